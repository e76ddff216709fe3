"""The one TensorFlow training step: the trainer trains with it, and the cost probe and the hybrid-decode sizing measure
it, so what is measured is what is trained.

Precision (`steps.train.core.precision`) is Keras' global mixed-precision policy, set by `set_precision` before the
model is built: its layers then compute in bfloat16 or float16 and keep float32 weights. The step casts the model's
output to float32 before the loss (Keras' guidance puts a float32 last layer there; a cast here does it for any
workload's model), and with float16 the optimizer (`step_optimizer`) scales the loss.

Compile (pipeline parameter) on: the forward, the loss and the gradients compile with XLA (``jit_compile``); the
optimizer's update stays outside, as under MirroredStrategy it sums the gradients across the replicas, which one XLA
cluster on one device cannot hold. The probes' steps (`steps.train.frameworks.tensorflow.costs`, `.local_decode`) run
without XLA, as PyTorch's do (`steps.train.frameworks.pytorch.step.TrainStep.on_copy` says why).

Batches arrive as uint8 NHWC and are normalised inside the step (`Workload.tf_normalize`), on the device; NHWC is the
layout Keras convolutions take and the one cuDNN's tensor-core kernels compute in, so nothing here transposes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tensorflow as tf

if TYPE_CHECKING:
    import keras

from steps.train.core.precision import choose
from steps.train.workload import Workload

# Keras runs both mixed policies on a CPU too (checked with TensorFlow 2.21, Keras 3.15), so fp16 is allowed on a CPU
# host; only auto never picks it there
POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
BF16_COMPUTE_CAPABILITY = (8, 0)  # Ampere: the first NVIDIA GPUs with bfloat16 tensor cores


def resolve_tf_precision(requested: str) -> str:
    """The precision this host trains in (`steps.train.core.precision.choose`): bf16 on a GPU of compute capability
    8.0 or more."""
    gpus = tf.config.list_physical_devices("GPU")
    capability = tf.config.experimental.get_device_details(gpus[0]).get("compute_capability") if gpus else None
    return choose(requested, gpu=bool(gpus), gpu_bf16=bool(capability and tuple(capability) >= BF16_COMPUTE_CAPABILITY))


def set_precision(precision: str) -> None:
    """Keras' global policy for ``precision`` (resolved); the models built after it follow it."""
    tf.keras.mixed_precision.set_global_policy(POLICIES[precision])


def step_optimizer(workload: Workload, learning_rate: float) -> keras.optimizers.Optimizer:
    """The workload's optimizer; under float16, wrapped to scale the loss (float16's range loses small gradients
    otherwise; a step whose gradients overflowed is skipped). Built in the strategy's scope, as the model."""
    optimizer = workload.keras_optimizer(learning_rate)
    if tf.keras.mixed_precision.global_policy().compute_dtype == "float16":
        return tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer


def device_strategy() -> tf.distribute.Strategy:
    """Every GPU of this host (MirroredStrategy: each step's batch is split across them), or the one device."""
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([g.name for g in gpus])
    return tf.distribute.get_strategy()


def make_train_step(
    workload: Workload,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    strategy: tf.distribute.Strategy,
    *,
    jit_compile: bool = False,
) -> Callable[[dict[str, Any]], tf.Tensor]:
    """One training step over a distributed batch (``{"pixels", "labels", ...}``), its loss summed over replicas;
    ``jit_compile``: its forward, loss and gradients compiled with XLA (module doc)."""
    with strategy.scope():
        optimizer.build(model.trainable_variables)  # its slots, created once per replica before the first step
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def gradients(pixels, labels):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(workload.tf_normalize(pixels), training=True), tf.float32)
            per_sample = loss_fn(labels, logits)
            loss = tf.nn.compute_average_loss(per_sample)  # over the whole step's batch, all replicas
            scaled = optimizer.scale_loss(loss)  # the loss itself unless a LossScaleOptimizer scales it
        return loss, tape.gradient(scaled, model.trainable_variables)

    if jit_compile:
        gradients = tf.function(gradients, jit_compile=True, reduce_retracing=True, autograph=False)

    def replica_step(pixels, labels):
        loss, grads = gradients(pixels, labels)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    # reduce_retracing: the last batch of an epoch may be short. No AutoGraph: the step has no tensor-dependent Python
    # control flow, and converting what Keras calls inside it logged a warning that printed os.environ whole
    @tf.function(reduce_retracing=True, autograph=False)
    def train_step(batch):
        losses = strategy.run(replica_step, args=(batch["pixels"], batch["labels"]))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return train_step


def distribute(strategy: tf.distribute.Strategy, dataset: tf.data.Dataset) -> tf.distribute.DistributedDataset:
    """The host's batches split across the replicas; the dataset is already this host's whole share."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return strategy.experimental_distribute_dataset(dataset.with_options(options))
