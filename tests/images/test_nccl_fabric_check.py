"""The health check's fabric verdict: NCCL must have picked aws-ofi-nccl's efa provider before the
bandwidth counts, and the bandwidth threshold is the instance type's.

The logs below are written in the format of the anchors' published NCCL_DEBUG=INFO output
(aws-samples/awsome-distributed-training:3.test_cases/pytorch/FSDP/slurm/README.md@7217859f:
`p5-dy-gpu-4:930643:930850 [7] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2-aws`), with the
other lines in the wording of the sources at the pinned versions: NCCL's `"Using network %s"`
(NVIDIA/nccl:src/init.cc@v2.26.2-1), `"NET/Socket : Using%s"` (src/transport/net_socket.cc),
`"NET/Plugin: ..."` (src/plugin/net/net_v10.cc, plugin_open.cc); aws-ofi-nccl's `"Selected
provider is %s, fabric is %s (found %d nics)"` (aws/aws-ofi-nccl:src/nccl_ofi_net.cpp@v1.21.1)
and net name "Libfabric" (src/nccl_ofi_interface_nvidia.cpp@v1.21.1)."""

from __future__ import annotations

import node_check
import pytest
from node_check import Expectations

from components.efa import expected_bus_bandwidth_gb_s
from infra.core.catalog import InstanceFacts
from tests.conftest import ROOT

OFI_EFA_LOG = """\
p5-dy-gpu-3:60823:60823 [2] NCCL INFO NCCL version 2.26.2+cuda12.2
p5-dy-gpu-3:60823:61204 [2] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v10)
p5-dy-gpu-3:60823:61204 [2] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.21.1
p5-dy-gpu-3:60823:61204 [2] NCCL INFO NET/OFI Using Libfabric version 2.4
p5-dy-gpu-3:60823:61204 [2] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 32 nics)
p5-dy-gpu-3:60823:61204 [2] NCCL INFO Using network Libfabric
p5-dy-gpu-3:60823:61204 [2] NCCL INFO ncclCommInitRank comm 0x55d1c5a0 rank 2 nranks 16 cudaDev 2 nvmlDev 2 busId 75000 commId 0x3c1e - Init COMPLETE
"""

# The same job in a stock image: no plugin, so NCCL falls back to TCP sockets on the ENA.
SOCKET_LOG = """\
p5-dy-gpu-3:60823:60823 [2] NCCL INFO NCCL version 2.26.2+cuda12.2
p5-dy-gpu-3:60823:61204 [2] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.
p5-dy-gpu-3:60823:61204 [2] NCCL INFO NET/IB : No device found.
p5-dy-gpu-3:60823:61204 [2] NCCL INFO NET/Socket : Using [0]eth0:10.40.12.7<0>
p5-dy-gpu-3:60823:61204 [2] NCCL INFO Using network Socket
p5-dy-gpu-3:60823:61204 [2] NCCL INFO ncclCommInitRank comm 0x55d1c5a0 rank 2 nranks 16 cudaDev 2 nvmlDev 2 busId 75000 commId 0x3c1e - Init COMPLETE
"""

# The plugin loads but libfabric offers only TCP (no EFA device in the pod): still not EFA.
OFI_TCP_LOG = OFI_EFA_LOG.replace(
    "Selected provider is efa, fabric is efa (found 32 nics)",
    "Selected provider is tcp, fabric is 10.40.0.0/16 (found 1 nics)",
)

EFA_POOL = Expectations(
    gpus=8,
    model="H100",
    min_driver_branch=570,
    efa_devices=32,
    min_matmul_fraction=0.6,
    min_memory_bandwidth_fraction=0.7,
    min_lustre_mb_s=200,
    min_bus_bandwidth_gb_s=349.6,
    nccl_network="efa",
    ofi_plugin_version="1.21.1",
)


def _failed(report) -> list[str]:
    return [r.check for r in report.results if not r.ok]


def test_the_ofi_log_is_read_as_libfabric_over_the_efa_provider():
    net = node_check.parse_nccl_network(OFI_EFA_LOG)
    assert (net.network, net.provider, net.plugin_version) == ("Libfabric", "efa", "1.21.1")
    assert net.over_efa


def test_the_socket_log_is_read_as_tcp_sockets():
    net = node_check.parse_nccl_network(SOCKET_LOG)
    assert (net.network, net.provider) == ("Socket", None)
    assert not net.over_efa


def test_a_socket_fallback_fails_the_fabric_check_whatever_its_bandwidth():
    report = node_check.fabric_verdict("n1", SOCKET_LOG, busbw=1000.0, expected=EFA_POOL, ranks=16)
    assert not report.healthy
    assert _failed(report) == ["NCCL network", "aws-ofi-nccl", "NCCL all-reduce busbw"]
    assert report.results[-1].value == "not compared"


def test_the_plugin_over_libfabric_tcp_fails_too():
    assert "NCCL network" in _failed(node_check.fabric_verdict("n1", OFI_TCP_LOG, 1000.0, EFA_POOL, 16))


def test_efa_at_the_expected_bandwidth_passes():
    report = node_check.fabric_verdict("n1", OFI_EFA_LOG, busbw=437.0, expected=EFA_POOL, ranks=16)
    assert report.healthy, report.table()


def test_efa_below_the_instance_types_threshold_fails_on_bandwidth_only():
    assert _failed(node_check.fabric_verdict("n1", OFI_EFA_LOG, busbw=120.0, expected=EFA_POOL, ranks=16)) == [
        "NCCL all-reduce busbw"
    ]


def test_another_plugin_version_than_the_image_pins_fails():
    log = OFI_EFA_LOG.replace("aws-ofi-nccl 1.21.1", "aws-ofi-nccl 1.13.2-aws")
    assert _failed(node_check.fabric_verdict("n1", log, 437.0, EFA_POOL, 16)) == [
        "aws-ofi-nccl",
        "NCCL all-reduce busbw",
    ]


def test_no_nccl_log_at_all_is_a_failure_not_a_pass():
    assert "NCCL network" in _failed(node_check.fabric_verdict("n1", "", 437.0, EFA_POOL, 16))


def test_a_pool_without_efa_accepts_sockets():
    plain = Expectations(
        **{**EFA_POOL.__dict__, "nccl_network": "any", "ofi_plugin_version": None, "min_bus_bandwidth_gb_s": 5}
    )
    assert node_check.fabric_verdict("n1", SOCKET_LOG, 10.0, plain, 2).healthy


def test_nccl_debug_files_of_one_process_are_read_back(tmp_path):
    (tmp_path / "nccl-node-a-41.log").write_text(OFI_EFA_LOG)
    (tmp_path / "nccl-node-a-42.log").write_text(SOCKET_LOG)
    pattern = str(tmp_path / "nccl-%h-%p.log")
    assert node_check.parse_nccl_network(node_check.read_nccl_logs(pattern, 41)).over_efa
    assert not node_check.parse_nccl_network(node_check.read_nccl_logs(pattern, 42)).over_efa


# Captured, not written: the NCCL_DEBUG_FILE the rendered check's all-reduce wrote on a bare H200 box
# (NCCL 2.28.9 in PyTorch 2.11, no EFA; tests/gpu/node_check_here.py, 2026-12-04). Lines kept as NCCL
# wrote them, the 64 channel lines left out.
CAPTURED_H200_SOCKET_LOG = """\
vm:516:516 [0] NCCL INFO NCCL_SOCKET_IFNAME set to ^docker,lo,veth
vm:516:516 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:516:516 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so
vm:516:516 [0] NCCL INFO NET/IB : No device found.
vm:516:516 [0] NCCL INFO Failed to initialize NET plugin IB
vm:516:516 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0>
vm:516:516 [0] NCCL INFO Initialized NET plugin Socket
vm:516:516 [0] NCCL INFO Assigned NET plugin Socket to comm
vm:516:516 [0] NCCL INFO Using network Socket
vm:516:516 [0] NCCL INFO ncclCommInitRankConfig comm 0x17f5c1a0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 commId 0x5067e512f72d03db - Init START
vm:516:516 [0] NCCL INFO TUNER/Plugin: Could not find: ofi libnccl-tuner-ofi.so
vm:516:516 [0] NCCL INFO ncclCommInitRankConfig comm 0x17f5c1a0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 commId 0x5067e512f72d03db - Init COMPLETE
"""


def test_a_real_nccl_log_without_efa_is_read_as_sockets_and_fails_an_efa_pool(tmp_path):
    (tmp_path / "nccl-vm-516.log").write_text(CAPTURED_H200_SOCKET_LOG)
    log = node_check.read_nccl_logs(str(tmp_path / "nccl-%h-%p.log"), 516)
    assert node_check.parse_nccl_network(log) == node_check.NcclNetwork("Socket", None, None)
    assert _failed(node_check.fabric_verdict("vm", log, 0.0, EFA_POOL, 1)) == [
        "NCCL network",
        "aws-ofi-nccl",
        "NCCL all-reduce busbw",
    ]


def test_the_tuner_library_name_ofi_opens_is_the_one_the_image_checks_for():
    # NCCL_TUNER_PLUGIN=ofi made NCCL look for exactly this file; the image build asserts it exists
    assert "libnccl-tuner-ofi.so" in CAPTURED_H200_SOCKET_LOG
    assert 'libnccl-tuner-ofi.so"' in (ROOT / "images/training/Dockerfile").read_text()


def _facts(name: str, gbps: float) -> InstanceFacts:
    return InstanceFacts(
        name=name,
        gpus=8,
        gpu_model="H100",
        gpu_memory_mib=0,
        efa_supported=True,
        efa_max_interfaces=32,
        network_cards=(0,),
        nvme_disks=8,
        vcpus=192,
        architectures=("x86_64",),
        network_gbps=gbps,
    )


@pytest.mark.parametrize(
    ("instance_type", "published"), [("p5.48xlarge", 436.95), ("p4d.24xlarge", 76.79), ("p4de.24xlarge", 76.79)]
)
def test_threshold_is_a_fraction_of_the_anchors_published_busbw(instance_type, published):
    threshold, source = expected_bus_bandwidth_gb_s(_facts(instance_type, 3200))
    assert threshold == pytest.approx(published * 0.8, abs=0.1)
    assert "published" in source


def test_threshold_without_a_published_run_is_a_fraction_of_line_rate():
    threshold, source = expected_bus_bandwidth_gb_s(_facts("p5en.48xlarge", 3200))  # 3200 Gbps = 400 GB/s
    assert threshold == 280.0 and "line rate" in source


def test_every_efa_threshold_is_far_above_what_tcp_over_one_ena_card_can_carry():
    """TCP runs over card 0's ENA only: at most its 100 Gbps = 12.5 GB/s on p5."""
    for name in ("p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"):
        assert expected_bus_bandwidth_gb_s(_facts(name, 1600))[0] > 4 * 12.5
