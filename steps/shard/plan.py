"""The shard step's plan stage: sample ids, the train/validation split, and how many shards hold what.

Ids follow (sorted class, sorted relative path) over the images that
decoded, so the same input always gives the same ids. The split is
stratified and seeded per class; the train shard count is a multiple of the
data hosts and the samples are dealt so shard sizes differ by at most one,
which gives every host equal work under ShardedByS3Key.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from steps.formats.registry import FORMATS
from steps.shard.scan import Candidate


@dataclass(frozen=True)
class Item:
    """A validated image that will go into a shard."""

    sample_id: int
    label: int
    path: Path
    ext: str
    size: int


def assign_ids(valid: list[Candidate]) -> list[Item]:
    # Candidates are already in (sorted class, sorted relative path) order.
    return [Item(i, c.label, c.path, c.path.suffix.lower().lstrip("."), c.path.stat().st_size) for i, c in enumerate(valid)]


def split(items: list[Item], validation_fraction: float, seed: int) -> tuple[list[Item], list[Item]]:
    """Stratified, seeded train/validation split; both lists sorted by sample id."""
    train, validation = [], []
    for label in sorted({i.label for i in items}):
        members = [i for i in items if i.label == label]
        # Seed per class so adding a class does not reshuffle the others.
        random.Random(f"{seed}/split/{label}").shuffle(members)
        n_val = validation_count(len(members), validation_fraction)
        validation += members[:n_val]
        train += members[n_val:]
    return sorted(train, key=_id), sorted(validation, key=_id)


def validation_count(n: int, fraction: float) -> int:
    """Validation samples for a class of ``n``: >= 1 when possible, always leaving 1 to train."""
    if fraction <= 0 or n < 2:
        return 0
    return min(n - 1, max(1, math.floor(n * fraction + 0.5)))


def plan_shard_count(items: list[Item], target_bytes: int, multiple: int, *, shard_format: str = "webdataset") -> int:
    """Shards for ``items``: enough to stay near ``target_bytes``, a multiple of ``multiple``.

    ShardedByS3Key hands each data host len(shards) / hosts objects, so a multiple of
    the host count (with sample counts within 1) gives every host equal work. More
    shards than samples would leave shards empty; then we take the largest multiple
    that fits (the caller guarantees len(items) >= multiple).
    """
    if not items:
        return 0
    sample_bytes = FORMATS[shard_format].sample_bytes
    by_size = math.ceil(sum(sample_bytes(i.size) for i in items) / target_bytes)
    count = math.ceil(max(1, by_size) / multiple) * multiple
    if count > len(items):
        count = len(items) // multiple * multiple
    return count


def shuffled(items: list[Item], seed: int) -> list[Item]:
    # Mixed classes inside every train shard, so a streaming reader needs only a small buffer.
    items = list(items)
    random.Random(f"{seed}/train-order").shuffle(items)
    return items


def deal(items: list[Item], count: int) -> list[list[Item]]:
    """Cut ``items`` into ``count`` contiguous groups whose sizes differ by at most 1."""
    base, extra = divmod(len(items), count) if count else (0, 0)
    groups, start = [], 0
    for index in range(count):
        end = start + base + (1 if index < extra else 0)
        groups.append(items[start:end])
        start = end
    return groups


def _id(item: Item) -> int:
    return item.sample_id
