"""The Ray path's training dataset: blocks of about one decoded batch, so a shard is decoded by many tasks."""

import io
import logging

import numpy as np
import pytest
from PIL import Image

from steps.formats.webdataset import write_shard
from steps.train.frameworks.ray.dataset import MIN_BLOCK_BYTES, block_bytes, training_dataset
from steps.train.workload import load_workload

SHAPES = "steps.train.workloads.shapes"


def test_a_block_holds_one_decoded_batch_and_one_mib_at_least():
    shapes = load_workload(SHAPES, {})  # 64 x 64 pixels, three channels
    assert block_bytes(shapes, batch_size=64) == MIN_BLOCK_BYTES  # 786,432 bytes of pixels: the floor
    assert block_bytes(shapes, batch_size=512) == 512 * 64 * 64 * 3

    class Large(type(shapes)):
        image_size = 224

    assert block_bytes(Large({}), batch_size=64) == 64 * 224 * 224 * 3


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
        ds = training_dataset([str(shard)], SHAPES, {"blur_passes": 0}, batch_size=64).materialize()
        ids = [int(i) for batch in ds.iter_batches(batch_size=64, batch_format="numpy") for i in batch["ids"]]
        assert ds.num_blocks() > 1
    finally:
        ray.shutdown()
    assert sorted(ids) == list(range(300))
