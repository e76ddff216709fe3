"""The shapes workload's TensorFlow decode."""

from __future__ import annotations

import numpy as np
import pytest

from steps.train.workloads.shapes import Shapes
from tests.support.tfrecords import jpeg

tf = pytest.importorskip("tensorflow")


def test_tf_decode_gives_uint8_images_of_the_workload_size_reproducibly():
    workload = Shapes({"blur_passes": 2})
    raw = tf.constant(jpeg(1, size=57))
    seed = tf.constant([3, 4], tf.int64)
    a = workload.tf_decode(raw, train=True, seed=seed)
    b = workload.tf_decode(raw, train=True, seed=seed)
    assert a.dtype == tf.uint8 and a.shape == (64, 64, 3)
    assert np.array_equal(a.numpy(), b.numpy())  # stateless: the same seed, the same augmentation
    assert not np.array_equal(a.numpy(), workload.tf_decode(raw, train=True, seed=tf.constant([5, 6], tf.int64)).numpy())
    assert workload.tf_decode(raw, train=False, seed=seed).shape == (64, 64, 3)
