"""How many decode workers a trainer host runs beside its training loop, from what its step measured."""

from __future__ import annotations

from steps.contract import HYBRID_CHANNEL
from steps.formats.webdataset import list_shards, write_shard
from steps.train.core import spare_cpus
from steps.train.core.cluster import Cluster
from steps.train.core.config import TrainConfig
from tests.support.environment import FakeEnv


def test_trainer_cpus_auto_keeps_what_the_step_measured_and_says_when_it_could_not(tmp_path, monkeypatch):
    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(k, 0, "jpg", b"ok") for k in range(4)])
    env = FakeEnv(
        "t-1", {"dnn_group": ("ml.g5.2xlarge", ["t-1"]), "data_group": ("ml.c5.xlarge", ["d-1"])}, current_group="dnn_group"
    )
    env.channel_input_dirs, env.input_data_config = (
        {HYBRID_CHANNEL: str(tmp_path)},
        {HYBRID_CHANNEL: {"S3DistributionType": "ShardedByS3Key"}},
    )
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
