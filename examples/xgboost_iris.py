"""Distributed XGBoost on an XGBoostJob: the Master runs the collective's tracker and every pod
(Master rank 0, Workers 1..n) trains on its own shard of an Iris-like synthetic data set; the
trees are the same on every rank (gradient histograms are all-reduced), rank 0 saves the model.

The Training Operator sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK on every pod
(kubeflow/trainer:pkg/controller.v1/xgboost/xgboost.go@v1.9.4 SetPodEnv). xgboost's RabitTracker
and collective.CommunicatorContext (xgboost 3.2: xgboost/tracker.py, xgboost/collective.py) do the
rest. Runs on the GPU when there is one (device="cuda"), else on CPU. MODEL_DIR: where rank 0
writes model.json (the team's FSx directory when the stack has one).

How it ends tells the operator what to do (restartPolicy ExitCode, examples/xgboost-iris.yaml): a
retryable code (>= 128) recreates the pod, anything else fails the job (IsRetryableExitCode,
kubeflow/trainer:pkg/util/train/train_util.go@v1.9.4). A drain's SIGTERM ends the process by the
signal (143). The collective cannot take a rank back mid-training, so when a peer goes away
(drained, lost, its node shut down) the others' sockets fail and xgboost raises XGBoostError with
the socket's error in its message: such an error exits EXIT_PEER_LOST and the gang starts again;
any other error (a bad parameter, a bug) exits 1.
"""

from __future__ import annotations

import os
import sys

# The code examples/checkpointing.py uses for the same event: a retry for the operator.
EXIT_PEER_LOST = 150
# Words of the socket errors xgboost's collective reports when a peer or its connection is gone.
PEER_LOST_WORDS = ("socket", "connect", "recv", "send", "timed out", "timeout", "broken pipe", "peer")


def exit_code(error: BaseException) -> int:
    """EXIT_PEER_LOST for an XGBoostError about a lost peer's socket, 1 for anything else."""
    kind = type(error)
    lost = (
        kind.__name__ == "XGBoostError"
        and kind.__module__.startswith("xgboost")
        and any(word in str(error).lower() for word in PEER_LOST_WORDS)
    )
    return EXIT_PEER_LOST if lost else 1


def shard(rank: int, world: int, rows: int = 3000, seed: int = 7):
    """Three Gaussian classes in four features (Iris-sized problem), this rank's rows of them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, rows)
    features = rng.normal(size=(rows, 4)) + labels[:, None] * np.array([1.5, -1.0, 2.0, 0.5])
    return features[rank::world], labels[rank::world]


def train(rank: int, world: int, tracker_host: str, tracker_port: int, device: str, rounds: int = 20):
    import xgboost as xgb
    from xgboost import collective

    with collective.CommunicatorContext(
        dmlc_communicator="rabit", dmlc_tracker_uri=tracker_host, dmlc_tracker_port=tracker_port, dmlc_task_id=str(rank)
    ):
        features, labels = shard(rank, world)
        dtrain = xgb.DMatrix(features, label=labels)
        params = {"objective": "multi:softmax", "num_class": 3, "tree_method": "hist", "device": device, "max_depth": 4}
        booster = xgb.train(params, dtrain, num_boost_round=rounds, evals=[(dtrain, f"rank{rank}")], verbose_eval=5)
        accuracy = float((booster.predict(dtrain) == labels).mean())
        collective.communicator_print(f"rank {rank}/{world}: training accuracy {accuracy:.3f}\n")
        return booster


def run() -> int:
    from xgboost.tracker import RabitTracker

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    tracker = None
    if rank == 0:  # the Master pod hosts the tracker on the port the operator opened
        tracker = RabitTracker(n_workers=world, host_ip="0.0.0.0", port=port)
        tracker.start()
    device = "cuda" if os.environ.get("NVIDIA_VISIBLE_DEVICES", "void") not in ("", "void", "none") else "cpu"
    booster = train(rank, world, "localhost" if rank == 0 else host, port, device)
    if rank == 0:
        model_dir = os.environ.get("MODEL_DIR", "/tmp")
        os.makedirs(model_dir, exist_ok=True)
        booster.save_model(os.path.join(model_dir, "model.json"))
        tracker.wait_for()
    return 0


def main() -> int:
    try:
        return run()
    except Exception as error:  # noqa: BLE001 - classified and reported: the code says retry or fail
        print(f"xgboost_iris: {type(error).__name__}: {error}", file=sys.stderr)
        return exit_code(error)


if __name__ == "__main__":
    sys.exit(main())
