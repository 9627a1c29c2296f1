"""The pre-flight gang check: before a multi-node job's training command, on the nodes the gang got.

`python preflight.py -- COMMAND...` runs in every pod of the gang (one process per node), then
replaces itself with COMMAND when the gang passes. It checks, within PREFLIGHT_TIMEOUT_SECONDS:
- on each node: the locked-memory limit (RLIMIT_MEMLOCK: below it libfabric cannot register memory
  and NCCL falls back to TCP), the free memory of every visible GPU (another process's leftovers),
  and a write of the job's checkpoint size (PREFLIGHT_CHECKPOINT_BYTES) to its shared checkpoint
  directory, fsynced;
- across the gang: an all-reduce over every node (NCCL on GPUs, gloo on CPU) whose bus bandwidth
  must reach PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS, over the fabric NCCL selected (PREFLIGHT_NCCL_NETWORK
  `efa`: aws-ofi-nccl's efa provider, read from NCCL's INFO log as node_check.py reads it).
When the gang all-reduce fails, the nodes are bisected: the failing group is split in halves, each
half probed at once (disjoint groups run concurrently), the failing halves split again; a pair or a
single node left is probed against a node that has passed, so the bad node is named, not its
partner (`isolate`). Coordination goes through the job's own TCPStore (MASTER_ADDR:MASTER_PORT, the
master pod, before torchrun uses the port), so a rank that hangs or dies costs its probe, not the check.

Every rank prints one line (`preflight rank R node N: ...`). Then:
- pass: exec COMMAND with the environment the pod started with;
- a node (or nodes) named: each rank writes the verdict to its termination message
  (/dev/termination-log, the pod's status, which the platform's watchdog reads with its own RBAC:
  no team pod holds a Kubernetes token) and exits EXIT_RETRY, which the Training Operator's
  ExitCode policy retries by recreating the pod (IsRetryableExitCode: code >= 128, kubeflow/trainer:
  pkg/util/train/train_util.go@v1.9.4); the watchdog asks the health gate to check the node again,
  and the gate's own taint keeps the recreated gang off it;
- every node failing the same way (no EFA on any node, the checkpoint directory unwritable, the
  whole gang slow and no node to blame): EXIT_CONFIG, which the job does not retry - a setting,
  not a node, is wrong, and a retry would fail the same way.
HIGGSFIELD_PREFLIGHT=skip skips it (one job); PyTorch is imported only when the gang check runs.

`python preflight.py --node -- COMMAND...` is the same without PyTorch, for the frameworks whose
image has none (TFJob, XGBoostJob: infra/offline/jobs.py add_node_preflight): each pod checks its
own node alone - locked memory, the GPUs' free memory (from nvidia-smi), the checkpoint write - in
one line of the same form, and exits EXIT_RETRY when its node fails, so the pod is recreated; first
it serves its node as a suspect on the progress port (`linger`), so the watchdog asks the health
gate to re-check it, as for the gang check.

`python preflight.py --mpi -- MPIRUN...` is an MPIJob launcher's (infra/offline/jobs.py
add_mpi_preflight): its workers run no command of ours, so it runs `--node` in each worker of the
operator's hostfile through mpirun, all at once and time-boxed, prints one line per worker, and on a
named node serves it marked `recreate` (the watchdog re-checks it, then deletes the job's pods there
for the operator to recreate elsewhere) and exits EXIT_RETRY; else it becomes MPIRUN.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # node_check.py ships next to this file
from node_check import bus_bandwidth_gb_s, parse_nccl_network, read_nccl_logs  # noqa: E402
from progress import PORT_ENV, serve, suspects_text  # noqa: E402

# A node of the gang is bad: above 127, so ExitCode retries (the pod is recreated); 143 and 150
# are examples/checkpointing.py's, this one is the pre-flight's own.
EXIT_RETRY = 151
# The same failure on every node: a setting is wrong; 1-127, so ExitCode fails the job at once.
EXIT_CONFIG = 4
SKIP = "skip"
TERMINATION_LOG = Path("/dev/termination-log")
# The kubelet keeps at most 4096 bytes of a termination message (corev1 TerminationMessagePath).
MESSAGE_LIMIT = 4000
NCCL_LOG = "/tmp/preflight-nccl-%h-%p.log"
CHUNK = 8 << 20
REPORT_MARGIN_S = 15.0  # past a probe's timeout, how long rank 0 waits for a member's report


@dataclass(frozen=True)
class Settings:
    """What the rendered job sets (infra/offline/jobs.py preflight_env), and what the Training
    Operator injects: PET_NNODES and PET_NODE_RANK count pods, not processes (setPodEnv, kubeflow/
    trainer:pkg/controller.v1/pytorch/envvar.go@v1.9.4), MASTER_ADDR/MASTER_PORT the master pod."""

    nodes: int
    rank: int
    master: str
    port: int
    node: str
    timeout_s: float = 300.0
    min_busbw_gb_s: float = 0.0
    message_mb: float = 256.0
    probe_timeout_s: float = 60.0  # one probe: a dead or hung member costs its group this, not the time box
    nccl_network: str = "any"
    min_locked_bytes: int = 0
    min_gpu_free_fraction: float = 0.9
    checkpoint_dir: str = ""
    checkpoint_bytes: int = 0

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Settings:
        """An elastic job's PET_NNODES is a range (`1:4`): its gang is not fixed before the
        rendezvous, so its pre-flight checks each node alone (nodes 1)."""
        nnodes = env.get("PET_NNODES") or env.get("WORLD_SIZE") or "1"
        return cls(
            nodes=1 if ":" in nnodes else int(nnodes),
            rank=int(env.get("PET_NODE_RANK") or env.get("RANK") or 0),
            master=env.get("MASTER_ADDR", "127.0.0.1"),
            port=int(env.get("MASTER_PORT") or 29500),
            node=env.get("NODE_NAME") or os.uname().nodename,
            timeout_s=float(env.get("PREFLIGHT_TIMEOUT_SECONDS") or 300),
            min_busbw_gb_s=float(env.get("PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS") or 0),
            message_mb=float(env.get("PREFLIGHT_MESSAGE_MB") or 256),
            probe_timeout_s=float(env.get("PREFLIGHT_PROBE_TIMEOUT_SECONDS") or 60),
            nccl_network=env.get("PREFLIGHT_NCCL_NETWORK") or "any",
            min_locked_bytes=int(env.get("MIN_LOCKED_MEMORY_BYTES") or 0),
            min_gpu_free_fraction=float(env.get("PREFLIGHT_MIN_GPU_FREE_FRACTION") or 0.9),
            checkpoint_dir=env.get("CHECKPOINT_SHARED_DIR", ""),
            checkpoint_bytes=int(env.get("PREFLIGHT_CHECKPOINT_BYTES") or 0),
        )


@dataclass(frozen=True)
class Check:
    name: str
    value: str
    expected: str
    ok: bool

    def __str__(self) -> str:
        return f"{self.name} {self.value}" + ("" if self.ok else f" (expected {self.expected})")


# --- the checks on one node -----------------------------------------------------------------------


def locked_memory(wanted: int, limit: tuple[int, int] | None = None) -> Check:
    soft, _ = limit if limit is not None else resource.getrlimit(resource.RLIMIT_MEMLOCK)
    unlimited = soft == resource.RLIM_INFINITY
    value = "unlimited" if unlimited else f"{soft} B"
    return Check("memlock", value, f">= {wanted} B", unlimited or soft >= wanted)


def gpu_headroom(torch: Any, fraction: float) -> Check:
    """Free memory on every visible GPU: a process left on the node (a crashed job's, a zombie)
    holds memory the job will need."""
    if torch is None or not torch.cuda.is_available():
        return Check("gpu free", "no GPU", "none needed", True)
    worst = 1.0
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        worst = min(worst, free / total)
    return Check(
        "gpu free", f"{worst:.0%} (least of {torch.cuda.device_count()})", f">= {fraction:.0%}", worst >= fraction
    )


def checkpoint_write(directory: str, size: int, deadline: float, rank: int) -> Check:
    """Write `size` bytes to the shared checkpoint directory, fsync, delete: the directory exists,
    is writable by the job's user, has the room, and writes within the time box."""
    if not directory or size <= 0:
        return Check("checkpoint write", "not asked", "-", True)
    path = Path(directory) / f".preflight-{rank}"
    start = time.monotonic()
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        block = b"\0" * min(CHUNK, size)
        with path.open("wb") as out:
            left = size
            while left > 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{size - left} of {size} B before the time box ended")
                left -= out.write(block[: min(left, len(block))])
            out.flush()
            os.fsync(out.fileno())
    except (OSError, TimeoutError) as error:
        return Check("checkpoint write", f"{type(error).__name__}: {error}", f"{size} B written", False)
    finally:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass  # never created: the directory itself failed
    seconds = max(time.monotonic() - start, 1e-6)
    return Check("checkpoint write", f"{size >> 20} MiB at {size / seconds / 1e6:.0f} MB/s", "written", True)


# nvidia-smi's query of every GPU's memory in MiB, one CSV line per GPU (`nvidia-smi
# --help-query-gpu`: memory.free, memory.total; the NVIDIA container toolkit mounts the binary into
# every GPU container, its `utility` capability: NVIDIA_DRIVER_CAPABILITIES).
SMI_QUERY = ["nvidia-smi", "--query-gpu=memory.free,memory.total", "--format=csv,noheader,nounits"]


def gpu_headroom_smi(fraction: float, run: Callable[[list[str]], str] | None = None) -> Check:
    """gpu_headroom without PyTorch: the least free share of any GPU nvidia-smi lists."""
    try:
        text = run(SMI_QUERY) if run else subprocess.run(SMI_QUERY, capture_output=True, text=True, timeout=30).stdout
        pairs = [[float(v) for v in line.split(",")] for line in text.strip().splitlines() if line.strip()]
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return Check("gpu free", "no GPU (no nvidia-smi)", "none needed", True)
    if not pairs:
        return Check("gpu free", "no GPU", "none needed", True)
    worst = min(free / total for free, total in pairs if total)
    return Check("gpu free", f"{worst:.0%} (least of {len(pairs)})", f">= {fraction:.0%}", worst >= fraction)


def run_node_check(env: dict[str, str], run: Callable[[list[str]], str] | None = None) -> int:
    """The node alone, without PyTorch: one line, the termination message, 0 or EXIT_RETRY."""
    settings, started = Settings.from_env({**env, "PET_NNODES": "1", "PET_NODE_RANK": "0"}), time.monotonic()
    deadline = started + settings.timeout_s
    checks = [
        locked_memory(settings.min_locked_bytes),
        gpu_headroom_smi(settings.min_gpu_free_fraction, run),
        checkpoint_write(settings.checkpoint_dir, settings.checkpoint_bytes, deadline, 0),
    ]
    failed = [c for c in checks if not c.ok]
    said = "; ".join(f"{c.name} {c.value}" + ("" if c.ok else f" (expected {c.expected})") for c in checks)
    verdict = f"BAD NODE ({', '.join(c.name for c in failed)})" if failed else "ok"
    print(
        f"preflight rank 0/1 node {settings.node}: {verdict} in {time.monotonic() - started:.1f}s; {said}", flush=True
    )
    if not failed:
        return 0
    _terminate({"ok": False, "code": EXIT_RETRY, "suspects": {settings.node: said}, "problem": verdict})
    return EXIT_RETRY


# --- MPIJob: the launcher checks every worker's node before its mpirun ---------------------------

# The hostfile the MPI Operator mounts in the launcher, one `POD slots=N` line per worker (newConfigMap,
# configMountPath /etc/mpi; Open MPI reads it from OMPI_MCA_orte_default_hostfile, newLauncher:
# kubeflow/trainer:pkg/controller.v1/mpi/mpijob_controller.go@v1.9.4), and the kubectl its init
# container delivers to the launcher (kubectlMountPath /opt/kube, pkg/controller.v1/mpi/mpijob.go),
# whose Role may get the job's pods (newLauncherRole, same file).
HOSTFILE = "/etc/mpi/hostfile"
KUBECTL = "/opt/kube/kubectl"
# What each worker runs under mpirun: this file's node check, in the worker's container (kubexec.sh:
# kubectl exec), so with the worker's environment (its NODE_NAME, its checkpoint directory).
MPI_NODE_CHECK = ["python", "/code/preflight.py", "--node"]
NODE_LINE = re.compile(r"^preflight rank \d+/\d+ node (\S+): (ok|BAD NODE[^;]*?|FAILED[^;]*?) in [\d.]+s(?:; (.*))?$")


def mpi_hosts(env: dict[str, str]) -> list[str]:
    path = env.get("PREFLIGHT_HOSTFILE") or env.get("OMPI_MCA_orte_default_hostfile") or HOSTFILE
    return [line.split()[0] for line in Path(path).read_text().splitlines() if line.strip() and line[0] != "#"]


@dataclass
class HostResult:
    """One worker's node check: its node (None: it never answered), `ok`, and what its line said."""

    host: str
    node: str | None
    ok: bool
    said: str
    blame: bool = True  # False: its pod was not running yet (an image pull), nothing said of its node


def _ready(host: str, env: dict[str, str], timeout: float) -> bool:
    """Whether the worker's pod is Ready within `timeout`: the operator starts the launcher without
    waiting for its workers (its init container only copies kubectl), and a worker still pulling its
    image says nothing about its node. No kubectl to ask: assumed ready."""
    kubectl = env.get("PREFLIGHT_KUBECTL") or KUBECTL
    argv = [kubectl, "wait", "--for=condition=Ready", f"pod/{host}", f"--timeout={int(timeout)}s"]
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout + 30).returncode == 0
    except FileNotFoundError:
        return True
    except (OSError, subprocess.TimeoutExpired):
        return False


def _check_host(host: str, env: dict[str, str], timeout: float) -> HostResult:
    """One worker's node check through mpirun, one rank on `host` alone (a host that fails to start
    or hangs costs only its own result), once its pod is Ready."""
    ready_s = float(env.get("PREFLIGHT_READY_SECONDS") or 600)
    if not _ready(host, env, ready_s):
        return HostResult(host, None, False, f"pod not Ready within {ready_s:.0f}s", blame=False)
    mpirun = (env.get("PREFLIGHT_MPIRUN") or "mpirun").split()
    argv = [*mpirun, "--allow-run-as-root", "-np", "1", "--host", host, *MPI_NODE_CHECK]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return HostResult(host, None, False, f"no answer within {timeout:.0f}s")
    except OSError as error:
        return HostResult(host, None, False, f"mpirun did not start: {error}")
    for text in done.stdout.splitlines():
        found = NODE_LINE.match(text.strip())
        if found:
            checks = found.group(3) or ""
            return HostResult(host, found.group(1), found.group(2) == "ok", f"{found.group(2)}; {checks}".strip("; "))
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return HostResult(host, None, False, f"mpirun exited {done.returncode} with no pre-flight line ({tail[:200]})")


def _node_of(host: str, env: dict[str, str]) -> str | None:
    """The node a silent worker's pod is on, asked of the API server with the launcher's own kubectl."""
    kubectl = env.get("PREFLIGHT_KUBECTL") or KUBECTL
    try:
        done = subprocess.run(
            [kubectl, "get", "pod", host, "-o", "jsonpath={.spec.nodeName}"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def mpi_verdict(results: list[HostResult]) -> dict:
    """The workers' results: pass; the nodes named (EXIT_RETRY); or every worker of two or more
    failing its own checks the same way (EXIT_CONFIG: a setting, not a node)."""
    failed = [r for r in results if not r.ok]
    if not failed:
        return {"ok": True, "code": 0, "suspects": {}, "problem": ""}
    if len(failed) == len(results) > 1 and all(r.node for r in failed) and len({r.said for r in failed}) == 1:
        return _config(f"every worker: {failed[0].said}")
    suspects = {r.node or f"pod {r.host}": f"worker {r.host}: {r.said}" for r in failed if r.blame}
    waiting = ", ".join(r.host for r in failed if not r.blame)
    return {
        "ok": False,
        "code": EXIT_RETRY,
        "suspects": suspects,
        "problem": "" if suspects else f"not ready: {waiting}",
    }


def run_mpi_check(env: dict[str, str]) -> int:
    """The launcher's pre-flight: every worker's node check at once (each time-boxed), one line per
    worker, the verdict; a worker that never answered is named by its pod's node."""
    started, timeout = time.monotonic(), float(env.get("PREFLIGHT_TIMEOUT_SECONDS") or 300)
    hosts = mpi_hosts(env)
    answers: dict[str, HostResult] = {}
    threads = [
        threading.Thread(target=lambda h=host: answers.__setitem__(h, _check_host(h, env, timeout)), daemon=True)
        for host in hosts
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 30)
    results = [answers.get(h) or HostResult(h, None, False, "no answer") for h in hosts]
    for result in results:
        if result.node is None and result.blame:
            result.node = _node_of(result.host, env)
    decided = mpi_verdict(results)
    for index, r in enumerate(results):
        state = "ok" if r.ok else ("BAD NODE" if r.blame and decided["suspects"] else "FAILED")
        print(
            f"preflight rank {index}/{len(results)} node {r.node or 'pod-' + r.host}: {state} in "
            f"{time.monotonic() - started:.1f}s; worker {r.host}: {r.said}",
            flush=True,
        )
    if not decided["ok"]:
        print(f"preflight: {decided['problem'] or 'bad nodes ' + ', '.join(decided['suspects'])}", flush=True)
        _terminate(decided)
    return int(decided["code"])


def local_checks(settings: Settings, torch: Any, deadline: float) -> list[Check]:
    return [
        locked_memory(settings.min_locked_bytes),
        gpu_headroom(torch, settings.min_gpu_free_fraction),
        checkpoint_write(settings.checkpoint_dir, settings.checkpoint_bytes, deadline, settings.rank),
    ]


# --- bisection: which node makes the gang fail ------------------------------------------------------

Group = tuple[int, ...]
ProbeRound = Callable[[list[Group]], list[bool]]


@dataclass
class Isolation:
    """Which ranks the probes blame (`suspects`), which passed (`good`), in how many rounds; a pair
    with no node known good to test against is blamed whole (`ambiguous`)."""

    suspects: list[int] = field(default_factory=list)
    good: set[int] = field(default_factory=set)
    rounds: int = 0
    ambiguous: bool = False


def _halves(group: Group) -> tuple[Group, Group]:
    middle = len(group) // 2
    return group[:middle], group[middle:]


def _find_referees(leaves: list[int], probe: ProbeRound, result: Isolation) -> list[int]:
    """With no rank known good, pairs of the leaves themselves: a pair that passes is good. Up to
    three pairings, each shifted by one (for three leaves: every pair), so one bad rank cannot
    spoil every pair."""
    for shift in range(min(3, len(leaves))):
        order = leaves[shift:] + leaves[:shift]
        pairs = [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
        if not pairs:
            break
        outcomes = probe(pairs)
        result.rounds += 1
        result.good.update(rank for pair, ok in zip(pairs, outcomes, strict=True) if ok for rank in pair)
        if result.good:
            break
    return [rank for rank in leaves if rank not in result.good]


def isolate(failing: Group, probe: ProbeRound) -> Isolation:
    """Bisect a failing group of ranks. Each round probes disjoint groups at once: the halves of
    every group still failing. A group of three or fewer is not split: each member is paired with
    a rank that passed (a different one where there are enough, so the pairs stay disjoint; over
    further rounds otherwise), and with none passed yet, with each other first (_find_referees). A
    member that fails with a good partner is a suspect. A failing group whose halves both pass
    blames nobody (the fault needs both halves: a link between them); no rank passing at all
    blames every leaf, `ambiguous`."""
    result = Isolation()
    pending: list[Group] = [failing]
    leaves: list[int] = []
    while pending:
        leaves += [rank for group in pending if len(group) <= 3 for rank in group]
        split = [half for group in pending if len(group) > 3 for half in _halves(group)]
        if not split:
            break
        outcomes = probe(split)
        result.rounds += 1
        pending = [group for group, ok in zip(split, outcomes, strict=True) if not ok]
        result.good.update(rank for group, ok in zip(split, outcomes, strict=True) if ok for rank in group)
    if leaves and not result.good:
        leaves = _find_referees(leaves, probe, result)
        if not result.good:
            result.suspects, result.ambiguous = sorted(leaves), True
            return result
    while leaves:
        referees = sorted(result.good)
        batch, leaves = leaves[: len(referees)], leaves[len(referees) :]
        outcomes = probe([(rank, referee) for rank, referee in zip(batch, referees, strict=False)])
        result.rounds += 1
        result.suspects += [rank for rank, ok in zip(batch, outcomes, strict=True) if not ok]
        result.good.update(rank for rank, ok in zip(batch, outcomes, strict=True) if ok)
    result.suspects.sort()
    return result


# --- the gang: a TCPStore to coordinate, a fresh process group per probe --------------------------


@dataclass
class Probe:
    """One member's view of one probe: it completed (`ok`), how fast, and which network NCCL used."""

    ok: bool
    busbw_gb_s: float = 0.0
    network: str = ""
    error: str = ""


def run_probe(torch: Any, store: Any, name: str, group: Group, rank: int, settings: Settings, timeout: float) -> Probe:
    """This rank's part of an all-reduce among `group`: a process group of its own (over a prefix of
    the store), one warm-up, then timed iterations; the slowest member decides the group's speed."""
    dist = torch.distributed
    member, size = group.index(rank), len(group)
    prefixed = dist.PrefixStore(name, store)
    try:
        if torch.cuda.is_available():
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timedelta(seconds=timeout)
            group_pg = dist.ProcessGroupNCCL(prefixed, member, size, options)
            tensor = torch.ones(int(settings.message_mb * (1 << 20) / 4), device="cuda")
        else:
            group_pg = dist.ProcessGroupGloo(prefixed, member, size, timedelta(seconds=timeout))
            tensor = torch.ones(int(settings.message_mb * (1 << 20) / 4))
        group_pg.allreduce([tensor]).wait()
        iterations = 3
        start = time.perf_counter()
        for _ in range(iterations):
            group_pg.allreduce([tensor]).wait()
        if tensor.is_cuda:
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / iterations
    except Exception as error:  # noqa: BLE001 - DistError, a timeout, a lost peer: the probe failed
        return Probe(False, error=f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")
    busbw = bus_bandwidth_gb_s(tensor.numel() * tensor.element_size(), seconds, size)
    network = ""
    if tensor.is_cuda:
        net = parse_nccl_network(read_nccl_logs(NCCL_LOG, os.getpid()))
        network = "efa" if net.over_efa else (net.network or "unknown")
    return Probe(True, busbw, network or "gloo")


def bounded_probe(
    torch: Any, store: Any, name: str, group: Group, rank: int, settings: Settings, timeout: float
) -> Probe:
    """`run_probe`, but this rank reports by `timeout` whatever happens: a peer that never joins can
    hold a process group's rendezvous past its own timeout (the store retries), and rank 0 would then
    count this healthy rank as silent. The late probe is left to end on its own (a daemon thread)."""
    done: list[Probe] = []
    worker = threading.Thread(
        target=lambda: done.append(run_probe(torch, store, name, group, rank, settings, timeout)), daemon=True
    )
    worker.start()
    worker.join(timeout + 2)
    return done[0] if done else Probe(False, error=f"no result within {timeout:.0f}s")


class Gang:
    """The job's TCPStore (rank 0 serves it on the master pod) and the pre-flight's keys in it."""

    def __init__(self, store: Any, rank: int, nodes: int) -> None:
        self.store, self.rank, self.nodes = store, rank, nodes

    def put(self, key: str, value: object) -> None:
        self.store.set(f"preflight/{key}", json.dumps(value))

    def get(self, key: str, deadline: float, poll: float = 0.05) -> Any:
        """The value of `key`, or None when it has not appeared by `deadline` (a rank that hangs)."""
        full = f"preflight/{key}"
        while True:
            if self.store.check([full]):
                return json.loads(self.store.get(full))
            if time.monotonic() > deadline:
                return None
            time.sleep(poll)


def group_ok(reports: Sequence[dict | None], min_busbw: float, network: str) -> bool:
    """A probe passes when every member reported success, the slowest at the bandwidth floor, and
    (where the pool has EFA) every member's NCCL over EFA."""
    if not reports or any(r is None or not r["ok"] for r in reports):
        return False
    if network == "efa" and any(r["network"] not in ("efa", "gloo") for r in reports):
        return False
    return min(r["busbw_gb_s"] for r in reports if r is not None) >= min_busbw


# --- rank 0 plans the rounds; every rank follows them ------------------------------------------------


class Coordinator:
    """Rank 0: publishes each round's groups, collects the members' reports, decides."""

    def __init__(self, gang: Gang, settings: Settings, deadline: float) -> None:
        self.gang, self.settings, self.deadline, self.round = gang, settings, deadline, 0
        self.silent: set[int] = set()
        self.reports: dict[int, list[dict | None]] = {}

    def probe_round(self, groups: list[Group]) -> list[bool]:
        k = self.round
        self.round += 1
        self.gang.put(f"plan/{k}", [list(g) for g in groups])
        started = time.monotonic()
        outcomes = []
        for index, group in enumerate(groups):
            until = min(self.deadline, started + self.settings.probe_timeout_s + REPORT_MARGIN_S)
            reports = [self.gang.get(f"result/{k}/{rank}", until) for rank in group]
            self.silent.update(rank for rank, r in zip(group, reports, strict=True) if r is None)
            self.reports[k * 1000 + index] = reports
            outcomes.append(group_ok(reports, self.settings.min_busbw_gb_s, self.settings.nccl_network))
        return outcomes


def follow(gang: Gang, settings: Settings, torch: Any, store: Any, deadline: float) -> list[Probe]:
    """Every rank (rank 0 in a thread): take each round's plan, run this rank's probe, report."""
    k, mine = 0, []
    while True:
        plan = gang.get(f"plan/{k}", deadline)
        if plan is None or plan == "done":
            return mine
        for index, group in enumerate(plan):
            if gang.rank in group:
                remaining = max(min(deadline - time.monotonic(), settings.probe_timeout_s), 1.0)
                probe = bounded_probe(torch, store, f"probe/{k}/{index}", tuple(group), gang.rank, settings, remaining)
                mine.append(probe)
                gang.put(f"result/{k}/{gang.rank}", probe.__dict__)
        k += 1


def _failed_local(local: dict[int, list[dict]], nodes: list[str]) -> dict[str, str]:
    failed = {r: [c for c in checks if not c["ok"]] for r, checks in local.items()}
    return {
        nodes[r]: "; ".join(f"{c['name']} {c['value']} (expected {c['expected']})" for c in checks)
        for r, checks in failed.items()
        if checks
    }


def _config(problem: str) -> dict:
    return {"ok": False, "code": EXIT_CONFIG, "suspects": {}, "problem": problem}


def verdict(
    nodes: list[str],
    local: dict[int, list[dict]],
    whole: list[dict | None] | None,
    isolation: Isolation | None,
    silent: set[int],
    network: str = "any",
) -> dict:
    """Rank 0's verdict: pass; the suspect nodes (EXIT_RETRY); or a problem of the gang, not of a
    node (EXIT_CONFIG): every node failing its own checks, NCCL off EFA on every node of an EFA
    pool, or an all-reduce that fails with no node to blame."""
    reasons = _failed_local(local, nodes)
    if reasons and len(reasons) == len(nodes):
        return _config("every node: " + next(iter(reasons.values())))
    seen = {r["network"] for r in whole or [] if r and r["ok"]}
    if network == "efa" and seen and "efa" not in seen and "gloo" not in seen:
        return _config(f"NCCL used {', '.join(sorted(seen))}, not EFA, on every node: the image's aws-ofi-nccl")
    if isolation is not None and isolation.ambiguous and len(isolation.suspects) > 2:
        return _config(
            "no node passed any all-reduce probe: the fabric of the whole gang, or a bandwidth floor "
            "(PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS) this gang cannot reach"
        )
    for rank in sorted(silent):
        reasons.setdefault(nodes[rank], "did not answer its all-reduce probe in time")
    for rank in isolation.suspects if isolation else []:
        reasons.setdefault(
            nodes[rank],
            "all-reduce slow or failing in a pair with no node known good (both re-checked)"
            if isolation and isolation.ambiguous
            else "all-reduce slow or failing with nodes that passed",
        )
    if reasons:
        return {"ok": False, "code": EXIT_RETRY, "suspects": reasons, "problem": ""}
    if isolation is not None:
        return _config(
            "the gang's all-reduce fails but no half or pair of it does: the fabric between its nodes, or a "
            "bandwidth floor (PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS) too high for this gang"
        )
    return {"ok": True, "code": 0, "suspects": {}, "problem": ""}


def coordinate(gang: Gang, settings: Settings, local: list[Check], deadline: float) -> dict:
    """Rank 0: wait for every rank's name and local checks, probe the whole gang, bisect on failure."""
    names = {0: settings.node}
    local_of: dict[int, list[dict]] = {0: [c.__dict__ for c in local]}
    for rank in range(1, settings.nodes):
        hello = gang.get(f"hello/{rank}", deadline)
        names[rank] = hello["node"] if hello else f"rank-{rank}"
        local_of[rank] = (
            hello["checks"] if hello else [{"name": "arrival", "value": "none", "expected": "arrives", "ok": False}]
        )
    ready = tuple(r for r in range(settings.nodes) if all(c["ok"] for c in local_of[r]))
    coordinator = Coordinator(gang, settings, deadline)
    whole, isolation = None, None
    if len(ready) > 1:
        (whole_ok,) = coordinator.probe_round([ready])
        whole = coordinator.reports[0]
        if not whole_ok:
            isolation = isolate(ready, coordinator.probe_round)
    gang.put(f"plan/{coordinator.round}", "done")
    nodes = [names[r] for r in range(settings.nodes)]
    decided = verdict(nodes, local_of, whole, isolation, coordinator.silent, settings.nccl_network)
    return {**decided, "nodes": nodes, "rounds": coordinator.round}


# --- main ---------------------------------------------------------------------------------------


def line(settings: Settings, local: list[Check], result: dict, probes: list[Probe], seconds: float) -> str:
    """This rank's one line: its node, its checks, its gang all-reduce, and the gang's verdict."""
    mine = result.get("suspects", {}).get(settings.node)
    state = "ok" if result["ok"] else ("BAD NODE" if mine else "FAILED")
    parts = [str(c) for c in local]
    if probes:
        first = probes[0]
        parts.append(
            f"all-reduce {first.busbw_gb_s:.2f} GB/s busbw over {first.network}"
            if first.ok
            else f"all-reduce failed ({first.error})"
        )
    tail = f"; {mine}" if mine else ""
    if not result["ok"] and not mine:
        tail = f"; gang: {result['problem'] or 'bad nodes ' + ', '.join(result['suspects'])}"
    return (
        f"preflight rank {settings.rank}/{settings.nodes} node {settings.node}: {state} in {seconds:.1f}s; "
        f"{', '.join(parts)}{tail}"
    )


def _terminate(message: dict) -> None:
    """The verdict in the container's termination message (the pod's status: what the watchdog
    reads); the kubelet mounts the file in every container (terminationMessagePath), so outside
    Kubernetes there is none and the line on stdout says it all."""
    path = Path(os.environ.get("PREFLIGHT_TERMINATION_LOG") or TERMINATION_LOG)
    if path.exists():
        path.write_text(json.dumps({"preflight": message})[:MESSAGE_LIMIT])


def check_gang(settings: Settings, torch: Any) -> tuple[list[Check], dict, list[Probe]]:
    """This rank's checks, the gang's verdict, and this rank's probes."""
    deadline = time.monotonic() + settings.timeout_s
    local = local_checks(settings, torch, deadline)
    if settings.nodes < 2:
        failed = [c for c in local if not c.ok]
        if failed:
            return (
                local,
                {"ok": False, "code": EXIT_RETRY, "suspects": {settings.node: str(failed[0])}, "problem": ""},
                [],
            )
        return local, {"ok": True, "code": 0, "suspects": {}, "problem": ""}, []
    store = torch.distributed.TCPStore(
        settings.master,
        settings.port,
        settings.nodes,
        settings.rank == 0,
        timeout=timedelta(seconds=settings.timeout_s),
        wait_for_workers=False,
    )
    gang = Gang(store, settings.rank, settings.nodes)
    ready = all(c.ok for c in local)
    if settings.rank != 0:
        gang.put(f"hello/{settings.rank}", {"node": settings.node, "checks": [c.__dict__ for c in local]})
        probes = follow(gang, settings, torch, store, deadline) if ready else []
        result = gang.get("verdict", deadline + 5)
        if result is not None:
            gang.put(f"read/{settings.rank}", True)
        lost = {
            "ok": False,
            "code": EXIT_RETRY,
            "suspects": {},
            "problem": f"no verdict from rank 0 ({settings.master})",
        }
        return local, result or lost, probes
    mine: list[list[Probe]] = []
    worker = threading.Thread(target=lambda: mine.append(follow(gang, settings, torch, store, deadline)), daemon=True)
    if ready:
        worker.start()
    result = coordinate(gang, settings, local, deadline)
    gang.put("verdict", result)
    worker.join(timeout=5)
    # the others read the verdict from rank 0's store: it serves until they have (or the time box)
    for rank in range(1, settings.nodes):
        gang.get(f"read/{rank}", min(deadline, time.monotonic() + 10))
    return local, result, mine[0] if mine else []


def run_check(env: dict[str, str]) -> int:
    """The check itself (a child process of `main`): one line, the termination message, the code."""
    settings = Settings.from_env(env)
    started = time.monotonic()
    # A hang anywhere (a store that never answers, a collective past its timeout) ends here: retried.
    guard = threading.Timer(settings.timeout_s + 30, _timed_out, args=(settings,))
    guard.daemon = True
    guard.start()
    import torch
    import torch.distributed  # noqa: F401 - the probes' process groups and the store

    local, result, probes = check_gang(settings, torch)
    guard.cancel()
    print(line(settings, local, result, probes, time.monotonic() - started), flush=True)
    if not result["ok"]:
        _terminate(result)
    return int(result["code"])


def _timed_out(settings: Settings) -> None:
    print(
        f"preflight rank {settings.rank}/{settings.nodes} node {settings.node}: FAILED: no verdict within "
        f"{settings.timeout_s:.0f}s (PREFLIGHT_TIMEOUT_SECONDS)",
        flush=True,
    )
    _terminate({"ok": False, "code": EXIT_RETRY, "suspects": {}, "problem": "timed out"})
    os._exit(EXIT_RETRY)


def main(argv: list[str], environ: dict[str, str] | None = None) -> int:
    """`preflight.py -- COMMAND...`: the check in a child process (whose sockets, the store on
    MASTER_PORT among them, close with it before torchrun binds the port), then COMMAND in this
    process's place with the pod's environment. `--check`: only the check."""
    env = dict(os.environ if environ is None else environ)
    if argv[:1] == ["--check"]:
        return run_check(env)
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    if env.get("HIGGSFIELD_PREFLIGHT", "").lower() == SKIP:
        print("preflight: skipped (HIGGSFIELD_PREFLIGHT=skip)", flush=True)
        return _run(command, env)
    if argv[:1] == ["--mpi"]:  # an MPIJob's launcher: every worker's node, through mpirun
        code = run_mpi_check(env)
        if code != 0:
            linger(env, recreate=True)
            return code
        return _run(command, env)
    if argv[:1] == ["--node"]:  # the node alone, no PyTorch (TFJob, XGBoostJob, JAXJob, PaddleJob)
        code = run_node_check(env)
        if code != 0:
            linger(env)  # its node named: served for the watchdog's re-check request, as the gang check does
            return code
        return _run(command, env)
    child_env = dict(env)
    if env.get("PREFLIGHT_NCCL_NETWORK") == "efa":  # NCCL's INFO log names the network it picked
        child_env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": NCCL_LOG})
    timeout = float(env.get("PREFLIGHT_TIMEOUT_SECONDS") or 300) + 60
    try:
        code = subprocess.run([sys.executable, os.path.abspath(__file__), "--check"], env=child_env, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"preflight: the check did not end within {timeout:.0f}s", flush=True)
        return EXIT_RETRY
    if code.returncode != 0:
        linger(env)
        return code.returncode if code.returncode > 0 else EXIT_RETRY  # killed by a signal: retried
    return _run(command, env)


LINGER_SECONDS = 120.0


def linger(env: dict[str, str], recreate: bool = False) -> None:
    """After a failure that named nodes, serve them as higgsfield_preflight_suspect on the progress
    port for PREFLIGHT_LINGER_SECONDS, so the watchdog learns them before the pod exits and the
    operator deletes it (its termination message goes with it), and the gate's taint is on the node
    before the recreated pod is placed: a scrape (kube-prometheus-stack's 30 s), a watchdog pass
    (components/job_watchdog.py CHECK_S, 30 s) and a gate poll for requests (health_gate.py
    RECHECK_POLL_SECONDS, 30 s) at their worst, and half a minute to spare."""
    port, seconds = env.get(PORT_ENV), float(env.get("PREFLIGHT_LINGER_SECONDS") or LINGER_SECONDS)
    path = Path(env.get("PREFLIGHT_TERMINATION_LOG") or TERMINATION_LOG)
    try:
        suspects = list(json.loads(path.read_text())["preflight"].get("suspects", {}))
    except (OSError, ValueError, KeyError):
        return
    if not (port and suspects and seconds > 0):
        return
    directory = Path(tempfile.mkdtemp(prefix="preflight-"))
    (directory / "preflight.prom").write_text(suspects_text([s for s in suspects if " " not in s], recreate))
    server = serve(directory, int(port))
    time.sleep(seconds)
    server.shutdown()


def _run(command: list[str], env: dict[str, str]) -> int:
    """Become the training command (its signals, its exit code), with the pod's own environment."""
    if not command:
        return 0
    os.execvpe(command[0], command, env)
    return 0  # pragma: no cover - exec does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
