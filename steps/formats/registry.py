"""The shard step's output formats, by ``--format`` name: file suffix, writer, and the bytes a sample adds.

The formats themselves live beside this: WebDataset tar shards in
`steps.formats.webdataset`, TFRecord shards in `steps.formats.tfrecord`. The plan
stage (`steps.shard.plan`) sizes shards with ``sample_bytes``; the write stage
(`steps.shard.write`) names and writes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from steps.formats.tfrecord import FRAME_BYTES, write_tfrecord_shard
from steps.formats.tfrecord import SUFFIX as TFRECORD_SUFFIX
from steps.formats.webdataset import write_shard

# A tf.train.Example's feature names, tags and lengths around the image bytes: 71-76 bytes
# measured for 1 KB-1 MB images and 9-digit ids; rounded up so shards err on the small side.
EXAMPLE_OVERHEAD = 80


@dataclass(frozen=True)
class ShardFormat:
    """How one output format names, writes and sizes shards."""

    suffix: str
    write: Callable[[Path, Iterable[tuple[int, int, str, bytes]]], int]
    sample_bytes: Callable[[int], int]  # image file size -> bytes the sample adds to a shard


def _tar_bytes(size: int) -> int:
    # A 512-byte header plus the payload padded to 512 for the image, and the same for the label.
    return 512 + math.ceil(size / 512) * 512 + 1024


def _tfrecord_bytes(size: int) -> int:
    # The record frame (length and two CRCs) around one Example holding the image bytes.
    return FRAME_BYTES + EXAMPLE_OVERHEAD + size


FORMATS = {
    "webdataset": ShardFormat(suffix=".tar", write=write_shard, sample_bytes=_tar_bytes),
    "tfrecord": ShardFormat(suffix=TFRECORD_SUFFIX, write=write_tfrecord_shard, sample_bytes=_tfrecord_bytes),
}
