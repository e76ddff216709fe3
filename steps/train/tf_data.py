"""The TensorFlow input pipeline: TFRecord shards -> decoded, augmented uint8 batches.

One definition serves both TensorFlow paths. Heterogeneous: the trainer
builds it over `SERVE_PATTERN` and hands it to tf.data.service; every worker
(one per data host) runs the graph itself, and the pattern, relative, is
resolved in that worker's working directory, which holds only that host's
shards. So each worker reads only its own files and every sample is served
exactly once per epoch. Homogeneous (the baseline): the trainer runs the same
graph in-process over its own list of files.

Decoding is the workload's `tf_decode` (TF ops only: the graph runs in
another process). A sample that fails to decode is dropped by
``ignore_errors`` with a warning in the worker's log, and the trainer's
per-epoch accounting counts it as corrupt; `sample_ids` then names it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from steps.shard.tfrecord import SUFFIX, parse_record
from steps.train.workload import Workload

SERVE_PATTERN = f"*{SUFFIX}"  # relative: resolved on the worker, in its serving directory
SHUFFLE_BUFFER = 256


def _files(source: str | list[str]) -> tf.data.Dataset:
    if isinstance(source, str):
        # matching_files inside a dataset function, so it runs where the dataset runs, not here
        return tf.data.Dataset.from_tensors(source).flat_map(lambda p: tf.data.Dataset.from_tensor_slices(tf.io.matching_files(p)))
    return tf.data.Dataset.from_tensor_slices(tf.constant(source, dtype=tf.string))


def training_dataset(source: str | list[str], workload: Workload, *, batch_size: int, seed: int, epoch: int) -> tf.data.Dataset:
    """Batches of ``{"pixels": uint8 NHWC, "labels": int64, "ids": int64}`` over one epoch of ``source``
    (a file pattern, resolved where the dataset runs, or a list of files)."""
    files = _files(source).shuffle(4096, seed=_mix(seed, epoch, 1))
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=False)
    samples = records.map(parse_record, num_parallel_calls=tf.data.AUTOTUNE).shuffle(SHUFFLE_BUFFER, seed=_mix(seed, epoch, 2))

    def decode(sample):
        sample_seed = tf.stack([tf.constant(_mix(seed, epoch, 3), tf.int64), sample["id"]])
        return {"pixels": workload.tf_decode(sample["image"], train=True, seed=sample_seed),
                "labels": sample["label"], "ids": sample["id"]}

    decoded = samples.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return decoded.ignore_errors(log_warning=True).batch(batch_size).prefetch(tf.data.AUTOTUNE)


def validation_dataset(files: list[str], workload: Workload, *, batch_size: int) -> tf.data.Dataset:
    def decode(sample):
        return {"pixels": workload.tf_decode(sample["image"], train=False, seed=tf.constant([0, 0], tf.int64)),
                "labels": sample["label"], "ids": sample["id"]}

    records = tf.data.TFRecordDataset(tf.constant(files, dtype=tf.string))
    decoded = records.map(parse_record).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return decoded.ignore_errors(log_warning=True).batch(batch_size).prefetch(tf.data.AUTOTUNE)


def sample_ids(files: list[str]) -> np.ndarray:
    """Every sample id in ``files``: reads them whole, so only asked for when samples went missing."""
    spec = {"id": tf.io.FixedLenFeature([], tf.int64)}
    ids = tf.data.TFRecordDataset(tf.constant(files, dtype=tf.string)).map(lambda r: tf.io.parse_single_example(r, spec)["id"])
    chunks = [batch.numpy() for batch in ids.batch(65536)]
    return np.concatenate(chunks) if chunks else np.empty(0, np.int64)


def _mix(seed: int, epoch: int, stream: int) -> int:
    return (seed * 1_000_003 + epoch * 1_009 + stream) % (2**31 - 1)
