"""Which host decodes which sample when trainer hosts decode too (hybrid decode).

Every shard's samples are dealt by their position in the shard: position ``k``
goes to whoever owns ``k % period``. Trainer ``r`` owns ``trainers[r]`` slots,
the data hosts the rest, so each host's share is in proportion to the decode
workers it brings. The rule needs nothing but the shard itself: a data host
that holds only its own objects (ShardedByS3Key) and a trainer that sees
every object agree on every sample, and each sample has exactly one owner.

The trainers settle the split once all of them know every host's workers (the
data hosts say theirs in the HELLO) and send it in their RESUME frame; a data
host refuses trainers that disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steps.common.errors import UserError


@dataclass(frozen=True)
class Take:
    """Positions ``k`` of a shard with ``lo <= k % period < hi``."""

    lo: int = 0
    hi: int = 1
    period: int = 1

    def __contains__(self, position: int) -> bool:
        return self.lo <= position % self.period < self.hi

    def count(self, samples: int) -> int:
        """How many of a shard's ``samples`` positions this take holds."""
        whole, rest = divmod(samples, self.period)
        return whole * (self.hi - self.lo) + max(0, min(rest, self.hi) - self.lo)


ALL = Take()


@dataclass(frozen=True)
class Split:
    period: int
    trainers: tuple[int, ...]  # slots per trainer rank; the data hosts own the rest

    @classmethod
    def weighted(cls, trainer_workers: list[int], data_workers: int) -> Split:
        """Slots in proportion to decode workers: one slot per worker."""
        if data_workers < 1 or any(w < 0 for w in trainer_workers):
            raise ValueError(f"bad worker counts: trainers {trainer_workers}, data hosts {data_workers}")
        return cls(sum(trainer_workers) + data_workers, tuple(trainer_workers))

    @property
    def hybrid(self) -> bool:
        return sum(self.trainers) > 0

    def trainer(self, rank: int) -> Take:
        lo = sum(self.trainers[:rank])
        return Take(lo, lo + self.trainers[rank], self.period)

    def data(self) -> Take:
        return Take(sum(self.trainers), self.period, self.period)

    def as_meta(self) -> dict:
        return {"period": self.period, "trainers": list(self.trainers)}

    @classmethod
    def from_meta(cls, meta: Any, *, trainers: int, sender: str) -> Split:
        """The split a trainer sent, checked: it must leave the data hosts a share and name every trainer."""
        try:
            period, slots = int(meta["period"]), tuple(int(s) for s in meta["trainers"])
        except (KeyError, TypeError, ValueError):
            raise UserError(
                f"trainer {sender} sent a malformed decode split {meta!r}: run the same code on every host",
                headline="bad decode split",
            ) from None
        if len(slots) != trainers or min(slots, default=0) < 0 or not 0 <= sum(slots) < period:
            raise UserError(
                f"trainer {sender} sent decode split {meta!r} for {trainers} trainer(s): it must give each trainer "
                "0 or more slots and leave the data hosts at least one",
                headline="bad decode split",
            )
        return cls(period, slots)


NONE = Split(1, ())
