"""The one TensorFlow train step in each precision, on the CPU: Keras' mixed policy, float32 loss, loss scaling."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from steps.common.errors import UserError  # noqa: E402
from steps.train.frameworks.tensorflow.checkpoint import Checkpoints  # noqa: E402
from steps.train.frameworks.tensorflow.step import (  # noqa: E402
    make_train_step,
    resolve_tf_precision,
    set_precision,
    step_optimizer,
)
from steps.train.workload import Workload  # noqa: E402

COMPUTE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class Dense(Workload):
    image_size = 8

    def build_keras_model(self, num_classes):
        inputs = tf.keras.Input((8, 8, 3))
        hidden = tf.keras.layers.Dense(4, activation="relu")(tf.keras.layers.Flatten()(inputs))
        return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes)(hidden))


@pytest.fixture(autouse=True)
def _float32_afterwards():
    yield
    tf.keras.mixed_precision.set_global_policy("float32")  # the policy is global: leave it as other tests expect it


def _batch():
    rng = np.random.default_rng(0)
    return {"pixels": tf.constant(rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)), "labels": tf.constant([0, 1, 0, 1])}


def _built(workload, precision):
    set_precision(resolve_tf_precision(precision))
    model = workload.build_keras_model(2)
    return model, step_optimizer(workload, 0.1)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_one_step_in_each_precision_trains_on_the_cpu(precision):
    """fp16 included: Keras runs mixed_float16 on a CPU, so it is allowed on a CPU host (auto never picks it there)."""
    workload = Dense()
    model, optimizer = _built(workload, precision)
    before = [w.copy() for w in model.get_weights()]
    loss = make_train_step(workload, model, optimizer, tf.distribute.get_strategy())(_batch())
    assert model.layers[-1].compute_dtype == COMPUTE[precision]
    assert all(v.dtype == tf.float32 for v in model.trainable_variables)  # the weights stay float32
    assert loss.dtype == tf.float32 and np.isfinite(float(loss))  # the loss is computed in float32
    assert isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer) == (precision == "fp16")
    assert not any(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_auto_trains_in_fp32_on_the_cpu():
    assert resolve_tf_precision("auto") == "fp32"


def test_an_fp16_checkpoint_restores_the_loss_scale(tmp_path):
    workload = Dense()
    model, optimizer = _built(workload, "fp16")
    make_train_step(workload, model, optimizer, tf.distribute.get_strategy())(_batch())
    optimizer.dynamic_scale.assign(512.0)
    Checkpoints(tmp_path).save(model, optimizer, {"epoch": 1})
    fresh, fresh_optimizer = _built(workload, "fp16")
    fresh_optimizer.build(fresh.trainable_variables)
    Checkpoints(tmp_path).load(fresh, fresh_optimizer)
    assert float(fresh_optimizer.dynamic_scale) == 512.0
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), fresh.get_weights()))


@pytest.mark.parametrize("saved,now", [("fp32", "fp16"), ("fp16", "bf16")])
def test_a_checkpoint_across_the_loss_scaling_boundary_is_refused_naming_the_precision_to_resume_with(tmp_path, saved, now):
    workload = Dense()
    model, optimizer = _built(workload, saved)
    make_train_step(workload, model, optimizer, tf.distribute.get_strategy())(_batch())
    Checkpoints(tmp_path).save(model, optimizer, {"epoch": 1})
    fresh, fresh_optimizer = _built(workload, now)
    fresh_optimizer.build(fresh.trainable_variables)
    with pytest.raises(UserError, match="resume with Precision=") as refused:
        Checkpoints(tmp_path).load(fresh, fresh_optimizer)
    assert refused.value.headline == "checkpoint does not fit"


class HostOnlyNormalize(Dense):
    """A normalisation through a Python function: TensorFlow runs it, XLA cannot compile it."""

    def tf_normalize(self, pixels):
        x = tf.numpy_function(lambda a: (a.astype(np.float32) - 127.5) / 64.0, [pixels], tf.float32, stateful=False)
        return tf.ensure_shape(x, pixels.shape)


@pytest.mark.slow
def test_jit_compile_trains_one_step_through_xla_on_the_cpu():
    workload = Dense()
    model, optimizer = _built(workload, "fp32")
    before = [w.copy() for w in model.get_weights()]
    loss = make_train_step(workload, model, optimizer, tf.distribute.get_strategy(), jit_compile=True)(_batch())
    assert np.isfinite(float(loss))
    assert not any(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_jit_compile_puts_the_normalisation_and_forward_under_xla():
    """What XLA cannot compile fails the step only with jit_compile: the normalisation and the forward run in the XLA
    cluster (the batch arrives as uint8 and is normalised inside the step, on the device)."""
    workload = HostOnlyNormalize()
    model, optimizer = _built(workload, "fp32")
    strategy = tf.distribute.get_strategy()
    assert np.isfinite(float(make_train_step(workload, model, optimizer, strategy)(_batch())))
    with pytest.raises(tf.errors.InvalidArgumentError, match="PyFunc"):
        make_train_step(workload, model, optimizer, strategy, jit_compile=True)(_batch())
