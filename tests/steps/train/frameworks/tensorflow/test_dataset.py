"""The TensorFlow input pipeline: every sample once per epoch, a corrupt one skipped, and tf.data.service workers each
serving only their own shards."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from steps.train.frameworks.tensorflow.dataset import SERVE_PATTERN, training_dataset  # noqa: E402
from steps.train.frameworks.tensorflow.trainer import account_epoch  # noqa: E402
from steps.train.workloads.shapes import Shapes  # noqa: E402
from tests.support.tfrecords import collect_ids, write_shards  # noqa: E402


@pytest.mark.slow
def test_the_input_pipeline_serves_every_sample_once_and_skips_a_corrupt_one(tmp_path):
    files = write_shards(tmp_path, [list(range(0, 10)), list(range(10, 25))], corrupt=(7,))
    for epoch in (0, 1):
        ids = collect_ids(
            training_dataset([str(f) for f in files], Shapes({"blur_passes": 0}), batch_size=4, seed=0, epoch=epoch)
        )
        assert sorted(ids) == [i for i in range(25) if i != 7]
        assert account_epoch(epoch, [np.array(ids)], expected=25) == {
            "epoch": epoch,
            "expected": 25,
            "received": 24,
            "distinct": 24,
            "missing": 1,
        }


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
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, dispatcher.target.split("://")[1], str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for folder in folders
    ]
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
