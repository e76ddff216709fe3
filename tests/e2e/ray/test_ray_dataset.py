"""The Ray path's training dataset on a local Ray node: a shard streams out in blocks of about one decoded batch, each
decoded by a task of its own."""

import io
import logging

import numpy as np
import pytest
from PIL import Image

from steps.formats.webdataset import write_shard
from steps.train.frameworks.ray.dataset import training_dataset

SHAPES = "steps.train.workloads.shapes"


@pytest.mark.slow
@pytest.mark.e2e  # a local Ray node
def test_one_shard_is_decoded_in_many_blocks_and_every_sample_arrives_once(tmp_path):
    """One 3.7 MB shard of 300 samples: with Ray's default (128 MB blocks) it was one block, decoded by one task."""
    ray = pytest.importorskip("ray")
    noise = np.random.default_rng(0)

    def png() -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(noise.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buffer, format="PNG")
        return buffer.getvalue()

    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(i, i % 2, "png", png()) for i in range(300)])
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, configure_logging=False)
    try:
        ds = training_dataset([str(shard)], SHAPES, {"blur_passes": 0}, batch_size=64, stream=True).materialize()
        ids = [int(i) for batch in ds.iter_batches(batch_size=64, batch_format="numpy") for i in batch["ids"]]
        assert ds.num_blocks() > 1
    finally:
        ray.shutdown()
    assert sorted(ids) == list(range(300))
