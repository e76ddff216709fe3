"""The Ray path's training dataset: blocks of about one decoded batch (its local-node test: tests/e2e/ray/test_ray_dataset.py)."""

from steps.train.frameworks.ray.dataset import MIN_BLOCK_BYTES, block_bytes
from steps.train.workload import load_workload

SHAPES = "steps.train.workloads.shapes"


def test_a_block_holds_one_decoded_batch_and_one_mib_at_least():
    shapes = load_workload(SHAPES, {})  # 64 x 64 pixels, three channels
    assert block_bytes(shapes, batch_size=64) == MIN_BLOCK_BYTES  # 786,432 bytes of pixels: the floor
    assert block_bytes(shapes, batch_size=512) == 512 * 64 * 64 * 3

    class Large(type(shapes)):
        image_size = 224

    assert block_bytes(Large({}), batch_size=64) == 64 * 224 * 224 * 3
