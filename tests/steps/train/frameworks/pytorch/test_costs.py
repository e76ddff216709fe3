"""Decode alone and the step alone, per batch: measured on a copy, the trained model untouched."""

from __future__ import annotations

import numpy as np
import torch

from steps.shard.format import write_shard
from steps.train.frameworks.pytorch.costs import isolated_costs
from tests.fixtures.tiny_workload import Tiny


class Plain(Tiny):
    def decode(self, raw, *, train, rng):
        return np.full((16, 16, 3), int(raw) % 256, dtype=np.uint8)


def test_costs_are_measured_per_batch_without_touching_the_model(tmp_path):
    shard = tmp_path / "validation-00000.tar"
    write_shard(shard, [(i, i % 2, "jpg", str(i).encode()) for i in range(20)])
    workload = Plain({"hidden": 4})
    model = workload.build_model(2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    costs = isolated_costs(workload, model, torch.device("cpu"), [shard], batch_size=8, learning_rate=0.1, batches=3)
    assert costs["batches"] == 3 and costs["batch_size"] == 8 and costs["device"] == "cpu"  # 20 samples, read again as needed
    assert costs["decode_s_per_batch"] > 0 and costs["step_s_per_batch"] > 0
    assert costs["decode_s_per_batch"] == costs["decode_cpu_s_per_batch"] / costs["cpus"]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_no_shards_no_costs(tmp_path):
    assert isolated_costs(Plain({}), Plain({}).build_model(2), torch.device("cpu"), [], batch_size=8, learning_rate=0.1) is None
