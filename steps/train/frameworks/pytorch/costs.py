"""Decode alone and the train step alone, per batch, on this host: the bound a data host is judged by.

A homogeneous host decodes a batch (``d`` seconds) and trains on it (``s``) one
after the other; a heterogeneous cluster overlaps the two on different hosts.
No overlap of two stages beats ``(d + s) / max(d, s)``, so a measured speedup
above that bound means the baseline (or the measurement) is wrong, not that
the data host is worth more. After training, the trainer measures both on
its own CPUs: decode in this process on a few validation shards' samples with
training augmentation (what a data host does per sample), then train steps on
those batches with a copy of the trained model and a fresh optimizer (so the
model written is untouched). Evaluate reads the result (``isolated_costs`` in
metrics.json) and prints the bound beside the measured speedup.
"""

from __future__ import annotations

import copy
import time
from itertools import islice
from pathlib import Path

import numpy as np
import torch

from steps.shard.format import iter_shard
from steps.train.core.cost_document import MEASURED_BATCHES, cost_document
from steps.train.frameworks.pytorch.dataset import collate
from steps.train.workload import Workload



def isolated_costs(workload: Workload, net: torch.nn.Module, device: torch.device, shards: list[Path], *,
                   batch_size: int, learning_rate: float, batches: int = MEASURED_BATCHES) -> dict | None:
    """Seconds per batch of decode (one process, this host's CPUs assumed to split it evenly) and of the train
    step (data resident), each the fastest of the measured batches: the stage's own cost with the least
    interference from anything else on the machine, so a bound built from them is a true best case.
    None when the shards hold fewer than two batches."""
    rng = np.random.default_rng(0)
    samples = (s for _ in range(batches + 1) for shard in shards for s in iter_shard(shard))  # a few rounds if small
    decode_s, decoded = [], []
    for _ in range(batches + 1):
        started = time.perf_counter()
        items = []
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
    if len(decoded) < 2:
        return None
    step_s = _step_seconds(workload, net, device, decoded, learning_rate)
    return cost_document(decode_s, step_s, batch_size=batch_size, device=device.type, decode_in_one_process=True)


def _step_seconds(workload: Workload, net: torch.nn.Module, device: torch.device, batches: list, learning_rate: float) -> list[float]:
    model = copy.deepcopy(net).to(device)
    model.train()
    optimizer = workload.optimizer(model.parameters(), learning_rate)
    loss_fn = workload.loss().to(device)
    seconds = []
    for batch in batches:
        started = time.perf_counter()
        x = workload.normalize(batch.pixels.to(device))
        y = batch.labels.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        loss.item()  # waits for the device
        seconds.append(time.perf_counter() - started)
    return seconds
