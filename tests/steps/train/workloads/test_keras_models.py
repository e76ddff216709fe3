"""The Keras models a workload builds: twins of the PyTorch ones."""

from __future__ import annotations

import numpy as np
import pytest

from steps.train.workloads.shapes import Shapes

tf = pytest.importorskip("tensorflow")


@pytest.mark.slow
def test_keras_small_cnn_is_the_twin_of_the_torch_one_and_resnet50_is_selectable():
    small = Shapes({}).build_keras_model(8)
    trainable = sum(int(np.prod(w.shape)) for w in small.trainable_weights)
    assert trainable == 61_208  # the torch small_cnn's parameter count for 8 classes
    assert small(tf.zeros((2, 64, 64, 3))).shape == (2, 8)
    resnet = Shapes({"model": "resnet50"}).build_keras_model(8)
    assert resnet.name == "resnet50" and 23_000_000 < resnet.count_params() < 24_000_000
