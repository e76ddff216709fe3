"""Bad data fails fast: an epoch whose samples do not decode beyond ``max_corrupt_share`` ends training.

A corrupt sample is counted and reported, never silently dropped (`steps.train.frameworks.pytorch.dataset`); a few are
normal in real data. Past the share the data (or the workload's decode) is broken, and training on
what is left would report a model and a price-performance built on the wrong samples, so the step
fails at once, naming the count, the share and examples.
"""

from __future__ import annotations

import math

from steps.train.core.errors import CorruptData


class CorruptBudget:
    def __init__(self, max_share: float, samples_per_epoch: int) -> None:
        self.max_share = max_share
        self.samples_per_epoch = max(int(samples_per_epoch), 1)
        self.limit = math.floor(max_share * self.samples_per_epoch)  # at most this many per epoch
        self._epoch = -1
        self._seen: list = []

    def restore(self, epoch: int, seen: list) -> None:
        """What a checkpoint says ``epoch`` already counted (a resumed run)."""
        self._epoch, self._seen = epoch, list(seen)

    def add(self, epoch: int, corrupt: list) -> None:
        """Count this batch's ``(sample_id, reason)`` pairs; raise `CorruptData` once the epoch is over its budget."""
        if epoch != self._epoch:
            self._epoch, self._seen = epoch, []
        self._seen.extend(corrupt)
        if len(self._seen) > self.limit:
            raise self.error(epoch, len(self._seen), self._seen, so_far=True)

    def check_epoch(self, epoch: int, missing: int, examples: list) -> None:
        """For a count known only at the end of an epoch (TensorFlow's accounting)."""
        if missing > self.limit:
            raise self.error(epoch, missing, examples, so_far=False)

    def error(self, epoch: int, count: int, examples: list, *, so_far: bool) -> CorruptData:
        shown = "; ".join(f"sample {sid}: {reason}" for sid, reason in examples[:3])
        when = "already " if so_far else ""
        return CorruptData(
            f"epoch {epoch}: {when}{count} of its {self.samples_per_epoch} samples ({count / self.samples_per_epoch:.1%}) "
            f"failed to decode, more than max_corrupt_share={self.max_share:g} allows ({self.limit}); e.g. {shown}. "
            "Fix or remove those files (the Shard step's report.json lists the ones it could not read at all), "
            "or raise MaxCorruptShare"
        )
