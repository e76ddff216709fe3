"""A DataLoader pool's active decode workers change while it runs: never more decode at once than the throttle allows,
and each sample still comes once per epoch whatever the changes."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

from steps.formats.webdataset import write_shard
from steps.train.core.config import TrainConfig
from steps.train.frameworks.pytorch import throttle as throttle_module
from steps.train.frameworks.pytorch.dataset import ShardDataset, batch_loader
from steps.train.frameworks.pytorch.throttle import Throttle, off_because, workers_report
from steps.train.workload import Workload


class Overlapping(Workload):
    """Counts how many workers decode at the same moment (shared with the worker processes)."""

    image_size = 4

    def __init__(self, start_method: str) -> None:
        context = multiprocessing.get_context(start_method)
        self.now = context.Value("i", 0)
        self.most = context.Value("i", 0)

    def decode(self, raw, *, train, rng):
        with self.now.get_lock():
            self.now.value += 1
            self.most.value = max(self.most.value, self.now.value)
        time.sleep(0.01)  # long enough for the other workers to overlap when they may
        with self.now.get_lock():
            self.now.value -= 1
        return np.full((4, 4, 3), int(raw) % 256, dtype=np.uint8)


def _shard(tmp_path, samples: int):
    shard = tmp_path / "train-00000.tar"
    write_shard(shard, [(i, 0, "jpg", str(i).encode()) for i in range(samples)])
    return shard


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "forkserver"])  # forkserver: a GPU trainer's decode workers
def test_one_active_worker_of_three_decodes_alone_then_three_overlap_and_every_sample_comes_once(tmp_path, start_method):
    workload = Overlapping(start_method)
    dataset = ShardDataset([_shard(tmp_path, 90)], workload, train=False)  # no shuffle buffer: decode as read
    dataset.throttle = throttle = Throttle(3, active=1, start_method=start_method)
    loader = batch_loader(dataset, batch_size=5, num_workers=3, start_method=start_method)
    try:
        seen = []
        for i, batch in enumerate(loader):
            seen += batch.ids.tolist()
            if i == 6:  # part way through the epoch: one worker decoded at a time so far
                assert workload.most.value == 1
                assert throttle.set(3) == 3
        assert sorted(seen) == list(range(90))  # each sample once, across the change
        assert workload.most.value > 1
        assert throttle.set(1) == 1  # and back: idle workers hold no token, so all come back at once
        second = [i for b in loader for i in b.ids.tolist()]
        assert sorted(second) == list(range(90))
    finally:
        loader._stop_workers()


def test_the_active_count_stays_within_the_pool():
    throttle = Throttle(4)
    assert throttle.active == 4
    assert throttle.set(9) == 4 and throttle.set(0) == 1 and throttle.set(3) == 3
    assert Throttle(2, active=5).active == 2


def test_a_token_held_past_the_wait_leaves_the_change_for_later(monkeypatch):
    monkeypatch.setattr(throttle_module, "TAKE_BACK_WAIT_S", 0.1)
    throttle = Throttle(2)
    with throttle:  # one worker decodes, the other token is free: taken back at once
        assert throttle.set(1) == 1
    throttle.set(2)
    with throttle, throttle:  # both workers decode long samples: no token comes back in time
        assert throttle.set(1) == 2  # gave up after the wait: both tokens still out
    assert throttle.set(1) == 1  # freed: the next interval's change goes through


def test_why_a_pool_is_not_retuned_is_in_its_report():
    on, off = TrainConfig(retune="on"), TrainConfig(retune="off")
    assert off_because(on, Throttle(2)) == ""
    assert off_because(off, Throttle(2)) == "retune=off"
    assert "nothing to retune" in off_because(on, Throttle(1))
    assert workers_report(off, Throttle(3), None) == {"start": 3, "end": 3, "changed": 0, "changes": [], "off": "retune=off"}


def test_a_worker_waiting_for_a_token_gives_up_once_its_starter_is_gone(monkeypatch):
    monkeypatch.setattr(throttle_module, "OWNER_CHECK_S", 0.05)
    throttle = Throttle(2, active=1)
    with throttle:  # the one token is taken; as a worker sees it while the process that started it lives: it waits on
        raised = []

        def wait():
            try:
                throttle.__enter__()
            except RuntimeError as exc:
                raised.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        waiter.join(timeout=0.3)
        assert waiter.is_alive()
        throttle._starter = (os.getpid(), -1)  # that process is gone (the worker was reparented)
        waiter.join(timeout=5)
        assert not waiter.is_alive() and raised
        with pytest.raises(RuntimeError, match="process that started this decode worker is gone"):
            throttle.__enter__()


def test_opening_the_throttle_lets_every_worker_decode():
    throttle = Throttle(3, active=1)
    throttle.open()
    assert throttle.active == 3
    with throttle, throttle, throttle:  # three tokens: none waits
        pass
