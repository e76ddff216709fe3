"""How many of a DataLoader's decode workers decode at once, changed while it runs (`steps.train.core.retune`).

A DataLoader's worker processes are fixed when it starts, and each owns a fixed
residue of the sample positions (`steps.train.frameworks.pytorch.dataset.ShardDataset`):
which worker decodes which sample is what keeps every sample once per epoch. So
the pool stays whole and a shared semaphore of ``active`` tokens sets how many of
its workers decode at a time: a worker takes a token for each sample it decodes.
A worker without one sleeps on the semaphore and costs no CPU; the DataLoader
still asks every worker in turn, so the pool decodes at the rate of ``active`` workers.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from typing import Any

from steps.train.core.config import TrainConfig
from steps.train.core.retune import Controller, Retuner, fixed
from steps.train.frameworks.pytorch.dataset import worker_start_method

TAKE_BACK_WAIT_S = 1.0  # a token is freed after each sample: this long without one, the change waits for the next interval
OWNER_CHECK_S = 1.0  # how often a worker waiting for a token checks that the process that started it is alive


class Throttle:
    """``active`` of a pool of ``pool`` decode workers at a time; pickled into the workers with their dataset."""

    def __init__(self, pool: int, active: int | None = None, *, start_method: str | None = None) -> None:
        """``start_method``: how the DataLoader starts its workers (`worker_start_method` by default, as
        `batch_loader` does): a semaphore crosses into forkserver workers only if made in that context."""
        self.pool = pool
        self.active = pool if active is None else max(1, min(active, pool))
        self._tokens = multiprocessing.get_context(start_method or worker_start_method()).Semaphore(self.active)
        self._starter: tuple[int, int] | None = None  # (a worker's pid, its parent's) as of its first wait

    def set(self, active: int) -> int:
        """Make ``active`` workers (within 1..pool) decode at once; returns how many do. Taking a token back waits for a
        worker to finish its sample, at most `TAKE_BACK_WAIT_S` per token."""
        active = max(1, min(active, self.pool))
        while self.active < active:
            self._tokens.release()
            self.active += 1
        while self.active > active:
            if not self._tokens.acquire(timeout=TAKE_BACK_WAIT_S):
                break
            self.active -= 1
        return self.active

    def open(self) -> None:
        """Every worker decodes again: before the pool shuts down, so no worker is left waiting for a token (a
        DataLoader joins each worker for seconds before it terminates it)."""
        self.set(self.pool)

    def __enter__(self) -> Throttle:
        if self._starter is None or self._starter[0] != os.getpid():
            # the process that started this worker: the DataLoader's own (fork) or its forkserver, which ends with it
            self._starter = (os.getpid(), os.getppid())
        while not self._tokens.acquire(timeout=OWNER_CHECK_S):
            if os.getppid() != self._starter[1]:  # it is gone: end the wait, the worker's own loop then exits
                raise RuntimeError("the process that started this decode worker is gone")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._tokens.release()


def retuner(
    cfg: TrainConfig, throttle: Throttle, read: Callable[[], tuple[float, int]], *, consumers: Callable[[], int] = lambda: 1
) -> Retuner | None:
    """A running `Retuner` over ``throttle``'s workers between 1 and its pool, or None where there is nothing to tune
    (retune=off, a pool of one); ``read``/``consumers`` as `Retuner` takes them."""
    if off_because(cfg, throttle):
        return None
    return Retuner(Controller(throttle.active, 1, throttle.pool), read, throttle.set, consumers=consumers).start()


def off_because(cfg: TrainConfig, throttle: Throttle) -> str:
    """Why ``throttle``'s workers are not retuned ('' when they are)."""
    if cfg.retune != "on":
        return f"retune={cfg.retune}"
    if throttle.pool < 2:
        return "one decode worker: nothing to retune"
    return ""


def workers_report(cfg: TrainConfig, throttle: Throttle, tuner: Retuner | None) -> dict:
    """``decode_workers`` of metrics.json for ``throttle``'s pool."""
    return tuner.report() if tuner is not None else fixed(throttle.active, off_because(cfg, throttle))
