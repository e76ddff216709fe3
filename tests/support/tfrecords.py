"""TFRecord shards of small real JPEGs for the TensorFlow path's tests, and the sample ids a dataset yields."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from steps.formats.tfrecord import write_tfrecord_shard


def jpeg(seed: int, size: int = 40) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG")
    return buffer.getvalue()


def write_shards(folder: Path, ids: list[list[int]], corrupt: tuple[int, ...] = ()) -> list[Path]:
    """One shard per list of ids in ``folder``; the ids in ``corrupt`` hold bytes that are no JPEG."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, shard_ids in enumerate(ids):
        path = folder / f"train-{index:05d}.tfrecord"
        write_tfrecord_shard(path, [(i, i % 3, "jpg", b"not a jpeg" if i in corrupt else jpeg(i)) for i in shard_ids])
        paths.append(path)
    return paths


def collect_ids(dataset) -> list[int]:
    return [int(i) for batch in dataset for i in batch["ids"].numpy()]
