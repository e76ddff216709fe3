"""The Ray path's data pipeline: Ray Data decodes on every CPU of the cluster.

The pipeline reads the WebDataset shards (`ray.data.read_webdataset`, the raw
bytes: the workload decodes) and runs the workload's decode as map tasks,
which Ray schedules on any node with a free CPU: the data hosts' and the
trainer hosts' own spare ones alike. A sample that fails to decode travels
as a row marked not ``ok`` with its error, so the trainer counts and names
it, as on the other paths. Each Ray Train worker takes its share of it
(`exact_split`) into its loop (`steps.train.frameworks.ray.step`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from steps.formats.webdataset import IMAGE_EXTS, LABEL_EXT

if TYPE_CHECKING:  # ray is imported where used, as the functions below do
    import ray.data
    from ray.train import DataConfig

    from steps.train.workload import Workload

_WORKLOADS: dict = {}


def cached_workload(name: str, options: dict) -> Workload:
    """The workload ``name`` with ``options``, loaded once per process (every decode task and the loop ask for it)."""
    from steps.train.workload import load_workload

    key = (name, repr(sorted(options.items())))
    if key not in _WORKLOADS:
        _WORKLOADS[key] = load_workload(name, options)
    return _WORKLOADS[key]


def decode_batch(batch: dict, *, workload: str, options: dict) -> dict:
    """Rows of ``read_webdataset`` (key, image bytes, label bytes) -> decoded uint8 pixels, label, id, and per row
    whether it decoded (``ok``, ``error``), the CPU seconds it took and the node it ran on."""
    import ray

    w = cached_workload(workload, options)
    started = time.thread_time()
    keys = batch["__key__"]
    images = [
        next((batch[ext][i] for ext in IMAGE_EXTS if ext in batch and batch[ext][i] is not None), None) for i in range(len(keys))
    ]
    rng = np.random.default_rng()  # augmentation differs per epoch; the Ray path does not replay it bit for bit
    pixels, labels, ids, ok, errors = [], [], [], [], []
    for key, raw, label in zip(keys, images, batch[LABEL_EXT] if LABEL_EXT in batch else [None] * len(keys)):
        ids.append(int(key))
        try:
            if raw is None or label is None:
                raise ValueError("an image or a label file is missing")
            value = int(bytes(label).decode())
            decoded = w.decode(bytes(raw), train=True, rng=rng)
        except Exception as exc:  # noqa: BLE001 - a bad sample is counted and named, never the end of the epoch
            value, decoded, error = 0, np.zeros((w.image_size, w.image_size, 3), np.uint8), f"{type(exc).__name__}: {exc}"[:200]
        else:
            error = ""
        pixels.append(decoded)
        labels.append(value)
        ok.append(not error)
        errors.append(error)
    cpu = (time.thread_time() - started) / max(len(keys), 1)
    node = ray.util.get_node_ip_address()
    return {
        "pixels": np.stack(pixels),
        "labels": np.asarray(labels, np.int64),
        "ids": np.asarray(ids, np.int64),
        "ok": np.asarray(ok),
        "error": np.asarray(errors, dtype=object),
        "cpu_s": np.full(len(keys), cpu),
        "node": np.asarray([node] * len(keys), dtype=object),
    }


def training_dataset(files: list[str], workload: str, options: dict, batch_size: int, *, stream: bool) -> ray.data.Dataset:
    """Every shard's samples, decoded by Ray Data map tasks on whichever node has a CPU free.

    ``stream`` (the Train workers reserve CPUs of their own, so decode has the others): a block holds about one training
    batch of decoded pixels (`block_bytes`), not Ray's default 128 MB, so a read task streams a shard out in blocks of a
    few batches, each decoded by a task of its own as soon as it is read, on any free CPU, while the workers train. With
    the default a shard was one block, decoded by one task on one CPU, and the trainer's first batch of every epoch came
    when that shard's last sample was decoded (2.8 of an epoch's 2.9 s, one 14 MB shard). Not streamed: a Train worker
    that reserves no CPU (the 1-vCPU baseline) shares its CPU with the decode, and many small tasks beside its steps
    made each step 106 -> 155 ms where one block per shard decodes, then trains."""
    import ray
    from ray.data import DataContext
    from ray.data.context import DEFAULT_TARGET_MAX_BLOCK_SIZE

    # Ray Train hands the driver's context to the ingest, which reads it when it runs the dataset
    block = block_bytes(cached_workload(workload, options), batch_size) if stream else DEFAULT_TARGET_MAX_BLOCK_SIZE
    DataContext.get_current().target_max_block_size = block
    ds = ray.data.read_webdataset(files, decoder=None, override_num_blocks=max(len(files), 1))
    return ds.randomize_block_order().map_batches(
        # fn_kwargs gives decode_batch its keyword arguments; Ray's type of the function takes the batch alone
        decode_batch,  # type: ignore[arg-type]
        fn_kwargs={"workload": workload, "options": options},
        batch_size=batch_size,
        batch_format="numpy",
        num_cpus=1,
    )


MIN_BLOCK_BYTES = 1 << 20  # DataContext.target_min_block_size's default: smaller blocks cost more in tasks than they gain


def block_bytes(workload: Workload, batch_size: int) -> int:
    """Ray Data's target block size for the training dataset: one batch of decoded pixels (uint8, three channels),
    1 MiB at least."""
    return max(MIN_BLOCK_BYTES, batch_size * workload.image_size * workload.image_size * 3)


def exact_split() -> DataConfig:
    """Ray Train's DataConfig, splitting every dataset among the workers without dropping rows (``equal=False``); a
    single worker's is the dataset's own iterator (a streaming split of one is a coordinator actor, one more Ray
    worker process, passing every block through)."""
    from ray.train import DataConfig

    class ExactSplit(DataConfig):
        def configure(self, datasets, world_size, worker_handles, worker_node_ids, **kwargs):
            output = [{} for _ in range(world_size)]
            for name, ds in datasets.items():
                ds = ds.copy(ds)
                ds.context.execution_options = self._resolve_execution_options(name)
                if world_size == 1:  # nothing to split: the dataset's own iterator, no coordinator actor
                    output[0][name] = ds.iterator()
                    continue
                for i, split in enumerate(ds.streaming_split(world_size, equal=False, locality_hints=worker_node_ids)):
                    output[i][name] = split
            return output

    return ExactSplit()
