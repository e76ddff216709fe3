"""The TensorFlow input pipeline: TFRecord shards -> decoded, augmented uint8 batches.

One definition serves both TensorFlow paths. Heterogeneous: the trainer
builds it over `SERVE_PATTERN` and hands it to tf.data.service; every worker
(one per data host) runs the graph itself, and the pattern, relative, is
resolved in that worker's working directory, which holds only that host's
shards. So each worker reads only its own files and every sample is served
exactly once per epoch. Homogeneous (the baseline): the trainer runs the same
graph in-process over its own list of files.

Hybrid decode: a worker on the trainer host serves every shard too, and each
worker decodes only the positions of each shard its ``TAKE_FILE`` names
(`steps.train.core.split`), so data hosts and trainer never serve the same sample.

Decoding is the workload's `tf_decode` (TF ops only: the graph runs in
another process). A sample that fails to decode is dropped by
``ignore_errors`` with a warning in the worker's log, and the trainer's
per-epoch accounting counts it as corrupt; `sample_ids` then names it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from steps.formats.tfrecord import SUFFIX, parse_record
from steps.train.core.constants import SHUFFLE_BUFFER
from steps.train.core.split import Take
from steps.train.workload import Workload

SERVE_PATTERN = f"*{SUFFIX}"  # relative: resolved on the worker, in its serving directory
TAKE_FILE = "hetero-take"  # relative, beside the shards a worker serves: "lo hi period" (steps.train.core.split.Take)


def _files(source: str | list[str]) -> tf.data.Dataset:
    if isinstance(source, str):
        # matching_files inside a dataset function, so it runs where the dataset runs, not here
        return tf.data.Dataset.from_tensors(source).flat_map(
            lambda p: tf.data.Dataset.from_tensor_slices(tf.io.matching_files(p))
        )
    return tf.data.Dataset.from_tensor_slices(tf.constant(source, dtype=tf.string))


def training_dataset(
    source: str | list[str], workload: Workload, *, batch_size: int, seed: int, epoch: int, take_file: str | None = None
) -> tf.data.Dataset:
    """Batches of ``{"pixels": uint8 NHWC, "labels": int64, "ids": int64}`` over one epoch of ``source``
    (a file pattern, resolved where the dataset runs, or a list of files). ``take_file``: a file, read where the
    dataset runs, naming which positions of each shard this worker decodes (hybrid decode: `write_take`)."""
    files = _files(source).shuffle(4096, seed=_mix(seed, epoch, 1))
    records = files.interleave(
        tf.data.TFRecordDataset if take_file is None else _taken(take_file),
        cycle_length=4,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=False,
    )
    samples = records.map(parse_record, num_parallel_calls=tf.data.AUTOTUNE).shuffle(SHUFFLE_BUFFER, seed=_mix(seed, epoch, 2))

    def decode(sample):
        sample_seed = tf.stack([tf.constant(_mix(seed, epoch, 3), tf.int64), sample["id"]])
        return {
            "pixels": workload.tf_decode(sample["image"], train=True, seed=sample_seed),
            "labels": sample["label"],
            "ids": sample["id"],
        }

    decoded = samples.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return decoded.ignore_errors(log_warning=True).batch(batch_size).prefetch(tf.data.AUTOTUNE)


def _taken(take_file: str):
    """A shard's records at the positions ``take_file``, beside it, names (``lo hi period``: ``lo <= k % period < hi``)."""

    @tf.autograph.experimental.do_not_convert  # plain TF ops; converting TFRecordDataset's constructor logs os.environ
    def records(path):
        # the take file's path is derived from the shard's, not a constant: graph rewriting would otherwise try to
        # read it where the dataset is defined (the trainer), not only where it runs (the worker)
        beside = tf.strings.regex_replace(path, "[^/]*$", take_file)
        take = tf.strings.to_number(tf.strings.split(tf.strings.strip(tf.io.read_file(beside))), tf.int64)
        lo, hi, period = take[0], take[1], take[2]
        return (
            tf.data.TFRecordDataset(path)
            .enumerate()
            .filter(lambda k, _: tf.logical_and(k % period >= lo, k % period < hi))
            .map(lambda _, record: record)
        )

    return records


def write_take(folder: Path, take: Take) -> None:
    """What `training_dataset(take_file=TAKE_FILE)` reads in a worker serving ``folder``."""
    (folder / TAKE_FILE).write_text(f"{take.lo} {take.hi} {take.period}\n")


def validation_dataset(files: list[str], workload: Workload, *, batch_size: int) -> tf.data.Dataset:
    def decode(sample):
        return {
            "pixels": workload.tf_decode(sample["image"], train=False, seed=tf.constant([0, 0], tf.int64)),
            "labels": sample["label"],
            "ids": sample["id"],
        }

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
