"""Multi-worker TensorFlow on a TFJob: MultiWorkerMirroredStrategy over the workers the Training
Operator lists in TF_CONFIG (kubeflow/trainer:pkg/controller.v1/tensorflow/tensorflow.go@v1.9.4
genTFConfigJSONStr), an MNIST-sized classifier on synthetic data, and BackupAndRestore so that a
gang restarted after a lost node resumes at the epoch it reached (CHECKPOINT_DIR: the team's FSx
directory when the stack has one, else the node's disk).

How it ends tells the operator what to do (restartPolicy ExitCode, examples/tf-mnist.yaml): a
retryable code (>= 128) recreates the pod, anything else fails the job (IsRetryableExitCode,
kubeflow/trainer:pkg/util/train/train_util.go@v1.9.4). A drain's SIGTERM ends the process by the
signal (143); when a peer goes away (drained, lost, its node shut down) every other worker's
collective fails with one of PEER_LOST_ERRORS (tensorflow/tensorflow:tensorflow/python/distribute/
integration_test/mwms_peer_failure_test.py: "All workers should get Unavailable error"), and the
worker exits EXIT_PEER_LOST; any other exception is a bug: exit 1.
"""

from __future__ import annotations

import json
import os
import sys

# The code examples/checkpointing.py uses for the same event: a retry for the operator.
EXIT_PEER_LOST = 150
# tf.errors classes a collective raises when a peer or its connection is gone.
PEER_LOST_ERRORS = ("UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError")


def exit_code(error: BaseException) -> int:
    """EXIT_PEER_LOST for TensorFlow's errors of a lost peer, 1 for anything else."""
    lost = type(error).__name__ in PEER_LOST_ERRORS and type(error).__module__.startswith("tensorflow")
    return EXIT_PEER_LOST if lost else 1


def train() -> int:
    import tensorflow as tf

    config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = len(config.get("cluster", {}).get("worker", [])) or 1
    batch = 64 * workers
    rng = tf.random.Generator.from_seed(1234)
    images = rng.normal((60_000, 28, 28))
    labels = tf.cast(rng.uniform((60_000,), maxval=10, dtype=tf.int32), tf.int64)
    data = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(10_000, seed=7).batch(batch).repeat()
    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Input((28, 28)),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(512, activation="relu"),
                tf.keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    backup = os.path.join(os.environ.get("CHECKPOINT_DIR", "/tmp/tf-backup"), "backup")
    model.fit(
        data,
        epochs=int(os.environ.get("EPOCHS", "3")),
        steps_per_epoch=int(os.environ.get("STEPS", "200")),
        callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir=backup)],
        verbose=2,
    )
    return 0


def main() -> int:
    try:
        return train()
    except Exception as error:  # noqa: BLE001 - classified and reported: the code says retry or fail
        print(f"tf_mnist: {type(error).__name__}: {error}", file=sys.stderr)
        return exit_code(error)


if __name__ == "__main__":
    sys.exit(main())
