"""TensorFlow checkpoints at epoch ends: variables and the run so far come back; a broken one is refused saying what to do."""

from __future__ import annotations

import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from steps.common.errors import UserError  # noqa: E402
from steps.train.frameworks.tensorflow.checkpoint import POINTER, Checkpoints  # noqa: E402
from steps.train.workloads.shapes import Shapes  # noqa: E402


def _built():
    workload = Shapes({})
    model, optimizer = workload.build_keras_model(3), workload.keras_optimizer(0.01)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def test_variables_and_state_come_back_and_only_the_newest_epoch_is_kept(tmp_path):
    model, optimizer = _built()
    saver = Checkpoints(tmp_path)
    saver.save(model, optimizer, {"epoch": 1, "steps": 10, "accounting": []})
    optimizer.iterations.assign(7)
    saver.save(model, optimizer, {"epoch": 2, "steps": 20, "accounting": [{"epoch": 1}]})
    assert {p.name for p in tmp_path.iterdir()} == {POINTER, "tf-epoch-2"}

    restored_model, restored_optimizer = _built()
    reader = Checkpoints(tmp_path)
    state = reader.load(restored_model, restored_optimizer)
    assert reader.saved_epoch == 2  # what an interruption before the next save falls back to
    assert state["epoch"] == 2 and state["steps"] == 20 and state["accounting"] == [{"epoch": 1}]
    assert int(restored_optimizer.iterations.numpy()) == 7
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), restored_model.get_weights()))


def test_no_checkpoint_is_a_fresh_start_and_a_broken_one_says_how_to_start_over(tmp_path):
    model, optimizer = _built()
    assert Checkpoints(tmp_path).load(model, optimizer) is None
    (tmp_path / POINTER).write_text(json.dumps({"version": 1, "variables": "tf-epoch-3/variables", "epoch": 3}))
    with pytest.raises(UserError, match=r"cannot be restored .* delete the checkpoint folder"):
        Checkpoints(tmp_path).load(model, optimizer)
