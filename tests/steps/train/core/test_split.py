"""The hybrid decode split: every sample has exactly one owner, in proportion to each side's workers."""

from __future__ import annotations

import pytest

from steps.common.errors import UserError
from steps.train.core.split import Split, Take


@pytest.mark.parametrize("samples", [0, 1, 5, 41, 42, 43, 100])
def test_a_take_counts_its_positions_exactly(samples):
    split = Split.weighted([2, 3], data_workers=4)
    takes = [split.trainer(0), split.trainer(1), split.data()]
    for take in takes:
        assert take.count(samples) == sum(1 for k in range(samples) if k in take)
    assert sum(t.count(samples) for t in takes) == samples


def test_slots_follow_the_workers_each_side_brings():
    split = Split.weighted([6], data_workers=36)
    assert (split.period, split.trainer(0), split.data()) == (42, Take(0, 6, 42), Take(6, 42, 42))
    assert not Split.weighted([0, 0], data_workers=8).hybrid and Split.weighted([0, 1], data_workers=8).hybrid
    assert Split.weighted([0], data_workers=3).data().count(10) == 10  # no local workers: the data hosts own all


def test_a_split_from_a_trainer_is_checked():
    ok = Split.weighted([1, 2], 5)
    assert Split.from_meta(ok.as_meta(), trainers=2, sender="t") == ok
    for bad in (
        {"period": 3, "trainers": [1, 2]},
        {"period": 8, "trainers": [1]},
        {"period": 8, "trainers": [-1, 2]},
        {"trainers": [1, 2]},
        "nonsense",
    ):
        with pytest.raises(UserError, match="decode split"):
            Split.from_meta(bad, trainers=2, sender="t")
