"""The ledger of consumed samples."""

import numpy as np

from steps.train.core.ledger import Ledger, digest


def test_the_ledger_digest_is_the_set_not_the_order():
    a, b = Ledger(), Ledger()
    a.add(0, [3, 1, 2])
    b.add(0, [2, 3])
    b.add(0, [1])
    assert a.close_epoch(0, a.ids) == b.close_epoch(0, b.ids)
    assert digest(np.array([1, 2])) != digest(np.array([1, 3]))
