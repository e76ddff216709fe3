"""The shard step's output on the tiny dataset, made once per session for every job the end-to-end tests start
(read-only: the emulator provisions channels from it as SageMaker downloads S3 objects)."""

from __future__ import annotations

import pytest

from steps.shard.shard import shard_dataset


@pytest.fixture(scope="session")
def shards(tmp_path_factory, tiny_images):
    """WebDataset shards for 2 data hosts (PyTorch, Ray)."""
    out = tmp_path_factory.mktemp("shards")
    shard_dataset(tiny_images, out, target_shard_mb=1, data_hosts=2)
    return out


@pytest.fixture(scope="session")
def tf_shards(tmp_path_factory, tiny_images):
    """TFRecord shards for 2 data hosts (TensorFlow)."""
    out = tmp_path_factory.mktemp("tf-shards")
    shard_dataset(tiny_images, out, target_shard_mb=1, data_hosts=2, shard_format="tfrecord")
    return out
