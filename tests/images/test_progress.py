"""Training progress (images/training/progress.py): each rank's file, the pod's one endpoint that
Prometheus scrapes, and the rendered jobs that publish it."""

from __future__ import annotations

import urllib.request

import progress
import pytest

from infra.core.names import PROGRESS_PORT, PROGRESS_PORT_NAME
from infra.offline import jobs
from tests.conftest import plan_of


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
        assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
