"""The Ray path's training dataset: blocks of about one decoded batch (its local-node test: tests/e2e/ray/test_ray_dataset.py)."""

from types import SimpleNamespace

import pytest

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


def test_a_single_worker_takes_the_datasets_own_iterator_several_a_streaming_split():
    """A streaming split of one is a coordinator actor passing every block through: one worker iterates the dataset."""
    pytest.importorskip("ray")
    from steps.train.frameworks.ray.dataset import exact_split

    class Dataset:
        def __init__(self):
            self.context = SimpleNamespace(execution_options=None)

        def copy(self, ds):
            return Dataset()

        def iterator(self):
            return "its iterator"

        def streaming_split(self, n, *, equal, locality_hints):
            assert equal is False
            return [f"split {i} of {n}" for i in range(n)]

    config = exact_split()
    assert config.configure({"train": Dataset()}, 1, None, None) == [{"train": "its iterator"}]
    assert config.configure({"train": Dataset()}, 2, None, ["a", "b"]) == [{"train": "split 0 of 2"}, {"train": "split 1 of 2"}]
