"""The Ray Train loop's batches: what `TrainStep` gets from a Ray Data batch."""

from __future__ import annotations

import numpy as np
import torch

from steps.train.frameworks.ray.step import host_batch


def _ray_batch(ok: list[bool]) -> dict:
    rows = len(ok)
    batch = {
        "pixels": np.arange(rows * 2 * 2 * 3, dtype=np.uint8).reshape(rows, 2, 2, 3),
        "labels": np.arange(10, 10 + rows, dtype=np.int64),
        "ok": np.asarray(ok),
    }
    for array in batch.values():
        array.flags.writeable = False  # as Ray hands out views of its object store
    return batch


def test_a_batch_reaches_the_step_as_uint8_pixels_and_int64_labels_of_the_rows_that_decoded():
    batch = _ray_batch([True, False, True, True])
    pixels, labels = host_batch(batch, pinned=False)
    assert pixels.dtype == torch.uint8 and labels.dtype == torch.int64  # normalised on the device, by the step
    assert torch.equal(pixels, torch.from_numpy(batch["pixels"][[0, 2, 3]].copy()))
    assert labels.tolist() == [10, 12, 13]
    assert not pixels.is_pinned()  # a CPU trainer copies nothing to a device
    pixels[0, 0, 0, 0] = 255  # its own memory, not Ray's read-only block
    assert batch["pixels"][0, 0, 0, 0] == 0


def test_a_batch_of_which_nothing_decoded_is_empty():
    pixels, labels = host_batch(_ray_batch([False, False]), pinned=False)
    assert pixels.shape == (0, 2, 2, 3) and labels.shape == (0,)
