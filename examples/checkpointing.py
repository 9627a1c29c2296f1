"""Checkpoints that survive a lost node: written to local NVMe, published to shared storage in the
background, complete only with a marker, the last N kept, a final one flushed on SIGTERM, and the
newest complete one loaded on start. Pure Python (no torch): examples/train_ddp.py plugs in
torch.distributed.checkpoint as the shard writer and reader; tests/offline/test_checkpointing.py runs it
with real files on CPU.

Layout on shared storage (FSx), one directory per job:

    step-000001200/                 a checkpoint: every rank's shard files, copied in by that rank
        .rank-00003.published       rank 3 has copied all its files (written after them)
        COMPLETE                    every rank has: written last, by rank 0, atomically
    step-000001300/                 no COMPLETE (a save cut short): never loaded, deleted later

`python checkpointing.py torchrun ...` is the rendered jobs' command (see `launch`): the kubelet's
SIGTERM reaches the workers directly, so a final checkpoint may take longer than torchrun's 30 s.
On EFA pools it first refuses a locked-memory limit NCCL cannot register memory under
(locked_memory_problem).

Every file lands by write-to-a-temporary-name + fsync + rename (POSIX rename is atomic within a
directory, also on Lustre), so a reader sees a whole file or none; COMPLETE is renamed into place
only after every rank's `.published` marker is there, so a checkpoint without it is never loaded.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

COMPLETE = "COMPLETE"
PREFIX = "step-"
# What a rank exits with after its final checkpoint on SIGTERM: 128 + SIGTERM, the code of a
# process ended by the signal. With restartPolicy ExitCode the Training Operator restarts codes
# 128-255 and fails the job on 1-127 (kubeflow/trainer: pkg/apis/kubeflow.org/v1/common_types.go,
# pkg/util/train/train_util.go IsRetryableExitCode@v1.9.4); the rendered PyTorch jobs use ExitCode.
EXIT_AFTER_SIGTERM = 128 + signal.SIGTERM
# What a rank exits with when a collective failed because a peer went away (a lost node, a
# drained peer's rank gone before the stop was agreed): torch.distributed raises DistError (C++
# c10::DistError in c10/util/Exception.h and its DistBackendError, DistNetworkError,
# DistStoreError) for NCCL, Gloo, network and store failures. Above 127, so ExitCode retries it;
# ours, not the 128 + N of a signal.
EXIT_PEER_LOST = 150
# What a rank's process ends with when NCCL's watchdog takes it down: 128 + SIGABRT. A collective that a
# lost peer never joins raises nothing in Python; it waits on the GPU until the watchdog times it out (or
# sees the peer's connection fail) and, with TORCH_NCCL_ASYNC_ERROR_HANDLING=3 (infra/offline/jobs.py),
# rethrows in its own thread, which aborts the process (WorkNCCL::handleException and ncclCommWatchdog,
# pytorch/pytorch:torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, read through the code search); the
# heartbeat monitor ends a stuck one the same way. `prefix_ranks` reports it, so the pod's code is a retry.
# Other signals (a segfault of the program) stay failures.
EXIT_TORN_DOWN = 128 + signal.SIGABRT
# torchrun exits 1 whenever a worker fails, whatever the worker's code (its elastic agent raises
# ChildFailedError). A worker that stops for a retryable reason writes its code here
# (`report_exit`) and `launch` passes it on as the container's exit code, so the operator sees 143
# or 150 (or EXIT_TORN_DOWN, above), not torchrun's 1.
EXIT_DIR_ENV = "HIGGSFIELD_EXIT_DIR"
# On EFA pools libfabric pins the memory NCCL registers, and the kernel counts it against
# RLIMIT_MEMLOCK for a process without CAP_IPC_LOCK, as every team pod is. The platform gives every
# container of an EFA node a limit (components/efa.py EFA_LOCKED_MEMORY_BYTES) and the rendered job
# passes it as MIN_LOCKED_MEMORY_BYTES (infra/offline/pods.py); below it registration fails and NCCL
# falls back to TCP sockets without an error, so the launcher refuses to start.
# Exit code then: 1-127, which the Training Operator's ExitCode restart policy treats as permanent.
EXIT_LOCKED_MEMORY = 3


def step_dir(root: Path, step: int) -> Path:
    return root / f"{PREFIX}{step:09d}"


def step_of(path: Path) -> int | None:
    name = path.name
    return int(name[len(PREFIX) :]) if name.startswith(PREFIX) and name[len(PREFIX) :].isdigit() else None


def checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Every checkpoint directory under `root`, oldest first (complete or not)."""
    if not root.is_dir():
        return []
    found = [(step, p) for p in root.iterdir() if p.is_dir() and (step := step_of(p)) is not None]
    return sorted(found)


def is_complete(path: Path) -> bool:
    return (path / COMPLETE).is_file()


def latest_complete(root: Path) -> tuple[int, Path] | None:
    """The newest checkpoint with its COMPLETE marker, or None (start from scratch)."""
    complete = [(step, p) for step, p in checkpoints(root) if is_complete(p)]
    return complete[-1] if complete else None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """`path` appears whole or not at all: written under a temporary name, synced, renamed."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def copy_atomically(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    with open(source, "rb") as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, 16 * 1024 * 1024)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, target)


class IncompleteCheckpoint(RuntimeError):
    """Not every rank published its shard in time: the checkpoint stays without its marker."""


@dataclass
class CheckpointStore:
    """One rank's view of a job's checkpoints: `local` is its node's NVMe, `shared` the job's
    directory on FSx (the same for every rank)."""

    local: Path
    shared: Path
    rank: int
    world_size: int
    keep_last: int
    wait_for_ranks_s: float = 600.0
    poll_s: float = 0.5

    def __post_init__(self) -> None:
        if self.keep_last < 1:
            raise ValueError(
                f"keep_last must be at least 1, got {self.keep_last}"
            )  # config rejects 0 too (checkpoints.keepLast)

    def local_dir(self, step: int) -> Path:
        """Where this rank writes its shard of `step` (a directory of its own: ranks of a node share the disk)."""
        path = step_dir(self.local, step) / f"rank-{self.rank:05d}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _marker(self, step: int, rank: int) -> Path:
        return step_dir(self.shared, step) / f".rank-{rank:05d}.published"

    def publish(self, step: int) -> Path:
        """Copy this rank's files of `step` to shared storage, then its marker; rank 0 then waits
        for every rank's marker, writes COMPLETE and prunes. Returns the shared directory."""
        target = step_dir(self.shared, step)
        target.mkdir(parents=True, exist_ok=True)
        source = step_dir(self.local, step) / f"rank-{self.rank:05d}"
        files = sorted(p for p in source.rglob("*") if p.is_file())
        for path in files:
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            copy_atomically(path, destination)
        _fsync_dir(target)
        write_atomically(
            self._marker(step, self.rank), json.dumps({"files": [str(p.relative_to(source)) for p in files]}).encode()
        )
        if self.rank == 0:
            self._complete(step)
            self.prune()
        self._drop_local_before(step)
        return target

    def _complete(self, step: int) -> None:
        deadline = time.monotonic() + self.wait_for_ranks_s
        missing = list(range(self.world_size))
        while True:
            missing = [r for r in missing if not self._marker(step, r).is_file()]
            if not missing:
                break
            if time.monotonic() > deadline:
                raise IncompleteCheckpoint(
                    f"step {step}: ranks {missing} did not publish within {self.wait_for_ranks_s:.0f}s; it will not "
                    "be loaded"
                )
            time.sleep(self.poll_s)
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        write_atomically(
            step_dir(self.shared, step) / COMPLETE,
            json.dumps({"step": step, "world_size": self.world_size, "completed": stamp}).encode(),
        )

    def prune(self) -> list[Path]:
        """Keep the newest `keep_last` complete checkpoints; delete older complete ones and any
        incomplete one older than the newest complete (a save that was cut short). Incomplete
        ones newer than that may still be in flight and are left alone."""
        found = checkpoints(self.shared)
        complete = [p for _, p in found if is_complete(p)]
        if not complete:
            return []
        newest = step_of(complete[-1]) or 0
        doomed = complete[: -self.keep_last] + [p for step, p in found if not is_complete(p) and step < newest]
        for path in doomed:
            # the marker goes first, so a half-deleted directory is never mistaken for a checkpoint
            (path / COMPLETE).unlink(missing_ok=True)
            shutil.rmtree(path, ignore_errors=True)
        return doomed

    def _drop_local_before(self, step: int) -> None:
        for older, path in checkpoints(self.local):
            if older < step:
                shutil.rmtree(path, ignore_errors=True)

    def wait_complete(self, step: int, timeout: float) -> bool:
        """Wait until `step` has its COMPLETE marker: after a final save every rank waits for it
        before exiting, because once one worker exits torchrun stops the others 30 s later."""
        deadline = time.monotonic() + timeout
        while not is_complete(step_dir(self.shared, step)):
            if time.monotonic() > deadline:
                return False
            time.sleep(self.poll_s)
        return True

    def resume_from(self) -> tuple[int, Path] | None:
        """What every rank loads on start: the newest complete checkpoint on shared storage."""
        return latest_complete(self.shared)


class BackgroundPublisher:
    """Publishes checkpoints on a thread while training goes on: one at a time, in order (a new
    one waits for the previous), errors kept for `wait` to raise."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.published: list[int] = []

    def submit(self, step: int) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(step,), name=f"publish-{step}", daemon=True)
        self._thread.start()

    def _run(self, step: int) -> None:
        try:
            self.store.publish(step)
            self.published.append(step)
        except BaseException as error:  # noqa: BLE001 - reported by wait()
            self.error = error

    def wait(self, timeout: float | None = None) -> bool:
        """True when nothing is in flight any more (False: still copying after `timeout`)."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
            self._thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return True


class StopRequest:
    """SIGTERM (the kubelet stopping the pod: a drain, a Capacity Block's end, a preemption)
    asks for a final checkpoint; `notice_at` (CHECKPOINT_NOTICE_AT, set on Capacity Block pools)
    asks for one checkpoint ahead of the drain. Ranks agree on both through `reduce` (an
    all-reduce MAX), so every rank saves at the same step."""

    def __init__(
        self, notice_at: datetime | None = None, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    ) -> None:
        self.signalled = threading.Event()
        self.notice_at, self._now = notice_at, now
        self.noticed = False
        self.since: float | None = None

    def install(self) -> StopRequest:
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.since = time.monotonic()
        self.signalled.set()

    def agree(self, reduce: Callable[[int], int] = lambda flag: flag) -> str | None:
        """`stop` (SIGTERM on any rank), `notice` (the notice time passed, once), or None."""
        local = (
            2
            if self.signalled.is_set()
            else 1
            if (self.notice_at is not None and not self.noticed and self._now() >= self.notice_at)
            else 0
        )
        agreed = reduce(local)
        if agreed == 2:
            return "stop"
        if agreed == 1:
            self.noticed = True
            return "notice"
        return None


def settings(environ: dict[str, str]) -> dict:
    """The checkpoint settings a rendered job passes (higgsfield:checkpoints, the pool's window)."""
    notice = environ.get("CHECKPOINT_NOTICE_AT")
    return {
        "local": Path(environ.get("CHECKPOINT_DIR", "/tmp/checkpoints")),
        "shared": Path(
            environ.get("CHECKPOINT_SHARED_DIR", environ.get("CHECKPOINT_DIR", "/tmp/checkpoints") + "-shared")
        ),
        "keep_last": int(environ.get("CHECKPOINT_KEEP_LAST", "3")),
        "every": int(environ.get("CHECKPOINT_EVERY_STEPS", "100")),
        "flush_s": float(environ.get("CHECKPOINT_FLUSH_SECONDS", "600")),
        "notice_at": datetime.fromisoformat(notice.replace("Z", "+00:00")) if notice else None,
    }


def children_of(pid: int) -> list[int]:
    """The direct children of `pid` (Linux /proc/PID/task/TID/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def report_exit(code: int, environ: dict[str, str] | None = None) -> int:
    """A worker's exit `code`, written to EXIT_DIR_ENV's directory (one file per local rank) when it
    is a retry (>= 128) so that `launch` can pass it on; returns `code`."""
    environ = dict(os.environ) if environ is None else environ
    directory = environ.get(EXIT_DIR_ENV)
    if code >= 128 and directory:
        write_atomically(Path(directory) / f"rank-{environ.get('LOCAL_RANK', '0')}", str(code).encode())
    return code


def pod_exit_code(launcher: int, signalled: bool, reported: list[int]) -> int:
    """The container's exit code from torchrun's code, whether this pod got SIGTERM, and the codes
    its workers reported: a stop or a lost peer is a retry (>= 128: 143, 150 or 134) for the operator's
    ExitCode policy; anything else (a bug's exit 1) stays below 128 and fails the job."""
    if launcher == 0:
        return 0
    if signalled:
        return EXIT_AFTER_SIGTERM
    retries = [code for code in reported if code >= 128]
    return max(retries) if retries else launcher


def reported_exits(directory: Path) -> list[int]:
    """The codes the workers wrote with `report_exit`."""
    codes = []
    for path in sorted(directory.glob("rank-*")) if directory.is_dir() else []:
        text = path.read_text().strip()
        if text.isdigit():
            codes.append(int(text))
    return codes


def locked_memory_problem(environ: dict[str, str] | os._Environ, limit: tuple[int, int] | None = None) -> str | None:
    """One line saying why NCCL over EFA cannot register memory here, or None: only where the job
    asks (MIN_LOCKED_MEMORY_BYTES), when the soft RLIMIT_MEMLOCK (`limit`, else this process's) is
    finite and below it."""
    wanted = int(environ.get("MIN_LOCKED_MEMORY_BYTES") or 0)
    if not wanted:
        return None
    soft, _ = limit if limit is not None else resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return None
    return (
        f"locked-memory limit (RLIMIT_MEMLOCK) is {soft} bytes, below the {wanted} the platform gives containers "
        "on EFA nodes: libfabric could not register memory and NCCL would fall back to TCP sockets; the node lacks "
        "the containerd baseRuntimeSpec rlimits of its NodeConfig (components/efa.py node_user_data)"
    )


def serve_progress() -> dict[str, str]:
    """With HIGGSFIELD_PROGRESS_PORT (the rendered job sets it), serve the ranks' progress files on
    it (progress.py, shipped next to this file) and tell the ranks where to write them."""
    port = os.environ.get("HIGGSFIELD_PROGRESS_PORT")
    if not port:
        return {}
    import progress

    directory = Path(tempfile.mkdtemp(prefix="higgsfield-progress-"))
    progress.serve(directory, int(port))
    return {progress.DIR_ENV: str(directory)}


def launch(argv: list[str], poll_s: float = 0.2) -> int:
    """Run the launcher `argv` (torchrun) as a child and, on SIGTERM, signal its workers instead
    of it: torchrun answers a SIGTERM by signalling the workers and killing them 30 s later
    (a fixed timeout until `--shutdown-timeout`, pytorch/pytorch#172596, 2026, newer than the
    image's PyTorch), which cuts a large model's final checkpoint short. The workers flush within
    the pod's grace period; once they are gone, torchrun gets the SIGTERM too (so an elastic agent
    does not restart them on a node that is going away). Returns the pod's exit code
    (`pod_exit_code`): a retry after a stop or a lost peer, torchrun's own code otherwise."""
    exits = Path(tempfile.mkdtemp(prefix="higgsfield-exit-"))
    child = subprocess.Popen(argv, env={**os.environ, EXIT_DIR_ENV: str(exits), **serve_progress()})
    signalled = threading.Event()

    def forward(signum, frame) -> None:
        signalled.set()
        workers = children_of(child.pid)
        for pid in workers:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

        def then_launcher() -> None:
            while any(_alive(pid) for pid in workers):
                time.sleep(poll_s)
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

        threading.Thread(target=then_launcher, daemon=True).start()

    signal.signal(signal.SIGTERM, forward)
    code = child.wait()
    try:
        return pod_exit_code(code, signalled.is_set(), reported_exits(exits))
    finally:
        shutil.rmtree(exits, ignore_errors=True)


RANK_PREFIX = "--rank-prefix"


def rank_tag(environ: dict[str, str] | os._Environ) -> str:
    """`[rank 3]`: the global rank torchrun gives each worker (RANK), else the pod's own (the
    operator's RANK, or the replica index of a job without torchrun)."""
    rank = environ.get("RANK") or environ.get("PET_NODE_RANK") or "?"
    return f"[rank {rank}]"


def prefix_ranks(argv: list[str]) -> int:
    """Run `argv` (one worker: `torchrun --no-python python checkpointing.py --rank-prefix python
    train.py`) with every line it writes to stdout and stderr prefixed with its rank, so a pod of
    eight ranks writes lines a reader (`higgsfield jobs logs`, a CloudWatch query for `[rank 3]`)
    can tell apart. SIGTERM goes on to the worker, whose exit code is this process's."""
    tag = rank_tag(os.environ).encode() + b" "
    # a Python worker writing to a pipe buffers its output in blocks: unbuffered, each line comes when written
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signal.SIGTERM))

    def copy(source, target) -> None:
        for line in iter(source.readline, b""):
            target.write(tag + line)
            target.flush()

    copies = [
        threading.Thread(target=copy, args=(child.stdout, sys.stdout.buffer), daemon=True),
        threading.Thread(target=copy, args=(child.stderr, sys.stderr.buffer), daemon=True),
    ]
    for thread in copies:
        thread.start()
    code = child.wait()
    for thread in copies:
        thread.join()
    if code == -signal.SIGABRT:  # NCCL's watchdog took it down: a retry, which torchrun's exit 1 would hide
        return report_exit(EXIT_TORN_DOWN)
    return code if code >= 0 else 128 - code  # a worker ended by a signal: 128 + N, as a shell reports it


if __name__ == "__main__":
    if sys.argv[1:2] == [RANK_PREFIX]:
        sys.exit(prefix_ranks(sys.argv[2:]))
    if problem := locked_memory_problem(os.environ):  # before torchrun, and so before NCCL starts
        print(f"checkpointing.py: {problem}", file=sys.stderr, flush=True)
        sys.exit(EXIT_LOCKED_MEMORY)
    sys.exit(launch(sys.argv[1:]))
