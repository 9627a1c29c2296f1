"""Rank-prefixed logs end to end: the launcher (examples/checkpointing.py --rank-prefix) puts each
worker's rank in front of every line it writes, so `higgsfield jobs logs` and a CloudWatch query
for `[rank 3]` find one rank's lines; run for real, under torchrun with eight CPU ranks where
PyTorch is installed (HIGGSFIELD_TORCH_PYTHON), and alone without it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

from tests.conftest import ROOT, needs_torch, torch_python

LAUNCHER = str(ROOT / "examples" / "checkpointing.py")
WORKER = "import sys; print('loss 0.5'); print('warning: slow', file=sys.stderr); sys.exit(7)"


def test_every_line_a_worker_writes_carries_its_rank_and_its_exit_code_is_kept():
    done = subprocess.run(
        [sys.executable, LAUNCHER, "--rank-prefix", sys.executable, "-c", WORKER],
        env={**os.environ, "RANK": "3"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.stdout, done.stderr, done.returncode) == ("[rank 3] loss 0.5\n", "[rank 3] warning: slow\n", 7)


def test_sigterm_reaches_the_worker_behind_the_prefixer():
    worker = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); "
        "print('up', flush=True); time.sleep(30)"
    )
    proc = subprocess.Popen(
        [sys.executable, LAUNCHER, "--rank-prefix", sys.executable, "-c", worker],
        env={**os.environ, "RANK": "5"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "[rank 5] up\n"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143 and time.monotonic() - started < 10


@needs_torch
def test_a_pod_of_eight_torchrun_ranks_writes_each_line_with_its_rank():
    python = torch_python()
    done = subprocess.run(
        [
            python, LAUNCHER,  # the rendered job's command, with this machine's Python
            python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "8", "--no-python",
            python, LAUNCHER, "--rank-prefix",
            python, "-c", "import os; print('step 1 on local rank', os.environ['LOCAL_RANK'])",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = sorted(line for line in done.stdout.splitlines() if "step 1" in line)
    assert lines == [f"[rank {r}] step 1 on local rank {r}" for r in range(8)]


def test_every_pytorch_example_runs_each_worker_behind_the_rank_prefixer():
    from infra.offline import jobs
    from tests.conftest import config_of

    for example in ("pytorch-ddp", "pytorch-elastic"):
        for template in jobs.pod_templates(jobs.render(example, config_of("prod"), pool="h100")[-1]):
            command = template["spec"]["containers"][0]["command"]
            torchrun = command.index("torchrun")
            assert command[torchrun + 1 : torchrun + 5] == [
                "--no-python",
                "python",
                "/code/checkpointing.py",
                "--rank-prefix",
            ]


def test_a_python_workers_lines_come_through_as_written_not_when_its_buffer_fills():
    worker = "import time; print('first'); time.sleep(30)"
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as in a pod
    proc = subprocess.Popen(
        [sys.executable, LAUNCHER, "--rank-prefix", sys.executable, "-c", worker],
        env={**environ, "RANK": "1"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 10)  # long before the worker's exit, 30 s on
        assert ready and proc.stdout.readline() == "[rank 1] first\n"
    finally:
        proc.terminate()  # on to the worker
        proc.wait(timeout=10)
