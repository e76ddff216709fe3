"""The shard step's plan stage: validation counts per class and shard counts per data host."""

from __future__ import annotations

from pathlib import Path

import pytest

from steps.shard.plan import Item, deal, plan_shard_count, validation_count


def test_plan_never_makes_more_shards_than_samples():
    huge = [Item(i, 0, Path("x"), "jpg", 10 * 2**20) for i in range(5)]
    assert plan_shard_count(huge, 2**20, 1) == 5
    assert plan_shard_count(huge, 2**20, 2) == 4  # largest multiple of 2 that fits
    assert plan_shard_count([], 2**20, 3) == 0


@pytest.mark.parametrize(
    "n, fraction, expected", [(10, 0.1, 1), (2, 0.1, 1), (1, 0.5, 0), (10, 0, 0), (10, 0.25, 3), (3, 0.9, 2)]
)
def test_validation_count(n, fraction, expected):
    assert validation_count(n, fraction) == expected


@pytest.mark.parametrize("n, count, expected", [(10, 3, [4, 3, 3]), (4, 4, [1, 1, 1, 1]), (0, 0, [])])
def test_deal_cuts_contiguous_groups_within_one(n, count, expected):
    groups = deal(list(range(n)), count)
    assert [len(g) for g in groups] == expected and [i for g in groups for i in g] == list(range(n))
