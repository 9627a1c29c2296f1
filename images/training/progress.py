"""Training progress, published cheaply: each rank writes a few lines of Prometheus text to a file of
its own (`record`, at most once a second, atomically renamed), and one small HTTP server per pod
(`serve`, started by examples/checkpointing.py's launcher) serves every rank's file on the container
port named `progress`, which Prometheus scrapes (components/observability.py, job `training-progress`).
No Kubernetes API, no token, no extra process: a team pod needs no RBAC for it.

The series (per rank; Prometheus adds namespace, pod, the Kubeflow job's name and the node):
  higgsfield_training_step                       the last finished step
  higgsfield_training_step_seconds               that step's wall time
  higgsfield_training_compute_seconds            its forward pass alone: no collective, so a slow
                                                 rank shows here while every rank's step time is
                                                 the slowest one's (the all-reduce waits for it)
  higgsfield_training_progress_timestamp_seconds when it finished (Unix time)
  higgsfield_training_checkpoint_seconds_total   seconds the rank has been blocked in checkpoint saves
                                                 since it started (a counter: goodput's checkpoint phase)
  higgsfield_preflight_suspect{node}             1 for a node the pre-flight named (preflight.py)
The watchdog (images/training/job_watchdog.py) and the alerts read them.
"""

from __future__ import annotations

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DIR_ENV = "HIGGSFIELD_PROGRESS_DIR"
PORT_ENV = "HIGGSFIELD_PROGRESS_PORT"
PORT_NAME = "progress"
PREFIX = "higgsfield_training_"


class Progress:
    """One rank's progress file."""

    def __init__(self, directory: str | Path | None, rank: int, every_s: float = 1.0) -> None:
        self.path = Path(directory) / f"rank-{rank}.prom" if directory else None
        self.rank, self.every_s, self._last = rank, every_s, 0.0
        self.checkpoint_seconds = 0.0  # blocked in checkpoint saves since this rank started

    def blocked_on_checkpoint(self, seconds: float) -> str:
        """Count a save's blocking time (published with the next record, which is not skipped) and
        say it in the words infra/offline/goodput.py CHECKPOINT_NOTE reads from the log."""
        self.checkpoint_seconds += seconds
        self._last = 0.0
        return checkpoint_note(seconds, self.checkpoint_seconds)

    def record(self, step: int, step_seconds: float, compute_seconds: float, now: float | None = None) -> bool:
        """Write the rank's progress (skipped within `every_s` of the last write); True when written."""
        now = time.time() if now is None else now
        if self.path is None or now - self._last < self.every_s:
            return False
        label = f'{{rank="{self.rank}"}}'
        text = (
            f"{PREFIX}step{label} {step}\n"
            f"{PREFIX}step_seconds{label} {step_seconds:.6f}\n"
            f"{PREFIX}compute_seconds{label} {compute_seconds:.6f}\n"
            f"{PREFIX}progress_timestamp_seconds{label} {now:.3f}\n"
            f"{PREFIX}checkpoint_seconds_total{label} {self.checkpoint_seconds:.3f}\n"
        )
        partial = self.path.with_suffix(".tmp")
        partial.write_text(text)
        os.replace(partial, self.path)
        self._last = now
        return True


def checkpoint_note(blocked: float, total: float) -> str:
    """A save's line in the training log: this save's blocking time and the run's total so far."""
    return f"(blocked {blocked:.2f}s, {total:.2f}s in all)"


def from_env(rank: int) -> Progress:
    return Progress(os.environ.get(DIR_ENV), rank)


def suspects_text(nodes: list[str], recreate: bool = False) -> str:
    """The pre-flight's verdict as series: one per node it named. `recreate`: the job's pods on the
    node do not leave it by themselves (an MPIJob's workers: the launcher alone exits), so the
    watchdog deletes them for the operator to recreate elsewhere."""
    label = ',recreate="true"' if recreate else ""
    return "".join(f'higgsfield_preflight_suspect{{node="{n}"{label}}} 1\n' for n in nodes)


def exposition(directory: Path) -> str:
    """Every rank's file, with one TYPE line per metric (the text format wants each family once)."""
    lines = []
    for path in sorted(directory.glob("*.prom")):
        try:
            lines += path.read_text().splitlines()
        except OSError:
            continue
    names = sorted({line.split("{", 1)[0].split(" ", 1)[0] for line in lines if line and not line.startswith("#")})
    types = [f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}" for name in names]
    ordered = [line for name in names for line in lines if line.split("{", 1)[0].split(" ", 1)[0] == name]
    return "\n".join(types + ordered) + "\n"


def serve(directory: Path, port: int) -> ThreadingHTTPServer:
    """Serve `directory`'s progress files at /metrics on `port`, in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = exposition(directory).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
