"""Which samples each trainer consumed, per epoch: the proof in metrics.json that every sample was consumed exactly
once per epoch, across interruptions too (per epoch: samples, distinct ids, a digest of the id set)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import SupportsInt

import numpy as np


class Ledger:
    """Which samples this trainer consumed, per epoch: the current epoch's ids, and a summary of each finished one."""

    def __init__(self, epochs: list | None = None, epoch: int = 0, ids: list | None = None) -> None:
        self.epochs: list[dict] = list(epochs or [])
        self.epoch = epoch
        self._ids: list = list(ids or [])

    def add(self, epoch: int, ids: Iterable[SupportsInt]) -> None:
        if epoch != self.epoch:
            self.epoch, self._ids = epoch, []
        self._ids.extend(int(i) for i in ids)

    @property
    def ids(self) -> np.ndarray:
        return np.asarray(self._ids, dtype=np.int64)

    def close_epoch(self, epoch: int, all_ids: np.ndarray) -> dict:
        """``all_ids``: every trainer's ids of ``epoch`` together. Returns the epoch's summary, also kept."""
        distinct = np.unique(all_ids)
        summary = {
            "epoch": epoch,
            "samples": int(all_ids.size),
            "distinct": int(distinct.size),
            "duplicates": int(all_ids.size - distinct.size),
            "digest": digest(distinct),
        }
        self.epochs.append(summary)
        self.epoch, self._ids = epoch + 1, []
        return summary

    def state(self) -> dict:
        return {"epochs": self.epochs, "epoch": self.epoch, "ids": self.ids}

    @classmethod
    def from_state(cls, state: dict) -> Ledger:
        return cls(state["epochs"], state["epoch"], [int(i) for i in state["ids"]])


def digest(ids: np.ndarray) -> str:
    """The same set of sample ids, in any order, gives the same digest."""
    return hashlib.sha256(np.sort(np.asarray(ids, dtype=np.int64)).astype("<i8").tobytes()).hexdigest()[:16]
