"""The TensorFlow training loop: each epoch's samples accounted for, and each batch split across replicas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from steps.train.frameworks.tensorflow.errors import DuplicateSamples  # noqa: E402
from steps.train.frameworks.tensorflow.trainer import account_epoch  # noqa: E402
from tests.support.tfrecords import write_shards  # noqa: E402

REPO = Path(__file__).resolve().parents[5]


def test_accounting_refuses_samples_served_twice():
    with pytest.raises(DuplicateSamples, match="epoch 2: 4 samples arrived, 3 distinct, 3 expected.*ShardedByS3Key"):
        account_epoch(2, [np.array([1, 2]), np.array([2, 3])], expected=3)


MIRRORED = textwrap.dedent("""
    import json, os, pathlib, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from steps.train.core.config import TrainConfig
    from steps.train.frameworks.tensorflow.dataset import training_dataset
    from steps.train.frameworks.tensorflow.checkpoint import Checkpoints
    from steps.train.frameworks.tensorflow.trainer import train_epochs
    from steps.train.workloads.shapes import Shapes

    class Source:
        samples_per_epoch = 40
        def dataset(self, epoch):
            return training_dataset(sys.argv[1:], workload, batch_size=8, seed=0, epoch=epoch)
        def check(self):
            pass

    workload = Shapes({"blur_passes": 0})
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = workload.build_keras_model(3)
        optimizer = workload.keras_optimizer(0.003)
    checkpoints = Checkpoints(pathlib.Path(sys.argv[1]).parent / "checkpoints")
    cfg = TrainConfig(epochs=2, batch_size=8, warmup_steps=1)
    stats, accounting, _ = train_epochs(cfg, workload, model, optimizer, Source(), strategy, checkpoints)
    assert checkpoints.saved_epoch == 2  # saved at each epoch end
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, "steps": stats.steps, "accounting": accounting}))
""")


@pytest.mark.e2e
def test_the_training_loop_splits_each_batch_across_replicas(tmp_path):
    files = write_shards(tmp_path, [list(range(0, 20)), list(range(20, 40))])
    run = subprocess.run(
        [sys.executable, "-c", MIRRORED, *map(str, files)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2 and result["steps"] == 10  # 40 samples / 8 per step, twice
    assert [(a["received"], a["distinct"], a["missing"]) for a in result["accounting"]] == [(40, 40, 0)] * 2
