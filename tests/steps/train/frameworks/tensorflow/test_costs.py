"""What a TensorFlow trainer measures of decode and step alone."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from steps.train.core.config import TrainConfig  # noqa: E402
from steps.train.frameworks.tensorflow.costs import isolated_costs  # noqa: E402
from steps.train.workloads.shapes import Shapes  # noqa: E402
from tests.support.tfrecords import write_shards  # noqa: E402


@pytest.mark.slow
def test_isolated_costs_leave_the_trained_model_untouched(tmp_path):
    files = [str(f) for f in write_shards(tmp_path, [list(range(0, 20))])]
    workload = Shapes({"blur_passes": 0})
    model = workload.build_keras_model(3)
    before = [w.copy() for w in model.get_weights()]
    costs = isolated_costs(TrainConfig(batch_size=4), workload, model, tf.distribute.get_strategy(), files, batches=3)
    assert costs["batches"] == 3 and costs["batch_size"] == 4 and costs["device"] == "cpu"
    assert 0 < costs["decode_s_per_batch"] <= costs["decode_s_per_batch_median"]
    assert 0 < costs["step_s_per_batch"] <= costs["step_s_per_batch_median"]
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    assert isolated_costs(TrainConfig(batch_size=4), workload, model, tf.distribute.get_strategy(), []) is None
