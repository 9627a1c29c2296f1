"""Team namespaces: where jobs run, what they may use, and what keeps teams apart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import ceil, floor

import pulumi

from components import tenancy
from components.demand import EFA, HUGEPAGES, gpu_node_share
from components.gang_deadline import GangDeadline, GangDeadlineArgs
from components.kubernetes_objects import KubernetesObject, KubernetesPatch
from components.observability import EBS_STORAGE_CLASS
from components.storage import DATASET_CLAIM, PVC_NAME
from components.tenancy import TeamRules, limit_range_defaults
from infra.config import CPU_SERVICE_PRIORITY_CLASS, DEFAULT_PRIORITY_CLASS, GpuPool, PriorityClassSpec, Team
from infra.config.scheduler import (
    CPU_ONLY_PODS,
    CPU_SERVICE_CPU,
    CPU_SERVICE_MEMORY_GIB,
    CPU_SERVICE_PODS,
    MIN_CPU_QUOTA,
    MIN_MEMORY_QUOTA_GIB,
)
from infra.core.names import KUBEFLOW_GROUP, KUBEFLOW_JOB_KINDS

# Objects a team namespace may hold at most (ours: far above what jobs make, far below what fills
# etcd); and no volume of the cluster's EBS classes: a team's storage is the platform's Lustre claims
# (components/storage.py), and an EBS claim would buy volumes outside every quota. `gp2` is the class
# some EKS versions ship (components/cluster_created.py).
OBJECT_COUNTS = {"configmaps": 500, "secrets": 200, "services": 100, "persistentvolumeclaims": 50}
# Every other kind a team creates is counted too (count/<resource>.<group>, kubernetes.io/docs/concepts/policy/
# resource-quotas/#object-count-quota, custom resources included): a suspended Job, a CronJob or a Kubeflow job
# makes no pod, so the pods quota bounds none of them, and each may carry ~1.5 MiB of annotations into etcd.
# Jobs (batch and every Kubeflow kind the operator serves): Team.max_jobs, or JOBS_FLOOR or twice the pods quota
# (finished ones stay until deleted); the long-running kinds: WORKLOADS_FLOOR or the pods quota (each runs a pod
# at least), ReplicaSets eleven times that (a Deployment keeps its revisionHistoryLimit of 10 old ones).
# Events (core/v1, whose message has no length limit): the namespace's own, the kubelet's, the scheduler's
# and the operators' about its pods count alike (a quota admits every creator), so the bound is far above
# what a pod's life makes (scheduled, pulled, created, started, killed: ~10) and they expire after an hour.
# Ingresses: none, the platform runs no ingress controller (a team's serving goes through a Service).
JOBS_FLOOR, WORKLOADS_FLOOR, SERVICE_ACCOUNTS_FLOOR, EVENTS_FLOOR, EVENTS_PER_POD = 100, 20, 50, 1000, 50
JOB_RESOURCES = ("jobs.batch", *(f"{r}.{KUBEFLOW_GROUP}" for r in sorted(KUBEFLOW_JOB_KINDS.values())))
WORKLOAD_RESOURCES = (
    "cronjobs.batch",
    "deployments.apps",
    "daemonsets.apps",  # one whose nodeSelector matches no node runs no pod: the pods quota bounds none
    "statefulsets.apps",
    "replicationcontrollers",
    "horizontalpodautoscalers.autoscaling",
)
EBS_CLASSES = (EBS_STORAGE_CLASS, "gp2")


def compute_quota(team: Team, pools: Sequence[GpuPool]) -> dict:
    """The namespace's share of the GPU fleet in every dimension a node has: a ResourceQuota on
    what its pods request in all (CPU and memory: the team's quota; EFA interfaces and huge pages:
    its GPUs' share of the pools' nodes, components/demand.py gpu_node_share), on its pods (one per
    GPU and one per node of its share, plus CPU_ONLY_PODS), and no PodDisruptionBudget (one would
    keep the autoscaler from emptying a node under a pod it names; a team's GPU pods hold their
    nodes already, by the karpenter.sh/do-not-disrupt the platform gives them). Requests, not
    limits: a quota on a resource makes the API server refuse a pod that does not state it
    (kubernetes.io/docs/concepts/policy/resource-quotas/), and training containers rarely set CPU
    limits; LimitRange's defaultRequest fills in requests for containers that name none. An
    extended resource (EFA) or huge pages are quoted as requests only, which equal their limits."""
    share = gpu_node_share(pools)
    pods = ceil(team.gpu_quota * share["pods"]) + CPU_ONLY_PODS
    jobs = team.max_jobs if team.max_jobs is not None else max(JOBS_FLOOR, 2 * pods)
    workloads = max(WORKLOADS_FLOOR, pods)
    hard = {
        "requests.cpu": str(team.cpu_quota),
        "requests.memory": f"{team.memory_quota_gib}Gi",
        f"requests.{EFA}": str(floor(team.gpu_quota * share[EFA])),
        f"requests.{HUGEPAGES}": f"{floor(team.gpu_quota * share[HUGEPAGES])}Mi",
        "pods": str(pods),
        "count/poddisruptionbudgets.policy": "0",
        **{f"count/{kind}": str(n) for kind, n in OBJECT_COUNTS.items()},
        **{f"count/{kind}": str(jobs) for kind in JOB_RESOURCES},
        **{f"count/{kind}": str(workloads) for kind in WORKLOAD_RESOURCES},
        "count/replicasets.apps": str(11 * workloads),
        "count/serviceaccounts": str(max(SERVICE_ACCOUNTS_FLOOR, workloads)),
        "count/events": str(max(EVENTS_FLOOR, EVENTS_PER_POD * pods)),
        "count/ingresses.networking.k8s.io": "0",
        **{f"{c}.storageclass.storage.k8s.io/requests.storage": "0" for c in EBS_CLASSES},
    }
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute", "namespace": team.name},
        "spec": {"hard": hard},
    }


PLAIN_GPU_QUOTA = "plain-gpu"


def plain_gpu_quota(team: Team, rules: TeamRules) -> dict:
    """The GPUs of every pod of the namespace outside its Kubeflow gangs' classes (the training classes
    and the platform's default: tenancy.gang_classes): the plain workloads' (Deployments, Jobs,
    StatefulSets, their pods; the team policy has them name a class counted here,
    tenancy.plain_gpu_validations), whose pods exist before Volcano admits them and so are autoscaler
    demand beyond the queue (docs/design/autoscaler-demand.md, "What remains"). Bounded at the team's GPU
    quota: at most the team's share again for pods the queue holds back. No training gang is counted, so
    none is cut; an evaluation Kubeflow job's gang is, and may wait part-created while plain pods hold the
    quota."""
    exempt = list(tenancy.gang_classes(rules))
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": PLAIN_GPU_QUOTA, "namespace": team.name},
        "spec": {
            "hard": {"requests.nvidia.com/gpu": str(team.gpu_quota)},
            "scopeSelector": {
                "matchExpressions": [{"scopeName": "PriorityClass", "operator": "NotIn", "values": exempt}]
            },
        },
    }


def cpu_only_quota(team: Team) -> dict:
    """What the namespace's pods without GPUs but its services may ask in all: CPU-only work's room (MIN_CPU_QUOTA
    vCPUs and MIN_MEMORY_QUOTA_GIB GiB, within the team's quota, and CPU_ONLY_PODS pods) less its services' part
    (cpu_service_quota), the MPI launchers included. The team policy has every such pod set a deadline and no GPU
    pod or service set one (tenancy.node_share_validations), so the Terminating scope (a pod whose
    spec.activeDeadlineSeconds is set) is exactly them. Without it the compute quota's CPU and memory, sized by the
    team's GPUs, could all go to pods without GPUs, packed onto nodes the team's GPU pods then do not fit: twice its
    share of nodes. Pods already running are counted as they are and refused nothing."""
    room = (
        MIN_CPU_QUOTA - CPU_SERVICE_CPU,
        MIN_MEMORY_QUOTA_GIB - CPU_SERVICE_MEMORY_GIB,
        CPU_ONLY_PODS - CPU_SERVICE_PODS,
    )
    return _room_quota(team, tenancy.CPU_ONLY_QUOTA, *room, {"scopes": ["Terminating"]})


def cpu_service_quota(team: Team) -> dict:
    """What the namespace's services without GPUs may ask in all: CPU-only work's room's other part (CPU_SERVICE_CPU
    vCPUs, CPU_SERVICE_MEMORY_GIB GiB, CPU_SERVICE_PODS pods). A Deployment's pods cannot carry the deadline the
    `cpu-only` quota counts by, so the policy has them name the platform's class of services without GPUs
    (CPU_SERVICE_PRIORITY_CLASS, tenancy.node_share_validations) and this quota counts that class: together the two
    quotas hold no more than CPU-only work's room, which the teams' CPU nodes' maxSize is sized by."""
    scope = {"scopeName": "PriorityClass", "operator": "In", "values": [CPU_SERVICE_PRIORITY_CLASS]}
    return _room_quota(
        team,
        tenancy.CPU_SERVICE_QUOTA,
        CPU_SERVICE_CPU,
        CPU_SERVICE_MEMORY_GIB,
        CPU_SERVICE_PODS,
        {"scopeSelector": {"matchExpressions": [scope]}},
    )


def _room_quota(team: Team, name: str, cpu: int, memory_gib: int, pods: int, scope: dict) -> dict:
    """A ResourceQuota of `scope` on a part of CPU-only work's room: `cpu` vCPUs and `memory_gib` GiB (within the
    team's own quota) and `pods` pods."""
    hard = {
        "requests.cpu": str(min(team.cpu_quota, cpu)),
        "requests.memory": f"{min(team.memory_quota_gib, memory_gib)}Gi",
        "pods": str(pods),
    }
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": team.name},
        "spec": {"hard": hard, **scope},
    }


def container_defaults(team: Team) -> dict:
    """LimitRange: what a container (init and sidecar containers included) requests when it
    names nothing, so every pod is counted by the compute quota instead of refused by it. No
    default limit: a container that requests more memory than a default limit would be refused
    (request above limit), and memory above the request is bounded by the node, not the team."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "container-defaults", "namespace": team.name},
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "defaultRequest": {
                        "cpu": f"{team.default_cpu_request_millicores}m",
                        "memory": f"{team.default_memory_request_mib}Mi",
                    },
                }
            ]
        },
    }


def rules_of(
    team: Team,
    classes: Sequence[PriorityClassSpec] = (),
    public_load_balancers: bool = False,
    pools: Sequence[GpuPool] = (),
    grace_seconds: int | None = None,
) -> TeamRules:
    """What the team's admission policy allows: its classes, the platform's default class that the API server writes
    into a pod naming none and its class of services without GPUs (components/training.py priority_classes); the
    Service types it is given; whether the stack has public load balancers; the GPUs of each pool's nodes; the pods'
    grace (higgsfield:checkpoints.terminationGracePeriod, its default where None)."""
    serving = {c.name for c in classes if c.workload == "serving"}
    training = {c.name for c in classes if c.workload == "training"}
    fleet = _per_gpu(pools) if pools else None
    return TeamRules(
        name=team.name,
        queue=team.queue,
        priority_classes=(*team.priority_classes, DEFAULT_PRIORITY_CLASS, CPU_SERVICE_PRIORITY_CLASS),
        uid=team.uid,
        serving_classes=tuple(c for c in team.priority_classes if c in serving),
        training_classes=tuple(c for c in team.priority_classes if c in training),
        service_types=tuple(team.service_types),
        public_load_balancers=public_load_balancers,
        node_gpus=tuple((p.name, p.gpus_per_node) for p in pools),
        gpu_share=fleet[:2] if fleet else None,
        efa_share=fleet[2:] if fleet else None,
        pool_shares=tuple((p.name, _per_gpu([p])) for p in pools),
        **({} if grace_seconds is None else {"grace_seconds": grace_seconds}),
        pods_quota=int(compute_quota(team, pools)["spec"]["hard"]["pods"]) if pools else None,
        container_defaults=limit_range_defaults(team),
    )


def _per_gpu(pools: Sequence[GpuPool]) -> tuple[float, float, float, float]:
    """One GPU's share of the pools' nodes (the most of any type; no EFA on pools without it): vCPUs, bytes of memory,
    EFA interfaces, bytes of 2 MiB huge pages."""
    share = gpu_node_share(pools)
    return float(share["cpu"]), float(share["memory"] * 2**20), float(share[EFA]), float(share[HUGEPAGES] * 2**20)


@dataclass(frozen=True, kw_only=True)
class TeamsArgs:
    teams: Sequence[Team]
    priority_classes: Sequence[PriorityClassSpec]
    kubernetes_version: str
    monitoring_namespace: str
    api_server_cidr: str  # where the private API endpoint's interfaces live (the VPC)
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]
    pools: Sequence[GpuPool] = ()  # the teams' share of these nodes; with `image`: the gang deadline
    image: pulumi.Input[str] | None = None  # the training image (it ships images/training/gang_deadline.py)
    public_load_balancers: bool = False  # the stack's higgsfield:publicLoadBalancers
    # higgsfield:checkpoints.terminationGracePeriod: the most a team's pod takes to stop
    grace_seconds: int = field(kw_only=True)
    api_service_ip: str = field(kw_only=True)  # the `kubernetes` Service's ClusterIP (StackConfig.api_service_ip)


class Teams(pulumi.ComponentResource):
    """One namespace per team with its GPU quota, the priority classes it may use, and the
    rules that keep it from the others (components/tenancy.py); with GPU pools and the training
    image, the gang deadline that gives back what a half-delivered gang holds (components/gang_deadline.py).

    Creates per team: a Namespace (Pod Security `baseline` enforced, `restricted` warned; its
    Volcano queue as the default; the queue's capability is the team's GPU quota, whole gangs at a
    time - no ResourceQuota on training GPUs, which would admit part of a gang), a ResourceQuota on
    the GPUs of its serving classes' pods (servingGpuQuota: serving is no gang), a ResourceQuota on
    requested CPU and memory with a LimitRange that gives containers default requests, a ResourceQuota
    `cpu-only` on what its pods without GPUs (the ones with a deadline) request in all, a zero-pod quota
    per priority class the team is *not* given, a ValidatingAdmissionPolicy and its binding to
    the namespace (queue, priority classes, UID/GID, no privilege, no host access, GPUs only
    through the device plugin and Volcano, no nodeName, no system/startup tolerations, Services
    ClusterIP unless the team is given more), a Role and RoleBinding that let the team's group
    (`higgsfield:team:<team>`, named by its people's access entries) submit Kubeflow jobs and read
    their PodGroups, default-deny NetworkPolicies with the allowances jobs
    need, and a Server-Side Apply patch of the namespace's `default` ServiceAccount (the cluster
    creates it) so that it automounts no token. Once for all teams: the ValidatingAdmissionPolicy
    (+ binding to every team namespace) that refuses NetworkPolicy writes by anyone who may not
    change admission policies, the one that bounds the grace of a team pod's delete or eviction, the one
    that keeps a team's objects from blocking a pod's deletion, and the one that keeps the claim names the program
    makes in team namespaces its own (a team's claim of a new dataset's name would stop the deploy that adds it).
    Replaced when: a team is renamed (its namespace, and everything in it, is deleted). A new UID
    re-owns nothing: change it only with the team's files (docs/tasks.md, "Add a team").
    """

    def __init__(self, name: str, args: TeamsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:teams:Teams", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        self.namespaces: dict[str, KubernetesObject] = {}
        if args.teams:
            guards = {
                "netpol-guard": tenancy.network_policy_guard(),
                "pod-release-guard": tenancy.pod_release_guard(args.grace_seconds),
                "pod-dependents-guard": tenancy.pod_dependents_guard(),
                "claim-name-guard": tenancy.claim_name_guard([PVC_NAME], [DATASET_CLAIM.format(name="")]),
            }
            for suffix, guard in guards.items():
                made = KubernetesObject(f"{name}-{suffix}", guard, opts=child)
                KubernetesObject(
                    f"{name}-{suffix}-binding",
                    tenancy.in_every_team_namespace(guard["metadata"]["name"]),
                    opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[made]),
                )
        for team in args.teams:
            rules = rules_of(team, args.priority_classes, args.public_load_balancers, args.pools, args.grace_seconds)
            ns = KubernetesObject(f"{name}-{team.name}", tenancy.namespace(rules, args.kubernetes_version), opts=child)
            self.namespaces[team.name] = ns
            in_ns = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns])

            def obj(suffix: str, manifest: dict, opts: pulumi.ResourceOptions = in_ns) -> KubernetesObject:
                return KubernetesObject(f"{name}-{team.name}-{suffix}", manifest, opts=opts)  # noqa: B023 - used in this loop

            # No ResourceQuota on GPUs: it admits pods one at a time, so the operator would create
            # part of a gang and the autoscaler buy nodes for it. The team's GPU quota is its own
            # queue's capability, which Volcano's enqueue checks for the whole gang (components/demand.py).
            if rules.serving_classes:
                # serving's own quota, scoped to its classes: no gang is cut by it (a Deployment's
                # replicas are each worth serving), and it caps what serving can take back
                obj(
                    "serving-gpu",
                    {
                        "apiVersion": "v1",
                        "kind": "ResourceQuota",
                        "metadata": {"name": "serving-gpu", "namespace": team.name},
                        "spec": {
                            "hard": {"requests.nvidia.com/gpu": str(team.serving_gpu_quota)},
                            "scopeSelector": {
                                "matchExpressions": [
                                    {
                                        "scopeName": "PriorityClass",
                                        "operator": "In",
                                        "values": list(rules.serving_classes),
                                    }
                                ]
                            },
                        },
                    },
                )
            obj("plain-gpu", plain_gpu_quota(team, rules))
            # The LimitRange first: a pod created between the two would be refused by the quota.
            defaults = obj("limits", container_defaults(team))
            obj(
                "compute",
                compute_quota(team, args.pools),
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, defaults]),
            )
            cpu_only = obj(
                tenancy.CPU_ONLY_QUOTA,
                cpu_only_quota(team),
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, defaults]),
            )
            cpu_services = obj(
                tenancy.CPU_SERVICE_QUOTA,
                cpu_service_quota(team),
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, defaults]),
            )
            for cls in args.priority_classes:
                if cls.name in team.priority_classes:
                    continue
                obj(
                    f"deny-{cls.name}",
                    {
                        "apiVersion": "v1",
                        "kind": "ResourceQuota",
                        "metadata": {"name": f"deny-{cls.name}", "namespace": team.name},
                        "spec": {
                            "hard": {"pods": "0"},
                            "scopeSelector": {
                                "matchExpressions": [
                                    {"scopeName": "PriorityClass", "operator": "In", "values": [cls.name]}
                                ]
                            },
                        },
                    },
                )
            # The policy exists before its binding, and both before anything runs in the namespace. It is applied
            # after the quotas of pods without GPUs: it admits the pods they count (a deadline, the class of
            # services), and a pod admitted before its quota exists runs uncounted for as long as it lives.
            policy = obj(
                "admission",
                tenancy.admission_policy(rules),
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[cpu_only, cpu_services])),
            )
            obj(
                "admission-binding",
                tenancy.admission_binding(rules),
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[policy, ns]),
            )
            # kube-controller-manager creates `default` in every new namespace (components/cluster_created.py):
            # patched, never created. Whichever comes first works: a Server-Side Apply of a missing object
            # creates it (pulumi/pulumi-kubernetes#2194) and the controller then finds it; forced, so that the
            # field is ours even if someone applied it by hand.
            KubernetesPatch(
                f"{name}-{team.name}-default-sa", tenancy.default_service_account(team.name), force=True, opts=in_ns
            )
            # its people submit Kubeflow jobs through this Role (their access entry's group)
            obj("jobs-role", tenancy.job_submitter_role(team.name))
            obj("jobs-binding", tenancy.job_submitter_binding(team.name))
            for netpol in tenancy.network_policies(
                team.name,
                monitoring_namespace=args.monitoring_namespace,
                api_server_cidr=args.api_server_cidr,
                api_service_ip=args.api_service_ip,
            ):
                obj(f"netpol-{netpol['metadata']['name']}", netpol)
        if args.image is not None and args.pools and args.teams:
            # half-delivered gangs give back the nodes that arrived (components/gang_deadline.py)
            GangDeadline(
                f"{name}-gang-deadline",
                GangDeadlineArgs(
                    pools=args.pools,
                    namespaces=list(self.namespaces),
                    image=args.image,
                    grace_seconds=args.grace_seconds,
                    provider=args.provider,
                    depends_on=[*args.depends_on, *self.namespaces.values()],
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"namespaces": list(self.namespaces)})
