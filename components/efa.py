"""EFA on every network card: the interface layout, and the fabric an EFA pool sits in."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.core import versions
from infra.core.catalog import InstanceFacts
from infra.core.names import EFA_RESOURCE, HUGEPAGES_RESOURCE

# 2 MiB huge pages reserved at boot for libfabric/NCCL over EFA (EC2 User Guide, "Get started
# with EFA and NCCL": vm.nr_hugepages=5128). The node advertises all of them as `hugepages-2Mi`.
EFA_HUGEPAGES_2MI = 5128
# What one EFA pod asks for: the anchors' manifests request 5120Mi per pod, not the node's whole
# reservation (aws-samples/awsome-distributed-training:micro-benchmarks/nccl-tests/kubernetes/
# nccl-tests.yaml@7217859f: `hugepages-2Mi: 5120Mi` beside `vpc.amazonaws.com/efa: 32`).
EFA_POD_HUGEPAGES_MI = 5120
# On a Karpenter pool no pod may request huge pages (components/karpenter.py: Karpenter's instance
# types offer none, so it would launch no node), and the kubelet limits a pod's hugetlb cgroup to 0
# for every page size it does not request (kubernetes/kubernetes:pkg/kubelet/cm/cgroup_manager_linux.go,
# "for each page size omitted, limit to 0"). libfabric's EFA provider is told to keep its internal
# buffers in ordinary pages: FI_EFA_USE_HUGE_PAGE, "Using huge page memory has a small performance
# advantage, but can cause system to run out of huge page memory" (ofiwg/libfabric:man/fi_efa.7.md
# @v2.3.1). The cost: that small advantage, on the provider's bounce buffers only (NCCL's data moves
# through GPU memory registered with GPUDirect RDMA, not through them).
EFA_WITHOUT_HUGE_PAGES_ENV = {"FI_EFA_USE_HUGE_PAGE": "0"}

# Locked memory for every container on an EFA node. The EFA driver pins the memory libfabric
# registers for NCCL and counts it against the process's RLIMIT_MEMLOCK unless it has CAP_IPC_LOCK
# (ib_umem_get, torvalds/linux:drivers/infiniband/core/umem.c); team pods run non-root with every
# capability dropped (infra/offline/pods.py run_as_team). A container's rlimits are the ones in
# containerd's base runtime spec, and the AL2023 AMI's sets RLIMIT_NOFILE only (awslabs/amazon-eks-
# ami:nodeadm/internal/containerd/base-runtime-spec.json@v20260724), so RLIMIT_MEMLOCK would be
# whatever containerd's systemd unit gives containerd itself (the AMI adds only `Slice=` to it:
# templates/al2023/runtime/rootfs/etc/systemd/system/containerd.service.d/00-runtime-slice.conf,
# same ref), far below what registration needs (the kernel's default is 8 MiB), and NCCL falls back
# to TCP sockets. nodeadm merges NodeConfig `containerd.baseRuntimeSpec` (nodeadm/api/v1alpha1/
# nodeconfig_types.go, same ref) over its default ("Modifying container RLIMITs", nodeadm/doc/
# examples.md; writeBaseRuntimeSpec, nodeadm/internal/containerd/base_runtime_spec.go); Bottlerocket raises MEMLOCK the
# same way on EFA nodes
# (bottlerocket-os/bottlerocket-core-kit#141).
# 10^18 bytes, not RLIM_INFINITY (2^64-1): nodeadm merges the spec through Go's encoding/json into
# map[string]interface{}, so every number passes through a float64 (util.Merge, nodeadm/internal/
# util/merge.go@v20260724); 2^64-1 comes out as 18446744073709552000, which overflows the OCI
# spec's uint64 and containerd would refuse the spec. 10^18 is exact in a float64 and is more
# memory than any instance has. The health gate fails a node whose containers get less
# (node_check.py MIN_LOCKED_MEMORY_BYTES), and examples/checkpointing.py refuses to start NCCL below it.
EFA_LOCKED_MEMORY_BYTES = 10**18
# The merge replaces a list wholesale (mergo.WithOverride, nodeadm/vendor/dario.cat/mergo/merge.go@
# v20260724), so our rlimits restate the AMI's RLIMIT_NOFILE (base-runtime-spec.json, same ref).
AMI_CONTAINER_NOFILE = {"soft": 65536, "hard": 1048576}


def container_rlimits_node_config() -> str:
    """The NodeConfig `spec` lines (YAML, two-space indented) that give every container of the
    node EFA_LOCKED_MEMORY_BYTES of locked memory and keep the AMI's open-files limit."""
    nofile, memlock = AMI_CONTAINER_NOFILE, EFA_LOCKED_MEMORY_BYTES
    return (
        "  containerd:\n    baseRuntimeSpec:\n      process:\n        rlimits:\n"
        f"          - type: RLIMIT_NOFILE\n            soft: {nofile['soft']}\n            hard: {nofile['hard']}\n"
        f"          - type: RLIMIT_MEMLOCK\n            soft: {memlock}\n            hard: {memlock}\n"
    )


# The PIDs (threads count) one pod of a GPU node may hold. The kubelet's default is none (podPidsLimit -1:
# kubernetes/kubelet:config/v1beta1/types.go@v0.35.0), so one team's pod could spend the node's PID space: the
# kubelet's own forks then fail, and the node monitoring agent reports ForkFailedOutOfPIDs, Fatal, which node
# repair answers by replacing the node with every pod on it (docs/design/tenancy.md). A training pod's ranks,
# their intra-op threads, data-loader and compile workers come to a few thousand; 32,768 leaves that room
# several times over, and it takes 128 pods at the cap to spend a pid_max of 4,194,304 (systemd's on 64-bit
# hosts; unread here for AL2023: `sysctl kernel.pid_max` on a node, and a pod's
# `cat /sys/fs/cgroup/pids.peak` for what a job really holds).
POD_PIDS_LIMIT = 32_768


def kubelet_node_config() -> str:
    """The NodeConfig `spec` lines that give the kubelet our settings: nodeadm merges `kubelet.config` into its
    KubeletConfiguration (KubeletOptions.Config, awslabs/amazon-eks-ami:nodeadm/api/v1alpha1/
    nodeconfig_types.go@01348c0d)."""
    return f"  kubelet:\n    config:\n      podPidsLimit: {POD_PIDS_LIMIT}\n"


# Instances whose EFA supports RDMA (GPUDirect RDMA reads/writes), from the EC2 User Guide's EFA
# instance table ("Supported instance types", RDMA read/write columns, docs.aws.amazon.com/AWSEC2/
# latest/UserGuide/efa.html#efa-instance-types; moto's catalog has no RDMA field). Unverified from
# here: `aws ec2 describe-instance-types` carries no RDMA flag either; re-read the guide on a bump.
RDMA_INSTANCE_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200")

# NCCL's bootstrap/socket interfaces: everything but loopback, docker bridges and veth pairs, as
# the anchors' image does (nccl-tests.Dockerfile@7217859f: `NCCL_SOCKET_IFNAME=^docker,lo,veth`).
NCCL_SOCKET_IFNAME = "^docker,lo,veth"
# The training image's library path (images/training/Dockerfile): our aws-ofi-nccl build first,
# then the EFA installer's libfabric and Open MPI, the installer's own plugin directories (so an
# installer-based image brought by a team still finds a plugin), and the NVIDIA runtime's
# libraries. A pod's LD_LIBRARY_PATH replaces the image's, so this is the whole path.
EFA_LIBRARY_PATH = ":".join(
    (
        f"{versions.AWS_OFI_NCCL_PREFIX}/lib",
        "/opt/amazon/efa/lib",
        "/opt/amazon/openmpi/lib",
        "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
        "/opt/amazon/ofi-nccl/lib",
        "/usr/local/nvidia/lib",
        "/usr/local/nvidia/lib64",
    )
)


@dataclass(frozen=True)
class Interface:
    network_card: int
    device_index: int
    efa_only: bool


def efa_interfaces_for(instance: InstanceFacts) -> list[Interface]:
    """The launch-template interfaces for an EFA instance, per the EC2 User Guide "Maximize
    network bandwidth on Amazon EC2 instances with multiple network cards" (docs.aws.amazon.com/
    AWSEC2/latest/UserGuide/efa-acc-inst-types.html): an ENA primary at card 0 device 0; an
    EFA-only interface on card 0 at device 1; then one EFA-only interface on each further card
    at device 0 - as many as the instance's maximum EFA interfaces.
    p5.48xlarge: 32 cards -> 32 EFA; p5en.48xlarge 16; p4d.24xlarge 4; p6-b200.48xlarge 8."""
    layout = [Interface(network_card=0, device_index=0, efa_only=False)]
    for card in instance.network_cards[: instance.efa_max_interfaces]:
        layout.append(Interface(network_card=card, device_index=1 if card == 0 else 0, efa_only=True))
    return layout


def efa_count(layout: list[Interface]) -> int:
    return sum(1 for i in layout if i.efa_only)


def efa_resources(instance: InstanceFacts) -> dict[str, int | str]:
    """What an EFA node offers: every EFA interface of the instance, and the huge pages reserved
    at boot (the autoscaler's node template)."""
    return {
        EFA_RESOURCE: efa_count(efa_interfaces_for(instance)),
        HUGEPAGES_RESOURCE: f"{EFA_HUGEPAGES_2MI * 2}Mi",
    }


def efa_pod_resources(instance: InstanceFacts) -> dict[str, int | str]:
    """What one EFA pod per node asks for: every EFA interface, and the anchors' 5120Mi of huge
    pages - less than the node's reservation, which leaves slack for the node's own use."""
    return {
        EFA_RESOURCE: efa_count(efa_interfaces_for(instance)),
        HUGEPAGES_RESOURCE: f"{EFA_POD_HUGEPAGES_MI}Mi",
    }


def supports_rdma(instance: InstanceFacts) -> bool:
    return instance.name.split(".")[0] in RDMA_INSTANCE_FAMILIES


def efa_environment(instance: InstanceFacts) -> dict[str, str]:
    """The libfabric/NCCL environment of a container that uses the EFA interfaces of `instance`:
    the efa provider, device RDMA where the instance has it, NCCL's socket interfaces without
    loopback and bridges, the plugin's library path, and the aws-ofi-nccl tuner where the pinned
    plugin has one. The only source of these variables: examples and the health check use it.

    FI_PROVIDER=efa and FI_EFA_USE_DEVICE_RDMA=1 as the anchors set them (aws-samples/awsome-
    distributed-training:micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml and 4.validation_
    and_observability/2.gpu-cluster-healthcheck/checks/5-nccl-allreduce.sh@7217859f); aws-ofi-nccl
    notes both are harmless with libfabric >= 1.18 on p4/p5 (aws/aws-ofi-nccl:doc/efa-env-var.md
    @v1.21.1). NCCL_TUNER_PLUGIN=ofi: NCCL opens `libnccl-tuner-ofi.so` for it (NVIDIA/nccl:src/
    plugin/plugin_open.cc@v2.26.2-1, "%s-%s.so" with prefix libnccl-tuner), which aws-ofi-nccl
    builds on AWS (aws/aws-ofi-nccl:src/Makefile.am@v1.21.1)."""
    if not instance.efa_supported:
        raise ValueError(f"{instance.name} has no EFA")
    env = {"FI_PROVIDER": "efa"}
    if supports_rdma(instance):
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    env["NCCL_SOCKET_IFNAME"] = NCCL_SOCKET_IFNAME
    env["LD_LIBRARY_PATH"] = EFA_LIBRARY_PATH
    if versions.AWS_OFI_NCCL_HAS_TUNER:
        env["NCCL_TUNER_PLUGIN"] = "ofi"
    return env


# Expected NCCL all-reduce bus bandwidth between two nodes at 1 GiB messages (what the health
# check sends), from the anchors' published nccl-tests runs (aws-samples/awsome-distributed-
# training:micro-benchmarks/nccl-tests/README.md@7217859f, "Results"): 2 x p4de.24xlarge 76.79
# GB/s, 2 x p5.48xlarge 436.95 GB/s (out-of-place busbw at 1073741824 B). p4d has p4de's network
# (4 x 100 Gbps EFA) and p5e p5's (32 x 100 Gbps); p5en and p6 have no published run there.
PUBLISHED_ALLREDUCE_BUSBW_GB_S = {"p4d": 76.79, "p4de": 76.79, "p5": 436.95, "p5e": 436.95}
# A healthy fabric reaches this fraction of the published figure ...
PUBLISHED_BUSBW_FRACTION = 0.8
# ... and, where nothing is published, this fraction of the instance's network line rate (sum of
# its cards' baseline bandwidth in AWS's catalog, in GB/s). Both published runs exceed their line
# rate (p5: 437 GB/s on 400 GB/s; p4de: 77 on 50) because part of the ring runs over NVLink, so
# 0.7 of line rate is a conservative floor - and far above TCP over one ENA card (<= 12.5 GB/s).
LINE_RATE_FRACTION = 0.7


def expected_bus_bandwidth_gb_s(instance: InstanceFacts) -> tuple[float, str]:
    """The NCCL all-reduce bus bandwidth below which an EFA fabric of `instance` is unhealthy,
    and where the number comes from."""
    family = instance.name.split(".")[0]
    published = PUBLISHED_ALLREDUCE_BUSBW_GB_S.get(family)
    if published is not None:
        return round(
            published * PUBLISHED_BUSBW_FRACTION, 1
        ), f"{PUBLISHED_BUSBW_FRACTION:.0%} of the anchors' published {published} GB/s"
    line = instance.network_gbps / 8
    return round(
        line * LINE_RATE_FRACTION, 1
    ), f"{LINE_RATE_FRACTION:.0%} of the {line:.0f} GB/s network line rate (nothing published)"


def node_user_data(
    raid0: bool, hugepages: int, fast_image_pull: bool = False, scripts: Sequence[str] = (), locked_memory: bool = False
) -> str:
    """AL2023 user data (MIME multipart, merged by EKS with its own): a nodeadm NodeConfig that
    builds a RAID0 array of the local NVMe drives for kubelet and containerd and, with
    `fast_image_pull`, turns on nodeadm's FastImagePull feature gate (containerd pulls and unpacks
    through the SOCI snapshotter in parallel-pull mode, on nodes of 4+ vCPUs and 7+ GiB:
    UseSOCISnapshotter in awslabs/amazon-eks-ami:nodeadm/internal/containerd/config.go,
    the gate in nodeadm/api/v1alpha1/nodeconfig_types.go, doc/examples.md "Enabling fast image
    pull"@v20260724; the SOCI directory is one of the mounts localStorage moves onto the array);
    with `locked_memory` (EFA pools), containers' locked-memory limit (container_rlimits_node_config);
    a script that reserves huge pages before kubelet starts so that it can advertise them; and any
    other shell `scripts` (bodies after the shebang) the caller adds. Every GPU node's kubelet caps each
    pod's PIDs (kubelet_node_config)."""
    spec = kubelet_node_config()
    if fast_image_pull:
        spec += "  featureGates:\n    FastImagePull: true\n"
    if raid0:
        spec += "  instance:\n    localStorage:\n      strategy: RAID0\n"
    if locked_memory:
        spec += container_rlimits_node_config()
    reserve = (
        [
            f"echo 'vm.nr_hugepages = {hugepages}' > /etc/sysctl.d/90-efa-hugepages.conf\n"
            f"sysctl -w vm.nr_hugepages={hugepages}\n"
        ]
        if hugepages
        else []
    )
    return base64.b64encode(mime_user_data(spec, [*reserve, *scripts]).encode()).decode()


def mime_user_data(node_config_spec: str, scripts: Sequence[str] = ()) -> str:
    """AL2023 user data as EKS and Karpenter merge it with their own: MIME multipart, a nodeadm NodeConfig of
    `node_config_spec` (its `spec` lines, two-space indented), then each shell script (its body after the shebang)."""
    parts = [
        "Content-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n"
        + node_config_spec
    ]
    parts += [
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n#!/bin/bash\nset -euo pipefail\n' + script
        for script in scripts
    ]
    body = 'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="//"\n\n'
    return body + "".join(f"--//\n{part}\n" for part in parts) + "--//--\n"


class EfaFabric(pulumi.ComponentResource):
    """What an EFA pool's nodes share: a security group that allows all traffic to and from
    itself (EFA's OS-bypass traffic needs it on every interface) and, unless the capacity
    brings its own placement, a cluster placement group.

    Creates: security group, optional placement group. Replaced when: the VPC changes, or the
    placement group is switched on or off.
    """

    def __init__(
        self,
        name: str,
        vpc_id: pulumi.Input[str],
        placement_group: bool,
        tags: Mapping[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("higgsfield:efa:EfaFabric", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self_all: dict[str, Any] = {"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}
        group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=vpc_id,
            description="EFA: all traffic to and from members of this group",
            ingress=[aws.ec2.SecurityGroupIngressArgs(**self_all, description="EFA peers")],
            egress=[aws.ec2.SecurityGroupEgressArgs(**self_all, description="EFA peers")],
            tags=dict(tags),
            opts=child,
        )
        self.security_group_id = group.id
        self.placement_group_name: pulumi.Output[str] | None = None
        if placement_group:
            pg = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster", tags=dict(tags), opts=child)
            self.placement_group_name = pg.name
        self.register_outputs({"security_group_id": self.security_group_id})
