"""The ``isolated_costs`` document of metrics.json, framework-free: the PyTorch (`steps.train.frameworks.pytorch.step`) and TensorFlow
(`steps.train.frameworks.tensorflow.costs`) measurements both write it, and a TensorFlow host imports no torch."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path

import numpy as np

from steps.formats.webdataset import Decoder, iter_shard
from steps.train.core.cluster import available_cpus

MEASURED_BATCHES = 8  # after one warm-up batch


def cost_document(
    decode_s: list[float], step_s: list[float], *, batch_size: int, device: str, decode_in_one_process: bool
) -> dict:
    """``isolated_costs`` of metrics.json from per-batch timings whose first batch is the warm-up. Decode timed in
    one process is spread over this host's CPUs; timed through a pipeline that used them all, it is taken as is."""
    cpus = available_cpus()
    spread = cpus if decode_in_one_process else 1
    decode, step = decode_s[1:], step_s[1:]
    return {
        "batches": len(decode),
        "batch_size": batch_size,
        "cpus": cpus,
        "device": device,
        "decode_cpu_s_per_batch": min(decode) * cpus / spread,
        "decode_s_per_batch": min(decode) / spread,
        "step_s_per_batch": min(step),
        "decode_s_per_batch_median": statistics.median(decode) / spread,
        "step_s_per_batch_median": statistics.median(step),
    }


def timed_decode(
    workload: Decoder, shards: list[Path], *, batch_size: int, batches: int, collate: Callable
) -> tuple[list[float], list]:
    """``batches + 1`` batches of ``shards``' samples (a few rounds if they are small; the first batch the warm-up),
    decoded in this process with training augmentation as a data host decodes each sample, and the seconds each took;
    fewer when the shards run out. ``collate``: the framework's batch of ``(sample_id, label, pixels | None, error |
    None)`` items, timed with the decode."""
    rng = np.random.default_rng(0)
    samples = (s for _ in range(batches + 1) for shard in shards for s in iter_shard(shard))
    decode_s, decoded = [], []
    for _ in range(batches + 1):
        started = time.perf_counter()
        items: list[tuple[int, int, np.ndarray | None, str | None]] = []
        for sample in islice(samples, batch_size):
            try:
                items.append((sample.sample_id, sample.label, workload.decode(sample.raw, train=True, rng=rng), None))
            except Exception as exc:  # noqa: BLE001 - a corrupt sample costs what it costs
                items.append((sample.sample_id, sample.label, None, str(exc)))
        if len(items) < batch_size:
            break
        batch = collate(items)
        decode_s.append(time.perf_counter() - started)
        decoded.append(batch)
    return decode_s, decoded


def cost_line(host: str, costs: dict) -> str:
    return (
        f"[trainer] {host}: alone on {costs['cpus']} CPU(s): decode {costs['decode_s_per_batch'] * 1e3:.1f} ms, "
        f"step {costs['step_s_per_batch'] * 1e3:.1f} ms per batch of {costs['batch_size']}"
    )
