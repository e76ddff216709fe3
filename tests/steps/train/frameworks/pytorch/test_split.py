"""The hybrid decode split as the PyTorch dataset applies it: trainers and data hosts together decode every sample
once, whatever their worker counts, and a resumed trainer leaves out what was consumed (the split's own arithmetic:
tests/steps/train/core/test_split.py)."""

from __future__ import annotations

import numpy as np
import pytest

from steps.formats.webdataset import write_shard
from steps.train.core.split import ALL, Split, Take
from steps.train.frameworks.pytorch.dataset import ShardDataset, batch_loader
from steps.train.workload import Workload


class Plain(Workload):
    image_size = 2

    def decode(self, raw, *, train, rng):
        if raw == b"bad":
            raise ValueError("cannot decode")
        return np.zeros((2, 2, 3), dtype=np.uint8)


@pytest.mark.slow
def test_trainers_and_data_hosts_decode_every_sample_once_whatever_their_worker_counts(tmp_path):
    """Two data hosts with their own shards (ShardedByS3Key) and two trainers that see every shard: the
    union is each sample once, corrupt ones included, with every host running a different number of workers."""
    shards = []
    for s in range(4):
        shards.append(tmp_path / f"train-{s:05d}.tar")
        write_shard(shards[-1], [(100 * s + k, 0, "jpg", b"bad" if k == 7 else b"ok") for k in range(23 + s)])
    split = Split.weighted([1, 2], data_workers=3)
    hosts = [
        (shards[:2], split.data(), 2),
        (shards[2:], split.data(), 1),  # data hosts: their own objects
        (shards, split.trainer(0), 1),
        (shards, split.trainer(1), 2),
    ]  # trainers: every object, their positions
    seen = []
    for stream, (mine, take, workers) in enumerate(hosts):
        dataset = ShardDataset(mine, Plain(), train=True, stream=stream, take=take)
        ids = [
            i
            for b in batch_loader(dataset, batch_size=4, num_workers=workers)
            for i in b.ids.tolist() + [c[0] for c in b.corrupt]
        ]
        assert len(ids) == dataset.samples_per_epoch([23 + shards.index(p) for p in mine])
        seen += ids
    everything = [100 * s + k for s in range(4) for k in range(23 + s)]
    assert sorted(seen) == everything


def test_a_resumed_trainer_leaves_out_what_was_consumed_from_its_own_share_too(tmp_path):
    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(k, 0, "jpg", b"ok") for k in range(30)])
    dataset = ShardDataset([shard], Plain(), train=True, take=Take(0, 1, 3))
    dataset.resume(0, consumed=[0, 3, 6])
    got = sorted(i for b in batch_loader(dataset, batch_size=4, num_workers=1) for i in b.ids.tolist())
    assert got == list(range(9, 30, 3))
    assert ALL.count(30) == 30
