"""Workload loading, models, corrupt-sample accounting, roles and metric lines."""

from __future__ import annotations

import re
import sys
import time
import types

import numpy as np
import pytest
import torch

from steps.common.errors import UserError
from steps.contract import METRIC_DEFINITIONS
from steps.shard.format import write_shard
from steps.train.core.cluster import DATA, TRAINER, Cluster
from steps.train.core.config import TrainConfig
from steps.train.core.metrics import StepStats, metric_line
from steps.train.frameworks.pytorch.dataset import ShardDataset, batch_loader
from steps.train.workload import Workload, load_workload
from steps.train.workloads.models import resnet50, small_cnn


def test_resnet50_has_the_torchvision_parameter_count():
    model = resnet50(1000)
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 1000)


def test_small_cnn_maps_a_batch_to_logits():
    assert small_cnn(8)(torch.zeros(4, 3, 64, 64)).shape == (4, 8)


def test_workload_errors_name_the_module_and_the_fix(monkeypatch):
    with pytest.raises(UserError, match="cannot import workload module 'no_such.module'"):
        load_workload("no_such.module", {})
    monkeypatch.setitem(sys.modules, "empty_workload", types.ModuleType("empty_workload"))
    with pytest.raises(UserError, match="must define WORKLOAD"):
        load_workload("empty_workload", {})
    with pytest.raises(UserError, match="no option 'colour'.*blur_passes"):
        load_workload("steps.train.workloads.shapes", {"colour": 1})


class FailsOnOddIds(Workload):
    image_size = 4

    def decode(self, raw, *, train, rng):
        if int(raw) % 2:
            raise ValueError("cannot decode")
        return np.full((4, 4, 3), int(raw) % 256, dtype=np.uint8)


def test_corrupt_samples_are_counted_and_reported_not_dropped(tmp_path):
    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(i, i % 3, "jpg", str(i).encode()) for i in range(20)])
    loader = batch_loader(ShardDataset([shard], FailsOnOddIds(), train=True), batch_size=6, num_workers=2)
    good, corrupt = [], []
    for batch in loader:
        good += batch.ids.tolist()
        corrupt += batch.corrupt
    assert sorted(good) == list(range(0, 20, 2))
    assert sorted(sid for sid, _ in corrupt) == list(range(1, 20, 2))
    assert all("cannot decode" in reason for _, reason in corrupt)


def test_replicated_parts_split_samples_without_overlap(tmp_path):
    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(i, 0, "jpg", str(2 * i).encode()) for i in range(30)])
    seen = []
    for part in range(3):
        dataset = ShardDataset([shard], FailsOnOddIds(), train=True, part=(part, 3), stream=part)
        seen.append({i for b in batch_loader(dataset, batch_size=4, num_workers=2) for i in b.ids.tolist()})
    assert sorted(seen[0] | seen[1] | seen[2]) == list(range(30))
    assert sum(len(s) for s in seen) == 30


class FakeEnv:
    def __init__(self, current_host, groups, current_group="homogeneousCluster"):
        self.current_host = current_host
        self.instance_groups_dict = {n: {"instance_group_name": n, "instance_type": t, "hosts": h} for n, (t, h) in groups.items()}
        self.current_instance_group = current_group
        self.current_instance_type = "ml.m5.xlarge"
        self.hosts = sorted(h for _, hs in groups.values() for h in hs)
        self.channel_input_dirs, self.input_data_config = {}, {}
        self.model_dir, self.output_dir, self.output_data_dir = "/m", "/o", "/o/data"
        self.network_interface_name = "eth0"


def test_role_comes_from_the_group_not_the_host_name():
    groups = {"data_group": ("ml.c5.18xlarge", ["algo-3", "algo-1"]), "dnn_group": ("ml.p4d.24xlarge", ["algo-2"])}
    data = Cluster.from_environment(FakeEnv("algo-1", groups, "data_group"), TrainConfig())
    trainer = Cluster.from_environment(FakeEnv("algo-2", groups, "dnn_group"), TrainConfig())
    assert data.role == DATA and trainer.role == TRAINER and data.heterogeneous
    assert data.data_hosts == ("algo-1", "algo-3") and trainer.trainer_hosts == ("algo-2",)
    single = Cluster.from_environment(FakeEnv("algo-1", {"train": ("ml.g5.xlarge", ["algo-1", "algo-2"])}), TrainConfig())
    assert single.role == TRAINER and not single.heterogeneous and single.world_size == 2


def test_unknown_group_names_say_which_hyperparameters_to_set():
    groups = {"cpu": ("ml.c5.18xlarge", ["algo-1"]), "gpu": ("ml.p4d.24xlarge", ["algo-2"])}
    with pytest.raises(UserError, match=r"\['cpu', 'gpu'\].*data_group='data_group'.*set those hyperparameters"):
        Cluster.from_environment(FakeEnv("algo-1", groups, "cpu"), TrainConfig())
    renamed = Cluster.from_environment(FakeEnv("algo-1", groups, "cpu"), TrainConfig(data_group="cpu", dnn_group="gpu"))
    assert renamed.role == DATA


def test_metric_definitions_scrape_the_metric_lines():
    line = metric_line(epoch=1, step=20, step_time_ms=86.1234, samples_per_sec=744.2, data_wait_pct=3.1, loss=0.25, accuracy=0.93)
    scraped = {d["Name"]: float(re.search(d["Regex"], line).group(1)) for d in METRIC_DEFINITIONS}
    assert scraped == {"train:step_time_ms": 86.1234, "train:samples_per_sec": 744.2, "train:data_wait_pct": 3.1,
                       "train:loss": 0.25, "validation:accuracy": 0.93}


def test_step_stats_leave_out_warm_up():
    stats = StepStats(warmup_steps=2)
    for wait, compute in ((5.0, 5.0), (5.0, 5.0), (0.1, 0.3), (0.3, 0.3)):
        stats.record(wait=wait, compute=compute, samples=10)
    summary = stats.summary()
    assert summary["measured_steps"] == 2 and summary["seen"] == 40 and summary["samples"] == 20
    assert summary["step_time_s"]["mean"] == pytest.approx(0.5)
    assert summary["data_wait_share"] == pytest.approx(0.4)
    assert summary["warmup_steps_excluded"] == 2


def test_a_run_shorter_than_its_warm_up_measures_every_step():
    stats = StepStats(warmup_steps=5)
    for _ in range(3):
        stats.record(wait=0.1, compute=0.3, samples=8)
    summary = stats.summary()
    assert summary["measured_steps"] == 3 and summary["warmup_steps_excluded"] == 0
    assert summary["step_time_s"]["mean"] == pytest.approx(0.4) and summary["samples"] == 24


def test_a_malformed_shard_in_a_worker_keeps_its_message(tmp_path):
    shard = tmp_path / "train-00000.tar"
    shard.write_bytes(b"this is not a tar file" * 100)
    loader = batch_loader(ShardDataset([shard], FailsOnOddIds(), train=True), batch_size=4, num_workers=2)
    with pytest.raises(UserError) as caught:
        list(loader)
    assert str(shard) in caught.value.message
    assert "Caught" not in caught.value.message and "Traceback" not in caught.value.message


class Costly(FailsOnOddIds):
    def decode(self, raw, *, train, rng):
        deadline = time.thread_time() + 0.002  # CPU, not sleep: what a data host reports is CPU time
        while time.thread_time() < deadline:
            pass
        return super().decode(raw, train=train, rng=rng)


def test_each_batch_carries_the_cpu_seconds_its_worker_spent_on_it(tmp_path):
    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(i, 0, "jpg", str(2 * i).encode()) for i in range(24)])
    batches = list(batch_loader(ShardDataset([shard], Costly(), train=True), batch_size=6, num_workers=2))
    total = sum(b.cpu_s for b in batches)
    assert len(batches) == 4 and all(b.cpu_s > 0 for b in batches)
    assert 24 * 0.002 <= total < 24 * 0.002 + 1.0
