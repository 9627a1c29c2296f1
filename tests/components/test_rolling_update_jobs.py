"""Training jobs that live through a rolling update: a 16-node job rendered for prod, each of its
nodes drained in turn (and then two lost), replayed against the Training Operator's restart rules
(tests/training_operator_rules.py), stays un-Failed; a bug's exit 1 still fails it at once."""

from __future__ import annotations

import sys
import textwrap

import pytest

from infra.offline import jobs
from tests.conftest import ROOT, plan_of
from tests.training_operator_rules import Job

sys.path.insert(0, str(ROOT / "examples"))
import checkpointing

PYTORCH = ("pytorch-ddp", "pytorch-elastic")
NODES = 16
GPUS = 8  # local ranks per pod on p5.48xlarge


def _job(example: str = "pytorch-ddp") -> dict:
    cfg = plan_of("prod").config
    workers = NODES - 1 if example == "pytorch-ddp" else NODES
    (job,) = [o for o in jobs.render(example, cfg, pool="h100", workers=workers) if o["kind"] == "PyTorchJob"]
    if example == "pytorch-elastic":  # the HPA has grown it to the whole pool
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = NODES
    return job


def _pod_code(signalled: bool, worker_code: int) -> int:
    """A pod's exit code when each of its workers returned `worker_code` through report_exit and
    torchrun, as it does for any failed worker, exited 1."""
    return checkpointing.pod_exit_code(1, signalled, [worker_code] * GPUS)


def drain(job: Job, key: tuple[str, int]) -> None:
    """EKS drains the node of pod `key`: its pod is evicted (SIGTERM, final checkpoint); the
    other ranks agree on the stop, save the same step and exit EXIT_AFTER_SIGTERM."""
    for other in list(job.pods):
        if other != key:
            job.container_exits(other, _pod_code(False, checkpointing.EXIT_AFTER_SIGTERM))
    job.pod_deleted(key)
    job.reconcile()
    job.reconcile()  # the pods it deleted are created again


def lose(job: Job, key: tuple[str, int]) -> None:
    """The node of pod `key` disappears: the others end as a lost peer's (NCCL's watchdog tears them down, 134; gloo
    raises DistError, 150), both retried by the ExitCode policy."""
    for other in list(job.pods):
        if other != key:
            job.container_exits(other, _pod_code(False, checkpointing.EXIT_TORN_DOWN))
    job.pod_deleted(key)
    job.reconcile()
    job.reconcile()


@pytest.mark.parametrize("example", PYTORCH)
def test_a_16_node_rolling_update_and_two_lost_nodes_leave_the_job_running(example):
    job = Job.running(_job(example))
    assert len(job.pods) == NODES
    for key in sorted(job.pods):  # every node of the gang, one after another (maxUnavailable 1)
        drain(job, key)
        assert job.failed is None, job.failed
    for key in sorted(job.pods)[:2]:
        lose(job, key)
    assert job.failed is None and set(job.pods) == job.expected
    assert all(p.phase == "Running" and p.restarts == 0 for p in job.pods.values())


def test_the_same_rolling_update_fails_a_job_whose_containers_restart_in_place():
    """Why the rendered jobs are not OnFailure: every rank's in-place restart counts."""
    rendered = _job()
    for replica in rendered["spec"]["pytorchReplicaSpecs"].values():
        replica["restartPolicy"] = "OnFailure"
    job = Job.running(rendered)
    drained = 0
    for key in sorted(job.pods):
        drain(job, key)
        drained += 1
        if job.failed:
            break
    assert job.failed == "reached the backoff limit" and drained < NODES


def test_a_bug_fails_the_job_at_its_first_exit():
    job = Job.running(_job())
    drain(job, ("Worker", 3))  # an upgrade's drain first: still a retry
    assert job.failed is None
    job.container_exits(("Worker", 7), _pod_code(False, 1))  # a rank's exception: exit 1, nothing reported
    job.reconcile()
    assert job.failed == "Worker 7 exited 1, not retryable"


def _run_launcher(tmp_path, worker: str) -> int:
    script = tmp_path / "worker.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "examples")!r})
        from checkpointing import report_exit
        {worker}
        sys.exit(1)  # torchrun's exit whenever a worker failed
    """)
    )
    return checkpointing.launch([sys.executable, str(script)])


def test_the_launcher_passes_a_workers_final_checkpoint_exit_on_as_the_pods(tmp_path):
    assert _run_launcher(tmp_path, "report_exit(143)") == checkpointing.EXIT_AFTER_SIGTERM


def test_the_launcher_passes_a_lost_peer_on_as_a_retry_and_a_bug_as_a_failure(tmp_path):
    assert _run_launcher(tmp_path, "report_exit(150)") == checkpointing.EXIT_PEER_LOST >= 128
    assert _run_launcher(tmp_path, "report_exit(1)") == 1
