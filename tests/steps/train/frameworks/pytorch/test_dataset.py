"""Reading shards into batches: corrupt samples counted and named, parts without overlap, a worker's errors and CPU time
carried to the training loop."""

from __future__ import annotations

import time

import numpy as np
import pytest

from steps.common.errors import UserError
from steps.formats.webdataset import write_shard
from steps.train.frameworks.pytorch.dataset import ShardDataset, batch_loader, worker_start_method
from steps.train.workload import Workload


class FailsOnOddIds(Workload):
    image_size = 4

    def decode(self, raw, *, train, rng):
        if int(raw) % 2:
            raise ValueError("cannot decode")
        return np.full((4, 4, 3), int(raw) % 256, dtype=np.uint8)


class Costly(FailsOnOddIds):
    def decode(self, raw, *, train, rng):
        deadline = time.thread_time() + 0.002  # CPU, not sleep: what a data host reports is CPU time
        while time.thread_time() < deadline:
            pass
        return super().decode(raw, train=train, rng=rng)


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


def test_a_malformed_shard_in_a_worker_keeps_its_message(tmp_path):
    shard = tmp_path / "train-00000.tar"
    shard.write_bytes(b"this is not a tar file" * 100)
    loader = batch_loader(ShardDataset([shard], FailsOnOddIds(), train=True), batch_size=4, num_workers=2)
    with pytest.raises(UserError) as caught:
        list(loader)
    assert str(shard) in caught.value.message
    assert "Caught" not in caught.value.message and "Traceback" not in caught.value.message


def test_each_batch_carries_the_cpu_seconds_its_worker_spent_on_it(tmp_path):
    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(i, 0, "jpg", str(2 * i).encode()) for i in range(24)])
    batches = list(batch_loader(ShardDataset([shard], Costly(), train=True), batch_size=6, num_workers=2))
    total = sum(b.cpu_s for b in batches)
    assert len(batches) == 4 and all(b.cpu_s > 0 for b in batches)
    assert 24 * 0.002 <= total < 24 * 0.002 + 1.0


@pytest.mark.slow
def test_workers_started_by_a_forkserver_read_the_same_batches(tmp_path):
    # a GPU trainer's decode workers start so (worker_start_method): the dataset crosses pickled, not forked
    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(i, i % 3, "jpg", str(i).encode()) for i in range(24)])
    read = {}
    for method in ("fork", "forkserver"):
        loader = batch_loader(
            ShardDataset([shard], FailsOnOddIds(), train=True), batch_size=4, num_workers=2, start_method=method
        )
        batches = list(loader)
        read[method] = (sorted(i for b in batches for i in b.ids.tolist()), sorted(c[0] for b in batches for c in b.corrupt))
    assert read["forkserver"] == read["fork"]
    assert read["fork"] == (list(range(0, 24, 2)), list(range(1, 24, 2)))


def test_a_process_without_cuda_forks_its_workers():
    assert worker_start_method() == "fork"


class HoldsALambda(FailsOnOddIds):
    def __init__(self) -> None:
        self.pick = lambda raw: raw


def test_a_workload_that_cannot_cross_into_forkserver_workers_is_named_with_the_fix(tmp_path):
    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(i, 0, "jpg", str(i).encode()) for i in range(4)])
    dataset = ShardDataset([shard], HoldsALambda(), train=True)
    with pytest.raises(UserError, match=r"workload .*HoldsALambda cannot be pickled .*no lambdas"):
        batch_loader(dataset, batch_size=2, num_workers=1, start_method="forkserver")
    assert sorted(i for b in batch_loader(dataset, batch_size=2, num_workers=1, start_method="fork") for i in b.ids) == [0, 2]
