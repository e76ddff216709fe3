"""The hybrid decode split: every sample has exactly one owner, in proportion to each side's workers."""

from __future__ import annotations

import numpy as np
import pytest

from steps.common.errors import UserError
from steps.shard.format import write_shard
from steps.train.core.split import ALL, Split, Take
from steps.train.frameworks.pytorch.dataset import ShardDataset, batch_loader
from steps.train.workload import Workload


class Plain(Workload):
    image_size = 2

    def decode(self, raw, *, train, rng):
        if raw == b"bad":
            raise ValueError("cannot decode")
        return np.zeros((2, 2, 3), dtype=np.uint8)


@pytest.mark.parametrize("samples", [0, 1, 5, 41, 42, 43, 100])
def test_a_take_counts_its_positions_exactly(samples):
    split = Split.weighted([2, 3], data_workers=4)
    takes = [split.trainer(0), split.trainer(1), split.data()]
    for take in takes:
        assert take.count(samples) == sum(1 for k in range(samples) if k in take)
    assert sum(t.count(samples) for t in takes) == samples


def test_slots_follow_the_workers_each_side_brings():
    split = Split.weighted([6], data_workers=36)
    assert (split.period, split.trainer(0), split.data()) == (42, Take(0, 6, 42), Take(6, 42, 42))
    assert not Split.weighted([0, 0], data_workers=8).hybrid and Split.weighted([0, 1], data_workers=8).hybrid
    assert Split.weighted([0], data_workers=3).data().count(10) == 10  # no local workers: the data hosts own all


def test_a_split_from_a_trainer_is_checked():
    ok = Split.weighted([1, 2], 5)
    assert Split.from_meta(ok.as_meta(), trainers=2, sender="t") == ok
    for bad in ({"period": 3, "trainers": [1, 2]}, {"period": 8, "trainers": [1]}, {"period": 8, "trainers": [-1, 2]},
                {"trainers": [1, 2]}, "nonsense"):
        with pytest.raises(UserError, match="decode split"):
            Split.from_meta(bad, trainers=2, sender="t")


def test_trainers_and_data_hosts_decode_every_sample_once_whatever_their_worker_counts(tmp_path):
    """Two data hosts with their own shards (ShardedByS3Key) and two trainers that see every shard: the
    union is each sample once, corrupt ones included, with every host running a different number of workers."""
    shards = []
    for s in range(4):
        shards.append(tmp_path / f"train-{s:05d}.tar")
        write_shard(shards[-1], [(100 * s + k, 0, "jpg", b"bad" if k == 7 else b"ok") for k in range(23 + s)])
    split = Split.weighted([1, 2], data_workers=3)
    hosts = [(shards[:2], split.data(), 2), (shards[2:], split.data(), 1),  # data hosts: their own objects
             (shards, split.trainer(0), 1), (shards, split.trainer(1), 2)]  # trainers: every object, their positions
    seen = []
    for stream, (mine, take, workers) in enumerate(hosts):
        dataset = ShardDataset(mine, Plain(), train=True, stream=stream, take=take)
        ids = [i for b in batch_loader(dataset, batch_size=4, num_workers=workers) for i in b.ids.tolist() + [c[0] for c in b.corrupt]]
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


def test_trainer_cpus_auto_keeps_what_the_step_measured_and_says_when_it_could_not(tmp_path, monkeypatch):
    from steps.contract import HYBRID_CHANNEL
    from steps.shard.format import list_shards
    from steps.train.core import spare_cpus
    from steps.train.core.config import TrainConfig
    from tests.steps.train.test_training_parts import FakeEnv

    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(k, 0, "jpg", b"ok") for k in range(4)])
    env = FakeEnv("t-1", {"dnn_group": ("ml.g5.2xlarge", ["t-1"]), "data_group": ("ml.c5.xlarge", ["d-1"])}, current_group="dnn_group")
    env.channel_input_dirs, env.input_data_config = {HYBRID_CHANNEL: str(tmp_path)}, {HYBRID_CHANNEL: {"S3DistributionType": "ShardedByS3Key"}}
    from steps.train.core.cluster import Cluster

    cluster = Cluster.from_environment(env, TrainConfig())
    monkeypatch.setattr(spare_cpus, "available_cpus", lambda: 8)
    gpu_like = spare_cpus.spare(TrainConfig(), cluster, lambda shards: 1.02, list_shards=list_shards)
    assert (gpu_like.workers, gpu_like.kept, gpu_like.loop_cpus) == (6, 2, 1.02) and gpu_like.shards == [shard]
    cpu_bound = spare_cpus.spare(TrainConfig(), cluster, lambda shards: 7.9, list_shards=list_shards)
    assert (cpu_bound.workers, cpu_bound.kept) == (0, 8)
    unmeasured = spare_cpus.spare(TrainConfig(), cluster, lambda shards: "the model cannot be cloned", list_shards=list_shards)
    assert unmeasured.workers == 0 and "could not measure" in unmeasured.why and "trainer_cpus" in unmeasured.why
    fixed = spare_cpus.spare(TrainConfig(trainer_cpus="3"), cluster, lambda shards: 1 / 0, list_shards=list_shards)
    assert (fixed.workers, fixed.kept) == (5, 3)
    assert spare_cpus.spare(TrainConfig(trainer_cpus="all"), cluster, lambda shards: 1 / 0, list_shards=list_shards).workers == 0
