"""The TensorFlow path's parts: decode, models, the input pipeline, tf.data.service workers, accounting."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

tf = pytest.importorskip("tensorflow")

from steps.shard.tfrecord import write_tfrecord_shard  # noqa: E402
from steps.train.frameworks.tensorflow.dataset import SERVE_PATTERN, training_dataset  # noqa: E402
from steps.train.frameworks.tensorflow.errors import DuplicateSamples  # noqa: E402
from steps.train.frameworks.tensorflow.trainer import _account  # noqa: E402
from steps.train.workloads.shapes import Shapes  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def jpeg(seed: int, size: int = 40) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG")
    return buffer.getvalue()


def write_shards(folder: Path, ids: list[list[int]], corrupt: tuple[int, ...] = ()) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, shard_ids in enumerate(ids):
        path = folder / f"train-{index:05d}.tfrecord"
        write_tfrecord_shard(path, [(i, i % 3, "jpg", b"not a jpeg" if i in corrupt else jpeg(i)) for i in shard_ids])
        paths.append(path)
    return paths


def collect_ids(dataset) -> list[int]:
    return [int(i) for batch in dataset for i in batch["ids"].numpy()]


def test_tf_decode_gives_uint8_images_of_the_workload_size_reproducibly():
    workload = Shapes({"blur_passes": 2})
    raw = tf.constant(jpeg(1, size=57))
    seed = tf.constant([3, 4], tf.int64)
    a = workload.tf_decode(raw, train=True, seed=seed)
    b = workload.tf_decode(raw, train=True, seed=seed)
    assert a.dtype == tf.uint8 and a.shape == (64, 64, 3)
    assert np.array_equal(a.numpy(), b.numpy())  # stateless: the same seed, the same augmentation
    assert not np.array_equal(a.numpy(), workload.tf_decode(raw, train=True, seed=tf.constant([5, 6], tf.int64)).numpy())
    assert workload.tf_decode(raw, train=False, seed=seed).shape == (64, 64, 3)


def test_keras_small_cnn_is_the_twin_of_the_torch_one_and_resnet50_is_selectable():
    small = Shapes({}).build_keras_model(8)
    trainable = sum(int(np.prod(w.shape)) for w in small.trainable_weights)
    assert trainable == 61_208  # the torch small_cnn's parameter count for 8 classes
    assert small(tf.zeros((2, 64, 64, 3))).shape == (2, 8)
    resnet = Shapes({"model": "resnet50"}).build_keras_model(8)
    assert resnet.name == "resnet50" and 23_000_000 < resnet.count_params() < 24_000_000


def test_the_input_pipeline_serves_every_sample_once_and_skips_a_corrupt_one(tmp_path):
    files = write_shards(tmp_path, [list(range(0, 10)), list(range(10, 25))], corrupt=(7,))
    for epoch in (0, 1):
        ids = collect_ids(training_dataset([str(f) for f in files], Shapes({"blur_passes": 0}), batch_size=4, seed=0, epoch=epoch))
        assert sorted(ids) == [i for i in range(25) if i != 7]
        assert _account(epoch, [np.array(ids)], expected=25) == {
            "epoch": epoch, "expected": 25, "received": 24, "distinct": 24, "missing": 1}


def test_accounting_refuses_samples_served_twice():
    with pytest.raises(DuplicateSamples, match="epoch 2: 4 samples arrived, 3 distinct, 3 expected.*ShardedByS3Key"):
        _account(2, [np.array([1, 2]), np.array([2, 3])], expected=3)


WORKER = textwrap.dedent("""
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf
    service = tf.data.experimental.service
    os.chdir(sys.argv[2])  # the serving directory: the dataset's relative pattern resolves here
    worker = service.WorkerServer(service.WorkerConfig(dispatcher_address=sys.argv[1], worker_address="127.0.0.1:%port%", port=0))
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes stdin
    worker.stop()
""")


@pytest.mark.e2e
def test_tf_data_service_workers_each_serve_only_their_own_shards_exactly_once_per_epoch(tmp_path):
    hosts = 2
    shares = [[list(range(h * 100 + s * 10, h * 100 + s * 10 + 10)) for s in range(2)] for h in range(hosts)]
    folders = [tmp_path / f"host-{h}" for h in range(hosts)]
    for folder, share in zip(folders, shares):
        write_shards(folder, share)
    expected = sorted(i for share in shares for shard in share for i in shard)
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, dispatcher.target.split("://")[1], str(folder)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for folder in folders]
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"
        for epoch in range(2):
            dataset = training_dataset(SERVE_PATTERN, Shapes({"blur_passes": 0}), batch_size=8, seed=0, epoch=epoch)
            distributed = dataset.apply(service.distribute(processing_mode=service.ShardingPolicy.OFF, service=dispatcher.target))
            assert sorted(collect_ids(distributed)) == expected  # each once: no sample missing, none twice
    finally:
        for worker in workers:
            worker.stdin.close()
        for worker in workers:
            worker.wait(timeout=30)
        dispatcher.stop()
    assert all(worker.returncode == 0 for worker in workers)


MIRRORED = textwrap.dedent("""
    import json, os, pathlib, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from steps.train.core.config import TrainConfig
    from steps.train.frameworks.tensorflow.dataset import training_dataset
    from steps.train.frameworks.tensorflow.checkpoint import TfCheckpoints
    from steps.train.frameworks.tensorflow.trainer import _train
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
    checkpoints = TfCheckpoints(pathlib.Path(sys.argv[1]).parent / "checkpoints")
    stats, accounting, _ = _train(TrainConfig(epochs=2, batch_size=8, warmup_steps=1), workload, model, optimizer, Source(), strategy,
                                  checkpoints)
    assert checkpoints.saved_epoch == 2  # saved at each epoch end
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, "steps": stats.steps, "accounting": accounting}))
""")


@pytest.mark.e2e
def test_the_training_loop_splits_each_batch_across_replicas(tmp_path):
    files = write_shards(tmp_path, [list(range(0, 20)), list(range(20, 40))])
    run = subprocess.run([sys.executable, "-c", MIRRORED, *map(str, files)], capture_output=True, text=True, timeout=300,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2 and result["steps"] == 10  # 40 samples / 8 per step, twice
    assert [(a["received"], a["distinct"], a["missing"]) for a in result["accounting"]] == [(40, 40, 0)] * 2


def test_isolated_costs_leave_the_trained_model_untouched(tmp_path):
    from steps.train.core.config import TrainConfig
    from steps.train.frameworks.tensorflow.costs import tf_isolated_costs

    files = [str(f) for f in write_shards(tmp_path, [list(range(0, 20))])]
    workload = Shapes({"blur_passes": 0})
    model = workload.build_keras_model(3)
    before = [w.copy() for w in model.get_weights()]
    costs = tf_isolated_costs(TrainConfig(batch_size=4), workload, model, tf.distribute.get_strategy(), files, batches=3)
    assert costs["batches"] == 3 and costs["batch_size"] == 4 and costs["device"] == "cpu"
    assert 0 < costs["decode_s_per_batch"] <= costs["decode_s_per_batch_median"]
    assert 0 < costs["step_s_per_batch"] <= costs["step_s_per_batch_median"]
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    assert tf_isolated_costs(TrainConfig(batch_size=4), workload, model, tf.distribute.get_strategy(), []) is None
