"""The job watchdog and the training alerts: no job hangs silently, no slow node drags a gang for ever.

images/training/job_watchdog.py says what the watchdog does: from the ranks' progress in Prometheus
(images/training/progress.py, scraped as `training-progress`: components/observability.py), it
restarts a hung gang (deletes its quiet pods; the operator recreates them; an Event on the job) and
asks the health gate to check a straggler's node, or one the pre-flight named, again (an Event about
the node, which the gate's own per-node program acts on: images/training/health_gate.py recheck),
and a GPU node nobody has used for IDLE_RECHECK_S the same way; a node an MPIJob launcher's
pre-flight named is re-checked, then the job's pods there deleted for the operator to recreate.
`alert_rules` are the PrometheusRule groups for hangs, stragglers, gangs waiting past their deadline,
nodes the pre-flight named, and GPU XID errors. The decisions: docs/design/job-health.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from components.cpu_nodes import ON_SYSTEM_NODES
from components.gang_deadline import gang_deadline_s
from components.kubernetes_objects import (
    RESTRICTED_POD_SECURITY,
    KubernetesObject,
    preview_reads,
    restricted_namespace,
    role_and_binding,
    service_account_subject,
)
from components.workloads import DCGM_JOB, TRAINING_PROGRESS_JOB, VOLCANO_CONTROLLER_JOB
from infra.config import GpuPool
from infra.core.names import RECHECK_REASON

NAMESPACE = "higgsfield-watchdog"
SERVICE_ACCOUNT = "job-watchdog"
APP_LABELS = {"app.kubernetes.io/name": "job-watchdog", "app.kubernetes.io/part-of": "higgsfield"}
EVENTS_NAMESPACE = "default"  # where Events about nodes live (components/healthgate.py)
# The watchdog's memory: a page of a hung job's pods as large as a team can make them (images/training/job_watchdog.py
# PAGE) beside its own.
MEMORY_LIMIT = "256Mi"
# A job is hung when its newest step is older than HANG_STEP_MULTIPLE x its normal step time, and
# never sooner than HANG_FLOOR_S: longer than PyTorch's NCCL watchdog (5 minutes, infra/offline/jobs.py
# COLLECTIVE_TIMEOUT_S), which ends a stuck collective itself, so this one catches what that cannot
# (a rank stuck in its data loader or on storage, a process that never reaches its next collective),
# and longer than a synchronous checkpoint save.
HANG_STEP_MULTIPLE = 10
HANG_FLOOR_S = 900
STRAGGLER_FACTOR = 1.5  # a rank's forward pass over 1.5 x its peers', averaged over 10 minutes
RECHECK_QUIET_S = 3600  # a node is sent back to the gate at most once an hour
# A GPU node no pod has used for this long is sent back to the gate (images/training/job_watchdog.py
# idle_nodes): a GPU can fail while nobody runs on it, and the next gang should not find out.
IDLE_RECHECK_S = 12 * 3600
CHECK_S = 30


def settings_env(prometheus_url: str) -> list[dict]:
    values = {
        "PROMETHEUS_URL": prometheus_url,
        "HANG_STEP_MULTIPLE": HANG_STEP_MULTIPLE,
        "HANG_FLOOR_SECONDS": HANG_FLOOR_S,
        "STRAGGLER_FACTOR": STRAGGLER_FACTOR,
        "RECHECK_QUIET_SECONDS": RECHECK_QUIET_S,
        "IDLE_RECHECK_SECONDS": IDLE_RECHECK_S,
        "CHECK_SECONDS": CHECK_S,
    }
    return [{"name": k, "value": str(v)} for k, v in values.items()]


def rules_in_team_namespace() -> list[dict]:
    """In a team's namespace: list and delete pods (a hung job's, by uid) and record Events there (on
    the job their controller reference names). Nothing else, nowhere else."""
    return [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]


def rules_for_node_events() -> list[dict]:
    """In `default`: ask for a node's re-check (an Event) and see whether one was asked lately."""
    return [{"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list"]}]


def deployment(image: pulumi.Input[str], prometheus_url: str) -> dict:
    """One replica on the system nodes, restricted, no GPU, no host access."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "job-watchdog", "namespace": NAMESPACE, "labels": APP_LABELS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": APP_LABELS},
            "template": {
                "metadata": {"labels": APP_LABELS},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    **ON_SYSTEM_NODES,
                    "securityContext": RESTRICTED_POD_SECURITY,
                    "containers": [
                        {
                            "name": "watchdog",
                            "image": image,
                            "command": ["python", "/opt/higgsfield/job_watchdog.py"],
                            "env": settings_env(prometheus_url),
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "64Mi"},
                                "limits": {"memory": MEMORY_LIMIT},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


# GPU XIDs that take a node out of service: those whose immediate action in NVIDIA's XID catalog (r590)
# is a GPU reset, a machine restart or a check of its mechanicals (the node check's table and its
# citation: images/training/node_check.py CRITICAL_XIDS, kept equal by a test). Any other XID (13, 31,
# 94, 126: restart the application; 43, 63, 92: informational) is a warning.
CRITICAL_XIDS = (48, 54, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 151, 155, 156, 158, 168)
XID = "DCGM_FI_DEV_XID_ERRORS"  # the dcgm-exporter's last XID per GPU, 0 = none (the GPU dashboard's too)


def alert_rules(pools: Sequence[GpuPool]) -> list[dict]:
    """PrometheusRule groups (the chart's additionalPrometheusRulesMap: components/observability.py)."""
    progress = f'{{job="{TRAINING_PROGRESS_JOB}"}}'  # the scrape's own series, never another job's of that name
    progress_age = f"time() - max by (namespace, job_name) (higgsfield_training_progress_timestamp_seconds{progress})"
    normal_step = f"quantile by (namespace, job_name) (0.5, higgsfield_training_step_seconds{progress})"
    compute = f"avg_over_time(higgsfield_training_compute_seconds{progress}[10m])"
    # the exporters' own series, as the dashboard reads them: the XIDs DCGM's, the queues' Volcano's controller's
    # (queue_pod_group_inqueue_count, volcano-sh/volcano:pkg/controllers/metrics/queue.go@v1.15.1)
    xid, inqueue = (
        f'{XID}{{job="{DCGM_JOB}"}}',
        f'volcano_queue_pod_group_inqueue_count{{job="{VOLCANO_CONTROLLER_JOB}"}}',
    )
    critical = " or ".join(f"{xid} == {code}" for code in CRITICAL_XIDS)
    # the longest a gang may wait for its nodes on any pool, then the gang-deadline CronJob gives them back
    deadline = max((gang_deadline_s(p) for p in pools), default=1800.0)
    rules = [
        {
            "alert": "TrainingJobHung",
            "expr": f"({progress_age}) > on (namespace, job_name) "
            f"clamp_min({HANG_STEP_MULTIPLE} * {normal_step}, {HANG_FLOOR_S})",
            "for": "1m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "{{ $labels.namespace }}/{{ $labels.job_name }} has made no training step for "
                "{{ $value | humanizeDuration }}",
                "description": "The job watchdog restarts the gang from its newest complete checkpoint "
                "(Event TrainingHung on the job).",
            },
        },
        {
            "alert": "TrainingStraggler",
            "expr": f"{compute} > on (namespace, job_name) group_left "
            f"{STRAGGLER_FACTOR} * quantile by (namespace, job_name) (0.5, {compute})",
            "for": "15m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "rank {{ $labels.rank }} of {{ $labels.namespace }}/{{ $labels.job_name }} on "
                "{{ $labels.Hostname }} is slower than its peers",
                "description": f"The job watchdog asks the health gate to check the node again ({RECHECK_REASON}).",
            },
        },
        {
            "alert": "PreflightNamedNode",
            "expr": f"max by (namespace, job_name, node) (higgsfield_preflight_suspect{progress}) > 0",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "the pre-flight of {{ $labels.namespace }}/{{ $labels.job_name }} named node "
                "{{ $labels.node }}; the gang is recreated without it",
            },
        },
        {
            "alert": "GangWaitingPastDeadline",
            "expr": f"max by (queue_name) ({inqueue}) > 0",
            "for": f"{int(deadline)}s",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "queue {{ $labels.queue_name }} has had a gang waiting for its nodes longer than any "
                "pool's gang deadline",
                "description": "The pool lacks capacity; the gang-deadline CronJob gives back half-delivered gangs' "
                "nodes (docs/capacity.md).",
            },
        },
        {
            "alert": "GpuXidCritical",
            "expr": f"max by (Hostname, gpu) ({critical}) > 0",
            "labels": {"severity": "critical"},
            "annotations": {"summary": "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported a critical XID"},
        },
        {
            "alert": "GpuXidError",
            "expr": f"max by (Hostname, gpu) ({xid}) > 0",
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}",
            },
        },
    ]
    return [{"name": "higgsfield-training", "rules": rules}]


@dataclass(frozen=True, kw_only=True)
class JobWatchdogArgs:
    namespaces: Sequence[str]  # the teams' namespaces (created by the Teams component)
    image: pulumi.Input[
        str
    ]  # the platform's image built from images/training (the gate's), which ships job_watchdog.py
    prometheus_url: str
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]


class JobWatchdog(pulumi.ComponentResource):
    """The job watchdog, with least privilege.

    Creates: the higgsfield-watchdog Namespace (Pod Security restricted), its ServiceAccount, a
    ClusterRole of what it may do in a team namespace (list/delete pods, get PyTorchJobs, create
    Events) bound by a RoleBinding in each team namespace (nothing cluster-wide), a Role and
    RoleBinding in `default` (create/list Events: the re-check requests about nodes), the
    Deployment on the system nodes, and the CI preview's read of it (preview_reads). It never
    writes a node.
    Replaced when: never; settings are values of the Deployment.
    """

    def __init__(self, name: str, args: JobWatchdogArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:job_watchdog:JobWatchdog", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        ns = restricted_namespace(f"{name}-namespace", NAMESPACE, child)
        in_ns = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns, *args.depends_on])
        rbac = "rbac.authorization.k8s.io"
        subject = service_account_subject(SERVICE_ACCOUNT, NAMESPACE)

        def obj(suffix: str, manifest: dict) -> KubernetesObject:
            return KubernetesObject(f"{name}-{suffix}", manifest, opts=in_ns)

        obj(
            "sa",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
            },
        )
        team_role = "higgsfield-job-watchdog"
        obj(
            "team-role",
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "ClusterRole",
                "metadata": {"name": team_role},
                "rules": rules_in_team_namespace(),
            },
        )
        for namespace in args.namespaces:
            obj(
                f"binding-{namespace}",
                {
                    "apiVersion": f"{rbac}/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": team_role, "namespace": namespace},
                    "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": team_role},
                    "subjects": subject,
                },
            )
        role, binding = role_and_binding(
            "higgsfield-job-watchdog-node-events", rules_for_node_events(), subject, EVENTS_NAMESPACE
        )
        obj("node-events-role", role)
        obj("node-events-binding", binding)
        obj("deployment", deployment(args.image, args.prometheus_url))
        preview_reads(name, NAMESPACE, {"apps": ["deployments"]}, in_ns)
        self.register_outputs({"namespace": NAMESPACE})
