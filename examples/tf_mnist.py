"""Multi-worker TensorFlow on a TFJob: MultiWorkerMirroredStrategy over the workers the Training
Operator lists in TF_CONFIG (kubeflow/trainer:pkg/controller.v1/tensorflow/tensorflow.go@v1.9.4
genTFConfigJSONStr), an MNIST-sized classifier on synthetic data, and BackupAndRestore so that a
gang restarted after a lost node resumes at the epoch it reached (CHECKPOINT_DIR: the team's FSx
directory when the stack has one, else the node's disk).
"""

from __future__ import annotations

import json
import os
import sys

import tensorflow as tf


def main() -> int:
    config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = len(config.get("cluster", {}).get("worker", [])) or 1
    batch = 64 * workers
    rng = tf.random.Generator.from_seed(1234)
    images = rng.normal((60_000, 28, 28))
    labels = tf.cast(rng.uniform((60_000,), maxval=10, dtype=tf.int32), tf.int64)
    data = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(10_000, seed=7).batch(batch).repeat()
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Input((28, 28)), tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(512, activation="relu"), tf.keras.layers.Dense(10),
        ])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    backup = os.path.join(os.environ.get("CHECKPOINT_DIR", "/tmp/tf-backup"), "backup")
    model.fit(data, epochs=int(os.environ.get("EPOCHS", "3")), steps_per_epoch=int(os.environ.get("STEPS", "200")),
              callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir=backup)], verbose=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
