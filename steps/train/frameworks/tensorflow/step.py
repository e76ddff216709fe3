"""The one TensorFlow training step: the trainer trains with it, and the cost probe and the hybrid-decode sizing measure
it, so what is measured is what is trained."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tensorflow as tf

if TYPE_CHECKING:
    import keras

from steps.train.workload import Workload


def device_strategy() -> tf.distribute.Strategy:
    """Every GPU of this host (MirroredStrategy: each step's batch is split across them), or the one device."""
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy([g.name for g in gpus])
    return tf.distribute.get_strategy()


def make_train_step(
    workload: Workload, model: keras.Model, optimizer: keras.optimizers.Optimizer, strategy: tf.distribute.Strategy
) -> Callable[[dict[str, Any]], tf.Tensor]:
    """One training step over a distributed batch (``{"pixels", "labels", ...}``), its loss summed over replicas."""
    with strategy.scope():
        optimizer.build(model.trainable_variables)  # its slots, created once per replica before the first step
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(pixels, labels):
        with tf.GradientTape() as tape:
            per_sample = loss_fn(labels, model(workload.tf_normalize(pixels), training=True))
            loss = tf.nn.compute_average_loss(per_sample)  # over the whole step's batch, all replicas
        grads = tape.gradient(loss, model.trainable_variables)
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
