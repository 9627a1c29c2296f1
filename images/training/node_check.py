"""The GPU node health check that runs in a pod on each node of a pool (and, with --allreduce,
across nodes as a PyTorchJob). Standard library only, plus PyTorch for the GPU measurements.

On a node it: lists the GPUs (count, model, driver) and compares them with what the pool
promises; runs a bf16 matmul burn and a device-memory copy and reports the fraction of the GPU's
peak; counts the EFA devices, asks libfabric for its efa provider and, on EFA pools, checks that
containers get the locked-memory limit NCCL registers memory under (MIN_LOCKED_MEMORY_BYTES: the
gate runs privileged, but reads the same RLIMIT_MEMLOCK as a job's non-root pod); writes and reads a file on the
Lustre mount; prints the report (a table, then one JSON line) and exits non-zero when unhealthy.
The health gate (health_gate.py) acts on the report: it labels and untaints the node. Expectations and
thresholds come from the environment (the rendered Job sets them from the stack config).
"""

from __future__ import annotations

import glob
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Dense (no sparsity) bf16 tensor TFLOP/s and memory bandwidth GB/s per GPU, from NVIDIA's data
# sheets: H100 SXM5, H200 SXM, A100 40GB SXM4 (p4d), B200 (HGX B200), L40S.
PEAKS = {
    "H100": {"bf16_tflops": 989.0, "memory_gb_s": 3350.0},
    "H200": {"bf16_tflops": 989.0, "memory_gb_s": 4800.0},
    "A100": {"bf16_tflops": 312.0, "memory_gb_s": 1555.0},
    "B200": {"bf16_tflops": 2250.0, "memory_gb_s": 8000.0},
    "L40S": {"bf16_tflops": 362.0, "memory_gb_s": 864.0},
}
HEALTH_LABEL = "higgsfield.io/health"


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    memory_mib: int


@dataclass(frozen=True)
class Expectations:
    gpus: int
    model: str
    min_driver_branch: int  # the driver branch the image's CUDA needs, at least
    efa_devices: int
    min_matmul_fraction: float
    min_memory_bandwidth_fraction: float
    min_lustre_mb_s: float
    min_bus_bandwidth_gb_s: float
    lustre_path: str | None = None
    nccl_network: str = "any"  # "efa": NCCL must run over aws-ofi-nccl's efa provider
    ofi_plugin_version: str | None = None
    driver_version: str | None = None  # exactly this driver: the pool's pinned AMI release ships it
    pool_drivers: dict[str, list[str]] = field(
        default_factory=dict
    )  # driver -> healthy nodes of the pool on the same AMI
    min_locked_memory: int = 0  # EFA pools: the RLIMIT_MEMLOCK every container of the node gets (components/efa.py)

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Expectations:
        return cls(
            gpus=int(env["EXPECTED_GPUS"]),
            model=env["EXPECTED_GPU_MODEL"],
            min_driver_branch=int(env["MIN_DRIVER_BRANCH"]),
            efa_devices=int(env.get("EXPECTED_EFA_DEVICES", "0")),
            min_matmul_fraction=float(env["MIN_MATMUL_FRACTION"]),
            min_memory_bandwidth_fraction=float(env["MIN_MEMORY_BANDWIDTH_FRACTION"]),
            min_lustre_mb_s=float(env["MIN_LUSTRE_MBPS"]),
            min_bus_bandwidth_gb_s=float(env["MIN_BUS_BANDWIDTH_GBPS"]),
            lustre_path=env.get("LUSTRE_PATH") or None,
            nccl_network=env.get("EXPECTED_NCCL_NETWORK", "any"),
            ofi_plugin_version=env.get("EXPECTED_OFI_NCCL_VERSION") or None,
            driver_version=env.get("EXPECTED_DRIVER_VERSION") or None,
            pool_drivers=json.loads(env.get("POOL_DRIVERS") or "{}"),
            min_locked_memory=int(env.get("MIN_LOCKED_MEMORY_BYTES") or "0"),
        )


@dataclass
class Result:
    check: str
    value: str
    expected: str
    ok: bool


@dataclass
class Report:
    node: str
    results: list[Result] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return all(r.ok for r in self.results)

    def add(self, check: str, value: object, expected: str, ok: bool) -> None:
        self.results.append(Result(check, str(value), expected, bool(ok)))

    def table(self) -> str:
        lines = [f"node {self.node}: {'HEALTHY' if self.healthy else 'UNHEALTHY'}"]
        lines += [
            f"  {'ok' if r.ok else 'FAIL':<4} {r.check:<22} {r.value:<28} expected {r.expected}" for r in self.results
        ]
        return "\n".join(lines)

    def json(self) -> str:
        return json.dumps({"node": self.node, "healthy": self.healthy, "results": [asdict(r) for r in self.results]})


# --- measurements that need no GPU library ------------------------------------------------------


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Rows of `nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.strip().splitlines():
        name, driver, memory = (part.strip() for part in line.split(","))
        gpus.append(Gpu(name, driver, int(float(memory))))
    return gpus


def model_of(gpu_name: str) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'H100'."""
    return next((model for model in PEAKS if model in gpu_name.upper()), None)


def efa_devices(sysfs: Path = Path("/sys/class/infiniband")) -> int:
    """EFA interfaces appear as RDMA devices (rdmap*) under /sys/class/infiniband."""
    return len(list(sysfs.iterdir())) if sysfs.is_dir() else 0


def lustre_mb_s(directory: Path, megabytes: int = 256) -> tuple[float, float]:
    """(write MB/s, read MB/s) of one file on the shared file system."""
    path = directory / f".higgsfield-health-{os.getpid()}"
    block = os.urandom(1024 * 1024)
    try:
        start = time.perf_counter()
        with open(path, "wb") as f:
            for _ in range(megabytes):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        write = megabytes / (time.perf_counter() - start)
        start = time.perf_counter()
        with open(path, "rb") as f:
            while f.read(8 * 1024 * 1024):
                pass
        read = megabytes / (time.perf_counter() - start)
        return write, read
    finally:
        path.unlink(missing_ok=True)


def bus_bandwidth_gb_s(message_bytes: int, seconds: float, ranks: int) -> float:
    """NCCL's bus bandwidth of an all-reduce: algorithm bandwidth x 2(n-1)/n (nccl-tests PERFORMANCE.md)."""
    return message_bytes / seconds * 2 * (ranks - 1) / ranks / 1e9


@dataclass(frozen=True)
class NcclNetwork:
    """What NCCL's INFO log says it communicates over between nodes."""

    network: str | None  # "Using network <name>": Socket, IB, or the plugin's (Libfabric)
    provider: str | None  # aws-ofi-nccl: "Selected provider is <prov>, fabric is ..."
    plugin_version: str | None  # aws-ofi-nccl: "Initializing aws-ofi-nccl <version>"

    @property
    def over_efa(self) -> bool:
        return bool(self.network and "libfabric" in self.network.lower() and self.provider == "efa")


# The lines, at the pinned versions: NCCL's `INFO(NCCL_INIT, "Using network %s", ...)` (NVIDIA/nccl:
# src/init.cc@v2.26.2-1) names the net: "Socket" (src/transport/net_socket.cc), "IB", or the plugin's
# name, "Libfabric" for aws-ofi-nccl on NVIDIA ("AWS Libfabric" in older plugins; aws/aws-ofi-nccl:
# src/nccl_ofi_interface_nvidia.cpp@v1.21.1). The plugin prefixes its lines "NET/OFI " and logs
# "Initializing " PACKAGE_STRING and "Selected provider is %s, fabric is %s (found %d nics)"
# (aws/aws-ofi-nccl:src/nccl_ofi_net.cpp@v1.21.1; the anchors' logs show "NET/OFI Initializing
# aws-ofi-nccl 1.14.0", aws-samples/awsome-distributed-training:3.test_cases/pytorch/FSDP/slurm/README.md).
_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.M)
_PROVIDER = re.compile(r"NCCL INFO NET/OFI Selected [Pp]rovider is ([\w;-]+)", re.M)
_PLUGIN = re.compile(r"NCCL INFO NET/OFI Initializing aws-ofi-nccl (\S+)", re.M)


def parse_nccl_network(log: str) -> NcclNetwork:
    """The network NCCL selected, from its NCCL_DEBUG=INFO output (the last mention wins)."""

    def last(pattern: re.Pattern) -> str | None:
        found = pattern.findall(log)
        return found[-1].strip() if found else None

    return NcclNetwork(last(_USING_NETWORK), last(_PROVIDER), last(_PLUGIN))


def fabric_verdict(node: str, log: str, busbw: float | None, expected: Expectations, ranks: int = 0) -> Report:
    """The cross-node verdict: on an EFA pool NCCL must have picked aws-ofi-nccl's efa provider
    (a TCP fallback fails here, whatever its bandwidth); then the bus bandwidth must reach the
    pool's threshold. An unknown network (no INFO log) fails too."""
    report = Report(node)
    net = parse_nccl_network(log)
    seen = f"{net.network or 'unknown'}" + (f" / provider {net.provider}" if net.provider else "")
    if expected.nccl_network == "efa":
        report.add("NCCL network", seen, "Libfabric / provider efa", net.over_efa)
        if expected.ofi_plugin_version:
            version = (net.plugin_version or "none").removesuffix("-aws")
            report.add("aws-ofi-nccl", version, expected.ofi_plugin_version, version == expected.ofi_plugin_version)
    else:
        report.add("NCCL network", seen, "any", net.network is not None)
    if not report.healthy:
        report.add("NCCL all-reduce busbw", "not compared", "the expected network first", False)
        return report
    value = f"{busbw:.0f} GB/s over {ranks} ranks" if busbw is not None else "none"
    report.add(
        "NCCL all-reduce busbw",
        value,
        f">= {expected.min_bus_bandwidth_gb_s:.0f} GB/s",
        busbw is not None and busbw >= expected.min_bus_bandwidth_gb_s,
    )
    return report


def read_nccl_logs(pattern: str, pid: int | None = None) -> str:
    """The NCCL_DEBUG_FILE output of process `pid` (any process of the pod if None); NCCL expands
    %h to the host name and %p to the pid (NVIDIA/nccl:src/debug.cc@v2.26.2-1)."""
    wildcard = pattern.replace("%h", "*").replace("%p", "*" if pid is None else str(pid))
    return "".join(Path(f).read_text(errors="replace") for f in sorted(glob.glob(wildcard)))


# --- GPU measurements (PyTorch) -------------------------------------------------------------------


def matmul_tflops(torch, device, size: int = 8192, iterations: int = 50) -> float:
    a = torch.randn(size, size, dtype=torch.bfloat16, device=device)
    b = torch.randn(size, size, dtype=torch.bfloat16, device=device)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        a @ b
    end.record()
    torch.cuda.synchronize(device)
    return 2 * size**3 * iterations / (start.elapsed_time(end) / 1000) / 1e12


def memory_gb_s(torch, device, megabytes: int = 2048, iterations: int = 20) -> float:
    src = torch.empty(megabytes * 1024 * 1024, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize(device)
    return 2 * src.numel() * iterations / (start.elapsed_time(end) / 1000) / 1e9  # read + write


# --- the verdict -----------------------------------------------------------------------------------


def evaluate(
    node: str,
    gpus: list[Gpu],
    expected: Expectations,
    *,
    tflops: list[float] | None = None,
    memory: list[float] | None = None,
    efa: int | None = None,
    lustre: tuple[float, float] | None = None,
    efa_endpoints: int | None = None,
    locked_memory: int | None = None,
) -> Report:
    report = Report(node)
    report.add("GPU count", len(gpus), str(expected.gpus), len(gpus) == expected.gpus)
    models = sorted({model_of(g.name) or g.name for g in gpus})
    report.add("GPU model", ",".join(models) or "none", expected.model, models == [expected.model])
    report_driver(report, sorted({g.driver for g in gpus}), expected)
    peak = PEAKS.get(expected.model)
    if tflops is not None and peak:
        worst = min(tflops) / peak["bf16_tflops"] if tflops else 0.0
        report.add(
            "bf16 matmul",
            f"{min(tflops, default=0):.0f} TFLOP/s ({worst:.0%} of peak)",
            f">= {expected.min_matmul_fraction:.0%} of {peak['bf16_tflops']:.0f}",
            worst >= expected.min_matmul_fraction,
        )
    if memory is not None and peak:
        worst = min(memory) / peak["memory_gb_s"] if memory else 0.0
        report.add(
            "memory bandwidth",
            f"{min(memory, default=0):.0f} GB/s ({worst:.0%} of peak)",
            f">= {expected.min_memory_bandwidth_fraction:.0%} of {peak['memory_gb_s']:.0f}",
            worst >= expected.min_memory_bandwidth_fraction,
        )
    if efa is not None:
        report.add("EFA devices", efa, str(expected.efa_devices), efa == expected.efa_devices)
    if efa_endpoints is not None:
        report.add("libfabric efa provider", f"{efa_endpoints} endpoints", ">= 1", efa_endpoints >= 1)
    if locked_memory is not None:  # this container's soft RLIMIT_MEMLOCK, which every container of the node gets
        unlimited = locked_memory == resource.RLIM_INFINITY
        report.add(
            "locked memory",
            "unlimited" if unlimited else f"{locked_memory} bytes",
            f">= {expected.min_locked_memory} bytes",
            unlimited or locked_memory >= expected.min_locked_memory,
        )
    if lustre is not None:
        slower = min(lustre)
        report.add(
            "Lustre write/read",
            f"{lustre[0]:.0f}/{lustre[1]:.0f} MB/s",
            f">= {expected.min_lustre_mb_s:.0f} MB/s",
            slower >= expected.min_lustre_mb_s,
        )
    return report


def report_driver(report: Report, drivers: list[str], expected: Expectations) -> None:
    """The driver survives AMI updates: one driver on the node, at least the branch the image's CUDA
    needs (NVIDIA's table "CUDA Toolkit and Corresponding Driver Versions", infra/core/versions.py
    CUDA_MIN_DRIVER_BRANCH) - not one branch constant - and, where known, exactly the driver of the
    pool's pinned AMI release; then the same driver as the pool's healthy nodes on the same AMI."""
    branch = int(drivers[0].split(".")[0]) if len(drivers) == 1 and drivers[0].split(".")[0].isdigit() else None
    wanted = f">= {expected.min_driver_branch}" + (
        f", = {expected.driver_version} (the pinned AMI release's)" if expected.driver_version else ""
    )
    ok = (
        branch is not None
        and branch >= expected.min_driver_branch
        and (expected.driver_version is None or drivers == [expected.driver_version])
    )
    report.add("NVIDIA driver", ",".join(drivers) or "none", wanted, ok)
    others = {d: nodes for d, nodes in expected.pool_drivers.items() if [d] != drivers}
    if expected.pool_drivers:
        seen = "; ".join(f"{d} on {', '.join(sorted(nodes)[:3])}" for d, nodes in sorted(others.items()))
        report.add(
            "driver as the pool's",
            ",".join(drivers) or "none",
            f"the driver of the pool's nodes on this AMI{': ' + seen if seen else ''}",
            not others,
        )


def efa_provider_endpoints(fi_info: str) -> int:
    """How many endpoints libfabric's efa provider offers, from `fi_info -p efa -t FI_EP_RDM`
    output (one `provider: efa` line per endpoint; libfabric prints "fi_getinfo: -61" and no
    provider lines when the provider cannot open a device)."""
    return len(re.findall(r"^\s*provider:\s*efa\s*$", fi_info, re.M))


def fi_info_efa() -> str:
    """libfabric's view of the EFA devices (fi_info from the EFA installer, /opt/amazon/efa/bin)."""
    tool = shutil.which("fi_info") or "/opt/amazon/efa/bin/fi_info"
    try:
        return subprocess.run([tool, "-p", "efa", "-t", "FI_EP_RDM"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


# --- deeper checks: XIDs in the kernel log, an EFA loopback, DCGM diagnostics ----------------------

# The NVIDIA driver logs each XID to the kernel log as `NVRM: Xid (PCI:0000:53:00): 79, pid=..., ...`.
# Severity: the XIDs whose immediate action in NVIDIA's XID catalog (r590, docs.nvidia.com/deploy/
# xid-errors, "Resolution Bucket") is a GPU reset, a restart of the machine or a check of its
# mechanicals, as aws-samples/awsome-distributed-training classifies them (4.validation_and_
# observability/2.gpu-cluster-healthcheck/checks/0-nvidia-smi-check.sh@7a1d325d, "aligned with
# NVIDIA XID r590 catalog"; NVLink 74 at its default, reset): the node must not run jobs until it is
# reset. Those whose action is restarting the application (13, 31, 94 contained ECC, 126) or nothing
# (43, 63 row remap recorded, 92, 154 without a derived action) are listed and pass. Unverified from
# here: the catalog page for the AMI's driver branch. components/job_watchdog.py CRITICAL_XIDS alerts
# on the same codes (a test keeps them equal).
_RESET = "GPU reset required"
CRITICAL_XIDS = {
    48: "double-bit ECC error",
    54: "auxiliary power: check the mechanicals",
    64: "row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    109: _RESET,
    110: _RESET,
    119: "GSP RPC timeout",
    120: "GSP error",
    136: _RESET,
    140: _RESET,
    143: "GPU initialisation failed",
    151: "restart the machine",
    155: _RESET,
    156: _RESET,
    158: _RESET,
    168: "restart the machine (boot again, or enable ECC)",
}
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)")


def xid_events(kernel_log: str) -> list[tuple[str, int]]:
    """(PCI address, XID) of every XID the driver logged since boot."""
    return [(pci, int(code)) for pci, code in _XID.findall(kernel_log)]


def report_xids(report: Report, events: list[tuple[str, int]] | None, required: bool = True) -> None:
    """A critical XID since boot fails the node; any other XID is listed but passes (an application's
    fault, such as 13 or 31, is not the node's). An unreadable kernel log fails only where it is
    `required` (the privileged gate); an unprivileged check reports it."""
    if events is None:
        report.add("XID errors", "kernel log not readable", "readable (privileged)", not required)
        return
    critical = sorted({f"{code} {CRITICAL_XIDS[code]} on {pci}" for pci, code in events if code in CRITICAL_XIDS})
    others = sorted({str(code) for _, code in events if code not in CRITICAL_XIDS})
    value = "; ".join(critical) or ("none" if not others else f"only non-critical: {', '.join(others)}")
    report.add("XID errors", value, f"no critical XID ({', '.join(map(str, CRITICAL_XIDS))})", not critical)


def kernel_log() -> str | None:
    """The kernel's ring buffer (`dmesg`: the gate's privileged container may read it)."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def efa_loopback(devices: list[str], timeout: float = 20.0, first_port: int = 47592) -> dict[str, str]:
    """Each EFA device talks to itself: libfabric's fi_pingpong server and client over the efa
    provider on this node, shared-memory transfer off so the bytes cross the device (what the EFA
    installer's own efa_test.sh runs; unverified from here: `tar -xOf aws-efa-installer-1.50.0.tar.gz
    aws-efa-installer/efa_test.sh`). The domain of device D is `D-rdm` (fi_info -p efa). Returns the
    failure per device (empty: every device passed)."""
    tool = shutil.which("fi_pingpong") or "/opt/amazon/efa/bin/fi_pingpong"
    env = {**os.environ, "FI_EFA_ENABLE_SHM_TRANSFER": "0"}
    failures = {}
    for port, device in enumerate(devices, start=first_port):  # one control port per device, in turn
        args = [tool, "-e", "rdm", "-p", "efa", "-d", f"{device}-rdm"]
        # The server listens on -B; a client given -B would bind that same port before connecting and
        # fail with EADDRINUSE on one host, so it gets only -P (pp_ctrl_init_server and
        # pp_ctrl_init_client, ofiwg/libfabric:util/pingpong.c@v2.5.1, the same since v1.17.0).
        server_args = [*args, "-B", str(port)]
        try:
            server = subprocess.Popen(server_args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError as error:
            failures[device] = f"fi_pingpong: {error}"
            continue
        try:
            time.sleep(0.5)
            client_args = [*args, "-P", str(port), "localhost"]
            client = subprocess.run(client_args, env=env, capture_output=True, text=True, timeout=timeout)
            if client.returncode != 0:
                failures[device] = f"exit {client.returncode}: {(client.stderr or client.stdout).strip()[-200:]}"
        except subprocess.TimeoutExpired:
            failures[device] = f"no answer within {timeout:.0f}s"
        finally:
            server.kill()
            server.wait()
    return failures


def efa_device_names(sysfs: Path = Path("/sys/class/infiniband")) -> list[str]:
    return sorted(p.name for p in sysfs.iterdir()) if sysfs.is_dir() else []


# `dcgmi diag -j` at DCGM 4.5.3 (infra/core/versions.py DCGM_IMAGE) prints one JSON document:
#   {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory",
#     "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 3, "status": "Fail",
#                  "warnings": [{"warning": "...", "error_id": 0, "error_category": 0, "error_severity": 0}]}],
#     "test_summary": {"status": "Fail"}}]}], "runtime_error": "..."}, "entity_groups": [...], "metadata": {...}}
# (the schema NVIDIA/DCGM:testing/python3/dcgm_diag_schema.json, its keys nvvs/include/NvvsJsonStrings.h);
# a result's status is Pass, Skip, Warn, Fail or Not Run (Diag::HelperDisplayDiagResult), a run that could
# not start says only `runtime_error` (Diag::HelperDisplayFailureMessage), and `-i N` wraps each run in
# "iterations" with an "Overall Result" (Diag::RunStartDiag; dcgmi/Diag.cpp), all @v4.5.3.
DCGM_FAIL = "fail"
# Seconds a level may take: 1 (deployment checks) seconds, 2 (adds the short plugins) about two minutes,
# 3 (long stress tests) about half an hour.
DCGM_TIMEOUT_S = {1: 300.0, 2: 900.0, 3: 3600.0}
# The gate's DCGM container (components/healthgate.py dcgm_container) and this check share a directory:
# this side writes the level wanted to REQUEST, that side answers with dcgmi's JSON in RESULT.
DCGM_EXCHANGE_ENV = "DCGM_EXCHANGE_DIR"
DCGM_REQUEST, DCGM_RESULT = "request", "result.json"


def _dcgm_result_failures(test: str, result: dict) -> list[str]:
    if str(result.get("status", "")).lower() != DCGM_FAIL:
        return []
    where = f"{result.get('entity_group', 'GPU')} {result['entity_id']}" if "entity_id" in result else ""
    why = "; ".join(str(w.get("warning", "")).strip() for w in result.get("warnings") or [] if w.get("warning"))
    return [f"{test}" + (f" ({where})" if where else "") + (f": {why}" if why else "")]


def dcgm_failures(diag_json: str) -> list[str]:
    """What `dcgmi diag -j` reports as failed, each `test (GPU n): warning`; a run that did not start,
    or a document without a diagnostic, is a failure too. Warn, Skip and Not Run pass."""
    try:
        document = json.loads(diag_json or "{}")
    except ValueError:
        raise ValueError(f"dcgmi printed no JSON: {diag_json.strip()[:200]!r}") from None
    runs = document.get("iterations") or [document]
    found: list[str] = []
    for run in runs:
        diag = run.get("DCGM Diagnostic") if isinstance(run, dict) else None
        if not isinstance(diag, dict):
            found.append("no diagnostic in dcgmi's output")
            continue
        if diag.get("runtime_error"):
            found.append(f"did not run: {diag['runtime_error']}")
        for category in diag.get("test_categories") or []:
            for test in category.get("tests") or []:
                name = str(test.get("name", "unnamed test"))
                failed = [f for r in test.get("results") or [] for f in _dcgm_result_failures(name, r)]
                summary = str((test.get("test_summary") or {}).get("status", "")).lower()
                found += failed or ([name] if summary == DCGM_FAIL else [])
    if not found and str(document.get("Overall Result", "")).lower() == DCGM_FAIL:
        found.append(f"failed: {document.get('Warning', 'no reason given')}")
    return sorted(set(found))


def dcgm_by_container(exchange: Path, level: int, timeout: float, poll: float = 0.5) -> str:
    """Ask the gate's DCGM container for `dcgmi diag -r level -j` and wait for its JSON."""
    result = exchange / DCGM_RESULT
    result.unlink(missing_ok=True)
    partial = exchange / f"{DCGM_REQUEST}.tmp"
    partial.write_text(f"{level}\n")
    os.replace(partial, exchange / DCGM_REQUEST)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result.is_file():
            return result.read_text()
        time.sleep(poll)
    raise TimeoutError(f"no answer from the DCGM container within {timeout:.0f}s")


def report_dcgm(report: Report, level: int, exchange: str | None = None) -> None:
    """DCGM's diagnostics at `level` (`dcgmi diag -r`, DCGM_TIMEOUT_S), through the gate's DCGM
    container where `exchange` names the directory it shares, else a dcgmi in this image. Level 0:
    not run."""
    if level <= 0:
        return
    expected, timeout = f"level {level} passes", DCGM_TIMEOUT_S.get(level, DCGM_TIMEOUT_S[3])
    try:
        if exchange:
            output = dcgm_by_container(Path(exchange), level, timeout)
        else:
            tool = shutil.which("dcgmi")
            if not tool:
                report.add("DCGM diagnostics", "dcgmi not in the image", expected, False)
                return
            output = subprocess.run(
                [tool, "diag", "-r", str(level), "-j"], capture_output=True, text=True, timeout=timeout
            ).stdout
        failed = dcgm_failures(output)
    except (OSError, subprocess.TimeoutExpired, TimeoutError, ValueError) as error:
        report.add("DCGM diagnostics", f"did not run: {error}", expected, False)
        return
    report.add("DCGM diagnostics", "; ".join(failed) or f"level {level} passed", expected, not failed)


def deeper_checks(report: Report, env: dict[str, str], efa: bool) -> None:
    """The XID scan always; the EFA loopback on EFA pools; DCGM at DCGM_DIAG_LEVEL."""
    events = kernel_log()
    report_xids(report, xid_events(events) if events is not None else None, env.get("REQUIRE_KERNEL_LOG") == "1")
    if efa:
        failures = efa_loopback(efa_device_names())
        value = "; ".join(f"{d}: {why}" for d, why in sorted(failures.items())) or "every device"
        report.add("EFA loopback", value, "every device answers itself", not failures)
    report_dcgm(report, int(env.get("DCGM_DIAG_LEVEL") or 0), env.get(DCGM_EXCHANGE_ENV))


def check_node(env: dict[str, str]) -> Report:
    expected = Expectations.from_env(env)
    node = env.get("NODE_NAME", "unknown")
    smi = shutil.which("nvidia-smi")
    out = (
        subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        if smi
        else ""
    )
    gpus = parse_nvidia_smi(out) if out.strip() else []
    tflops = memory = None
    try:
        import torch

        if torch.cuda.is_available():
            devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
            tflops = [matmul_tflops(torch, d) for d in devices]
            memory = [memory_gb_s(torch, d) for d in devices]
    except ImportError:
        pass
    lustre = lustre_mb_s(Path(expected.lustre_path)) if expected.lustre_path else None
    report = evaluate(
        node,
        gpus,
        expected,
        tflops=tflops if tflops is not None else [],
        memory=memory if memory is not None else [],
        efa=efa_devices() if expected.efa_devices else None,
        lustre=lustre,
        efa_endpoints=efa_provider_endpoints(fi_info_efa()) if expected.efa_devices else None,
        locked_memory=resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] if expected.min_locked_memory else None,
    )
    if env.get("DEEPER_CHECKS", "1") != "0":
        deeper_checks(report, env, efa=bool(expected.efa_devices))
    return report


def check_allreduce(env: dict[str, str], megabytes: int = 1024, iterations: int = 20) -> Report:
    """Across nodes, under the Training Operator (RANK, WORLD_SIZE, MASTER_ADDR set): NCCL all-reduce."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    local = int(env.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    tensor = torch.ones(megabytes * 1024 * 1024 // 2, dtype=torch.bfloat16, device="cuda")
    for _ in range(5):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / iterations
    ranks = dist.get_world_size()
    busbw = bus_bandwidth_gb_s(tensor.numel() * tensor.element_size(), seconds, ranks)
    dist.destroy_process_group()
    log = read_nccl_logs(env["NCCL_DEBUG_FILE"], os.getpid()) if env.get("NCCL_DEBUG_FILE") else ""
    return fabric_verdict(env.get("NODE_NAME", "unknown"), log, busbw, Expectations.from_env(env), ranks)


def check_dcgm(env: dict[str, str], level: int) -> Report:
    """DCGM's diagnostics alone, at `level`: the one-off deeper run on a named node (`higgsfield
    healthcheck dcgm`, infra/offline/healthcheck.py render_dcgm), through its DCGM container."""
    report = Report(env.get("NODE_NAME", "unknown"))
    report_dcgm(report, level, env.get(DCGM_EXCHANGE_ENV))
    return report


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    if "--dcgm" in argv:
        report = check_dcgm(env, int(argv[argv.index("--dcgm") + 1]))
    else:
        report = check_allreduce(env) if "--allreduce" in argv else check_node(env)
    print(report.table())
    print(report.json())
    return 0 if report.healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
