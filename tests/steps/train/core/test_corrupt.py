"""Bad data fails fast: past max_corrupt_share of an epoch, training ends naming the count and examples."""

import pytest

from steps.train.core.corrupt import CorruptBudget
from steps.train.core.errors import CorruptData


def test_the_budget_allows_the_share_and_fails_on_the_first_sample_beyond_it():
    budget = CorruptBudget(0.01, 1000)  # 10 per epoch
    budget.add(0, [(i, "bad") for i in range(10)])
    with pytest.raises(
        CorruptData,
        match=r"epoch 0: already 11 of its 1000 samples \(1.1%\) failed to decode, more than "
        r"max_corrupt_share=0.01 allows \(10\); e.g. sample 0: bad; sample 1: bad; sample 2: bad",
    ):
        budget.add(0, [(10, "bad")])
    budget.add(1, [(i, "bad") for i in range(10)])  # a new epoch starts a new count


def test_zero_means_none_may_fail_and_one_means_never_fail():
    with pytest.raises(CorruptData):
        CorruptBudget(0.0, 50).add(0, [(7, "truncated")])
    CorruptBudget(1.0, 50).add(0, [(i, "x") for i in range(50)])
    with pytest.raises(CorruptData, match="epoch 3: 2 of its 50 samples"):
        CorruptBudget(0.0, 50).check_epoch(3, 2, [(7, "failed to decode")])
