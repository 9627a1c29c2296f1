"""The gang deadline: half-delivered gangs give back the nodes that arrived (docs/capacity.md,
docs/design/reserved-capacity.md).

images/training/gang_deadline.py says why the Cluster Autoscaler alone never removes them (it
packs the gang's pending pods onto them first) and what the CronJob does: suspend the Kubeflow job
(or batch Job) of a gang that waited longer than the deadline of the pools it may land on while it holds idle
nodes, and resume it after `GANG_RETRY_AFTER_S` (infra/core/names.py). The bound per pool is
infra/offline/cold_start.py `give_back`, shown by `higgsfield timeline STACK --job POOL`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from components.cpu_nodes import ON_SYSTEM_NODES
from components.kubernetes_objects import (
    RESTRICTED_POD_SECURITY,
    KubernetesObject,
    preview_reads,
    restricted_namespace,
    role_and_binding,
    service_account_subject,
)
from infra.config import GpuPool, seconds_of
from infra.core.names import GANG_RETRY_AFTER_S, KUBEFLOW_GROUP, KUBEFLOW_JOB_KINDS

NAMESPACE = "higgsfield-capacity"
SERVICE_ACCOUNT = "gang-deadline"
USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"  # the CronJob's requests, as admission sees them
MEMORY_LIMIT = "768Mi"
ESTIMATE = "estimate"


def boot_seconds(pool: GpuPool) -> tuple[float, str]:
    """EC2 launch, boot of the AL2023 NVIDIA AMI, nodeadm (RAID0, huge pages), kubelet joins and
    the node turns Ready. No AWS figure is published per type: an estimate, longer for the P
    family (8 GPUs, many EFA cards, a large NVMe array)."""
    family = pool.instance.name.split(".")[0]
    if family.startswith("p"):
        return 420.0, (
            f"{ESTIMATE}: EC2 launch + boot + join to node Ready for {pool.instance.name} (P family, 8 GPUs); "
            "measure with the ASG activity history and `kubectl get node -w`"
        )
    return 240.0, (
        f"{ESTIMATE}: EC2 launch + boot + join to node Ready for {pool.instance.name}; measure with the ASG activity "
        "history and `kubectl get node -w`"
    )


GANG_DEADLINE_MARGIN_S = 300.0
DEADLINE_CHECK_S = 60.0


def gang_deadline_s(pool: GpuPool) -> float:
    """How long a gang waits for its last node: boot + the gate's bound + a margin for EC2
    delivering a batch late. Beyond it the nodes are not coming (insufficient capacity)."""
    boot, _ = boot_seconds(pool)
    gate = seconds_of(pool.health_gate.timeout) if pool.health_gate.enabled else 0
    return boot + gate + GANG_DEADLINE_MARGIN_S


def empty_node_s(pool: GpuPool) -> float:
    """How long a node of the pool stays once nothing uses it: a node-group pool's scaleDownUnneededTime (its ASG
    tag); a Karpenter pool's NodePool consolidateAfter (components/karpenter.py), no less than that and the gang
    deadline, so a gang's first nodes are not taken away while its last ones boot and pass the gate."""
    unneeded = float(seconds_of(pool.scale_down_unneeded_time))
    return max(gang_deadline_s(pool), unneeded) if pool.provisioner == "karpenter" else unneeded


DEADLINE_LABEL = "higgsfield.io/gang-deadline"
# The CronJob's own ConfigMap (no DEADLINE_LABEL: it is no pool's): since when each team's gangs have waited beside
# idle nodes of each pool (images/training/gang_deadline.py TeamClock). It makes it on the first pass that needs it.
TEAM_CLOCKS = "gang-deadline-team-clocks"


def settings_of(namespaces: Sequence[str]) -> dict:
    """The CronJob's settings; each pool's deadline, and how long an empty node of it stays, is a ConfigMap of its
    own (deadline_config_map), so adding a pool adds one and changes nothing else."""
    return {
        "retryAfterSeconds": GANG_RETRY_AFTER_S,
        "checkSeconds": DEADLINE_CHECK_S,  # the schedule's period (cron_job): a pause younger began since the last pass
        "namespaces": list(namespaces),
        "deadlineLabel": DEADLINE_LABEL,
        "teamClocks": TEAM_CLOCKS,
    }


def deadline_config_map(pool: GpuPool, grace_seconds: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"gang-deadline-{pool.name}", "namespace": NAMESPACE, "labels": {DEADLINE_LABEL: "true"}},
        "data": {
            "pool": pool.name,
            "deadlineSeconds": str(int(gang_deadline_s(pool))),
            # a job its team paused that long left no idle node of the pool behind (images/training/gang_deadline.py
            # pause_actions): its pause is timed from the operator's request to delete its pods (the Suspended
            # condition), and a pod may take the stack's grace to end before its node starts to count as empty
            "emptySeconds": str(int(empty_node_s(pool)) + grace_seconds),
        },
    }


def cron_job(image: pulumi.Input[str], settings: dict) -> dict:
    every = f"*/{max(int(DEADLINE_CHECK_S // 60), 1)} * * * *"
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "gang-deadline", "namespace": NAMESPACE},
        "spec": {
            "schedule": every,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": 300,
                    "template": {
                        "spec": {
                            "serviceAccountName": SERVICE_ACCOUNT,
                            "restartPolicy": "Never",
                            **ON_SYSTEM_NODES,
                            "securityContext": RESTRICTED_POD_SECURITY,
                            "containers": [
                                {
                                    "name": "gang-deadline",
                                    "image": image,
                                    "command": ["python", "/opt/higgsfield/gang_deadline.py"],
                                    "env": [
                                        {
                                            "name": "GANG_DEADLINE_SETTINGS",
                                            "value": json.dumps(settings, sort_keys=True),
                                        }
                                    ],
                                    "resources": {
                                        "requests": {"cpu": "50m", "memory": "64Mi"},
                                        # a page of the largest objects (images/training/gang_deadline.py PAGE)
                                        "limits": {"memory": MEMORY_LIMIT},
                                    },
                                    "securityContext": {
                                        "allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]},
                                    },
                                }
                            ],
                        }
                    },
                }
            },
        },
    }


# Nodes, and the pods bound to them in every namespace: what tells an idle node from a held one.
CLUSTER_RULES = [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}]
# In its own namespace: list the pools' ConfigMaps, and keep the team clocks' one. Its get and update are limited to
# its name; its create cannot be ("You cannot restrict `create` or `deletecollection` requests by their resource
# name. For `create`, this limitation is because the name of the new object may not be known at authorization
# time.", kubernetes/website:content/en/docs/reference/access-authn-authz/rbac.md, read through the code search),
# and is confined to this namespace, where teams have no rights (components/tenancy.py binds theirs in their own).
OWN_NAMESPACE_RULES = [
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [TEAM_CLOCKS], "verbs": ["get", "update"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
]


def rules_in_team_namespace() -> list[dict]:
    """What the CronJob needs in a team's namespace: list PodGroups, and list/patch Kubeflow jobs and batch
    Jobs, a plain gang's (only the suspension and the deadline's two annotations are changed,
    images/training/gang_deadline.py)."""
    return [
        {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": ["list"]},
        {"apiGroups": [KUBEFLOW_GROUP], "resources": sorted(KUBEFLOW_JOB_KINDS.values()), "verbs": ["list", "patch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "patch"]},
    ]


@dataclass(frozen=True, kw_only=True)
class GangDeadlineArgs:
    pools: Sequence[GpuPool]
    namespaces: Sequence[str]  # the teams' namespaces (created by the Teams component)
    image: pulumi.Input[str]  # the training image, which ships gang_deadline.py
    grace_seconds: int  # higgsfield:checkpoints.terminationGracePeriod: the most a team's pod takes to stop
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]


class GangDeadline(pulumi.ComponentResource):
    """The CronJob that gives back the nodes of gangs that cannot be whole, with least privilege.

    Creates: the higgsfield-capacity Namespace (Pod Security restricted), its ServiceAccount, a
    ClusterRole to list nodes and pods (every namespace's: a node is idle only when no pod of any
    namespace holds it) and its binding, per team namespace a Role (list PodGroups, list/patch
    Kubeflow jobs) and RoleBinding, a ConfigMap per pool with its deadline and how long it keeps an
    empty node (and a Role to list them and to keep the CronJob's team clocks, a ConfigMap it makes itself), and
    the CronJob on the system nodes.
    Replaced when: never; a pool's deadline is a value of the CronJob.
    """

    def __init__(self, name: str, args: GangDeadlineArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:gang_deadline:GangDeadline", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        ns = restricted_namespace(f"{name}-namespace", NAMESPACE, child)
        in_ns = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, *args.depends_on])
        preview_reads(
            name, NAMESPACE, {"batch": ["cronjobs"]}, in_ns
        )  # the CronJob (its ConfigMaps by name: NAMED_READS)
        subject = service_account_subject(SERVICE_ACCOUNT, NAMESPACE)
        KubernetesObject(
            f"{name}-sa",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
            },
            opts=in_ns,
        )
        role, binding = role_and_binding("higgsfield-gang-deadline-nodes", CLUSTER_RULES, subject)
        KubernetesObject(f"{name}-nodes", role, opts=child)
        KubernetesObject(f"{name}-nodes-binding", binding, opts=child)
        for team_ns in args.namespaces:
            role, binding = role_and_binding("higgsfield-gang-deadline", rules_in_team_namespace(), subject, team_ns)
            KubernetesObject(f"{name}-{team_ns}-role", role, opts=child)
            KubernetesObject(f"{name}-{team_ns}-binding", binding, opts=child)
        role, binding = role_and_binding("gang-deadline-config", OWN_NAMESPACE_RULES, subject, NAMESPACE)
        KubernetesObject(f"{name}-config-reader", role, opts=in_ns)
        KubernetesObject(f"{name}-config-reader-binding", binding, opts=in_ns)
        for pool in args.pools:
            KubernetesObject(f"{name}-{pool.name}", deadline_config_map(pool, args.grace_seconds), opts=in_ns)
        KubernetesObject(f"{name}-cronjob", cron_job(args.image, settings_of(args.namespaces)), opts=in_ns)
        self.register_outputs({"namespace": NAMESPACE})
