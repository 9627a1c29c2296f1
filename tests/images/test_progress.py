"""Training progress (images/training/progress.py): each rank's file, the pod's one endpoint that
Prometheus scrapes, and the rendered jobs that publish it."""

from __future__ import annotations

import urllib.request

import progress
import pytest

from infra.core.names import PROGRESS_PORT, PROGRESS_PORT_NAME
from infra.offline import jobs
from tests.conftest import needs_torch, plan_of, torch_python


def test_a_rank_writes_its_step_and_times_at_most_once_a_second(tmp_path):
    rank = progress.Progress(tmp_path, 3)
    assert rank.record(10, 0.5, 0.2, now=100.0)
    assert not rank.record(11, 0.5, 0.2, now=100.4)  # within the second: skipped, no file write
    text = (tmp_path / "rank-3.prom").read_text()
    assert 'higgsfield_training_step{rank="3"} 10\n' in text
    assert 'higgsfield_training_progress_timestamp_seconds{rank="3"} 100.000' in text


def test_without_a_directory_nothing_is_written():
    assert not progress.Progress(None, 0).record(1, 1.0, 1.0)


def test_the_pod_serves_every_ranks_progress_with_one_type_line_per_metric(tmp_path):
    for rank in range(2):
        progress.Progress(tmp_path, rank).record(rank + 5, 1.0, 0.5, now=200.0)
    server = progress.serve(tmp_path, 0)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics").read().decode()
    finally:
        server.shutdown()
    assert body.count("# TYPE higgsfield_training_step gauge") == 1
    assert 'higgsfield_training_step{rank="0"} 5' in body and 'higgsfield_training_step{rank="1"} 6' in body
    families = [line.split("{")[0] for line in body.splitlines() if not line.startswith("#")]
    assert families == sorted(families)  # each family's samples together, as the text format wants


@pytest.mark.parametrize("example", ["pytorch-ddp", "pytorch-elastic"])
def test_every_rendered_pytorch_pod_publishes_progress_on_its_named_port(example):
    objects = jobs.render(example, plan_of("prod").config, pool="h100")
    for template in jobs.pod_templates(jobs.workload_of(objects)):
        container = template["spec"]["containers"][0]
        assert {"name": PROGRESS_PORT_NAME, "containerPort": PROGRESS_PORT, "protocol": "TCP"} in container["ports"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HIGGSFIELD_PROGRESS_PORT"] == str(PROGRESS_PORT)
        assert int(env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]) > int(env["HIGGSFIELD_COLLECTIVE_TIMEOUT_SECONDS"])
        assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"  # SkipCleanUp: no ncclCommAbort to hang in


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int, wanted: str, seconds: float = 20.0) -> str:
    import time

    deadline, body = time.monotonic() + seconds, ""
    while time.monotonic() < deadline:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            if wanted in body:
                return body
        except OSError:
            pass
        time.sleep(0.2)
    return body


def test_the_jobs_launcher_serves_its_ranks_progress_on_the_port(tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    port = _free_port()
    rank = "import progress, time; progress.from_env(0).record(7, 0.3, 0.1); time.sleep(10)"
    env = {**os.environ, "HIGGSFIELD_PROGRESS_PORT": str(port), "PYTHONPATH": str(ROOT / "images" / "training")}
    launcher = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "checkpointing.py"), sys.executable, "-c", rank], env=env
    )
    try:
        assert 'higgsfield_training_step{rank="0"} 7' in _scrape(port, "higgsfield_training_step{")
    finally:
        launcher.kill()
        launcher.wait()


def test_a_failed_preflight_serves_its_suspects_before_the_pod_exits(tmp_path):
    import json
    import threading

    import preflight

    port = _free_port()
    log = tmp_path / "termination-log"
    log.write_text(json.dumps({"preflight": {"ok": False, "code": 151, "suspects": {"node-7": "slow"}}}))
    env = {
        "HIGGSFIELD_PROGRESS_PORT": str(port),
        "PREFLIGHT_LINGER_SECONDS": "1.5",
        "PREFLIGHT_TERMINATION_LOG": str(log),
    }
    lingering = threading.Thread(target=preflight.linger, args=(env,))
    lingering.start()
    try:
        assert 'higgsfield_preflight_suspect{node="node-7"} 1' in _scrape(port, "suspect", 3)
    finally:
        lingering.join()


def test_a_ranks_checkpoint_stalls_add_up_and_reach_its_next_record_at_once(tmp_path):
    rank = progress.Progress(tmp_path, 0)
    assert rank.record(1, 0.5, 0.2, now=100.0)
    assert rank.blocked_on_checkpoint(2.5) == "(blocked 2.50s, 2.50s in all)"
    rank.blocked_on_checkpoint(1.0)
    assert rank.record(2, 0.5, 0.2, now=100.1)  # within the second, written anyway: a save was counted
    assert 'higgsfield_training_checkpoint_seconds_total{rank="0"} 3.500' in (tmp_path / "rank-0.prom").read_text()


def test_the_checkpoint_counter_is_served_as_a_counter(tmp_path):
    progress.Progress(tmp_path, 0).record(1, 0.5, 0.2, now=100.0)
    assert "# TYPE higgsfield_training_checkpoint_seconds_total counter" in progress.exposition(tmp_path)


@needs_torch
def test_train_ddp_publishes_the_time_its_ranks_were_blocked_in_checkpoint_saves(tmp_path):
    """Two gloo ranks of examples/train_ddp.py checkpointing every 4 steps: each rank's counter is
    above zero, and rank 0's save lines give goodput the run's total (infra/offline/goodput.py)."""
    import os
    import subprocess

    from infra.offline.goodput import CHECKPOINT_NOTE
    from tests.conftest import ROOT

    env = {
        **os.environ,
        "CHECKPOINT_DIR": str(tmp_path / "nvme"),
        "CHECKPOINT_SHARED_DIR": str(tmp_path / "fsx"),
        "CHECKPOINT_EVERY_STEPS": "4",
        "STEPS": "12",
        "OMP_NUM_THREADS": "1",
        "HIGGSFIELD_PROGRESS_DIR": str(tmp_path / "progress"),
        "PYTHONPATH": str(ROOT / "images" / "training"),
    }
    (tmp_path / "progress").mkdir()
    run = subprocess.run(
        [
            torch_python(),
            "-m",
            "torch.distributed.run",
            "--standalone",  # a free rendezvous port of its own: other tests run torchrun beside it
            "--nproc-per-node",
            "2",
            str(ROOT / "examples" / "train_ddp.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    totals = [float(m.group(1)) for m in CHECKPOINT_NOTE.finditer(run.stdout)]
    assert len(totals) == 3 and totals == sorted(totals) and totals[-1] > 0
    for rank in range(2):
        text = (tmp_path / "progress" / f"rank-{rank}.prom").read_text()
        counted = [
            line for line in text.splitlines() if line.startswith("higgsfield_training_checkpoint_seconds_total")
        ]
        assert counted and float(counted[0].split()[-1]) > 0


def test_every_series_a_pod_publishes_is_one_the_progress_scrape_keeps(tmp_path):
    """The scrape keeps only components/workloads.py PROGRESS_SERIES: a series progress.py adds must be listed."""
    import re

    from components.observability import training_progress_scrape_job

    progress.Progress(tmp_path, 0).record(1, 1.0, 0.5, now=100.0)
    (tmp_path / "suspects.prom").write_text(progress.suspects_text(["ip-10-0-0-1"]))
    names = {
        line.split("{", 1)[0].split(" ", 1)[0]
        for line in progress.exposition(tmp_path).splitlines()
        if line and not line.startswith("#")
    }
    keep = training_progress_scrape_job()["metric_relabel_configs"][0]
    assert "higgsfield_preflight_suspect" in names and len(names) == 6
    assert all(re.fullmatch(keep["regex"], name) for name in names), names
