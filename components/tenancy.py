"""What a team namespace enforces, as plain manifests: the admission policy, the namespace's
Pod Security and Volcano labels, and the NetworkPolicies. Pure functions, so tests evaluate the
CEL on sample objects and validate every object against the Kubernetes schema.

Upstream contracts (read at the pinned refs):
- kubeflow.org/v1 jobs: `spec.runPolicy.schedulingPolicy.{queue,priorityClass}` and
  `spec.<kind>ReplicaSpecs.<type>.template` (kubeflow/trainer:manifests/base/crds/
  kubeflow.org_{pytorch,tf,mpi,xgboost,jax,paddle}jobs.yaml@v1.9.4). The operator copies queue and
  priorityClass onto the Volcano PodGroup only, never onto the pods (kubeflow/trainer:
  pkg/controller.v1/common/job.go@v1.9.4), which is why the PriorityClass-scoped quotas alone
  never stopped a job: the policy checks the job, the PodGroup and the pods.
- Volcano PodGroup `spec.queue`, `spec.priorityClassName` (volcano-sh/volcano:installer/helm/chart/
  volcano/crd/bases/scheduling.volcano.sh_podgroups.yaml@v1.15.1); pods name a queue with the
  annotation `scheduling.volcano.sh/queue-name` or `volcano.sh/queue-name` (label or annotation)
  (volcano-sh/apis:pkg/apis/scheduling/v1beta1/labels.go); a PodGroup created in queue `default`
  is moved to the queue its namespace's `scheduling.volcano.sh/queue-name` annotation names
  (volcano-sh/volcano:pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go@v1.15.1).
- ValidatingAdmissionPolicy/Binding, admissionregistration.k8s.io/v1 (GA in Kubernetes 1.30).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from components import gang_deadline
from components.kubernetes_objects import deny_binding
from components.workloads import ELASTIC_ROOM_METRIC
from infra.config import (
    CPU_SERVICE_PRIORITY_CLASS,
    DEFAULT_PRIORITY_CLASS,
    GPU_TAINT_KEY,
    STARTUP_TAINT_KEY,
    SYSTEM_TAINT_KEY,
    Team,
)
from infra.config.checkpoints import Checkpoints
from infra.core.names import (
    CLEAN_POD_POLICIES,
    DO_NOT_DISRUPT,
    DRIVER_MAJOR_LABEL,
    EFA_RESOURCE,
    GAVE_BACK_ANNOTATION,
    GPU_DEVICE_ENV,
    GPU_RESOURCE,
    GROUP_NAME_ANNOTATION,
    HOSTNAME_LABEL,
    HUGEPAGES_RESOURCE,
    JOB_NAME_PREFIXES,
    KUBEFLOW_GROUP,
    KUBEFLOW_JOB_KINDS,
    KUBEFLOW_MANAGER,
    LONGEST_POD_DEADLINE,
    MIN_MEMBER_ANNOTATION,
    POOL_LABEL,
    QUEUE_ANNOTATION,
    REPLICA_TYPE_LABEL,
    SAFE_TO_EVICT,
    TEAM_CPU_LABEL,
    TEAM_CPU_TAINT_KEY,
    VOLCANO_GROUP_PREFIX,
    WAITING_SINCE_ANNOTATION,
)

TEAM_LABEL = "higgsfield.io/team"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server, immutable
QUEUE_KEY = "volcano.sh/queue-name"
SCHEDULER = "volcano"
# Pod Security Admission: `baseline` is enforced, `restricted` warned and audited. GPU and EFA
# jobs need no privilege (the device plugins hand /dev/nvidia* and /dev/infiniband/uverbs* to the
# container; no hostPath, no capability: AWS's EFA samples run with no securityContext at all,
# aws-samples/awsome-distributed-training:micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml
# and 3.test_cases/pytorch/FSDP/kubernetes/llama3_1_8b-fsdp.yaml@7217859f, whose hostPath
# /dev/shm is an emptyDir of medium Memory here), so our own pods meet `restricted`. It is not enforced
# because the Training Operator injects a `kubectl-delivery` init container into every MPIJob
# launcher without allowPrivilegeEscalation/capabilities settings (kubeflow/trainer:pkg/
# controller.v1/mpi/mpijob_controller.go@v1.9.4), which `restricted` rejects. The admission policy
# adds what matters across teams on top of `baseline`: the team's UID/GID, no added capabilities,
# no volume types beyond the safe ones.
PSA_ENFORCE, PSA_WARN = "baseline", "restricted"
REPLICA_SPECS = (
    "pytorchReplicaSpecs",
    "tfReplicaSpecs",
    "mpiReplicaSpecs",
    "xgbReplicaSpecs",
    "jaxReplicaSpecs",
    "paddleReplicaSpecs",
)
# Volume types a team pod may use: none reaches the node or mounts storage the platform did not
# bind to the namespace (no hostPath, no inline csi: a csi volume could name the file system root).
SAFE_VOLUMES = ("configMap", "secret", "emptyDir", "persistentVolumeClaim", "projected", "downwardAPI")
DNS = {"namespace": "kube-system", "pod": {"k8s-app": "kube-dns"}}
# Training Operator v1 labels the MPIJob launcher (it reaches the API server: kubectl exec):
# ReplicaTypeLabel (kubeflow/trainer:pkg/apis/kubeflow.org/v1/common_types.go@v1.9.4), the value
# lowercased (pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4 newLauncher). The operator creates
# the launcher Pod itself (`Pods(ns).Create(... newLauncher ...)`, same file), as its service
# account `training-operator` in the standalone overlay's namespace `kubeflow` (manifests/base/rbac/
# service-account.yaml and manifests/overlays/standalone/kustomization.yaml@v1.9.4): only that
# account may create a pod with the label, so no other pod gets the launcher's egress.
LAUNCHER = {REPLICA_TYPE_LABEL: "launcher"}
OPERATOR_USER = "system:serviceaccount:kubeflow:training-operator"
# The init container the operator adds to every launcher (newLauncher, kubeflow/trainer:pkg/controller.v1/mpi/
# mpijob_controller.go@v1.9.4).
KUBECTL_DELIVERY = "kubectl-delivery"
# What the operator's init container kubectl-delivery requests in every MPIJob launcher pod, CPU in cores and
# memory in bytes (initContainerCpu 100m, initContainerMem 512Mi: kubeflow/trainer:pkg/controller.v1/mpi/mpijob.go,
# added by newLauncher in mpijob_controller.go@v1.9.4).
LAUNCHER_INIT_REQUESTS = {"cpu": 0.1, "memory": 512.0 * 2**20}
# What kubectl-delivery also requests and limits, in bytes (initContainerEphStorage 5Gi, same files): the one
# ephemeral-storage a pod on a GPU node may ask, far below any node's, so it holds no node alone.
LAUNCHER_INIT_EPHEMERAL_STORAGE = 5.0 * 2**30
# What newLauncher sets empty on the first container of a launcher that asks no GPU (isGPULauncher, kubeflow/trainer:
# pkg/controller.v1/mpi/mpijob.go@v1.9.4): it hides the node's GPUs, it gives none.
LAUNCHER_HIDDEN_GPU_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
# What the operator's init container init-pytorch requests in each Worker pod of a PyTorchJob with a Master (50m,
# 10Mi: initContainerTemplate, added by setInitContainer only where a Master is, kubeflow/trainer:pkg/controller.v1/
# pytorch/initcontainer.go@v1.9.4), CPU in cores and memory in bytes.
WORKER_INIT_REQUESTS = {"cpu": 0.05, "memory": 10.0 * 2**20}


@dataclass(frozen=True)
class OperatorInit:
    """An init container the operator adds to a replica's pods, and what it requests: a floor the team policy keeps
    (gang_validations) and the renderers meet (infra/offline/pods.py request_the_operators_inits)."""

    kind: str
    replicas: str  # the job's replica specs' field
    replica: str
    beside: tuple[str, ...]  # the replicas the job must have too for the operator to add it
    requests: dict[str, float]
    container: str
    named: str  # the replica in a sentence


OPERATOR_INITS = (
    OperatorInit("MPIJob", "mpiReplicaSpecs", "Launcher", (), LAUNCHER_INIT_REQUESTS, KUBECTL_DELIVERY,
                 "an MPIJob's Launcher"),
    OperatorInit("PyTorchJob", "pytorchReplicaSpecs", "Worker", ("Master",), WORKER_INIT_REQUESTS, "init-pytorch",
                 "a PyTorchJob's Worker"),
)  # fmt: skip
# kube-controller-manager's controllers act as their own service accounts in kube-system (the
# Deployment controller scales ReplicaSets, the CronJob controller creates Jobs), or as the manager
# itself where it uses no service-account credentials; no team holds either.
CONTROLLER_USERS = "system:serviceaccount:kube-system:"
CONTROLLER_MANAGER = "system:kube-controller-manager"
# The Job controller makes each pod of a batch Job with its tracking finalizer and removes it once it has counted
# the pod (JobTrackingFinalizer, kubernetes/api:batch/v1/types.go@v0.35.0). It runs in kube-controller-manager as
# the `job-controller` service account where the manager uses service-account credentials
# (ClientOrDie("job-controller"), kubernetes/kubernetes:cmd/kube-controller-manager/app/batch.go, read through the
# code search), else as the manager itself: both are named, neither is a team's.
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
JOB_CONTROLLER_USERS = (f"{CONTROLLER_USERS}job-controller", CONTROLLER_MANAGER)


def _by_the_operator(kept: str) -> str:
    """The pod as the operator created it: its CREATE by the operator's account, or an UPDATE of which `kept` (over
    `oldObject`) says the part in question is unchanged. A team's own part of the same shape came from a template the
    policy judged at the job's CREATE, which no exemption covers."""
    return (
        f"(object.kind == 'Pod' && (request.userInfo.username == '{OPERATOR_USER}' || "
        f"(request.operation == 'UPDATE' && {kept})))"
    )


# Variable `e` of container `c` is in that container before the UPDATE (a pod's containers are immutable).
_KEPT_ENV = "oldObject.spec.containers.exists(o, o.name == c.name && has(o.env) && o.env.exists(x, x == e))"


def _operators_init(c: str, names: Sequence[str]) -> str:
    """Container `c` is one of the operator's init containers `names`, as the operator created it. Neither
    kubectl-delivery nor init-pytorch sets a securityContext (newLauncher; initContainerTemplate,
    pkg/controller.v1/pytorch/initcontainer.go@v1.9.4)."""
    kept = f"has(oldObject.spec.initContainers) && oldObject.spec.initContainers.exists(o, o == {c})"
    return f"({c}.name in {_list(names)} && {_by_the_operator(kept)})"


# Taints no team pod may tolerate: the system nodes' and the health gate's (a pod tolerating the
# startup taint would land on a node before it passed its checks). A toleration with no key and
# operator Exists tolerates every taint, these two included.
FORBIDDEN_TOLERATIONS = (SYSTEM_TAINT_KEY, STARTUP_TAINT_KEY)
# CDI device requests by annotation (cdi.AnnotationPrefix, read by the toolkit's
# cdiDeviceRequestsFromAnnotations in internal/config/image/cuda_image.go@v1.20.0 and by containerd's
# CDI support on the container's annotations). Kubelet puts only its own and the device plugin's
# annotations on a container, and nodeadm's containerd config passes no pod annotations to the
# runtime (no pod_annotations in nodeadm/internal/containerd/config2.template.toml@v20260724), so
# today a pod's annotation reaches neither; refused anyway, should either ever change.
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
# Workload kinds a team creates whose pod template the policy checks too (the pods their
# controllers create are checked again as Pods): group -> kind -> resource, the `edit` rights of
# AmazonEKSEditPolicy (apps, batch and core workloads; EKS user guide, access-policy-permissions).
WORKLOADS = {
    "apps": {
        "Deployment": "deployments",
        "ReplicaSet": "replicasets",
        "StatefulSet": "statefulsets",
        "DaemonSet": "daemonsets",
    },
    "batch": {"Job": "jobs", "CronJob": "cronjobs"},
    "": {"ReplicationController": "replicationcontrollers"},
}
TEMPLATE_KINDS = tuple(kind for kinds in WORKLOADS.values() for kind in kinds if kind != "CronJob")
# Services: a ClusterIP (or headless) Service stays inside the cluster network. externalIPs would
# let a team capture traffic to any IP (CVE-2020-8554); NodePort and LoadBalancer open the team's
# pods to the VPC or the internet, so they are per team (Team.service_types). A LoadBalancer made
# by the in-tree AWS cloud provider is internet-facing unless this annotation is set and not
# "false" (ServiceAnnotationLoadBalancerInternal, kubernetes/cloud-provider-aws:pkg/providers/v1/
# aws.go@v1.36.1), and that provider takes any tagged public subnet of the VPC, role tag or not
# (findSubnets/findELBSubnets, same file): without publicLoadBalancers it is required.
INTERNAL_LB_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-internal"


@dataclass(frozen=True)
class TeamRules:
    """What one team may use."""

    name: str
    queue: str
    priority_classes: tuple[str, ...]  # every class the team may name, the platform's default included
    uid: int
    serving_classes: tuple[str, ...] = ()  # those of them that preempt (docs/workload-classes.md)
    training_classes: tuple[str, ...] = ()  # those of them for Kubeflow gangs (no GPU quota counts their pods)
    service_types: tuple[str, ...] = ()  # beyond ClusterIP: NodePort, LoadBalancer
    public_load_balancers: bool = False  # the stack tags its public subnets for internet-facing load balancers
    node_gpus: tuple[tuple[str, int], ...] = ()  # (pool, GPUs of its nodes): a pod asking all of them may spread
    gpu_share: tuple[float, float] | None = None  # one GPU's share of the pools' nodes: (vCPUs, bytes of memory)
    # one GPU's share of the pools' nodes: (EFA interfaces, bytes of 2 MiB huge pages); None where it has no pools
    efa_share: tuple[float, float] | None = None
    # each pool's own share of its nodes per GPU: (pool, (vCPUs, bytes of memory, EFA interfaces, bytes of 2 MiB huge
    # pages)); its nodes' GPUs are node_gpus'
    pool_shares: tuple[tuple[str, tuple[float, float, float, float]], ...] = ()
    # the most a pod of the team takes to stop: higgsfield:checkpoints.terminationGracePeriod
    grace_seconds: int = field(default_factory=lambda: Checkpoints().grace_seconds)
    pods_quota: int | None = None  # the namespace's `pods` quota (components/teams.py compute_quota)
    # what the namespace's LimitRange gives a container that asks neither (components/teams.py container_defaults):
    # (vCPUs, bytes of memory)
    container_defaults: tuple[float, float] = field(default_factory=lambda: limit_range_defaults(Team))

    @property
    def gid(self) -> int:
        return self.uid


def limit_range_defaults(team: Team | type[Team]) -> tuple[float, float]:
    """(vCPUs, bytes) a container that names no CPU or memory request is given by the team's LimitRange; of the
    config's defaults when given the Team class itself."""
    if isinstance(team, type):
        fields = team.model_fields
        cpu, mib = fields["default_cpu_request_millicores"].default, fields["default_memory_request_mib"].default
    else:
        cpu, mib = team.default_cpu_request_millicores, team.default_memory_request_mib
    return cpu / 1000, float(mib * 2**20)


def _list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _field(obj: str, *path: str) -> str:
    """`has()` guards for a nested optional field: `has(a.b) && has(a.b.c)`."""
    return "(" + " && ".join(f"has({obj}.{'.'.join(path[: i + 1])})" for i in range(len(path))) + ")"


def _optional(obj: str, *path: str) -> str:
    """`[obj.path]` where the field is set, else `[]`: optional fields compared with `==`."""
    return f"({_field(obj, *path)} ? [{obj}.{'.'.join(path)}] : [])"


def _kept(*path: str) -> str:
    """An UPDATE leaves the optional field `path` as it was (absent in both, or equal)."""
    return f"{_optional('object', *path)} == {_optional('oldObject', *path)}"


def _annotation(obj: str, key: str) -> str:
    """`[obj's annotation key]` where it is set, else `[]` (a key holds `/` and `.`, so no _optional path)."""
    return (
        f"(has({obj}.metadata.annotations) && '{key}' in {obj}.metadata.annotations ? "
        f"[{obj}.metadata.annotations['{key}']] : [])"
    )


def _suspended(obj: str) -> str:
    """A job that is suspended: a batch Job by spec.suspend, a Kubeflow job by spec.runPolicy.suspend."""
    batch = f"({_field(obj, 'spec', 'suspend')} && {obj}.spec.suspend == true)"
    kubeflow = f"({_field(obj, 'spec', 'runPolicy', 'suspend')} && {obj}.spec.runPolicy.suspend == true)"
    return f"({obj}.kind == 'Job' ? {batch} : {kubeflow})"


def _by_the_deadline() -> str:
    """A request the gang deadline's CronJob (or the Training Operator) makes: the suspensions and clocks are theirs."""
    return f"request.userInfo.username in ['{gang_deadline.USER}', '{OPERATOR_USER}']"


def policy_name(team: str) -> str:
    return f"higgsfield-team-{team}"


def _templates_of(obj: str) -> str:
    """CEL: the pod templates of `obj` (object or oldObject): the pod itself, a workload's template (a CronJob's job
    template's), or every replica of a Kubeflow job."""
    replicas = " + ".join(
        f"(has({obj}.spec.{key}) ? {obj}.spec.{key}.map(r, {obj}.spec.{key}[r].template) : [])" for key in REPLICA_SPECS
    )
    cron = (
        f"(has({obj}.spec.jobTemplate) && has({obj}.spec.jobTemplate.spec) && "
        f"has({obj}.spec.jobTemplate.spec.template) ? [{obj}.spec.jobTemplate.spec.template] : [])"
    )
    return (
        f"{obj}.kind == 'Pod' ? [{obj}] : ({obj}.kind in {_list(TEMPLATE_KINDS)} ? (has({obj}.spec.template) ? "
        f"[{obj}.spec.template] : []) : "
        f"({obj}.kind == 'CronJob' ? {cron} : ({obj}.kind in {_list(list(KUBEFLOW_JOB_KINDS))} ? {replicas} : [])))"
    )


def cel_variables() -> list[dict]:
    """The pod templates of whatever is admitted: the pod itself, a workload's template (a CronJob's job
    template's), or every replica of a Kubeflow job; and every container of them: containers, init containers
    (sidecars are init containers with restartPolicy Always) and ephemeral containers."""
    return [
        {"name": "templates", "expression": _templates_of("object")},
        {"name": "specs", "expression": "variables.templates.filter(t, has(t.spec)).map(t, t.spec)"},
        {"name": "metas", "expression": "variables.templates.filter(t, has(t.metadata)).map(t, t.metadata)"},
        {"name": "containers", "expression": f"variables.specs.map(s, {_containers('s')})"},
        {
            # an UPDATE that keeps every pod spec (a job suspended or resumed, a pod's labels or finalizers): its
            # pods ask nothing they did not before
            "name": "specs_kept",
            "expression": "request.operation == 'UPDATE' && oldObject != null && "
            f"(object.kind in {_list(list(KUBEFLOW_JOB_KINDS))} ? {_replica_specs_kept()} : "
            f"({_templates_of('oldObject')}).filter(t, has(t.spec)).map(t, t.spec) == variables.specs)",
        },
    ]


def _replica_specs_kept() -> str:
    """A Kubeflow job's UPDATE keeps each replica type's pod spec, type by type. Not its templates' list: the API
    server hands a policy the object as a Go map (objectToResolveVal, kubernetes/kubernetes:staging/src/k8s.io/
    apiserver/pkg/admission/plugin/cel/filter.go) and CEL lists a Go map's keys in Go's iteration order, random on
    every iteration (stringIfaceMapAccessor.Iterator, google/cel-go:common/types/map.go; unstructuredMap.Iterator,
    staging/src/k8s.io/apiserver/pkg/cel/common/values.go@7eb7c8b4, alike; both read through the code search), so
    two lists of the same replica types' specs need not come in one order, and a list compared whole would refuse
    an UPDATE keeping them or pass one swapping them between replica types (tests/security/test_r23_attack.py)."""

    def same(key: str) -> str:
        new, old = f"object.spec.{key}", f"oldObject.spec.{key}"
        spec = [_optional(f"{obj}[r]", "template", "spec") for obj in (new, old)]
        return (
            f"(has({new}) == has({old}) && (!has({new}) || (size({new}) == size({old}) && "
            f"{new}.all(r, r in {old} && {spec[0]} == {spec[1]}))))"
        )

    return "(" + " && ".join(same(key) for key in REPLICA_SPECS) + ")"


# What only a GPU node has: its GPUs, its EFA interfaces and huge pages (the EFA pools' user data
# reserves them), and the GPU taint every GPU node carries (components/gpu_pools.py).
GPU_NODE_RESOURCES = (GPU_RESOURCE, EFA_RESOURCE)


def _containers(spec: str) -> str:
    """Every container of a pod spec: containers, init containers (sidecars too), ephemeral containers."""
    return (
        f"((has({spec}.containers) ? {spec}.containers : []) + (has({spec}.initContainers) ? {spec}.initContainers "
        f": []) + (has({spec}.ephemeralContainers) ? {spec}.ephemeralContainers : []))"
    )


# The handlers the kubelet runs for a container, which connect where their httpGet or tcpSocket `host` says (the pod's
# IP when unset): kubernetes/kubernetes:pkg/apis/core/types.go ProbeHandler and LifecycleHandler.
PROBES = ("readinessProbe", "livenessProbe", "startupProbe")
HOOKS = ("postStart", "preStop")


def _handlers_name_no_host(c: str) -> str:
    """Container `c`'s probes and lifecycle hooks leave `host` out of httpGet and tcpSocket: the kubelet would
    connect from the node's network to any address, an other team's pod or a node port no network policy closes."""

    def no_host(handler: str) -> str:
        return " && ".join(
            f"(!has({handler}.{kind}) || !has({handler}.{kind}.host) || {handler}.{kind}.host == '')"
            for kind in ("httpGet", "tcpSocket")
        )

    probes = [f"(!has({c}.{p}) || ({no_host(f'{c}.{p}')}))" for p in PROBES]
    hooks = [f"(!has({c}.lifecycle) || !has({c}.lifecycle.{h}) || ({no_host(f'{c}.lifecycle.{h}')}))" for h in HOOKS]
    return " && ".join([*probes, *hooks])


def _asks_node_resource(c: str) -> str:
    """Container `c` requests or limits what only a GPU node has: a GPU, EFA or huge pages."""

    def asks(field: str) -> str:
        return (
            f"(has({c}.resources) && has({c}.resources.{field}) && "
            f"{c}.resources.{field}.exists(k, k in {_list(GPU_NODE_RESOURCES)} || k.startsWith('hugepages-')))"
        )

    return f"({asks('limits')} || {asks('requests')})"


def _takes_a_gpu_node(spec: str) -> str:
    """A pod spec that can only run on a GPU node, or may be placed on one: it requests a GPU, EFA
    or huge pages in any container (init, sidecar, ephemeral), or tolerates the GPU taint."""
    return (
        f"({_containers(spec)}.exists(c, {_asks_node_resource('c')}) || "
        f"(has({spec}.tolerations) && {spec}.tolerations.exists(t, has(t.key) && t.key == '{GPU_TAINT_KEY}')))"
    )


def _tolerates_team_cpu(spec: str) -> str:
    """A pod spec that tolerates the teams' CPU nodes' taint: it may be placed there."""
    return f"(has({spec}.tolerations) && {spec}.tolerations.exists(t, has(t.key) && t.key == '{TEAM_CPU_TAINT_KEY}'))"


def _is_cpu_service(spec: str) -> str:
    """A pod spec of the platform's class of services without GPUs."""
    return f"(has({spec}.priorityClassName) && {spec}.priorityClassName == '{CPU_SERVICE_PRIORITY_CLASS}')"


def _takes_a_team_node(spec: str) -> str:
    """A pod spec that may be placed on a node teams share by the platform's rules: a GPU node (above), or one of the
    teams' CPU nodes (it tolerates their taint), where a pod without GPUs runs."""
    return f"({_takes_a_gpu_node(spec)} || {_tolerates_team_cpu(spec)})"


# The annotation values that keep a pod's node from being emptied (infra/core/names.py). Only a pod
# with GPUs may carry them: it holds its node by its GPUs already, within its team's queue; a pod
# without a GPU would pin a GPU node that its team's GPUs do not pay for. The platform gives every
# training pod do-not-disrupt (infra/offline/jobs.py), never the MPI launcher.
NODE_PINS = {DO_NOT_DISRUPT: "true", SAFE_TO_EVICT: "false"}


CPU_ONLY_QUOTA = "cpu-only"  # the ResourceQuota on a namespace's pods without GPUs (components/teams.py)
CPU_SERVICE_QUOTA = "cpu-services"  # the ResourceQuota on its services without GPUs (components/teams.py)
# How the team policy's refusal of a pod of the class of services without GPUs outside its one shape starts.
CPU_SERVICES_SHAPE = f"pods of {CPU_SERVICE_PRIORITY_CLASS} are"
# How the team policy's refusal of a pod without GPUs on a GPU node starts (node_share_validations): `higgsfield
# verify` kube.tenant-attacks tells that refusal from another by it.
WITHOUT_GPUS_OFF_GPU_NODES = "a pod without GPUs runs on the teams' CPU nodes"
# How the team policy's refusal of a pod on the teams' CPU nodes that Volcano does not schedule starts.
ON_TEAM_CPU_NODES_BY_VOLCANO = "pods on the teams' CPU nodes are scheduled by"
# How the team policy's refusal of a pod tolerating the teams' CPU nodes' taint without selecting them starts.
SELECTS_TEAM_CPU_NODES = "a pod that tolerates the teams' CPU nodes' taint selects them"

# What a pod on a GPU node may ask for: what the team's queue and quota hold in its GPUs' share
# (components/demand.py). Any other resource (ephemeral-storage, hugepages-1Gi, another extended
# resource) has no share: a pod asking more than half a node's of it holds a node alone, and a
# team's pods quota of them would hold that many nodes.
GPU_NODE_POD_RESOURCES = ("cpu", "memory", *GPU_NODE_RESOURCES, HUGEPAGES_RESOURCE)
# The node labels a pod on a GPU node or the teams' CPU nodes may select on: its pool (or the CPU nodes' own label),
# zone and region, and what every node of a pool shares. A label unique to a node (kubernetes.io/hostname, the
# gate's boot id) would pin it.
NODE_SELECTOR_KEYS = (
    POOL_LABEL,
    TEAM_CPU_LABEL,
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    # one AMI per pool, so every node of a pool has the same driver branch: selecting it spreads nothing
    DRIVER_MAJOR_LABEL,
)


def _asks_only(obj: str, resources: Sequence[str] = GPU_NODE_POD_RESOURCES) -> str:
    """`obj` (a container, or a pod spec's pod-level `resources`) requests and limits only `resources`."""
    allowed = _list(resources)
    return (
        f"(!has({obj}.resources) || ((!has({obj}.resources.requests) || {obj}.resources.requests.all(k, k in "
        f"{allowed})) && (!has({obj}.resources.limits) || {obj}.resources.limits.all(k, k in {allowed}))))"
    )


def _asks_at_most_of(obj: str, resource: str, most: float) -> str:
    """`obj` (a container) requests and limits at most `most` of `resource`, where it names it."""

    def within(field: str) -> str:
        return (
            f"(!has({obj}.resources) || !has({obj}.resources.{field}) || !('{resource}' in {obj}.resources.{field}) "
            f"|| quantity(string({obj}.resources.{field}['{resource}'])).asApproximateFloat() <= {most!r})"
        )

    return f"({within('requests')} && {within('limits')})"


def _asks_gpus(spec: str) -> str:
    """A pod spec whose containers request (or limit) at least one GPU."""

    def asks(field: str) -> str:
        return (
            f"(has(c.resources) && has(c.resources.{field}) && '{GPU_RESOURCE}' in c.resources.{field} && "
            f"!(string(c.resources.{field}['{GPU_RESOURCE}']) in ['0', '0m']))"
        )

    return f"(has({spec}.containers) && {spec}.containers.exists(c, {asks('limits')} || {asks('requests')}))"


def _near_other_namespaces(spec: str) -> str:
    """A pod spec with a podAffinity term (required or preferred) over pods of any namespace but its own: a
    namespaceSelector (an empty one matches every namespace) or namespaces; with neither, a term selects the pod's own
    namespace's pods (PodAffinityTerm, kubernetes/kubernetes:staging/src/k8s.io/api/core/v1/types.go as
    kubernetes-validate's kubernetes-json-schema/v1.37.0-local/podaffinityterm-v1.json has it). Volcano places a pod
    by it (the kube-scheduler's InterPodAffinity filter and score, volcano-sh/volcano:pkg/scheduler/plugins/predicates/
    predicates.go@v1.15.1), so with the hostname as topologyKey it puts the pod on another team's node: pinned there
    as by the node's name, and holding a GPU there, which keeps the job watchdog from re-checking that node on the
    other team's signal (images/training/job_watchdog.py _shared_with)."""
    affinity = f"{spec}.affinity.podAffinity"
    term = "(has(t.namespaceSelector) || (has(t.namespaces) && size(t.namespaces) > 0))"
    required = f"{affinity}.requiredDuringSchedulingIgnoredDuringExecution"
    preferred = f"{affinity}.preferredDuringSchedulingIgnoredDuringExecution"
    return (
        f"(has({spec}.affinity) && has({affinity}) && ((has({required}) && {required}.exists(t, {term})) || "
        f"(has({preferred}) && {preferred}.exists(p, has(p.podAffinityTerm) && "
        f"[p.podAffinityTerm].exists(t, {term})))))"
    )


def _spreads(spec: str) -> str:
    """A pod spec that spreads its pods over nodes or picks its node: topology spread, pod
    anti-affinity, pod affinity to another namespace's pods (_near_other_namespaces), or a node label beyond
    NODE_SELECTOR_KEYS (the hostname, the gate's boot id) or a node field in its node selector or affinity."""
    keys = _list(NODE_SELECTOR_KEYS)
    terms = (
        "(!has(t.matchFields) || size(t.matchFields) == 0) && (!has(t.matchExpressions) || "
        f"t.matchExpressions.all(e, e.key in {keys}))"
    )
    node = f"{spec}.affinity.nodeAffinity"
    required = f"{node}.requiredDuringSchedulingIgnoredDuringExecution"
    preferred = f"{node}.preferredDuringSchedulingIgnoredDuringExecution"
    by_required = (
        f"(has({required}) && has({required}.nodeSelectorTerms) && !{required}.nodeSelectorTerms.all(t, {terms}))"
    )
    by_preferred = f"(has({preferred}) && !{preferred}.all(p, !has(p.preference) || [p.preference].all(t, {terms})))"
    by_affinity = (
        f"(has({spec}.affinity) && (has({spec}.affinity.podAntiAffinity) || "
        f"(has({node}) && ({by_required} || {by_preferred}))))"
    )
    return (
        f"((has({spec}.topologySpreadConstraints) && size({spec}.topologySpreadConstraints) > 0) || "
        f"(has({spec}.nodeSelector) && !{spec}.nodeSelector.all(k, k in {keys})) || {by_affinity} || "
        f"{_near_other_namespaces(spec)})"
    )


def _whole_node(spec: str, node_gpus: Sequence[tuple[str, int]]) -> str:
    """A pod spec with a container that asks for every GPU of its pool's nodes (of the largest
    pool's, when it names no pool): one such pod is a node, so spreading it costs no node."""
    if not node_gpus:
        return "false"
    by_pool = "{" + ", ".join(f"'{pool}': {gpus}" for pool, gpus in node_gpus) + "}"
    pool = f"{spec}.nodeSelector['{POOL_LABEL}']"
    named = f"(has({spec}.nodeSelector) && '{POOL_LABEL}' in {spec}.nodeSelector && {pool} in {by_pool})"
    needed = f"({named} ? {by_pool}[{pool}] : {max(g for _, g in node_gpus)})"
    gpus = f"int(c.resources.{{0}}['{GPU_RESOURCE}'])"
    asks = " || ".join(
        f"(has(c.resources) && has(c.resources.{f}) && '{GPU_RESOURCE}' in c.resources.{f} && "
        f"{gpus.format(f)} >= {needed})"
        for f in ("limits", "requests")
    )
    return f"(has({spec}.containers) && {spec}.containers.exists(c, {asks}))"


def _request_sum(containers: str, resource: str, default: float = 0.0) -> str:
    """The containers' requests of `resource` as the pods will ask them, summed as numbers: a request, else the
    limit (the API server's defaulting of a Pod, SetDefaults_Pod, kubernetes/kubernetes:pkg/apis/core/v1/
    defaults.go@v1.35.0), else `default`: the team's LimitRange gives a container that names neither its
    defaultRequest, init containers included, after the defaulting and before validating admission
    (defaultContainerResourceRequirements and mergePodResourceRequirements, plugin/pkg/admission/limitranger/
    admission.go@v1.35.0). A Kubeflow job's templates get neither: counted so, a job is refused when the pods it
    would make are. quantity() and sum() are Kubernetes' CEL libraries (k8s.io/apiserver/pkg/cel/library/
    quantity.go and lists.go, kubernetes/kubernetes@v1.35.0)."""

    def of(field: str) -> str:
        return f"quantity(string(c.resources.{field}['{resource}'])).asApproximateFloat()"

    asked = (
        f"has(c.resources) && has(c.resources.requests) && '{resource}' in c.resources.requests ? {of('requests')} : "
        f"(has(c.resources) && has(c.resources.limits) && '{resource}' in c.resources.limits ? {of('limits')} : "
        f"{float(default)!r})"
    )
    return f"{containers}.map(c, {asked}).sum()"


def _defaults(team: TeamRules) -> dict[str, float]:
    cpu, memory = team.container_defaults
    return {"cpu": cpu, "memory": memory}


def _at_least_the_operators_init(init: OperatorInit, kept: str) -> dict:
    """The validation that a job's replica containers request together at least what the operator's init container
    asks of its pod (`init`), an UPDATE keeping every replica spec (`kept`) exempt."""
    specs = f"object.spec.{init.replicas}"
    spec = f"{specs}['{init.replica}']"
    applies = " && ".join(
        [f"object.kind == '{init.kind}'", f"has({specs})", *(f"'{r}' in {specs}" for r in (*init.beside, init.replica))]
        + [f"has({spec}.template)", f"has({spec}.template.spec)", f"has({spec}.template.spec.containers)"]
    )
    enough = " && ".join(
        f"{_request_sum(f'{spec}.template.spec.containers', r)} >= {v!r}" for r, v in init.requests.items()
    )
    beside = "".join(f" beside a {r}" for r in init.beside)
    return {
        "expression": f"!({applies}) || (request.operation == 'UPDATE' && {kept}) || ({enough})",
        "message": f"{init.named} containers{beside} request together at least what the operator's {init.container} "
        f"init container does ({init.requests['cpu'] * 1000:g}m cpu, {init.requests['memory'] / 2**20:g}Mi memory): "
        f"its pod asks that much, and the gang its queue admits counts the containers alone; raise the "
        f"{init.replica}'s resources.requests",
        "reason": "Forbidden",
    }


def _gpus(containers: str) -> str:
    """The GPUs `containers` limit, summed (an extended resource is limited wherever it is requested)."""
    asked = (
        f"has(c.resources) && has(c.resources.limits) && '{GPU_RESOURCE}' in c.resources.limits ? "
        f"int(c.resources.limits['{GPU_RESOURCE}']) : 0"
    )
    return f"{containers}.map(c, {asked}).sum()"


# A pod spec `s` as the scheduler counts it: a sidecar (an init container with restartPolicy Always) runs
# beside the containers for the pod's life, so the pod asks their sum; each other init container runs alone
# beside the sidecars; a pod-level `resources` (PodLevelResources, beta and on since Kubernetes 1.34) is what
# the scheduler counts where set (resource.PodRequests, kubernetes/kubernetes:staging/src/k8s.io/
# component-helpers/resource/helpers.go@v1.35.0).
_INITS = "(has(s.initContainers) ? s.initContainers : [])"
_SIDECAR = "(has(i.restartPolicy) && i.restartPolicy == 'Always')"
_SIDECARS = f"{_INITS}.filter(i, {_SIDECAR})"
_RUNNING = f"((has(s.containers) ? s.containers : []) + {_SIDECARS})"  # what runs for the pod's life
_POD_GPUS = f"double({_gpus(_RUNNING)})"
_GPU_SHARES = f"({_POD_GPUS} > 0.0 ? {_POD_GPUS} : 1.0)"  # the shares a pod may ask: one GPU's without GPUs


def _asks_at_most(resource: str, most: str, default: float = 0.0) -> str:
    """Pod spec `s` asks at most `most` (a CEL double) of `resource`, counted as the scheduler counts it: its
    containers with its sidecars, each other init container with the sidecars, its pod-level `resources`."""
    return (
        f"{_request_sum(_RUNNING, resource, default)} <= {most} && {_request_sum('[s]', resource)} <= {most} && "
        f"{_INITS}.all(i, {_SIDECAR} || {_request_sum(f'([i] + {_SIDECARS})', resource, default)} <= {most})"
    )


def share_cap_validations(team: TeamRules) -> list[dict]:
    """No pod on a GPU node asks more CPU or memory than its GPUs' share of the pools' nodes (one GPU's
    share for a pod without GPUs), nor more EFA interfaces or huge pages (none without GPUs): the team's
    quota then covers no more nodes than its GPUs in those dimensions either, for a pod asking more than
    half a node's CPU, memory, EFA interfaces or huge pages holds the node alone (and one with all its EFA
    interfaces takes the node from every EFA gang). An UPDATE that keeps every pod spec passes (variables.specs_kept):
    a cap added or narrowed since (new pools) must not keep the gang deadline from suspending a job holding nodes;
    a resize or an added toleration changes the spec and meets the caps."""
    validations = []
    if team.gpu_share is not None:
        cpu, memory = team.gpu_share
        given = _defaults(team)
        within = " && ".join(
            _asks_at_most(r, f"{_GPU_SHARES} * {most!r}", given[r]) for r, most in (("cpu", cpu), ("memory", memory))
        )
        validations.append(
            {
                "expression": f"variables.specs_kept || variables.specs.all(s, !{_takes_a_gpu_node('s')} || "
                f"({within}))",
                "message": f"a pod on a GPU node asks at most its GPUs' share of the node ({cpu:g} vCPUs and "
                f"{memory / 2**30:g} GiB per GPU; a pod without GPUs one GPU's): a bigger one would hold a node alone",
                "reason": "Forbidden",
            }
        )
    if team.efa_share is not None:
        # Nothing of the platform's asks for EFA or huge pages without a GPU: the MPI launcher runs mpirun over
        # ssh (infra/offline/team_job.py drops its resources; examples/mpi-nccl-tests.yaml's asks CPU and memory).
        efa, pages = team.efa_share
        within = " && ".join(
            _asks_at_most(r, f"{_POD_GPUS} * {most!r}")
            for r, most in ((EFA_RESOURCE, efa), (HUGEPAGES_RESOURCE, pages))
        )
        validations.append(
            {
                "expression": f"variables.specs_kept || variables.specs.all(s, !{_takes_a_gpu_node('s')} || "
                f"({within}))",
                "message": f"EFA interfaces and huge pages go with GPUs: a pod on a GPU node asks at most {efa:g} "
                f"{EFA_RESOURCE} and {pages / 2**20:g}Mi {HUGEPAGES_RESOURCE} per GPU, none without a GPU (its GPUs' "
                "share of the node): a bigger one would hold the node's EFA alone",
                "reason": "Forbidden",
            }
        )
    if team.pool_shares:
        validations.append(_pool_share_validation(team))
    return validations


def _pool_share_validation(team: TeamRules) -> dict:
    """The caps above are the fleet's roomiest share per GPU (the queue's); on a pool whose nodes have less per GPU,
    a pod of fewer GPUs than its node would still hold more of one than its GPUs (staging: a 1-GPU pod with all 4 of
    a p4d's EFA interfaces, a p5's share). So a pod is also held to the share of each pool it may land on: the pool
    its nodeSelector names, else every pool whose nodes have as many GPUs, EFA interfaces and huge pages as it asks
    (CPU and memory are not weighed: a pod that fits no such node is refused nothing it could run)."""
    gpus = dict(team.node_gpus)
    # pool -> [GPUs of its nodes, one GPU's vCPUs, bytes of memory, EFA interfaces, bytes of huge pages]
    pools = (
        "{"
        + ", ".join(f"'{name}': {[float(gpus[name]), *map(float, share)]!r}" for name, share in team.pool_shares)
        + "}"
    )
    selected = "s.nodeSelector['" + POOL_LABEL + "']"
    named = f"(has(s.nodeSelector) && '{POOL_LABEL}' in s.nodeSelector && {selected} in {pools})"
    node = f"{pools}[p][0]"
    fits = " && ".join(
        [f"{_POD_GPUS} <= {node}"]
        + [
            f"{_request_sum(_RUNNING, r)} <= {node} * {pools}[p][{i}]"
            for r, i in ((EFA_RESOURCE, 3), (HUGEPAGES_RESOURCE, 4))
        ]
    )
    lands = f"({named} ? {selected} == p : ({fits}))"
    given = _defaults(team)
    within = " && ".join(
        [_asks_at_most(r, f"{_GPU_SHARES} * {pools}[p][{i}]", given[r]) for r, i in (("cpu", 1), ("memory", 2))]
        + [_asks_at_most(r, f"{_POD_GPUS} * {pools}[p][{i}]") for r, i in ((EFA_RESOURCE, 3), (HUGEPAGES_RESOURCE, 4))]
    )
    return {
        "expression": f"variables.specs_kept || variables.specs.all(s, !{_takes_a_gpu_node('s')} || "
        f"{pools}.all(p, !{lands} || ({within})))",
        "message": "a pod asks at most its GPUs' share of each pool's nodes it may land on (the pool its nodeSelector "
        f"{POOL_LABEL} names, else every pool whose nodes have its GPUs, EFA and huge pages): on a pool with less "
        "per GPU than the largest share, a bigger one would hold that pool's node (its EFA, its CPU) alone; "
        "name the pool, or ask that pool's share",
        "reason": "Forbidden",
    }


def node_share_validations(team: TeamRules) -> list[dict]:
    """A team holds no more GPU nodes than its GPUs: a pod without GPUs runs on the teams' CPU nodes, never on a GPU
    node; its pods on the nodes teams share (GPU nodes, the teams' CPU nodes) are packed, never spread one to a node
    or pinned to a node by name (unless each asks for a whole node's GPUs, as the health check's do), and only its
    GPU pods may keep a node from being emptied."""
    pins = " || ".join(
        f"(('{k}' in t.metadata.annotations) && t.metadata.annotations['{k}'] == '{v}')" for k, v in NODE_PINS.items()
    )
    return [
        {
            # A pod without GPUs on a GPU node holds a node its team's GPUs do not pay for: one of a few millicores
            # naming a pool at zero makes the autoscaler buy it a node, and one whose controller the Cluster
            # Autoscaler does not know to replicate (a Kubeflow job's) keeps that node from scale-down while it
            # runs. Such pods run on the teams' CPU nodes. A pod the Training Operator creates passes: it is made of
            # a job's templates, which this rule judged when the job was created or they changed, so what it lets
            # through is the pods of jobs older than the rule (docs/upgrading.md lists them).
            "expression": f"variables.specs_kept || {_by_the_operator('false')} || "
            f"variables.specs.all(s, !{_takes_a_gpu_node('s')} || {_POD_GPUS} > 0.0)",
            "message": f"{WITHOUT_GPUS_OFF_GPU_NODES}, not on a GPU node (no toleration of the "
            f"{GPU_TAINT_KEY} taint, no EFA or huge pages without a GPU): nodeSelector {TEAM_CPU_LABEL}: "
            f'"true" and a toleration of the {TEAM_CPU_TAINT_KEY} taint; a pod without GPUs on a GPU node would '
            "hold a node its team's GPUs do not pay for",
            "reason": "Forbidden",
        },
        {
            # The MPI launchers there are Volcano's (the operator names it in a Kubeflow job's pods). A pod that
            # kube-scheduler binds there races Volcano for the same room, each counting the node from its own cache,
            # and the kubelet fails whichever pod it admits second (OutOfcpu, OutOfmemory: its admission's
            # `OutOf<resource>` reason, kubernetes/kubernetes:pkg/kubelet/lifecycle/predicate.go, not read at a pinned
            # ref; the message is that of InsufficientResourceError): a launcher failed so fails
            # its MPIJob (updateMPIJobStatus, kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4). A
            # Kubeflow job's templates name no other scheduler (gang_validations); its pods are judged as they come. A
            # pod that may take a GPU node is Volcano's by gpu_and_node_validations.
            "expression": f"!(object.kind in {_list(['Pod', *TEMPLATE_KINDS, 'CronJob'])}) || variables.specs.all(s, "
            f"!{_tolerates_team_cpu('s')} || (has(s.schedulerName) && s.schedulerName == '{SCHEDULER}'))",
            "message": f"{ON_TEAM_CPU_NODES_BY_VOLCANO} {SCHEDULER}, as the MPI launchers there are: set "
            f"schedulerName: {SCHEDULER} (a pod another scheduler binds beside them races {SCHEDULER} for the same "
            "room, and the kubelet fails the pod it admits second)",
            "reason": "Forbidden",
        },
        {
            # The gang deadline reads where a gang's pods may land from their node selectors, a pod that names no
            # pool being one that may land on every pool (images/training/gang_deadline.py _may_land): a pod for the
            # teams' CPU nodes names them, so its gang is never timed beside GPU nodes it cannot use.
            "expression": f"variables.specs.all(s, !{_tolerates_team_cpu('s')} || (has(s.nodeSelector) && "
            f"'{TEAM_CPU_LABEL}' in s.nodeSelector && s.nodeSelector['{TEAM_CPU_LABEL}'] == 'true'))",
            "message": f'{SELECTS_TEAM_CPU_NODES}: nodeSelector {TEAM_CPU_LABEL}: "true" beside its toleration',
            "reason": "Forbidden",
        },
        {
            # Volcano's binpack and the autoscaler's packing put such pods on the fewest nodes; spread
            # one per node, 32 one-GPU pods would hold 32 eight-GPU nodes
            "expression": f"variables.specs.all(s, !{_takes_a_team_node('s')} || !{_spreads('s')} || "
            f"{_whole_node('s', team.node_gpus)})",
            "message": "pods on GPU nodes are packed by the scheduler (and on the teams' CPU nodes): no "
            "topologySpreadConstraints, no podAntiAffinity, no podAffinity to another namespace's pods "
            f"(namespaceSelector, namespaces), nodeSelector and nodeAffinity on {', '.join(NODE_SELECTOR_KEYS)} only "
            f"(not {HOSTNAME_LABEL}, no node field): spread one to a node, a team's pods would hold more GPU nodes "
            "than its GPUs, or more CPU nodes than its CPU-only work's room (a pod that asks for all of its pool's "
            "GPUs may)",
            "reason": "Forbidden",
        },
        {
            # but the operator's kubectl-delivery, which asks its ephemeral-storage in every launcher
            "expression": f"variables.specs.all(s, !{_takes_a_team_node('s')} || ({_asks_only('s')} && "
            f"{_containers('s')}.all(c, {_asks_only('c')} || ({_operators_init('c', [KUBECTL_DELIVERY])} && "
            f"{_asks_only('c', (*GPU_NODE_POD_RESOURCES, 'ephemeral-storage'))} && "
            f"{_asks_at_most_of('c', 'ephemeral-storage', LAUNCHER_INIT_EPHEMERAL_STORAGE)}))))",
            "message": f"pods on GPU nodes ask for {', '.join(GPU_NODE_POD_RESOURCES)} only, and so do pods on the "
            "teams' CPU nodes (what the team's queue and quotas hold): no ephemeral-storage, hugepages-1Gi or other "
            "resource",
            "reason": "Forbidden",
        },
        {
            # The Cluster Autoscaler never removes the node of a pod no controller owns (drain.go, the
            # "not replicated" blocking reason); the garbage collector removes a pod whose owner is not there.
            # A pod's UPDATE may add tolerations (ValidatePodUpdate, kubernetes/kubernetes:pkg/apis/core/
            # validation/validation.go, read through the code search): a pending pod that gains the GPU taint's
            # is placed on a GPU node as one created with it, so that UPDATE is judged as a CREATE; any other
            # UPDATE passes (its owners are kept: volcano_group_validations).
            "expression": "object.kind != 'Pod' || (request.operation == 'UPDATE' && "
            f"{_takes_a_team_node('oldObject.spec')}) || "
            f"!{_takes_a_team_node('object.spec')} || (has(object.metadata.ownerReferences) && "
            "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true))",
            "message": "a pod on a GPU node is made by a controller, as is one on the teams' CPU nodes (a Job, a "
            "Deployment, a Kubeflow job): a bare pod would keep the autoscaler from ever removing its node",
            "reason": "Forbidden",
        },
        {
            # The Cluster Autoscaler puts a pod of every DaemonSet that should run on a node (taints and node
            # affinity, never room: GetDaemonSetPodsForNode, cluster-autoscaler/utils/daemonset/daemonset.go) into
            # the template node of a group it scales up from zero (SanitizedTemplateNodeInfoFromNodeGroup forces
            # them, podsExpectedOnFreshNode in simulator/node_info_utils.go, kubernetes/autoscaler@cluster-
            # autoscaler-1.35.2); Karpenter adds the requests of every DaemonSet compatible with a NodePool, from
            # its template where it has no pod, to each node it plans (getDaemonSetPods, pkg/controllers/
            # provisioning/provisioner.go; getDaemonOverhead, pkg/controllers/provisioning/scheduling/scheduler.go;
            # kubernetes-sigs/karpenter, the core aws/karpenter-provider-aws@v1.14.1 pins, read through the code
            # search). A team's DaemonSet that may run on GPU nodes would make every GPU node they plan look taken,
            # so that no job asking a node's GPUs fits one, for any team, though its own pods never run (the
            # DaemonSet controller pins each to its node by a matchFields affinity, refused above).
            "expression": f"object.kind != 'DaemonSet' || variables.specs.all(s, !{_takes_a_team_node('s')})",
            "message": "a team's DaemonSet runs on no GPU node, nor on the teams' CPU nodes (no GPU, EFA or huge "
            f"pages, no toleration of the {GPU_TAINT_KEY} or {TEAM_CPU_TAINT_KEY} taint): the autoscalers count a "
            "DaemonSet's pod on every node they plan, so a job's pods would fit no new node",
            "reason": "Forbidden",
        },
        {
            # The namespace's quotas bound CPU and memory by the team's GPUs' share, one dimension at a time: pods
            # without GPUs, created first and packed full, would make the autoscaler buy nodes its GPU pods (asking
            # little CPU) could then not join, about twice the GPUs' share of nodes. A deadline is the one mark of a
            # pod a ResourceQuota scope reads and a pod cannot lose (Terminating); the CPU-only quota holds such
            # pods to CPU-only work's room (components/teams.py cpu_only_quota).
            # A service's pods (a Deployment's) cannot carry one: they name the platform's class of services without
            # GPUs instead, which the `cpu-services` quota counts, and no deadline, so that each such pod is in one
            # of the two quotas.
            "expression": f"variables.specs_kept || variables.specs.all(s, !{_takes_a_team_node('s')} || "
            f"({_POD_GPUS} > 0.0 ? !has(s.activeDeadlineSeconds) : "
            f"has(s.activeDeadlineSeconds) != {_is_cpu_service('s')}))",
            "message": "a pod without GPUs on the teams' CPU nodes sets spec.activeDeadlineSeconds (its own: a "
            "template's spec, not a Job's spec or a Kubeflow job's runPolicy; any, up to "
            f"{LONGEST_POD_DEADLINE}), or, a Deployment's service, priorityClassName {CPU_SERVICE_PRIORITY_CLASS} "
            f"and no deadline; a pod with GPUs sets none: the deadline counts it in the namespace's "
            f"`{CPU_ONLY_QUOTA}` quota, the class in its `{CPU_SERVICE_QUOTA}` quota, CPU-only work's room, so that "
            "pods without GPUs hold no more CPU nodes than that room",
            "reason": "Forbidden",
        },
        {
            # The API server lets an UPDATE add a pod's deadline (never remove it: ValidatePodUpdate, kubernetes/
            # kubernetes:pkg/apis/core/validation/validation.go@000f2605), and quota admission charges a pod at its
            # CREATE and a resize only (the pod evaluator's Handles, pkg/quota/v1/evaluator/core/pods.go@05e7cb29; a
            # newer stored copy also charges an UPDATE that moves a pod across a scope, unpinned here): a pod moved
            # into the Terminating scope by an UPDATE might run uncounted by the CPU-only quota. Refused, a pod's
            # scope is the one it was created with.
            "expression": "object.kind != 'Pod' || request.operation != 'UPDATE' || oldObject == null || "
            "has(object.spec.activeDeadlineSeconds) == has(oldObject.spec.activeDeadlineSeconds)",
            "message": "a pod's activeDeadlineSeconds is set when it is created, not added by an update: the "
            f"`{CPU_ONLY_QUOTA}` quota counts a pod with one at its creation only",
            "reason": "Forbidden",
        },
        {
            # The class is the mark the `cpu-services` quota counts by, so it goes on a service without GPUs and on
            # nothing else: a Deployment's (or its ReplicaSet's) pods, asking no GPU, EFA or huge pages, on the
            # teams' CPU nodes (a container asking a GPU takes a GPU node). A Job's or a Kubeflow job's pods run to a
            # deadline instead; a StatefulSet or a
            # ReplicationController is not needed for a service without GPUs and is left out (docs/design/tenancy.md,
            # "A team's services without GPUs"), a DaemonSet is refused on the teams' nodes above. An UPDATE that
            # keeps a pod's spec passes: the garbage collector's that drops an orphaned pod's owners among them.
            "expression": f"variables.specs_kept || variables.specs.all(s, !{_is_cpu_service('s')} || ("
            f"object.kind in {_list(['Deployment', 'ReplicaSet', 'Pod'])} && "
            "(object.kind != 'Pod' || (has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists("
            "r, has(r.controller) && r.controller == true && r.kind == 'ReplicaSet'))) && "
            f"!{_takes_a_gpu_node('s')} && {_tolerates_team_cpu('s')} && "
            "!has(s.activeDeadlineSeconds)))",
            "message": f"{CPU_SERVICES_SHAPE} a Deployment's services without GPUs on the teams' CPU nodes: a "
            "Deployment (its ReplicaSet's pods), no GPU, EFA or huge pages, no toleration of the "
            f"{GPU_TAINT_KEY} taint, a toleration of the {TEAM_CPU_TAINT_KEY} taint, no deadline (a Job's pods "
            f"without GPUs set activeDeadlineSeconds instead and count in the `{CPU_ONLY_QUOTA}` quota)",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.templates.all(t, !has(t.metadata) || !has(t.metadata.annotations) || "
            f"!({pins}) || (has(t.spec) && {_asks_gpus('t.spec')}))",
            "message": f'only a pod with GPUs may keep its node from being emptied ({DO_NOT_DISRUPT}: "true", '
            f'{SAFE_TO_EVICT}: "false"): without a GPU it would pin a GPU node its team\'s GPUs do not pay for',
            "reason": "Forbidden",
        },
    ]


def _replicas(key: str) -> str:
    """The replicas of one replica-spec map of a Kubeflow job, summed (1 where unset: the operator's
    default). `sum()` is Kubernetes' CEL list library (k8s.io/apiserver/pkg/cel/library/lists.go,
    kubernetes/kubernetes@v1.35.0)."""
    specs = f"object.spec.{key}"
    return f"(has({specs}) ? {specs}.map(r, has({specs}[r].replicas) ? int({specs}[r].replicas) : 1).sum() : 0)"


def _gang_unchanged() -> str:
    """An UPDATE of a Kubeflow job that keeps its gang: every replica-spec map has the same replica types
    with the same replicas (1 where unset, the operator's default) as `oldObject`'s, and the same
    elasticPolicy and runPolicy.schedulingPolicy (absent in both, or equal)."""

    def replicas(obj: str) -> str:
        return f"(has({obj}.replicas) ? int({obj}.replicas) : 1)"

    def same_specs(key: str) -> str:
        new, old = f"object.spec.{key}", f"oldObject.spec.{key}"
        return (
            f"(has({new}) == has({old}) && (!has({new}) || (size({new}) == size({old}) && "
            f"{new}.all(r, r in {old} && {replicas(f'{new}[r]')} == {replicas(f'{old}[r]')}))))"
        )

    kept = [
        *(same_specs(key) for key in REPLICA_SPECS),
        _kept("spec", "elasticPolicy"),
        _kept("spec", "runPolicy", "schedulingPolicy"),
    ]
    return "(" + " && ".join(kept) + ")"


def _templates_unchanged() -> str:
    """An UPDATE of a Kubeflow job that keeps every replica type's pod template as `oldObject`'s, or one
    made while the job is suspended in both (it has no pods and no PodGroup then: resuming makes a new,
    Pending one, which goes through its queue's enqueue check)."""

    def same(key: str) -> str:
        new, old = f"object.spec.{key}", f"oldObject.spec.{key}"
        return (
            f"(!has({new}) || !has({old}) || {new}.all(r, !(r in {old}) || "
            f"{_optional(f'{new}[r]', 'template')} == {_optional(f'{old}[r]', 'template')}))"
        )

    kept = " && ".join(same(key) for key in REPLICA_SPECS)
    return f"(({_suspended('object')} && {_suspended('oldObject')}) || ({kept}))"


def _placement_unchanged() -> str:
    """An UPDATE of a Kubeflow job that keeps where each replica type's pods may land as `oldObject`'s: its
    template's nodeSelector and affinity (what the gang deadline reads for a job's pools, images/training/
    gang_deadline.py _pools_of)."""

    def same(key: str) -> str:
        new, old = f"object.spec.{key}", f"oldObject.spec.{key}"
        pairs = [
            [_optional(f"{obj}[r]", "template", "spec", field) for obj in (new, old)]
            for field in ("nodeSelector", "affinity")
        ]
        fields = " && ".join(f"{mine} == {was}" for mine, was in pairs)
        return f"(!has({new}) || !has({old}) || {new}.all(r, !(r in {old}) || ({fields})))"

    return "(" + " && ".join(same(key) for key in REPLICA_SPECS) + ")"


def gang_validations(team: TeamRules) -> list[dict]:
    """The gang is the job's: the operator makes the PodGroup's minMember the job's
    `schedulingPolicy.minAvailable` (else all its replicas) and its minResources the job's
    `schedulingPolicy.minResources` (else the requests of minMember pods: CalcPGMinResources)
    (kubeflow/trainer:pkg/controller.v1/common/job.go@v1.9.4 ReconcileJobs). A tenant's own values
    would let a 128-GPU job pass its queue's enqueue check as 1 CPU or 1 pod, and the autoscaler buy
    nodes for pods that can never all run. So minResources is never the tenant's, minAvailable is
    all the replicas (an elastic PyTorchJob's: its minReplicas workers and the other replicas), an
    elastic job is created at its minimum and grows only by its HPA (the /scale subresource, which
    no team may call), and the HPA's only metric is the platform's room (components/workloads.py)."""
    sched = "object.spec.runPolicy.schedulingPolicy"
    is_job = f"object.kind in {_list(list(KUBEFLOW_JOB_KINDS))}"
    name = "(has(object.metadata.name) ? object.metadata.name : object.metadata.generateName)"
    prefixes = "{" + ", ".join(f"'{kind}': '{prefix}'" for kind, prefix in JOB_NAME_PREFIXES.items()) + "}"
    total = " + ".join(_replicas(k) for k in REPLICA_SPECS)
    elastic = "(object.kind == 'PyTorchJob' && has(object.spec.elasticPolicy))"
    worker = "object.spec.pytorchReplicaSpecs.Worker"
    workers = (
        f"(has(object.spec.pytorchReplicaSpecs) && 'Worker' in object.spec.pytorchReplicaSpecs ? "
        f"(has({worker}.replicas) ? int({worker}.replicas) : 1) : 0)"
    )
    old_workers = workers.replace("object.", "oldObject.")
    kept_specs = " && ".join(_kept("spec", key) for key in REPLICA_SPECS)
    min_replicas = (
        f"(has(object.spec.elasticPolicy.minReplicas) ? int(object.spec.elasticPolicy.minReplicas) : {workers})"
    )
    gang = f"({elastic} ? ({total}) - {workers} + {min_replicas} : ({total}))"
    policy = "object.spec.elasticPolicy"
    pool = f"{worker}.template.spec.nodeSelector['{POOL_LABEL}']"
    has_pool = (
        f"(has(object.spec.pytorchReplicaSpecs) && 'Worker' in object.spec.pytorchReplicaSpecs && "
        f"has({worker}.template) && has({worker}.template.spec) && has({worker}.template.spec.nodeSelector) && "
        f"'{POOL_LABEL}' in {worker}.template.spec.nodeSelector)"
    )
    room = (
        f"m.type == 'External' && has(m.external) && has(m.external.metric) && m.external.metric.name == "
        f"'{ELASTIC_ROOM_METRIC}' && has(m.external.metric.selector) && "
        "!has(m.external.metric.selector.matchExpressions) && has(m.external.metric.selector.matchLabels) && "
        "size(m.external.metric.selector.matchLabels) == 2 && "
        f"m.external.metric.selector.matchLabels.queue_name == '{team.queue}' && "
        f"'pool' in m.external.metric.selector.matchLabels && {has_pool} && "
        f"m.external.metric.selector.matchLabels.pool == {pool} && has(m.external.target) && "
        "m.external.target.type == 'Value' && has(m.external.target.value) && string(m.external.target.value) == '1'"
    )
    # The HPA controller finds its target by the group of scaleTargetRef.apiVersion and the kind, which
    # kube-controller-manager's discovery REST mapper also knows lower-cased (NewDiscoveryRESTMapper adds
    # `strings.ToLower(resource.Kind)` beside each kind: kubernetes/client-go:restmapper/discovery.go@v0.35.0):
    # every target in the group kubeflow.org is a job's, whatever the spelling of its kind.
    kubeflow_kinds = "|".join(kind.lower() for kind in KUBEFLOW_JOB_KINDS)
    target = "object.spec.scaleTargetRef"
    hpa_on_a_job = (
        f"object.kind == 'HorizontalPodAutoscaler' && has({target}) && ("
        f"(has({target}.apiVersion) && {target}.apiVersion.matches('(?i)^{KUBEFLOW_GROUP.replace('.', '[.]')}/')) || "
        f"(has({target}.kind) && {target}.kind.matches('(?i)^({kubeflow_kinds})$')))"
    )
    return [
        {
            # The operator makes each elastic job's HPA from its elasticPolicy (pkg/controller.v1/pytorch/hpa.go@
            # v1.9.4); an HPA of the team's own on the job's /scale would grow it on any metric (the HPA controller
            # may scale every resource with a scale subresource).
            "expression": f"!({hpa_on_a_job}) || request.userInfo.username == '{OPERATOR_USER}'",
            "message": "a Kubeflow job's HorizontalPodAutoscaler is the Training Operator's (from elasticPolicy): "
            f"a team may not create or change one (no scaleTargetRef in {KUBEFLOW_GROUP}, whatever the kind's case)",
            "reason": "Forbidden",
        },
        {
            # The operator creates every missing pod of a gang once its PodGroup is past Pending
            # (DelayPodCreationDueToPodGroup, kubeflow/trainer:pkg/controller.v1/control/podgroup_control.go,
            # after SyncPodGroup rewrites the PodGroup's minMember in common/job.go ReconcileJobs@v1.9.4), and
            # the training class its pods carry is no GPU quota's: a running gang grown by an UPDATE would put
            # every new pod in front of the autoscaler at once, outside its queue's enqueue check. An elastic
            # job's Worker replicas change through /scale (its HPA, the operator's), which this policy does
            # not match; the job's own UPDATE keeps its size.
            "expression": f"!({is_job}) || request.operation != 'UPDATE' || "
            f"request.userInfo.username == '{OPERATOR_USER}' || {_gang_unchanged()}",
            "message": "a Kubeflow job keeps its size: its replica types and their replicas, elasticPolicy and "
            "spec.runPolicy.schedulingPolicy are those it was created with (an elastic job grows by its HPA); "
            "submit a new job for another size",
            "reason": "Forbidden",
        },
        {
            # Its pods' too: the operator re-creates a deleted pod from the job's template at once while the
            # PodGroup is past Pending, so 40 CPU workers given 8 GPUs each by a PUT, then deleted one by one
            # (edit deletes pods), would ask for 320 GPUs outside enqueue. A template is what its pods are: it
            # changes only while the job is suspended (no pods, no PodGroup), or by a new job.
            "expression": f"!({is_job}) || request.operation != 'UPDATE' || "
            f"request.userInfo.username == '{OPERATOR_USER}' || {_templates_unchanged()}",
            "message": "a Kubeflow job keeps its pod templates while it runs: suspend it "
            "(spec.runPolicy.suspend: true), change them, then resume it, or submit a new job",
            "reason": "Forbidden",
        },
        {
            "expression": f"!({is_job}) || !{_field('object', *sched.split('.')[1:], 'minResources')}",
            "message": "a gang's minResources is the platform's (the requests of its pods): remove "
            "spec.runPolicy.schedulingPolicy.minResources",
            "reason": "Forbidden",
        },
        {
            "expression": f"!({is_job}) || !{_field('object', *sched.split('.')[1:], 'minAvailable')} || "
            f"int({sched}.minAvailable) == {gang}",
            "message": "spec.runPolicy.schedulingPolicy.minAvailable is every replica of the job (an elastic "
            "PyTorchJob's: elasticPolicy.minReplicas workers and the other replicas); leave it unset or make it so",
            "reason": "Forbidden",
        },
        {
            # Unset, the operator's minMember is all the replicas (ReconcileJobs: `minMember := totalReplicas`),
            # which the HPA grows: the PodGroup's size is fixed once made (below).
            "expression": f"!{elastic} || {_field('object', *sched.split('.')[1:], 'minAvailable')}",
            "message": "an elastic PyTorchJob sets spec.runPolicy.schedulingPolicy.minAvailable to its gang "
            "(elasticPolicy.minReplicas workers and the other replicas): its PodGroup's size is fixed once made",
            "reason": "Forbidden",
        },
        {
            # Once its HPA has grown it, an elastic job has more replicas than minMember, and the operator's
            # minResources is the first minMember pods of its replica types sorted by priority (CalcPGMinResources,
            # kubeflow/trainer:pkg/controller.v1/common/util.go@v1.9.4): with a Master beside the Workers, an
            # unstable sort over a map picks another mix each pass, which the PodGroup's fixed size (below) then
            # refuses, and the operator's pass makes no pod. Elastic rendezvous needs no Master.
            "expression": f"!{elastic} || object.spec.pytorchReplicaSpecs.all(r, r == 'Worker')",
            "message": "an elastic PyTorchJob has Worker replicas only: with a Master, the gang's minResources "
            "would count another mix of replicas each time the operator sorts them",
            "reason": "Forbidden",
        },
        {
            # The operator's minResources sums each replica's containers' requests, or a container's limits
            # where it has no requests at all, and no init container, sidecars included (CalcPGMinResources,
            # AddResourceList, kubeflow/trainer:pkg/controller.v1/common/util.go@v1.9.4); the API server gives
            # a Pod each missing request its limit (SetDefaults_Pod, kubernetes/kubernetes:pkg/apis/core/v1/
            # defaults.go). GPUs limited beside other requests, or asked by an init container, would be in
            # the pods and not in the gang its queue admits.
            "expression": f"!({is_job}) || variables.specs.all(s, s.containers.all(c, !has(c.resources) || "
            "!has(c.resources.requests) || !has(c.resources.limits) || "
            "c.resources.limits.all(r, r in c.resources.requests)))",
            "message": "a Kubeflow job's container that sets requests requests everything it limits (and no init "
            f"container asks for {', '.join(GPU_NODE_RESOURCES)} or huge pages, as in every team pod): the operator "
            "sizes the gang its queue admits from its containers' requests (or limits, where a container has no "
            "requests)",
            "reason": "Forbidden",
        },
        {
            # A container naming no CPU or memory is counted at nothing in the gang's minResources
            # (CalcPGMinResources, AddResourceList, kubeflow/trainer:pkg/controller.v1/common/util.go@v1.9.4),
            # and its pod is then given the LimitRange's defaultRequest (components/teams.py container_defaults):
            # the gang its queue admits would hold less than its pods ask. An UPDATE that keeps every replica
            # spec makes no new gang (a suspension), or only the deadline's own retry (its resume): a job admitted
            # before this rule may still be suspended, and is resumed by its team only with its CPU named.
            "expression": f"!({is_job}) || (request.operation == 'UPDATE' && {kept_specs} && "
            f"(!({_suspended('oldObject')} && !{_suspended('object')}) || {_by_the_deadline()})) || "
            "variables.specs.all(s, s.containers.all(c, has(c.resources) && "
            "(has(c.resources.requests) ? 'cpu' in c.resources.requests && 'memory' in c.resources.requests : "
            "has(c.resources.limits) && 'cpu' in c.resources.limits && 'memory' in c.resources.limits)))",
            "message": "each container of a Kubeflow job names cpu and memory in its requests (or, without "
            "requests, in its limits): the operator sizes the gang its queue admits from them and counts a "
            "container naming neither at nothing, while its pods are given the namespace's default request; add "
            "resources.requests.cpu and resources.requests.memory (its memory limit, if it has one)",
            "reason": "Forbidden",
        },
        # A pod asks the larger of its containers' sum and each init container (resource.PodRequests,
        # kubernetes/kubernetes:staging/src/k8s.io/component-helpers/resource/helpers.go@v1.35.0), the operator's
        # among them (OPERATOR_INITS), while the gang counts the containers alone (CalcPGMinResources,
        # above): below the init container, the pod holds more than its queue admitted. An UPDATE that keeps every
        # replica spec is exempt, as for the rule above.
        *(_at_least_the_operators_init(init, kept_specs) for init in OPERATOR_INITS),
        *(
            [
                {
                    # The quota admits the operator's pods one at a time: a gang of more pods than it holds is
                    # Inqueue, its first pods made and their nodes bought, and it never forms.
                    "expression": f"!({is_job}) || request.operation != 'CREATE' || {total} <= {team.pods_quota}",
                    "message": f"a Kubeflow job has at most {team.pods_quota} pods (team {team.name}'s pods quota): "
                    "a larger gang could never have all its pods, so it would never start",
                    "reason": "Forbidden",
                }
            ]
            if team.pods_quota is not None
            else []
        ),
        {
            # The operator gives a template without schedulerName Volcano's and keeps any other
            # (CreateNewPod, isCustomSchedulerSet, kubeflow/trainer:pkg/controller.v1/common/pod.go@v1.9.4): a
            # replica of another scheduler's would be refused as a pod here (gpu_and_node_validations), and the
            # rest of its gang, Inqueue, would hold its nodes waiting for it.
            "expression": f"!({is_job}) || variables.specs.all(s, !has(s.schedulerName) || "
            f"s.schedulerName == '{SCHEDULER}')",
            "message": f"a Kubeflow job's pods are scheduled by {SCHEDULER}: remove schedulerName from its templates "
            "(the operator sets it)",
            "reason": "Forbidden",
        },
        {
            # The gang's minResources counts each replica's containers only (CalcPGMinResources, above),
            # and a pod asks the most of its containers' sum, with its sidecars', and each init container's
            # (resource.PodRequests, kubernetes/kubernetes:staging/src/k8s.io/component-helpers/resource/
            # helpers.go@v1.35.0), or its pod-level spec.resources (PodLevelResources) where set: a sidecar,
            # an init container asking more than the containers, or pod-level resources would put CPU and
            # memory in the pods that are not in the gang its queue admits.
            "expression": f"!({is_job}) || variables.specs.all(s, !has(s.resources) && (!has(s.initContainers) || "
            "s.initContainers.all(i, (!has(i.restartPolicy) || i.restartPolicy != 'Always') && "
            + " && ".join(
                f"{_request_sum('[i]', r, d)} <= {_request_sum('(has(s.containers) ? s.containers : [])', r, d)}"
                for r, d in _defaults(team).items()
            )
            + ")))",
            "message": "a Kubeflow job's templates ask for resources in their containers: no pod-level "
            "spec.resources, no sidecar (an init container with restartPolicy Always), and no init container "
            "asking more CPU or memory than the containers together; the operator sizes the gang its queue admits "
            "from the containers alone",
            "reason": "Forbidden",
        },
        {
            # The name is generated before validating admission sees a generateName CREATE; read
            # generateName should a server ever show it first (the prefix is the user's either way).
            "expression": f"!({is_job}) || request.operation != 'CREATE' || "
            f"(!{name}.startsWith('{VOLCANO_GROUP_PREFIX}') && (object.kind in {prefixes} ? "
            f"{name}.startsWith({prefixes}[object.kind]) : !{_list(list(JOB_NAME_PREFIXES.values()))}.exists(p, "
            f"{name}.startsWith(p))))",
            "message": "a Kubeflow job's name starts with its kind's prefix ("
            + ", ".join(f"{kind} '{prefix}'" for kind, prefix in JOB_NAME_PREFIXES.items())
            + f"), a PyTorchJob's with none of them, and none with '{VOLCANO_GROUP_PREFIX}' (Volcano's PodGroups): "
            "the operator finds a job's PodGroup by its name alone, so two jobs of one name would share a gang",
            "reason": "Forbidden",
        },
        {
            # SyncPodGroup gets the PodGroup by the job's namespace and name alone (infra/core/names.py) and
            # rewrites its spec, then makes the job's pods at once if the group is past Pending. A job deleted
            # with propagationPolicy=Orphan leaves its PodGroup, its owner reference removed by the garbage
            # collector (orphanDependents, kubernetes/kubernetes:pkg/controller/garbagecollector/
            # garbagecollector.go) and its phase kept (an Inqueue group stays Inqueue without pods:
            # getPodGroupPhase, volcano-sh/volcano:pkg/scheduler/framework/session.go@v1.15.1), for the next job
            # of that name to resize. A job's size and templates are fixed (above), so no PodGroup's minMember or
            # minResources changes, whoever owns it and whoever writes, the operator included (its SyncPodGroup
            # then fails and it makes no pod), but for Volcano's controller, which resizes a plain workload's
            # group after its owner (createOrUpdateNormalPodPG, pkg/controllers/podgroup/pg_controller_handler.go
            # @v1.15.1) and never a Kubeflow job's (their pods name their group).
            "expression": "object.kind != 'PodGroup' || request.operation != 'UPDATE' || "
            f"request.userInfo.username == '{VOLCANO_CONTROLLER_USER}' || "
            f"({_kept('spec', 'minMember')} && {_kept('spec', 'minResources')})",
            "message": "a PodGroup keeps its minMember and minResources: a Kubeflow job's are its job's, whose "
            "size is fixed, even once the job is gone (another job of the same name may not take it over)",
            "reason": "Forbidden",
        },
        {
            "expression": f"!{elastic} || {workers} == {min_replicas} || "
            f"(request.operation == 'UPDATE' && oldObject.kind == 'PyTorchJob' && {workers} == {old_workers})",
            "message": "an elastic PyTorchJob starts with its Worker replicas at elasticPolicy.minReplicas and grows "
            f"only by its HPA ({ELASTIC_ROOM_METRIC})",
            "reason": "Forbidden",
        },
        {
            "expression": f"!{elastic} || !has({policy}.metrics) || (size({policy}.metrics) == 1 && "
            f"{policy}.metrics.all(m, {room}))",
            "message": "an elastic job scales on the platform's metric only: one External metric "
            f"{ELASTIC_ROOM_METRIC} with matchLabels {{queue_name: {team.queue}, pool: <its Worker's pool>}} "
            "and target Value 1",
            "reason": "Forbidden",
        },
    ]


def _grace_cap(team: TeamRules) -> int:
    """The longest a team's pod may take to stop: the checkpoint grace, never under the API server's
    default of 30 s, which it writes into every pod that sets none (SetDefaults_PodSpec,
    kubernetes/kubernetes:pkg/apis/core/v1/defaults.go)."""
    return max(team.grace_seconds, 30)


def _by_a_platform_controller() -> str:
    """The request is a controller's of the platform: Volcano's, the Training Operator's or kube-controller-manager's
    (its own service accounts, or the manager itself where it uses no service-account credentials)."""
    user = "request.userInfo.username"
    return (
        f"({user} in ['{VOLCANO_CONTROLLER_USER}', '{OPERATOR_USER}', '{CONTROLLER_MANAGER}'] || "
        f"{user}.startsWith('{CONTROLLER_USERS}'))"
    )


def release_validations(team: TeamRules) -> list[dict]:
    """A team's pods give their nodes back when its queue stops counting them. Volcano counts a
    queue's share from its tasks that are Bound, Binding, Running or Allocated (AllocatedStatus,
    volcano-sh/volcano:pkg/scheduler/api/helpers.go@v1.15.1; proportion.go sums those): a pod being
    deleted is Releasing and counts in no queue while its containers still hold its GPUs, and the pods of
    a finished job, whose PodGroup the operator deletes, count in none at all."""
    is_job = f"object.kind in {_list(list(KUBEFLOW_JOB_KINDS))}"
    policy = "object.spec.runPolicy.cleanPodPolicy"
    cap = _grace_cap(team)
    return [
        {
            # The operator deletes a finished job's PodGroup and, under cleanPodPolicy None (every kind's
            # default), none of its pods (CleanUpResources, DeletePodsAndServices, kubeflow/trainer:pkg/
            # controller.v1/common/job.go@v1.9.4): a job ended by activeDeadlineSeconds, or by a Master that
            # exits first, would leave its Workers training outside every queue. An MPIJob's runPolicy value
            # wins over its older spec.cleanPodPolicy (mpijob_controller.go@v1.9.4), so runPolicy's is the one
            # read here; checked on every UPDATE too, for the operator reads it only once the job has finished.
            "expression": f"!({is_job}) || request.userInfo.username == '{OPERATOR_USER}' || "
            f"({_field('object', 'spec', 'runPolicy', 'cleanPodPolicy')} && {policy} in {_list(CLEAN_POD_POLICIES)})",
            "message": f"a Kubeflow job sets spec.runPolicy.cleanPodPolicy: {CLEAN_POD_POLICIES[0]} (or "
            f"{CLEAN_POD_POLICIES[1]}): under None, its pods would keep running once it has finished, outside its "
            "team's queue",
            "reason": "Forbidden",
        },
        {
            # The kubelet gives a deleted pod's containers its grace period before it kills them, and the pod
            # is Releasing all along; a grace of days would hold the GPUs that long outside the queue.
            "expression": "variables.specs.all(s, !has(s.terminationGracePeriodSeconds) || "
            f"s.terminationGracePeriodSeconds <= {cap})",
            "message": f"terminationGracePeriodSeconds is at most {cap} "
            "(higgsfield:checkpoints.terminationGracePeriod): a pod that is stopping counts in no queue, yet holds "
            "its node until it has stopped",
            "reason": "Forbidden",
        },
        {
            # A pod being deleted stays while it has a finalizer, and a team's own no controller would ever remove:
            # until its containers stop (the capped grace) it holds its node in no queue, and after, the object
            # stays, a stale pod of a stuck job. The operator copies a
            # template's finalizers onto the pods it makes (getPodsFinalizers, kubeflow/trainer:pkg/controller.v1/
            # control/pod_control.go@v1.9.4). So no finalizer in a team's templates, and on a pod only those it had
            # or the Job controller's tracking finalizer.
            "expression": "object.kind == 'Pod' ? (!has(object.metadata.finalizers) || "
            "object.metadata.finalizers.all(f, (request.operation == 'UPDATE' && has(oldObject.metadata.finalizers) "
            f"&& f in oldObject.metadata.finalizers) || (f == '{JOB_TRACKING_FINALIZER}' && "
            f"request.userInfo.username in {_list(list(JOB_CONTROLLER_USERS))}))) : "
            "variables.metas.all(m, !has(m.finalizers) || size(m.finalizers) == 0)",
            "message": "no finalizers on a team's pods or in its templates (but the Job controller's own): a pod "
            "being deleted stays while it has one, a stale object no controller removes",
            "reason": "Forbidden",
        },
        {
            # A controller finds its pods by their labels. The Training Operator lists a job's pods by its labels
            # alone (GetPodsForJob: client.MatchingLabels(GenLabels), kubeflow/trainer:pkg/controller.v1/pytorch/
            # pytorchjob_controller.go@v1.9.4), and deletes only those when the job is suspended or ends
            # (ReconcileJobs, CleanUpResources, pkg/controller.v1/common/job.go), while it deletes the job's
            # PodGroup; the Job, ReplicaSet and StatefulSet controllers release a pod whose labels no longer match
            # (ClaimPods, ReleasePod, kubernetes/kubernetes:pkg/controller/controller_ref_manager.go, read through
            # the code search), which then has no controller: nothing deletes it, and the Cluster Autoscaler never
            # removes its node (the `replicated` rule, cluster-autoscaler/simulator/drainability/rules/replicated/
            # rule.go@cluster-autoscaler-1.35.2). Relabelled, a pod would keep its GPUs after its job was suspended
            # by the gang deadline or had ended, in no queue. So a controller's pod keeps its labels.
            "expression": "object.kind != 'Pod' || request.operation != 'UPDATE' || "
            f"{_by_a_platform_controller()} || !(has(oldObject.metadata.ownerReferences) && "
            "oldObject.metadata.ownerReferences.exists(r, has(r.controller) && r.controller)) || "
            f"{_kept('metadata', 'labels')}",
            "message": "a pod a controller owns keeps its labels: its controller finds it by them, and a pod out of "
            "its controller's sight is neither deleted when its job is suspended or ends nor ever moved off its "
            "node (delete the pod instead)",
            "reason": "Forbidden",
        },
        {
            # A pod with scheduling gates waits unscheduled; Volcano deducts a gated pod's requests from its
            # gang's share of the queue (DeductSchGatedResources, volcano-sh/volcano:pkg/scheduler/api/
            # job_info.go@v1.15.1, with PodSchedulingReadiness on), so gated gangs would all be Inqueue at once
            # and ask for their nodes together when the gates are lifted. Gates are set only at creation
            # (Kubernetes' pod update validation lets them be removed, never added): a pod's UPDATE passes.
            # Volcano's own queue-admission gate (its SchedulingGatesQueueAdmission, alpha, off by default:
            # pkg/features/volcano_features.go@v1.15.1) is not turned on here (components/training.py).
            "expression": "(object.kind == 'Pod' && request.operation == 'UPDATE') || variables.specs.all(s, "
            "!has(s.schedulingGates) || size(s.schedulingGates) == 0)",
            "message": "no schedulingGates: a gated pod's gang counts nothing in its queue, so gated gangs would "
            "all be admitted at once and ask for their nodes together when the gates are lifted",
            "reason": "Forbidden",
        },
    ]


def suspension_validations() -> list[dict]:
    """A job stays the platform's to stop. The gang deadline suspends the job of a gang that waited past its pools'
    deadline holding idle nodes, and only it resumes one (images/training/gang_deadline.py): a team resuming it
    at once would put its pods back on the idle nodes it gave back, as often as it liked. Its two annotations,
    when it gave a gang back and the clock of a waiting gang, are its own, and a Kubeflow job with a clock keeps
    where its pods may land. And a Kubeflow job is the operator's:
    the operator skips every job whose runPolicy.managedBy names another controller
    (ManagedByExternalController, first in each kind's Reconcile, kubeflow/trainer:
    pkg/controller.v1/pytorch/pytorchjob_controller.go@v1.9.4), and its webhooks do not keep the field unchanged
    (the PyTorchJob's ValidateUpdate compares the new job with itself,
    pkg/webhooks/pytorch/pytorchjob_webhook.go; the MPIJob has none, pkg/webhooks/webhooks.go@v1.9.4): a job
    handed away would never be suspended, ended by its deadline or cleaned up."""
    is_job = f"object.kind in {_list(list(KUBEFLOW_JOB_KINDS))}"
    suspendable = f"({is_job} || object.kind == 'Job')"  # the kinds the gang deadline suspends
    by_the_deadline = _by_the_deadline()

    def gave_back(obj: str) -> str:
        return _annotation(obj, GAVE_BACK_ANNOTATION)

    def waiting(obj: str) -> str:
        return _annotation(obj, WAITING_SINCE_ANNOTATION)

    return [
        {
            "expression": f"!({is_job}) || !{_field('object', 'spec', 'runPolicy', 'managedBy')} || "
            f"object.spec.runPolicy.managedBy == '{KUBEFLOW_MANAGER}'",
            "message": f"spec.runPolicy.managedBy is unset (or {KUBEFLOW_MANAGER}): the Training Operator "
            "reconciles no job another controller manages, so nothing would suspend, end or clean it up",
            "reason": "Forbidden",
        },
        {
            # An UPDATE of either kind the gang deadline suspends; its own resume passes (and the operator's).
            "expression": f"!{suspendable} || request.operation != 'UPDATE' || {by_the_deadline} || "
            f"!({gave_back('oldObject')} != [] && {_suspended('oldObject')}) || "
            f"({gave_back('object')} == {gave_back('oldObject')} && {_suspended('object')})",
            "message": f"a job the gang deadline suspended ({GAVE_BACK_ANNOTATION}) stays suspended, its annotation "
            "as it is, until the gang deadline resumes it (after its retry time): resumed at once, the gang would "
            "hold the idle nodes it gave back; delete the job to cancel it",
            "reason": "Forbidden",
        },
        {
            # A deleted object stays while it has a finalizer. A Kubeflow job being deleted is reconciled by no one
            # (every kind's Reconcile returns for a job with a deletionTimestamp: kubeflow/trainer:pkg/controller.v1/
            # pytorch/pytorchjob_controller.go@v1.9.4), and the garbage collector deletes no dependent of an owner
            # that still exists (classifyReferences, kubernetes/kubernetes:pkg/controller/garbagecollector/
            # garbagecollector.go, read through the code search); with the `orphan` finalizer it orphans them
            # (FinalizerOrphanDependents). So a finalizer of the team's would keep a deleted job's pods, its suspend
            # read by nobody. Neither the operator nor the Job controller puts one on a job; the API server adds
            # foregroundDeletion or orphan during a DELETE itself, not by an UPDATE, and the garbage collector
            # only removes them. A job keeps those it has.
            "expression": f"!{suspendable} || !has(object.metadata.finalizers) || "
            "object.metadata.finalizers.all(f, request.operation == 'UPDATE' && has(oldObject.metadata.finalizers) "
            "&& f in oldObject.metadata.finalizers)",
            "message": "a Kubeflow job or Job gets no finalizer: deleted, it would stay with its pods and PodGroup, "
            "ended by no controller, holding their nodes",
            "reason": "Forbidden",
        },
        {
            # decide() reads the annotation of every suspended job; only the CronJob writes it.
            "expression": f"!{suspendable} || {by_the_deadline} || {gave_back('object')} == [] || "
            f"(request.operation == 'UPDATE' && {gave_back('object')} == {gave_back('oldObject')})",
            "message": f"{GAVE_BACK_ANNOTATION} is the gang deadline's: a team neither sets nor changes it",
            "reason": "Forbidden",
        },
        {
            # The deadline's clock of a gang, on its job (images/training/gang_deadline.py clock_actions): a team
            # neither starts, moves nor stops it.
            "expression": f"!{suspendable} || {by_the_deadline} || "
            f"{waiting('object')} == (request.operation == 'UPDATE' ? {waiting('oldObject')} : [])",
            "message": f"{WAITING_SINCE_ANNOTATION} is the gang deadline's clock: a team neither sets, changes nor "
            "removes it",
            "reason": "Forbidden",
        },
        {
            # A job its team paused keeps its clock until the pause has lasted as long as the pools its templates
            # may land on keep an empty node (gang_deadline.py pause_actions), read from the templates at each
            # pass. Pointed at a pool whose empty nodes go sooner, the clock would come off while the nodes its
            # gang held are still there, and pointed back and resumed, the gang would be packed onto them again
            # with a new clock. A batch Job needs no rule: its template's scheduling fields change only while it
            # is suspended with no status.startTime (AllowMutableSchedulingDirectives, kubernetes/kubernetes:
            # pkg/registry/batch/job/strategy.go), which the Job controller sets on its first sync unsuspended and
            # never clears (syncJob, pkg/controller/job/job_controller.go; both read through the code search): a
            # clocked Job had pods, so it ran.
            "expression": f"!({is_job}) || request.operation != 'UPDATE' || {by_the_deadline} || "
            f"{waiting('oldObject')} == [] || {_placement_unchanged()}",
            "message": "a Kubeflow job the gang deadline is timing keeps where its pods may land (each template's "
            f"nodeSelector and affinity) while it carries {WAITING_SINCE_ANNOTATION}, which the gang deadline "
            "takes off once the job has been suspended as long as its pools keep an empty node: resume it as it "
            "is, wait, or submit a new job for another pool",
            "reason": "Forbidden",
        },
        {
            "expression": "object.kind != 'CronJob' || "
            f"(!{_field('object', 'spec', 'jobTemplate', 'metadata', 'annotations')} || "
            f"!('{GAVE_BACK_ANNOTATION}' in object.spec.jobTemplate.metadata.annotations || "
            f"'{WAITING_SINCE_ANNOTATION}' in object.spec.jobTemplate.metadata.annotations))",
            "message": f"a CronJob's jobTemplate carries neither {GAVE_BACK_ANNOTATION} nor "
            f"{WAITING_SINCE_ANNOTATION}: they are the gang deadline's",
            "reason": "Forbidden",
        },
    ]


# The team's own DELETE of a pod, and its eviction through pods/eviction (the `edit` rights of
# AmazonEKSEditPolicy include both), carry a gracePeriodSeconds of the requester's choosing that
# replaces the pod's own (the pod strategy's CheckGracefulDelete, kubernetes/kubernetes:pkg/registry/
# core/pod/strategy.go; the Eviction's deleteOptions are passed to that delete: pkg/registry/core/pod/
# storage/eviction.go). A team policy cannot judge a DELETE (its validations read `object`, null on
# DELETE), so one guard does, in every team namespace. It also keeps a Kubeflow job's DELETE from
# orphaning its pods (propagationPolicy Orphan, or the older orphanDependents): the garbage collector
# would take the job's ownerReference off its PodGroup and pods and delete neither, and the operator,
# which ignores a job it cannot get (`client.IgnoreNotFound` in Reconcile, kubeflow/trainer:pkg/
# controller.v1/pytorch/pytorchjob_controller.go@v1.9.4), would never end them: pending, they keep
# the nodes the autoscaler bought for them (the gang deadline passes over a PodGroup no job owns);
# running, they outlive the job's activeDeadlineSeconds. A batch Job's the same: its gang's PodGroup is
# Volcano's, owned by the Job, and orphaned with its pods.
POD_RELEASE_GUARD = "higgsfield-pod-release"
# A ReplicaSet's, StatefulSet's, DaemonSet's or ReplicationController's pods, orphaned, are bare: the garbage collector
# takes their controller reference off (orphanDependents, kubernetes/kubernetes:pkg/controller/garbagecollector/
# garbagecollector.go, read through the code search), nothing deletes them, and the Cluster Autoscaler never removes
# the node of a pod without a controller (the `replicated` rule, kubernetes/autoscaler:cluster-autoscaler/simulator/
# drainability/rules/replicated/rule.go@cluster-autoscaler-1.35.2), which node_share_validations refuses at a pod's
# creation. A Deployment's or CronJob's dependents, orphaned, are still controllers (ReplicaSets, Jobs).
ORPHANING_WORKLOADS = (
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("", "replicationcontrollers"),
)
# (group, resource) of the kinds whose DELETE orphans their dependents unless it names a propagation policy
SELF_ORPHANING = (("batch", "jobs"), ("", "replicationcontrollers"))


def pod_release_guard(grace_seconds: int) -> dict:
    """The ValidatingAdmissionPolicy that bounds the grace of every delete and eviction of a team's pod,
    and refuses a delete of a team's Kubeflow job that would leave its pods behind."""
    cap = max(grace_seconds, 30)
    # `request.options` is the request's DeleteOptions on DELETE (AdmissionRequest.options, a dyn field of
    # the `request` variable: BuildRequestType, kubernetes/kubernetes:staging/src/k8s.io/apiserver/pkg/
    # admission/plugin/cel/compile.go@v1.35.0)
    deleted = (
        "!has(request.options) || !has(request.options.gracePeriodSeconds) || "
        f"request.options.gracePeriodSeconds <= {cap}"
    )
    evicted = (
        "!has(object.deleteOptions) || !has(object.deleteOptions.gracePeriodSeconds) || "
        f"object.deleteOptions.gracePeriodSeconds <= {cap}"
    )
    # On a pod's DELETE too: a pod has no dependents, so refusing Orphan there costs nothing.
    orphans = (
        "has(request.options) && ((has(request.options.propagationPolicy) && "
        "request.options.propagationPolicy == 'Orphan') || (has(request.options.orphanDependents) && "
        "request.options.orphanDependents == true))"
    )
    self_orphaning = "[" + ", ".join(_list(kind) for kind in SELF_ORPHANING) + "]"
    return guard_policy(
        POD_RELEASE_GUARD,
        [
            _rule("", "pods", "DELETE"),
            _rule("", "pods/eviction", "CREATE"),
            *(_rule(KUBEFLOW_GROUP, r, "DELETE") for r in sorted(KUBEFLOW_JOB_KINDS.values())),
            # a plain gang's Job: its pods and PodGroup, orphaned, are no job's the gang deadline can suspend
            _rule("batch", "jobs", "DELETE"),
            # the workloads whose pods, orphaned, have no controller at all (SELF_ORPHANING names the one whose
            # DELETE orphans by default)
            *(_rule(group, resource, "DELETE") for group, resource in ORPHANING_WORKLOADS),
        ],
        [
            {
                "expression": f"request.operation == 'DELETE' ? ({deleted}) : ({evicted})",
                "message": f"a pod of a team is deleted or evicted with gracePeriodSeconds at most {cap} "
                "(higgsfield:checkpoints.terminationGracePeriod): a pod that is stopping counts in no queue, "
                "yet holds its node until it has stopped",
                "reason": "Forbidden",
            },
            {
                # A batch/v1 Job orphans its dependents unless the DELETE names a policy (its strategy's
                # DefaultGarbageCollectionPolicy, kubernetes/kubernetes:pkg/registry/batch/job/strategy.go, and
                # shouldOrphanDependents in the generic store, read through the code search): `kubectl delete`
                # sends Background, a bare API DELETE none. The controllers that delete Jobs name one (the CronJob
                # controller Background, the TTL controller Foreground, the namespace controller Background:
                # check on a cluster, docs/capacity.md).
                # A core/v1 ReplicationController's too (rcStrategy.DefaultGarbageCollectionPolicy, pkg/registry/
                # core/replicationcontroller/strategy.go, same).
                "expression": "request.operation != 'DELETE' || !has(request.resource) || "
                f"!([request.resource.group, request.resource.resource] in {self_orphaning}) || "
                "(has(request.options) && has(request.options.propagationPolicy) "
                "&& request.options.propagationPolicy in ['Background', 'Foreground'])",
                "message": "a Job or ReplicationController is deleted with propagationPolicy Background or Foreground "
                "(kubectl's default): its own default orphans its pods (and a Job's PodGroup), which would keep "
                "their nodes",
                "reason": "Forbidden",
            },
            {
                "expression": f"request.operation != 'DELETE' || !({orphans})",
                "message": "a team's pod, Job, Kubeflow job, ReplicaSet, StatefulSet, DaemonSet or "
                "ReplicationController is deleted with its dependents (no propagationPolicy Orphan, no "
                "orphanDependents): orphaned pods have no controller left to end them, and keep their nodes",
                "reason": "Forbidden",
            },
        ],
    )


# A pod deleted with propagationPolicy Foreground gets the `foregroundDeletion` finalizer, which the garbage
# collector removes only once no dependent whose owner reference sets blockOwnerDeletion is left
# (processDeletingDependentsItem), and a pod with dependents is itself deleted in Foreground when its job is
# (attemptToDeleteItem; kubernetes/kubernetes:pkg/controller/garbagecollector/garbagecollector.go, read through the
# code search). So any object of the team's with a finalizer of its own and a blocking reference to a pod would keep
# the pod, deleted, with a finalizer no controller removes: what release_validations refuses on the pod itself.
# EKS enables no OwnerReferencesPermissionEnforcement (awsdocs/amazon-eks-user-guide:latest/ug/clusters/
# platform-versions.adoc, read through the code search), so whoever may create a ConfigMap may set the flag. The
# platform's controllers may: Volcano's makes the PodGroup of a pod no controller owns with a controller reference
# to it, which blocks (buildPodGroupFromPod, volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@
# v1.15.1), and sets no finalizer on it.
POD_DEPENDENTS_GUARD = "higgsfield-pod-dependents"


def pod_dependents_guard() -> dict:
    """The ValidatingAdmissionPolicy that keeps a team's objects from blocking the deletion of a pod."""
    refs = "(has(object.metadata.ownerReferences) ? object.metadata.ownerReferences : [])"
    old_refs = (
        "(oldObject != null && has(oldObject.metadata.ownerReferences) ? oldObject.metadata.ownerReferences : [])"
    )
    # the garbage collector finds an owner by the kind in its reference; the kind is matched in any case
    blocks_a_pod = "r.kind.matches('(?i)^pod$') && has(r.blockOwnerDeletion) && r.blockOwnerDeletion"
    return guard_policy(
        POD_DEPENDENTS_GUARD,
        # Namespaced: a binding's namespaceSelector never skips a cluster-scoped object (MatchResources,
        # kubernetes/api:admissionregistration/v1/types.go@v0.35.0), and no cluster-scoped object is a team's
        [
            {
                "apiGroups": ["*"],
                "apiVersions": ["*"],
                "resources": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ],
        [
            {
                "expression": f"{_by_a_platform_controller()} || {refs}.all(r, !({blocks_a_pod}) || r in {old_refs})",
                "message": "no object of a team's blocks the deletion of a pod (blockOwnerDeletion in an owner "
                "reference to a Pod): a pod deleted in the foreground would stay, with a finalizer no controller "
                "removes, for as long as the object does",
                "reason": "Forbidden",
            }
        ],
    )


def _rule(group: str, resource: str, *operations: str) -> dict:
    return {"apiGroups": [group], "apiVersions": ["v1"], "resources": [resource], "operations": list(operations)}


def guard_policy(name: str, rules: list[dict], validations: list[dict]) -> dict:
    """A ValidatingAdmissionPolicy that fails closed, for in_every_team_namespace to bind."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": rules}, "validations": validations},
    }


def in_every_team_namespace(policy: str) -> dict:
    """Binds a guard policy to every team namespace (the label only the platform sets on namespaces)."""
    return deny_binding(
        policy,
        match_resources={"namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}},
    )


# Volcano's PodGroup controller gives every pod of `volcano` that names no PodGroup one of its own,
# shared by the pods of one controlling owner (GeneratePodgroupName, volcano-sh/volcano:staging/src/
# volcano.sh/apis/pkg/apis/helpers/helpers.go@v1.15.1): minMember is MIN_MEMBER_ANNOTATION on the
# pod's ReplicaSet, StatefulSet, DaemonSet or Job (1 where absent, negative or no integer), and
# minResources that many of the pod's requests (buildPodGroupFromPod, getAnnotationsFromUpperRes,
# getMinMemberFromUpperRes in pkg/controllers/podgroup/pg_controller_handler.go; CalTaskRequests in
# pkg/controllers/util/util.go@v1.15.1). A pod that names a PodGroup (GROUP_NAME_ANNOTATION) gets none
# and joins the one it names (processNextReq, pg_controller.go). The Deployment controller copies a
# Deployment's annotations to its ReplicaSets, the CronJob controller a job template's to its Jobs.
# The owner's other `volcano.sh/` annotations reach the PodGroup too (inheritUpperAnnotations, on by
# default: --inherit-owner-annotations, cmd/controller-manager/app/options/options.go@v1.15.1); those
# the scheduler reads (sla-waiting-time, hierarchy) belong to plugins this stack does not enable
# (components/training.py SCHEDULER_CONFIG: no sla, no hdrf).
GROUP_OWNERS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob")
# The kinds with a /scale subresource: their replicas change through PUT/PATCH of `<kind>/scale`
# (`kubectl scale`, the HPA controller, any holder of the `edit` role), whose object is an autoscaling/v1
# Scale carrying only name, namespace, UID, resourceVersion and creation time, never annotations
# (scaleFromDeployment, kubernetes/kubernetes:pkg/registry/apps/deployment/storage/storage.go@030880a5,
# and its StatefulSet/ReplicaSet/ReplicationController twins). No policy can compare a gang with replicas it
# never sees, so on these a gang is at most one pod (the serving floor is one: infra/offline/jobs.py
# SERVING_FLOOR). Volcano reads no ReplicationController's annotations today (getAnnotationsFromUpperRes);
# held the same should it start. A Job has no /scale (its storage serves the Job and its status only:
# JobStorage, pkg/registry/batch/job/storage/storage.go, same ref): its parallelism changes by an UPDATE of
# the Job, which this policy sees.
# The owner kinds Volcano's controller reads a plain pod's gang size from (getAnnotationsFromUpperRes,
# volcano-sh/volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1): the pod's every owner
# reference of these kinds, by kind and name in the pod's namespace.
VOLCANO_UPPER_KINDS = ("ReplicaSet", "StatefulSet", "DaemonSet", "Job")
SCALED_OWNERS = ("Deployment", "ReplicaSet", "StatefulSet", "ReplicationController")
# Volcano's controller-manager: the chart's `<release>-controllers` account (installer/helm/chart/volcano/
# templates/controllers.yaml@v1.15.1) in the release `volcano` (components/charts.py names a release
# after its chart) of namespace volcano-system (components/training.py VOLCANO_NAMESPACE).
VOLCANO_CONTROLLER_USER = "system:serviceaccount:volcano-system:volcano-controllers"


def _group_owner_pods() -> str:
    """How many pods a GROUP_OWNERS object runs at once: replicas, a Job's parallelism (1 where unset)
    or its completions where fewer, a DaemonSet's 1 (one PodGroup for its pods on every node it selects)."""

    def at_once(job: str) -> str:
        # a Job runs min(parallelism, completions) pods at once (JobSpec.parallelism, k8s.io/api batch/v1)
        parallelism = f"(has({job}.parallelism) ? int({job}.parallelism) : 1)"
        return (
            f"(has({job}.completions) && int({job}.completions) < {parallelism} ? int({job}.completions) : "
            f"{parallelism})"
        )

    cron = "object.spec.jobTemplate"
    templated = f"({_field('object', 'spec', 'jobTemplate', 'spec')} ? {at_once(cron + '.spec')} : 1)"
    return (
        f"(object.kind == 'DaemonSet' ? 1 : (object.kind == 'Job' ? {at_once('object.spec')} : "
        f"(object.kind == 'CronJob' ? {templated} : (has(object.spec.replicas) ? int(object.spec.replicas) : 1))))"
    )


def volcano_group_validations() -> list[dict]:
    """A workload's gang is no larger than its pods and no other gang's: the gang size a team writes on
    a workload Volcano makes a PodGroup for is an integer from 0 to the pods it runs at once, and only
    the Training Operator (on the pods it creates) and Volcano's controller name a pod's PodGroup.

    Below the pods is honest (minResources is that many pods' requests; each pod above it is allocated
    alone, against the queue's capability, and may be preempted: gang's preemptable). Above them the
    gang never forms: its minResources, more than the workload asks, sits in the queue's inqueue share
    and its pods wait for ever. A pod naming another PodGroup counts toward that gang's minMember, so a
    Kubeflow job's gang would start with a stranger in place of one of its replicas."""
    pods = _group_owner_pods()

    def sized(meta: str) -> str:
        value = f"{meta}.annotations['{MIN_MEMBER_ANNOTATION}']"
        return (
            f"(!has({meta}.annotations) || !('{MIN_MEMBER_ANNOTATION}' in {meta}.annotations) || "
            f"({value}.matches('^[0-9]{{1,9}}$') && ({pods} == 0 || int({value}) <= {pods})))"
        )

    cron = f"(!{_field('object', 'spec', 'jobTemplate', 'metadata')} || {sized('object.spec.jobTemplate.metadata')})"
    names_group = f"(has(m.annotations) && '{GROUP_NAME_ANNOTATION}' in m.annotations)"
    pod = "object.metadata.annotations"
    kept = (
        f"(has(oldObject.metadata.annotations) && '{GROUP_NAME_ANNOTATION}' in oldObject.metadata.annotations && "
        f"oldObject.metadata.annotations['{GROUP_NAME_ANNOTATION}'] == {pod}['{GROUP_NAME_ANNOTATION}'])"
    )
    scaled = f"object.metadata.annotations['{MIN_MEMBER_ANNOTATION}']"
    refs = "(has(object.metadata.ownerReferences) ? object.metadata.ownerReferences : [])"
    old_refs = "(has(oldObject.metadata.ownerReferences) ? oldObject.metadata.ownerReferences : [])"
    by_a_controller = (
        f"request.userInfo.username == '{OPERATOR_USER}' || request.userInfo.username.startsWith('{CONTROLLER_USERS}')"
    )
    return [
        {
            # Volcano sizes a plain pod's PodGroup from the annotations of every owner it names, looked up by kind
            # and name, not by UID and not only the controller (VOLCANO_UPPER_KINDS): a pod naming another
            # workload would borrow that workload's gang size for its own requests, a gang that never forms.
            # And it names the group after the pod's controller's UID (GeneratePodgroupName, helpers.go@v1.15.1):
            # a pod claiming any controller, whatever its kind, would join that workload's running gang.
            "expression": f"object.kind != 'Pod' || {by_a_controller} || (request.operation == 'CREATE' ? "
            f"(size({refs}) <= 1 && {refs}.all(r, !(r.kind in {_list(VOLCANO_UPPER_KINDS)}) && "
            f"!(has(r.controller) && r.controller))) : {refs} == {old_refs})",
            "message": "a pod a team creates names at most one owner, not as its controller, and no "
            f"{', '.join(VOLCANO_UPPER_KINDS)}: Volcano would size its gang from that owner's "
            f"{MIN_MEMBER_ANNOTATION}, or put it in its controller's gang; nor does a team change a pod's owners "
            "(create the workload instead)",
            "reason": "Forbidden",
        },
        {
            "expression": f"!(object.kind in {_list(SCALED_OWNERS)}) || "
            f"request.userInfo.username.startsWith('{CONTROLLER_USERS}') || !has(object.metadata.annotations) || "
            f"!('{MIN_MEMBER_ANNOTATION}' in object.metadata.annotations) || {scaled} in ['0', '1']",
            "message": f"{MIN_MEMBER_ANNOTATION} is 0 or 1 on a {', '.join(SCALED_OWNERS)}: their replicas change "
            "through /scale (kubectl scale, an HPA), which admission cannot compare with a gang, so a gang of "
            "several pods is a Job (its parallelism) or a Kubeflow job",
            "reason": "Forbidden",
        },
        {
            "expression": f"!(object.kind in {_list(GROUP_OWNERS)}) || "
            f"request.userInfo.username.startsWith('{CONTROLLER_USERS}') || "
            f"(object.kind == 'CronJob' ? {cron} : {sized('object.metadata')})",
            "message": f"{MIN_MEMBER_ANNOTATION} is a whole number from 0 to the pods the workload runs at once "
            "(replicas; a Job's parallelism, or its completions where fewer; 1 for a DaemonSet): a larger gang "
            "never forms and holds its queue",
            "reason": "Forbidden",
        },
        {
            # Volcano's controller makes a Job's PodGroup once, at its first pod, and never resizes it: it watches pods
            # for adds only, and updates of ReplicaSets and StatefulSets alone (Initialize, volcano-sh/volcano:pkg/
            # controllers/podgroup/pg_controller.go@v1.15.1); a Job's pods reach createNormalPodPGIfNotExist, which
            # creates a missing group and changes none, reading the Job's annotations by owner kind (volcano-sh/
            # volcano:pkg/controllers/podgroup/pg_controller_handler.go@v1.15.1 getAnnotationsFromUpperRes,
            # getMinMemberFromUpperRes). So the annotation stays what the group was made from: changed together with
            # a lower parallelism, the rule above would compare the new pods with a size no group has, while the
            # group keeps the old one, larger than the pods. The policy matches `jobs`, not `jobs/status`: the Job
            # controller's status writes never reach it; our other writers of a Job (the gang deadline, `higgsfield
            # jobs suspend`) patch spec.suspend and their own annotations only.
            "expression": f"object.kind != 'Job' || request.operation != 'UPDATE' || "
            f"request.userInfo.username.startsWith('{CONTROLLER_USERS}') || "
            f"{_annotation('object', MIN_MEMBER_ANNOTATION)} == {_annotation('oldObject', MIN_MEMBER_ANNOTATION)}",
            "message": f"a Job's {MIN_MEMBER_ANNOTATION} is fixed once it is made: Volcano sizes the Job's PodGroup "
            "from it once, at its first pod, and never again; submit a new Job for another gang",
            "reason": "Forbidden",
        },
        {
            "expression": f"object.kind == 'Pod' ? (!has({pod}) || !('{GROUP_NAME_ANNOTATION}' in {pod}) || "
            f"(request.operation == 'CREATE' && request.userInfo.username == '{OPERATOR_USER}') || "
            f"(request.operation == 'UPDATE' && (request.userInfo.username == '{VOLCANO_CONTROLLER_USER}' || {kept}))) "
            f": variables.metas.all(m, !{names_group})",
            "message": f"no {GROUP_NAME_ANNOTATION}: a pod's PodGroup is the Training Operator's (a Kubeflow job) or "
            "the one Volcano makes for its workload, never another gang's",
            "reason": "Forbidden",
        },
    ]


def gang_classes(team: TeamRules) -> tuple[str, ...]:
    """The classes a Kubeflow gang's pods may carry that no GPU ResourceQuota counts: the team's training
    classes, and the platform's default, which the API server writes into a pod whose template names none
    (the operator copies schedulingPolicy.priorityClass onto the PodGroup, not onto the pods)."""
    return (*team.training_classes, DEFAULT_PRIORITY_CLASS)


def plain_gpu_validations(team: TeamRules) -> list[dict]:
    """A GPU pod that is no Kubeflow job's names a class the `plain-gpu` quota counts (not a training
    class, not the platform's default). Volcano's controller groups a plain workload's pods after they
    exist, so each pending one is autoscaler demand whatever its queue says (docs/design/
    autoscaler-demand.md); the quota (components/teams.py plain_gpu_quota) bounds them at the team's GPU
    quota. Kubeflow jobs' pods are the Training Operator's, created only once their gang is Inqueue, and a
    controller's pods come from a template checked here."""
    if not team.training_classes:
        return []
    plain = f"object.kind in {_list([*TEMPLATE_KINDS, 'CronJob'])}"
    by_a_member = (
        f"(object.kind == 'Pod' && request.operation == 'CREATE' && request.userInfo.username != '{OPERATOR_USER}' "
        f"&& !request.userInfo.username.startsWith('{CONTROLLER_USERS}'))"
    )
    exempt = gang_classes(team)
    return [
        {
            "expression": f"!({plain} || {by_a_member}) || variables.specs.all(s, !{_takes_a_gpu_node('s')} || "
            f"(has(s.priorityClassName) && !(s.priorityClassName in {_list(exempt)})))",
            "message": "a GPU pod outside a Kubeflow job names a serving or evaluation class, not "
            f"{', '.join(exempt)} (nor none): its pods exist before Volcano admits them, so the team's plain-gpu "
            "quota must count them; or submit a Kubeflow job",
            "reason": "Forbidden",
        }
    ]


def gpu_and_node_validations() -> list[dict]:
    """GPUs only through the device plugin, Volcano and the quota; no pod placed by hand or onto
    the system nodes or a node before its health gate."""
    pods = _list(["Pod", *TEMPLATE_KINDS, "CronJob"])
    return [
        {
            # Not only GPU requests: a pod that asks for EFA or huge pages, or tolerates the GPU taint,
            # makes the autoscaler buy a GPU node too; through Volcano its queue's capability bounds it.
            "expression": (
                f"!(object.kind in {pods}) || variables.specs.all(s, (has(s.schedulerName) && s.schedulerName == "
                f"'{SCHEDULER}') || !{_takes_a_gpu_node('s')})"
            ),
            "message": f"GPU pods are scheduled by {SCHEDULER} (its queues and gangs): set schedulerName: "
            f"{SCHEDULER}, or submit a Kubeflow job (the operator sets it); "
            f"so is any pod that asks for EFA or huge pages or tolerates the {GPU_TAINT_KEY} taint, and every "
            "container counts (init, sidecar, ephemeral)",
            "reason": "Forbidden",
        },
        {
            # What a pod's GPUs are counted by outside admission reads its containers alone: the operator's gang
            # (CalcPGMinResources, kubeflow/trainer:pkg/controller.v1/common/util.go@v1.9.4) and the elastic room's
            # used GPUs, kube-state-metrics' kube_pod_container_resource_requests (spec.containers only:
            # createPodContainerResourceRequestsFamilyGenerator, kubernetes/kube-state-metrics:internal/store/
            # pod.go@v2.17.0; init containers are another series). A sidecar's GPUs would be free GPUs to every
            # team's elastic jobs in the pool, which would grow into them and have nodes bought. Init containers
            # are fixed once a pod is made, so a pod's UPDATE passes (one made before this rule stays updatable).
            "expression": "(object.kind == 'Pod' && request.operation == 'UPDATE') || variables.specs.all(s, "
            f"!has(s.initContainers) || s.initContainers.all(c, !{_asks_node_resource('c')}))",
            "message": f"no init container, sidecars included, asks for {', '.join(GPU_NODE_RESOURCES)} or huge "
            "pages: a pod's GPUs are counted (its gang, the pool's free GPUs every elastic job grows into) from its "
            "containers; put them in a container",
            "reason": "Forbidden",
        },
        {
            # but the empty ones the operator sets on its launcher without GPUs (LAUNCHER_HIDDEN_GPU_ENV), in the pod
            # it creates and that pod's later updates (a pod's containers are immutable)
            "expression": "variables.containers.all(cs, cs.all(c, !has(c.env) || c.env.all(e, !(e.name in "
            f"{_list(GPU_DEVICE_ENV)}) || (e.name in {_list(LAUNCHER_HIDDEN_GPU_ENV)} && !has(e.valueFrom) && "
            "(!has(e.value) || e.value == '') && "
            f"{_by_the_operator(_KEPT_ENV)}))))",
            "message": f"no {', '.join(GPU_DEVICE_ENV)} in a team container (value or valueFrom): GPUs come from the "
            "device plugin (resources nvidia.com/gpu)",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.metas.all(m, !has(m.annotations) || m.annotations.all(k, "
            f"!k.startsWith('{CDI_ANNOTATION_PREFIX}')))",
            "message": f"no {CDI_ANNOTATION_PREFIX}* annotations: devices are requested as resources "
            "(nvidia.com/gpu), never by name",
            "reason": "Forbidden",
        },
        {
            # The scheduler sets nodeName when it binds (pods/binding); on a pod's later updates it is there already.
            "expression": "(object.kind == 'Pod' && request.operation != 'CREATE') || variables.specs.all(s, "
            "!has(s.nodeName) || size(s.nodeName) == 0)",
            "message": "no nodeName: the kubelet admits a pod with nodeName without the scheduler (no queue, no "
            "quota check by Volcano, taints ignored); select a pool with nodeSelector higgsfield.io/pool",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.specs.all(s, !has(s.tolerations) || s.tolerations.all(t, has(t.key) && "
            f"size(t.key) > 0 && !(t.key in {_list(FORBIDDEN_TOLERATIONS)})))",
            "message": "tolerations name a taint key (no tolerate-everything), and not "
            f"{' or '.join(FORBIDDEN_TOLERATIONS)} (system nodes, nodes before their health gate)",
            "reason": "Forbidden",
        },
    ]


def container_hardening_validations() -> list[dict]:
    """Every container, ephemeral ones included, without privilege escalation."""
    return [
        {
            "expression": (
                "variables.containers.all(cs, cs.all(c, (has(c.securityContext) && "
                "has(c.securityContext.allowPrivilegeEscalation) && "
                f"c.securityContext.allowPrivilegeEscalation == false) || "
                f"{_operators_init('c', [i.container for i in OPERATOR_INITS])}))"
            ),
            "message": "every container sets securityContext.allowPrivilegeEscalation: false (setuid binaries can't "
            "gain privileges)",
            "reason": "Forbidden",
        }
    ]


def launcher_label_validations() -> list[dict]:
    """Only the operator's MPIJob launchers carry the launcher label (and so its API egress)."""
    key, value = next(iter(LAUNCHER.items()))
    labelled = f"(has(m.labels) && '{key}' in m.labels && m.labels['{key}'] == '{value}')"
    kept = (
        f"(request.operation == 'UPDATE' && has(oldObject.metadata.labels) && '{key}' in oldObject.metadata.labels && "
        f"oldObject.metadata.labels['{key}'] == '{value}')"
    )
    return [
        {
            "expression": f"object.kind == 'MPIJob' || variables.metas.all(m, !{labelled} || (object.kind == 'Pod' "
            f"&& (request.userInfo.username == '{OPERATOR_USER}' || {kept})))",
            "message": f"the label {key}={value} (egress to the API server) is the Training Operator's, on the "
            "MPIJob launchers it creates: remove it",
            "reason": "Forbidden",
        }
    ]


def service_validations(team: TeamRules) -> list[dict]:
    """Services stay inside the cluster network unless the stack gives the team more (point 3)."""
    allowed = ["ClusterIP", *team.service_types]
    rules = [
        {
            "expression": f"object.kind != 'Service' || !has(object.spec.type) || object.spec.type in {_list(allowed)}",
            "message": f"team {team.name}'s Services may be of type {', '.join(allowed)} (no ExternalName"
            + ("" if "NodePort" in allowed else ", NodePort")
            + ("" if "LoadBalancer" in allowed else ", LoadBalancer")
            + "): higgsfield:scheduler.teams[].serviceTypes",
            "reason": "Forbidden",
        },
        {
            "expression": "object.kind != 'Service' || !has(object.spec.externalIPs) || "
            "size(object.spec.externalIPs) == 0",
            "message": "no externalIPs on a Service: it would capture traffic the cluster sends to those IPs "
            "(CVE-2020-8554)",
            "reason": "Forbidden",
        },
    ]
    if "LoadBalancer" in team.service_types and not team.public_load_balancers:
        rules.append(
            {
                "expression": (
                    "object.kind != 'Service' || !has(object.spec.type) || object.spec.type != 'LoadBalancer' || "
                    f"(has(object.metadata.annotations) && '{INTERNAL_LB_ANNOTATION}' in object.metadata.annotations "
                    "&& "
                    f"object.metadata.annotations['{INTERNAL_LB_ANNOTATION}'] != 'false')"
                ),
                "message": "load balancers are internal in this stack: annotate the Service "
                f'{INTERNAL_LB_ANNOTATION}: "true" (higgsfield:publicLoadBalancers is off)',
                "reason": "Forbidden",
            }
        )
    return rules


def cel_validations(team: TeamRules) -> list[dict]:
    """Each rule: a CEL expression that is true for an allowed object, and the message shown."""
    queues, classes, uid, gid = _list([team.queue]), _list(team.priority_classes), team.uid, team.gid
    serving = _list(team.serving_classes)
    sched = "object.spec.runPolicy.schedulingPolicy"
    is_job = f"object.kind in {_list(list(KUBEFLOW_JOB_KINDS))}"
    no_container_runs_as_other = (
        "variables.containers.all(cs, cs.all(c, !has(c.securityContext) || ("
        f"(!has(c.securityContext.runAsUser) || c.securityContext.runAsUser == {uid}) && "
        f"(!has(c.securityContext.runAsGroup) || c.securityContext.runAsGroup == {gid}))))"
    )
    return (
        [
            {
                "expression": f"!({is_job}) || ({_field('object', 'spec', 'runPolicy', 'schedulingPolicy', 'queue')} "
                f"&& {sched}.queue in {queues})",
                "message": f"team {team.name} submits to queue {team.queue}: set "
                f"spec.runPolicy.schedulingPolicy.queue: {team.queue}",
                "reason": "Forbidden",
            },
            {
                "expression": f"!({is_job}) || "
                f"!{_field('object', 'spec', 'runPolicy', 'schedulingPolicy', 'priorityClass')} || "
                f"{sched}.priorityClass in {classes}",
                "message": f"team {team.name} may use priority classes {', '.join(team.priority_classes)} "
                "(spec.runPolicy.schedulingPolicy.priorityClass)",
                "reason": "Forbidden",
            },
            {
                "expression": f"object.kind != 'PodGroup' || (has(object.spec.queue) && object.spec.queue in {queues})",
                "message": f"team {team.name}'s PodGroups go to queue {team.queue}",
                "reason": "Forbidden",
            },
            {
                "expression": "object.kind != 'PodGroup' || !has(object.spec.priorityClassName) || "
                f"object.spec.priorityClassName in {classes}",
                "message": f"team {team.name}'s PodGroups may use priority classes {', '.join(team.priority_classes)}",
                "reason": "Forbidden",
            },
            {
                "expression": f"variables.specs.all(s, !has(s.priorityClassName) || s.priorityClassName in {classes})",
                "message": f"team {team.name}'s pods may use priority classes {', '.join(team.priority_classes)}",
                "reason": "Forbidden",
            },
            {
                "expression": (
                    f"variables.metas.all(m, (!has(m.annotations) || ((!('{QUEUE_ANNOTATION}' in m.annotations) || "
                    f"m.annotations['{QUEUE_ANNOTATION}'] in {queues}) && "
                    f"(!('{QUEUE_KEY}' in m.annotations) || m.annotations['{QUEUE_KEY}'] in {queues}))) && "
                    f"(!has(m.labels) || !('{QUEUE_KEY}' in m.labels) || m.labels['{QUEUE_KEY}'] in {queues}))"
                ),
                "message": f"team {team.name}'s pods may name only queue {team.queue}",
                "reason": "Forbidden",
            },
            {
                "expression": (
                    "variables.specs.all(s, has(s.securityContext) && "
                    f"has(s.securityContext.runAsUser) && s.securityContext.runAsUser == {uid} && "
                    f"has(s.securityContext.runAsGroup) && s.securityContext.runAsGroup == {gid} && "
                    f"has(s.securityContext.fsGroup) && s.securityContext.fsGroup == {gid} && "
                    "(!has(s.securityContext.supplementalGroups) || s.securityContext.supplementalGroups.all(g, g "
                    f"== {gid})))"
                ),
                "message": f"team {team.name}'s pods run as UID {uid} and GID {gid}: set securityContext runAsUser: "
                f"{uid}, runAsGroup: {gid}, fsGroup: {gid} (no other supplementalGroups)",
                "reason": "Forbidden",
            },
            {
                "expression": no_container_runs_as_other,
                "message": f"team {team.name}'s containers run as UID {uid} and GID {gid} (remove the container's "
                f"runAsUser/runAsGroup, or set them to {uid})",
                "reason": "Forbidden",
            },
            {
                "expression": (
                    "variables.containers.all(cs, cs.all(c, !has(c.securityContext) || ("
                    "(!has(c.securityContext.privileged) || c.securityContext.privileged == false) && "
                    "(!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || "
                    "size(c.securityContext.capabilities.add) == 0))))"
                ),
                "message": "no privileged containers and no added capabilities: GPUs and EFA come from the device "
                "plugins (resources nvidia.com/gpu, vpc.amazonaws.com/efa)",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.specs.all(s, (!has(s.hostNetwork) || s.hostNetwork == false) && "
                "(!has(s.hostPID) || s.hostPID == false) && (!has(s.hostIPC) || s.hostIPC == false))",
                "message": "no host network, PID or IPC namespace",
                "reason": "Forbidden",
            },
            {
                "expression": f"variables.containers.all(cs, cs.all(c, {_handlers_name_no_host('c')}))",
                "message": "no probe or lifecycle hook names a host: the kubelet connects there from the node, past "
                "the namespace's network policies (leave httpGet.host and tcpSocket.host out: the pod's own IP)",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.specs.all(s, !has(s.volumes) || s.volumes.all(v, "
                f"{' || '.join(f'has(v.{t})' for t in SAFE_VOLUMES)}))",
                "message": f"volumes may be {', '.join(SAFE_VOLUMES)}: no hostPath, no inline csi (storage comes "
                "from the namespace's claims)",
                "reason": "Forbidden",
            },
            {
                # A serving class preempts. Volcano lets it take only what a gang can spare
                # (infra/offline/preemption.py);
                # kube-scheduler would take any lower-priority pod, gangs' minimums included.
                "expression": (
                    "object.kind != 'Pod' || variables.specs.all(s, !has(s.priorityClassName) || "
                    f"!(s.priorityClassName in {serving}) || "
                    f"(has(s.schedulerName) && s.schedulerName == '{SCHEDULER}'))"
                ),
                "message": f"pods of a serving class ({', '.join(team.serving_classes) or 'none'}) are scheduled by "
                f"{SCHEDULER}: set schedulerName: {SCHEDULER}",
                "reason": "Forbidden",
            },
            {
                # Training never preempts: a job's pods and PodGroup may not carry a class that does.
                "expression": (
                    f"!({is_job}) || ((!{_field('object', 'spec', 'runPolicy', 'schedulingPolicy', 'priorityClass')} "
                    f"|| !({sched}.priorityClass in {serving})) && "
                    f"variables.specs.all(s, !has(s.priorityClassName) || !(s.priorityClassName in {serving})))"
                ),
                "message": "training jobs never preempt: a Kubeflow job may not use a serving class "
                f"({', '.join(team.serving_classes) or 'none'}); serve from a Deployment",
                "reason": "Forbidden",
            },
        ]
        + gpu_and_node_validations()
        + plain_gpu_validations(team)
        + node_share_validations(team)
        + share_cap_validations(team)
        + gang_validations(team)
        + release_validations(team)
        + suspension_validations()
        + volcano_group_validations()
        + container_hardening_validations()
        + launcher_label_validations()
        + service_validations(team)
    )


def admission_policy(team: TeamRules) -> dict:
    """The ValidatingAdmissionPolicy of one team: its queue, classes and identity, on the
    Kubeflow jobs, Volcano PodGroups, pods (ephemeral containers included: `kubectl debug` updates
    the pods/ephemeralcontainers subresource with the whole Pod; an in-place resize, GA in Kubernetes
    1.35, the pods/resize subresource, so a running pod's new requests meet the share cap too),
    workloads and Services of its namespace (the binding selects it)."""
    core = ["pods", "pods/ephemeralcontainers", "pods/resize", "services", *WORKLOADS[""].values()]
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": core, "operations": ["CREATE", "UPDATE"]},
        *(
            {
                "apiGroups": [group],
                "apiVersions": ["v1"],
                "resources": sorted(kinds.values()),
                "operations": ["CREATE", "UPDATE"],
            }
            for group, kinds in WORKLOADS.items()
            if group
        ),
        {
            "apiGroups": [KUBEFLOW_GROUP],
            "apiVersions": ["v1"],
            "resources": sorted(KUBEFLOW_JOB_KINDS.values()),
            "operations": ["CREATE", "UPDATE"],
        },
        {
            "apiGroups": ["scheduling.volcano.sh"],
            "apiVersions": ["v1beta1"],
            "resources": ["podgroups"],
            "operations": ["CREATE", "UPDATE"],
        },
        {
            "apiGroups": ["autoscaling"],
            "apiVersions": ["v1", "v2"],
            "resources": ["horizontalpodautoscalers"],
            "operations": ["CREATE", "UPDATE"],
        },
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name(team.name), "labels": {TEAM_LABEL: team.name}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            "variables": cel_variables(),
            "validations": cel_validations(team),
        },
    }


def admission_binding(team: TeamRules) -> dict:
    """Binds the team's policy to its namespace only (by the label the API server sets)."""
    return deny_binding(
        policy_name(team.name),
        labels={TEAM_LABEL: team.name},
        match_resources={"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: team.name}}},
    )


# NetworkPolicies are allow-lists that add up: a policy a team writes can only widen what the
# platform's default deny leaves open (an egress rule to 0.0.0.0/0 beside `default-deny` opens
# everything, Lustre's 988 included). So teams write none: not only the platform's are protected,
# every NetworkPolicy write (create, update, delete) in a team namespace is refused, unless the
# requester may change admission policies themselves (the platform's deploy identity and cluster
# admins: whoever could delete this policy gains nothing by being exempt from it). The `edit`
# rights of AmazonEKSEditPolicy include create/update/patch/delete on networking.k8s.io
# networkpolicies (EKS user guide, access-policy-permissions) and nothing on
# admissionregistration.k8s.io, so a team member or any service account of the namespace is refused.
NETWORK_POLICY_GUARD = "higgsfield-tenant-network-policies"


def network_policy_guard() -> dict:
    """The ValidatingAdmissionPolicy that keeps every team namespace's NetworkPolicies the platform's."""
    may_change_admission = (
        "authorizer.group('admissionregistration.k8s.io').resource('validatingadmissionpolicies')"
        ".check('update').allowed()"
    )
    return guard_policy(
        NETWORK_POLICY_GUARD,
        [_rule("networking.k8s.io", "networkpolicies", "CREATE", "UPDATE", "DELETE")],
        [
            {
                "expression": may_change_admission,
                "message": "NetworkPolicies in team namespaces are the platform's (default deny and the "
                "allowances jobs need): ask the platform team for an allowance",
                "reason": "Forbidden",
            }
        ],
    )


def network_policy_guard_binding() -> dict:
    return in_every_team_namespace(NETWORK_POLICY_GUARD)


# The claims the program makes in a team namespace take names a team could take first: pulumi-kubernetes creates and
# does not apply over an object it finds (no upsertExistingObjects, which the program does not set: pulumi/
# pulumi-kubernetes:CHANGELOG.md@v4.32.0, 4.29.0), so a team's claim of the name a new dataset's claim will have stops
# the deploy that adds the dataset at AlreadyExists. A claim of such a name is the platform's: CREATE refused to whoever
# may not change admission policies (the deploy identity and cluster admins may), as NETWORK_POLICY_GUARD's writes are.
# A StatefulSet's claims are named `TEMPLATE-SET-ORDINAL`: a template named `dataset` is refused too.
CLAIM_NAME_GUARD = "higgsfield-tenant-claim-names"


def claim_name_guard(names: Sequence[str], prefixes: Sequence[str]) -> dict:
    """The ValidatingAdmissionPolicy that keeps the claim names `names` and those starting with `prefixes` in every
    team namespace the platform's."""
    may_change_admission = (
        "authorizer.group('admissionregistration.k8s.io').resource('validatingadmissionpolicies')"
        ".check('update').allowed()"
    )
    taken = " || ".join(
        [*(f"object.metadata.name == '{n}'" for n in names)]
        + [f"object.metadata.name.startsWith('{p}')" for p in prefixes]
    )
    reserved = ", ".join([*(f"`{n}`" for n in names), *(f"`{p}*`" for p in prefixes)])
    return guard_policy(
        CLAIM_NAME_GUARD,
        [_rule("", "persistentvolumeclaims", "CREATE")],
        [
            {
                "expression": f"!({taken}) || {may_change_admission}",
                "message": f"claims named {reserved} in team namespaces are the platform's (the shared volume, the "
                "datasets): name yours otherwise",
                "reason": "Forbidden",
            }
        ],
    )


def namespace(team: TeamRules, kubernetes_version: str) -> dict:
    """The team's namespace: Pod Security levels pinned to the cluster's minor, and the queue
    Volcano moves the team's PodGroups to when they name none."""
    version = f"v{kubernetes_version}"
    labels = {TEAM_LABEL: team.name}
    for mode, level in (("enforce", PSA_ENFORCE), ("warn", PSA_WARN), ("audit", PSA_WARN)):
        labels[f"pod-security.kubernetes.io/{mode}"] = level
        labels[f"pod-security.kubernetes.io/{mode}-version"] = version
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": team.name, "labels": labels, "annotations": {QUEUE_ANNOTATION: team.queue}},
    }


# The Kubernetes group a team's people carry: their EKS access entry names it (`aws eks
# create-access-entry --kubernetes-groups higgsfield:team:<team>`, docs/tasks.md "Add a team").
def team_group(team: str) -> str:
    return f"higgsfield:team:{team}"


def job_submitter_role(team: str) -> dict:
    """What AmazonEKSEditPolicy does not give a team: the Kubeflow jobs of its namespace (the EKS
    access policy lists built-in resources only: awsdocs/amazon-eks-user-guide:latest/ug/manage-access/
    k8s-access/access-policy-reference.adoc@c88259ae, section AmazonEKSEditPolicy), and read access to
    the Volcano PodGroups the operator makes for them (to see why a gang waits). Namespaced; the team
    admission policy still decides every job it creates."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "higgsfield-jobs", "namespace": team},
        "rules": [
            {
                "apiGroups": [KUBEFLOW_GROUP],
                "resources": sorted(KUBEFLOW_JOB_KINDS.values()),
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            },
            {
                "apiGroups": [KUBEFLOW_GROUP],
                "resources": sorted(f"{r}/status" for r in KUBEFLOW_JOB_KINDS.values()),
                "verbs": ["get"],
            },
            {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": ["get", "list", "watch"]},
        ],
    }


def job_submitter_binding(team: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "higgsfield-jobs", "namespace": team},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "higgsfield-jobs"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": team_group(team)}],
    }


def default_service_account(team: str) -> dict:
    """Pods that name no service account get no API token (the MPIJob launcher has its own)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": team},
        "automountServiceAccountToken": False,
    }


def _netpol(team: str, name: str, spec: dict) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": team, "labels": {TEAM_LABEL: team}},
        "spec": spec,
    }


def network_policies(team: str, *, monitoring_namespace: str, api_server_cidr: str, api_service_ip: str) -> list[dict]:
    """Default deny in and out, then what jobs need: their own namespace (NCCL bootstrap, c10d
    rendezvous, MPI), DNS, the metrics scrape from the monitoring namespace, and the API server
    for MPIJob launchers (kubectl exec into the workers), TCP 443 only: at the `kubernetes`
    Service's address `api_service_ip`, which in-cluster clients dial, and in `api_server_cidr`
    (the VPC), where the endpoint's interfaces behind that Service live. The VPC CNI's network
    policy agent checks a pod's egress in an eBPF program on the host side of the pod's veth
    (attachEgressBPFProbe: TCIngressAttach on the host veth, aws/aws-network-policy-agent:
    pkg/ebpf/bpf_client.go@v1.4.1; the program matches the packet's ip->daddr against the policy's
    CIDRs, pkg/ebpf/c/tc.v4egress.bpf.c, same ref), before kube-proxy's DNAT in the host's
    netfilter: what it sees is the Service address, outside the VPC. Lustre is not here: the file system is
    mounted by the node's kernel (the CSI node plugin runs on the host network), so pod policies
    never see its traffic; EFA traffic bypasses the kernel and is limited by the EFA security group."""
    own = {"podSelector": {}}
    ns = lambda name: {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}  # noqa: E731
    dns = {**ns(DNS["namespace"]), "podSelector": {"matchLabels": DNS["pod"]}}
    return [
        _netpol(team, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _netpol(
            team,
            "allow-own-namespace",
            {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [own]}],
                "egress": [{"to": [own]}],
            },
        ),
        _netpol(
            team,
            "allow-dns",
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [{"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}],
            },
        ),
        _netpol(
            team,
            "allow-metrics-scrape",
            {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [ns(monitoring_namespace)]}]},
        ),
        _netpol(
            team,
            "allow-launcher-to-api-server",
            {
                "podSelector": {"matchLabels": LAUNCHER},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [{"ipBlock": {"cidr": f"{api_service_ip}/32"}}, {"ipBlock": {"cidr": api_server_cidr}}],
                        "ports": [{"protocol": "TCP", "port": 443}],
                    }
                ],
            },
        ),
    ]
