"""The control plane's endpoint, the system (CPU) nodes and the Cluster Autoscaler."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)

from infra.config.base import (
    Bool,
    Cidr,
    InstanceTypeName,
    MaxNodes,
    NodeCount,
    Setting,
    derived,
    items,
    number,
)
from infra.config.errors import Problems
from infra.config.gpu_pools import EKS_MAX_INSTANCE_TYPES, Duration, PositiveDuration, _catalog
from infra.config.limits import MAX_PUBLIC_CIDRS, public_cidr
from infra.core import versions
from infra.core.bundled import where_offered

# The cluster's Service range. The program leaves EKS's kubernetesNetworkConfig.serviceIpv4Cidr
# unset: "You can only specify a custom CIDR block when you create a cluster" (EKS API,
# KubernetesNetworkConfigRequest), so setting it on a running cluster would replace the cluster
# (infra/offline/diff.py refuses that). Unset, EKS "assigns addresses from either the 10.100.0.0/16 or
# 172.20.0.0/16 CIDR blocks": 172.20.0.0/16 when a VPC IPv4 CIDR block lies in 10.0.0.0/8, else
# 10.100.0.0/16 - the rule the EKS AMI used to find the cluster DNS address without the range
# (TEN_RANGE in awslabs/amazon-eks-ami:templates/al2/runtime/bootstrap.sh@v20260304).
EKS_SERVICE_CIDR_IN_TEN = "172.20.0.0/16"
EKS_SERVICE_CIDR_ELSEWHERE = "10.100.0.0/16"


def eks_service_cidr(vpc_cidr: str) -> str:
    """The Service range EKS gives a cluster created without one, in a VPC of `vpc_cidr`."""
    in_ten = ipaddress.IPv4Network(vpc_cidr).subnet_of(ipaddress.IPv4Network("10.0.0.0/8"))
    return EKS_SERVICE_CIDR_IN_TEN if in_ten else EKS_SERVICE_CIDR_ELSEWHERE


def api_service_ip(vpc_cidr: str) -> str:
    """The ClusterIP of the `kubernetes` Service (default namespace), which in-cluster clients
    (KUBERNETES_SERVICE_HOST) dial: the first address of the Service range (ServiceIPRange,
    `GetIndexedIP(&serviceClusterIPRange, 1)`, kubernetes/kubernetes:pkg/controlplane/services.go@
    9f0f14952c51e7a5622eac05c541ba20b5821627)."""
    return str(ipaddress.IPv4Network(eks_service_cidr(vpc_cidr)).network_address + 1)


class Endpoint(Setting):
    """Where the Kubernetes API is reachable from. Private access is always on."""

    private: Bool = True
    """Must be true: nodes reach the API server privately."""
    public_access_cidrs: tuple[Annotated[Cidr, AfterValidator(public_cidr)], ...] = items(maximum=MAX_PUBLIC_CIDRS)
    """Public (internet) CIDRs allowed to reach the public endpoint, at most 40 (the EKS quota); empty keeps the API
    private (prod: no 0.0.0.0/0)."""

    @field_validator("private")
    @classmethod
    def _always_private(cls, value: bool) -> bool:
        if not value:
            raise ValueError("must be true: nodes reach the API server privately")
        return value

    @property
    def public(self) -> bool:
        return bool(self.public_access_cidrs)


# The system nodes run what scales every node group, the system group included (the Cluster
# Autoscaler, components/autoscaler.py, tolerates only the system taint), and CoreDNS and the
# controllers: an empty group never grows back, as nothing is left to grow it.
SYSTEM_NODES_MIN = 1


class NodeSizes(Setting):
    """The system (CPU) node group."""

    instance_types: tuple[InstanceTypeName, ...] = items(1, EKS_MAX_INSTANCE_TYPES)
    """EC2 instance types, offered in aws:region, one CPU architecture (x86_64), without GPUs."""
    min_size: NodeCount
    """Nodes the autoscaler never goes below; at least 1 (the autoscaler itself runs on them)."""
    desired_size: NodeCount = derived("Nodes at creation; default minSize (the autoscaler owns it afterwards).")
    max_size: MaxNodes
    """Nodes the autoscaler never goes above."""

    @model_validator(mode="after")
    def _sizes(self, info: ValidationInfo) -> NodeSizes:
        problems = Problems()
        if self.desired_size is None:
            self._fill(desired_size=self.min_size)
        if self.min_size < SYSTEM_NODES_MIN:
            problems.add(
                "minSize",
                f"{self.min_size}: the system node group runs the Cluster Autoscaler, CoreDNS and the "
                f"controllers, so at zero nothing could ever scale it (or anything else) up again: at least "
                f"{SYSTEM_NODES_MIN}",
            )
        elif not self.min_size <= self.desired_size <= self.max_size:
            problems.add(
                "",
                f"needs minSize <= desiredSize <= maxSize, got {self.min_size} <= {self.desired_size} <= "
                f"{self.max_size}",
            )
        _cpu_instance_problems(problems, self.instance_types, info, "the system nodes")
        problems.raise_any()
        return self


def _cpu_instance_problems(
    problems: Problems, instance_types: tuple[str, ...], info: ValidationInfo, nodes: str
) -> None:
    """Each of a CPU node group's instance types is offered in the region, x86_64 (the group runs
    versions.CPU_AMI_TYPE) and without GPUs (that AMI has no NVIDIA driver)."""
    catalog, region = _catalog(info)
    if catalog is None:
        return
    for i, name in enumerate(instance_types):
        if not catalog.offered_in(name, region, "region"):
            problems.add(
                f"instanceTypes[{i}]",
                f"instance type {name!r} is not offered anywhere in {region}; {where_offered(name, region)}",
            )
        elif "x86_64" not in catalog.describe(name).architectures:
            problems.add(f"instanceTypes[{i}]", f"{name} is not x86_64; {nodes} run {versions.CPU_AMI_TYPE}")
        elif catalog.describe(name).gpus:
            problems.add(
                f"instanceTypes[{i}]",
                f"{name} has {catalog.describe(name).gpus} GPUs: {nodes} run {versions.CPU_AMI_TYPE} without NVIDIA "
                "drivers, so the GPUs would be paid for and never used; put GPU types in higgsfield:gpuPools",
            )


# The pods of node daemons on one of the teams' CPU nodes, each in a pod slot of its own: the VPC CNI's, kube-proxy,
# the Pod Identity agent, the node monitoring agent, the EBS and FSx CSI nodes (both tolerate every taint:
# components/addons.py), the CloudWatch agent and Fluent Bit, the node exporter, and one to spare. An estimate for
# sizing the group; on a cluster, `kubectl get pods -A --field-selector spec.nodeName=NODE` on one of its nodes.
TEAM_CPU_NODE_DAEMON_PODS = 10


class TeamCpuNodes(Setting):
    """The teams' CPU node group: where their pods without GPUs run (an MPI job's launcher, a CPU-only Job), never on
    a GPU node. It scales from zero and back (the Cluster Autoscaler)."""

    instance_types: tuple[InstanceTypeName, ...] = derived(
        "EC2 instance types, offered in aws:region, x86_64, without GPUs; default: cpuNodes.instanceTypes.",
        min_length=1,
        max_length=EKS_MAX_INSTANCE_TYPES,
    )
    max_size: MaxNodes = derived(
        "Nodes the autoscaler never goes above; default: room for every team's launchers however each other team "
        "spends its CPU-only work's room (16 vCPUs, 64 GiB and 16 pods: a pod asking more than half a node's CPU or "
        "memory stands alone), per team 2 x 16 vCPUs / a node's + 2 x 64 GiB / a node's + the nodes whose pod slots "
        "its 16 pods fill past the node daemons' (1 where a node holds 26 pods or more), on the smallest type."
    )
    scale_down_unneeded_time: PositiveDuration = derived(
        "How long a node stays empty before the autoscaler removes it; default: the GPU pools' longest "
        "scaleDownUnneededTime or bootTime plus healthGate.timeout, whichever is longer, so that a gang's launcher "
        "keeps its node while its GPU nodes boot and pass the health gate (Volcano binds a gang whole: the launcher's "
        "node is empty until then)."
    )

    @model_validator(mode="after")
    def _types(self, info: ValidationInfo) -> TeamCpuNodes:
        problems = Problems()
        _cpu_instance_problems(problems, self.instance_types or (), info, "the teams' CPU nodes")
        problems.raise_any()
        return self


class Autoscaler(Setting):
    """Cluster Autoscaler settings."""

    scale_down_unneeded_time: Duration = "10m"
    """How long a node stays unneeded before it is removed (10m, 600s, 1h)."""
    expander: Literal["least-waste", "most-pods", "priority", "random", "price"] = "least-waste"
    """Which node group grows when several could."""
    max_node_startup_time: Duration | None = None
    """--max-node-startup-time; unset: the slowest GPU pool's bootTime plus its healthGate.timeout (a node still in the
    gate is not yet 'unready'), at least the upstream 15m."""
    ok_total_unready_count: number(0) | None = None
    """--ok-total-unready-count; unset: the largest gang's nodes plus the upstream 3, so a gang whose nodes are all
    still unready never halts the autoscaler."""
    max_total_unready_percentage: Annotated[float, Strict(), Field(ge=0, le=100)] | None = None
    """--max-total-unready-percentage; unset: the upstream 45."""
