"""The TensorFlow twin of `steps.train.frameworks.pytorch.step`: decode alone and the train step alone, per batch, on this host.

Decode: the training input pipeline (`steps.train.frameworks.tensorflow.dataset.training_dataset`, training augmentation) over
the validation shards, in this process with its own parallelism, timed batch by batch as it is consumed
(so the per-batch time is the pipeline's throughput on this host's CPUs); the batches are cached. Step:
the training step (`steps.train.frameworks.tensorflow.step.make_train_step`) on those cached batches, with a clone of the
trained model and a fresh optimizer, so the model written is untouched.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import tensorflow as tf

if TYPE_CHECKING:
    import keras

from steps.train.core.config import TrainConfig
from steps.train.core.cost_document import MEASURED_BATCHES, cost_document
from steps.train.frameworks.tensorflow.dataset import training_dataset
from steps.train.workload import Workload


def isolated_costs(
    cfg: TrainConfig,
    workload: Workload,
    model: keras.Model,
    strategy: tf.distribute.Strategy,
    files: list[str],
    batches: int = MEASURED_BATCHES,
) -> dict | None:
    """The same document as `steps.train.frameworks.pytorch.step.isolated_costs`; None without validation files."""
    if not files:
        return None
    from steps.train.frameworks.tensorflow.step import distribute, make_train_step, step_optimizer

    cached = (
        training_dataset(files, workload, batch_size=cfg.batch_size, seed=cfg.seed, epoch=0).repeat().take(batches + 1).cache()
    )
    decode_s = []
    started = time.perf_counter()
    for _ in cached:  # fills the cache: decode, batch by batch
        decode_s.append(time.perf_counter() - started)
        started = time.perf_counter()
    if len(decode_s) < 2:
        return None
    with strategy.scope():
        try:
            clone = tf.keras.models.clone_model(model)
        except (ValueError, TypeError) as exc:  # a subclassed user model cannot be cloned: no step figure, no bound
            print(f"[trainer] step cost not measured: the model cannot be cloned ({exc})", flush=True)
            return None
        clone.set_weights(model.get_weights())
        optimizer = step_optimizer(workload, cfg.learning_rate)
    train_step = make_train_step(workload, clone, optimizer, strategy)
    step_s = []
    for batch in distribute(strategy, cached):  # from the cache: data resident
        started = time.perf_counter()
        float(train_step(batch))  # waits for the device
        step_s.append(time.perf_counter() - started)
    device = "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
    return cost_document(decode_s, step_s, batch_size=cfg.batch_size, device=device, decode_in_one_process=False)
