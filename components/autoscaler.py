"""Cluster Autoscaler: turns a pending GPU pod into a node, and an idle node into nothing."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi

from components.charts import helm_release
from components.cpu_nodes import SYSTEM_LABELS, SYSTEM_TOLERATION
from components.identity import pod_identity
from infra.config import Autoscaler, GpuPool, Queue, seconds_of
from infra.core.names import KUBE_SYSTEM as NAMESPACE
from infra.core.versions import Chart

SERVICE_ACCOUNT = "cluster-autoscaler"
# The chart's Deployment: its `cluster-autoscaler.fullname`, the release's name (the chart's: components/charts.py
# helm_release) and `<cloudProvider>-cluster-autoscaler` joined, since neither holds the other and no
# fullnameOverride is set (kubernetes/autoscaler:cluster-autoscaler/charts/cluster-autoscaler/templates/_helpers.tpl
# and deployment.yaml@cluster-autoscaler-chart-9.59.0). What `kubectl -n kube-system logs deploy/...` names.
DEPLOYMENT = "cluster-autoscaler-aws-cluster-autoscaler"

# --- when the autoscaler stops: unready nodes -------------------------------------------------
# At the pinned autoscaler (kubernetes/autoscaler:cluster-autoscaler/...@cluster-autoscaler-1.35.2,
# the image of infra/core/versions.py CLUSTER_AUTOSCALER_IMAGE["1.35"]):
# - A node with a startup taint (our gate's STARTUP_TAINT_KEY) is handed to the cluster state as an
#   unready copy (taints.FilterOutNodesWithStartupTaints, utils/taints/taints.go, called by
#   obtainNodeLists in core/static_autoscaler.go).
# - An unready node counts as NotStarted while CreationTimestamp + maxNodeStartupTime is in the
#   future, and as Unready after (updateReadinessStats, clusterstate/clusterstate.go); the time is
#   --max-node-startup-time (config/flags/flags.go: 15m default) unless the node group overrides it,
#   which AWS node groups cannot (GetAsgOptions in cloudprovider/aws/aws_manager.go reads no
#   maxnodestartuptime option).
# - IsClusterHealthy (clusterstate.go) is false when Unready > --ok-total-unready-count (default 3)
#   AND Unready > --max-total-unready-percentage (default 45) / 100 x all registered nodes; then
#   RunOnce logs "Cluster is not ready for autoscaling" and returns before any scale-up or
#   scale-down (core/static_autoscaler.go): the whole cluster stops scaling.
# So: a gang's nodes boot together; if they are still in the gate after maxNodeStartupTime, every one
# of them is Unready at once. The settings below keep a node in its gate NotStarted, and let the
# largest gang be wholly unready (bad nodes that stay tainted) without freezing everyone else.
UPSTREAM_MAX_NODE_STARTUP_S = 15 * 60
UPSTREAM_OK_TOTAL_UNREADY_COUNT = 3
UPSTREAM_MAX_TOTAL_UNREADY_PERCENTAGE = 45.0


@dataclass(frozen=True)
class Gang:
    """The most nodes one job can hold at once: on one pool (a job's pods select one pool), within
    the pool's maxSize and the GPU capability of the largest queue."""

    pool: str
    nodes: int
    why: str


def largest_gang(pools: Sequence[GpuPool], queues: Sequence[Queue]) -> Gang | None:
    capability = max((q.gpu_capability for q in queues), default=None)
    best: Gang | None = None
    for i, pool in enumerate(pools):
        by_queue = math.ceil(capability / pool.gpus_per_node) if capability is not None else pool.max_size
        nodes = min(pool.max_size, by_queue)
        why = f"pool {pool.name}: maxSize {pool.max_size} (higgsfield:gpuPools[{i}].maxSize)" + (
            f", the largest queue's {capability} GPUs = {by_queue} nodes of {pool.gpus_per_node}"
            if capability is not None
            else ""
        )
        if best is None or nodes > best.nodes:
            best = Gang(pool.name, nodes, why)
    return best


def startup_seconds(pool: GpuPool) -> int:
    """From registration to the startup taint's removal: boot to Ready, then the gate's checks."""
    return seconds_of(pool.boot_time) + (seconds_of(pool.health_gate.timeout) if pool.health_gate.enabled else 0)


@dataclass(frozen=True)
class UnreadyLimits:
    """The three flags, and what they were computed from."""

    max_node_startup_s: int
    ok_total_unready_count: int
    max_total_unready_percentage: float
    gang: Gang | None
    slowest_pool: str | None
    slowest_s: int

    def flags(self) -> dict[str, str | int | float]:
        minutes = math.ceil(self.max_node_startup_s / 60)
        return {
            "max-node-startup-time": f"{minutes}m",
            "ok-total-unready-count": self.ok_total_unready_count,
            "max-total-unready-percentage": self.max_total_unready_percentage,
        }

    def halts_with_gang_unready(self, other_nodes: int) -> bool:
        """IsClusterHealthy with every node of the largest gang Unready and `other_nodes` more
        registered (the fewest: the system nodes' minSize)."""
        if self.gang is None:
            return False
        unready, registered = self.gang.nodes, self.gang.nodes + other_nodes
        return (
            unready > self.ok_total_unready_count and unready > self.max_total_unready_percentage / 100.0 * registered
        )


def unready_limits(settings: Autoscaler, pools: Sequence[GpuPool], queues: Sequence[Queue]) -> UnreadyLimits:
    """The stack's values of the three flags: its own settings where set, else computed."""
    gang = largest_gang(pools, queues)
    slowest = max(pools, key=startup_seconds, default=None)
    slowest_s = startup_seconds(slowest) if slowest else 0
    startup = (
        seconds_of(settings.max_node_startup_time)
        if settings.max_node_startup_time
        else max(UPSTREAM_MAX_NODE_STARTUP_S, slowest_s)
    )
    count = (
        settings.ok_total_unready_count
        if settings.ok_total_unready_count is not None
        else (gang.nodes if gang else 0) + UPSTREAM_OK_TOTAL_UNREADY_COUNT
    )
    percentage = (
        settings.max_total_unready_percentage
        if settings.max_total_unready_percentage is not None
        else UPSTREAM_MAX_TOTAL_UNREADY_PERCENTAGE
    )
    return UnreadyLimits(startup, count, percentage, gang, slowest.name if slowest else None, slowest_s)


def autoscaler_policy(cluster_name: str, region: str) -> str:
    """Least privilege from the autoscaler's AWS guide (kubernetes/autoscaler cluster-autoscaler/
    cloudprovider/aws/README.md): read ASGs, launch templates and instance types; describe this
    cluster's node groups (scale from zero reads their labels and taints); change the size only
    of groups tagged as owned by this cluster."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": [
                        "autoscaling:DescribeAutoScalingGroups",
                        "autoscaling:DescribeAutoScalingInstances",
                        "autoscaling:DescribeLaunchConfigurations",
                        "autoscaling:DescribeScalingActivities",
                        "autoscaling:DescribeTags",
                        "ec2:DescribeImages",
                        "ec2:DescribeInstanceTypes",
                        "ec2:DescribeLaunchTemplateVersions",
                        "ec2:GetInstanceTypesFromInstanceRequirements",
                    ],
                    "Resource": "*",
                },
                {
                    "Effect": "Allow",
                    "Action": ["eks:DescribeNodegroup"],
                    "Resource": f"arn:aws:eks:{region}:*:nodegroup/{cluster_name}/*/*",
                },
                {
                    "Effect": "Allow",
                    "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                    "Resource": "*",
                    "Condition": {
                        "StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"}
                    },
                },
            ],
        }
    )


@dataclass(frozen=True, kw_only=True)
class ClusterAutoscalerArgs:
    cluster_name: str
    region: str
    settings: Autoscaler
    chart: Chart
    image_tag: str
    provider: pulumi.ProviderResource
    depends_on: Sequence[pulumi.Resource]
    tags: Mapping[str, str]
    limits: UnreadyLimits | None = None  # unready_limits(settings, pools, queues); None: the upstream defaults


class ClusterAutoscaler(pulumi.ComponentResource):
    """The Cluster Autoscaler, from its official chart, on the system nodes.

    Creates: an IAM role for EKS Pod Identity with a least-privilege inline policy, the Pod
    Identity association for its service account, and the Helm release (auto-discovery of
    this cluster's node groups by tag, balance-similar-node-groups, configurable expander and
    scale-down delay, and the unready limits sized from the GPU pools: `unready_limits`).
    Replaced when: the cluster name changes.
    """

    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("higgsfield:autoscaler:ClusterAutoscaler", name, None, opts)
        role, credentials = pod_identity(
            f"{name}-role",
            f"{name}-identity",
            args.tags,
            self,
            cluster=args.cluster_name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            inline_policy=autoscaler_policy(args.cluster_name, args.region),
            depends_on=args.depends_on,
        )
        self.release = helm_release(
            name,
            args.chart,
            NAMESPACE,
            {
                "cloudProvider": "aws",
                "awsRegion": args.region,
                # finds the ASGs tagged k8s.io/cluster-autoscaler/enabled and k8s.io/cluster-autoscaler/<cluster>,
                # which EKS puts on every managed node group's (docs.aws.amazon.com/eks/latest/userguide/
                # managed-node-groups.html)
                "autoDiscovery": {"clusterName": args.cluster_name},
                "image": {"tag": args.image_tag},
                "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
                "nodeSelector": SYSTEM_LABELS,
                # the chart's `tolerations` (kubernetes/autoscaler:charts/cluster-autoscaler/values.yaml@cluster-
                # autoscaler-chart-9.59.0)
                "tolerations": [SYSTEM_TOLERATION],
                "extraArgs": {
                    "balance-similar-node-groups": True,
                    "expander": args.settings.expander,
                    "scale-down-unneeded-time": args.settings.scale_down_unneeded_time,
                    "scale-down-delay-after-add": args.settings.scale_down_unneeded_time,
                    "skip-nodes-with-local-storage": False,
                    "skip-nodes-with-system-pods": False,
                    # sized from the pools and the gate (unready_limits; docs/autoscaling.md); the
                    # chart renders each extraArgs entry as --KEY=VALUE (templates/deployment.yaml)
                    **(args.limits.flags() if args.limits else {}),
                },
            },
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[*credentials, *args.depends_on]),
        )
        self.register_outputs({"role_arn": role.arn})
