"""The TensorFlow and XGBoost examples live through what the PyTorch ones do
(tests/components/test_rolling_update_jobs.py): a 16-node rolling update, each node drained in turn, and a
node that shuts down with no drain before it (the kubelet's graceful node shutdown marks its pods
Failed), replayed against the Training Operator's rules (tests/training_operator_rules.py); a
bug's exit 1 still fails the job at once. The PyTorch examples' node shutdown is replayed here too
(their drains: tests/components/test_rolling_update_jobs.py).

What each pod exits with is what the example's program returns for the event (tf_mnist.exit_code,
xgboost_iris.exit_code): SIGTERM ends a drained pod's process by the signal (143); the peers
of a lost or drained rank see their collective fail and exit EXIT_PEER_LOST.
"""

from __future__ import annotations

import sys

import pytest

from infra.offline import jobs
from tests.conftest import ROOT, plan_of
from tests.training_operator_rules import Job

sys.path.insert(0, str(ROOT / "examples"))
import checkpointing
import tf_mnist  # no TensorFlow needed: the program imports it in main
import xgboost_iris

NODES = 16
SIGTERM_EXIT = 143  # a process ended by SIGTERM: 128 + 15, as the container runtime reports it


class UnavailableError(Exception):
    """Stands in for tf.errors.UnavailableError: what MultiWorkerMirroredStrategy raises on every
    worker when a peer fails (tensorflow/tensorflow:tensorflow/python/distribute/integration_test/
    mwms_peer_failure_test.py, "All workers should get Unavailable error")."""


UnavailableError.__module__ = "tensorflow.python.framework.errors_impl"


class XGBoostError(Exception):
    """Stands in for xgboost.core.XGBoostError raised by the collective when a peer's socket closes."""


XGBoostError.__module__ = "xgboost.core"

PEER_LOST = {
    "PyTorchJob": checkpointing.pod_exit_code(1, False, [checkpointing.EXIT_PEER_LOST] * 8),
    "TFJob": tf_mnist.exit_code(UnavailableError("Socket closed")),
    "XGBoostJob": xgboost_iris.exit_code(XGBoostError("[rabit] Connection reset by peer: recv failed")),
}
BUG = {
    "TFJob": tf_mnist.exit_code(ValueError("Shapes (64, 10) and (64, 1) are incompatible")),
    "XGBoostJob": xgboost_iris.exit_code(XGBoostError("Invalid Parameter format for max_depth expect int")),
}


def _job(example: str) -> dict:
    cfg = plan_of("prod").config
    workers = NODES if example == "tf-mnist" else NODES - 1
    (job,) = [o for o in jobs.render(example, cfg, pool="h100", workers=workers) if o["kind"] in PEER_LOST]
    if example == "pytorch-elastic":  # grown to the whole pool
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = NODES
    return job


def drain(job: Job, key: tuple[str, int]) -> None:
    """The node of pod `key` is drained: its pod is evicted (deleted); the other ranks' collective
    fails and each exits with what its program returns for a lost peer."""
    for other in list(job.pods):
        if other != key:
            job.container_exits(other, PEER_LOST[job.kind])
    job.pod_deleted(key)
    job.reconcile()
    job.reconcile()  # the pods it deleted are created again


def shut_down(job: Job, key: tuple[str, int]) -> None:
    """The node of pod `key` shuts down with no drain before it (a reboot, a spot reclaim):
    graceful node shutdown ends its pod Failed with SIGTERM's exit; the others lose a peer."""
    for other in list(job.pods):
        if other != key:
            job.container_exits(other, PEER_LOST[job.kind])
    job.node_shuts_down(key, SIGTERM_EXIT)
    job.reconcile()
    job.reconcile()


@pytest.mark.parametrize("example", ["tf-mnist", "xgboost-iris"])
def test_a_16_node_rolling_update_leaves_the_job_running(example):
    job = Job.running(_job(example))
    assert len(job.pods) == NODES
    for key in sorted(job.pods):  # every pod's node, one after another (maxUnavailable 1)
        drain(job, key)
        assert job.failed is None, job.failed
    assert set(job.pods) == job.expected and all(p.phase == "Running" for p in job.pods.values())


@pytest.mark.parametrize("example", ["tf-mnist", "xgboost-iris", "pytorch-ddp", "pytorch-elastic"])
def test_a_node_that_shuts_down_without_a_drain_is_a_retry(example):
    job = Job.running(_job(example))
    for key in sorted(job.pods)[:2]:
        shut_down(job, key)
        assert job.failed is None, job.failed
    assert set(job.pods) == job.expected


@pytest.mark.parametrize("example", ["tf-mnist", "xgboost-iris"])
def test_a_bug_fails_the_job_at_its_first_exit(example):
    job = Job.running(_job(example))
    drain(job, sorted(job.pods)[3])  # an upgrade's drain first: still a retry
    assert job.failed is None
    key = sorted(job.pods)[5]
    job.container_exits(key, BUG[job.kind])
    job.reconcile()
    assert job.failed and f"{key[0]} {key[1]}" in job.failed


def test_peer_loss_and_a_stop_are_retries_and_a_bug_is_not():
    """The operator retries only codes >= 128 under ExitCode (IsRetryableExitCode,
    kubeflow/trainer:pkg/util/train/train_util.go@v1.9.4)."""
    assert all(code >= 128 for code in PEER_LOST.values())
    assert all(0 < code < 128 for code in BUG.values())
