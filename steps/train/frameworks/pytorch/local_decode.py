"""Hybrid decode, PyTorch: a trainer host's spare vCPUs (`steps.train.core.spare_cpus`) decode its share of every shard.

Its DataLoader workers read the trainer group's view of the training shards
(the ``train_local`` channel) and their batches join the data hosts' streams in
the trainer's merge queue (`steps.train.frameworks.pytorch.data.DataServiceClient.add_local`):
the same END accounting, sample-id ledger, RESUME position and failure handling.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import numpy as np
import torch

from steps.common.errors import UserError
from steps.shard.format import count_samples, iter_shard, list_shards
from steps.train.core.cluster import Cluster, available_cpus
from steps.train.core.config import TrainConfig
from steps.train.frameworks.pytorch.dataset import ShardDataset, batch_loader
from steps.train.core.spare_cpus import PROBE_STEPS, Spare, spare
from steps.train.core.split import Take
from steps.train.workload import Workload


def spare_workers(cfg: TrainConfig, cluster: Cluster, workload: Workload, model: torch.nn.Module, device: torch.device) -> Spare:
    """This trainer host's decode workers beside its loop; ``auto`` probes the step with a copy of ``model``."""
    def measure(shards: list[Path]) -> float:
        return loop_cpus(workload, model, device, sample_pixels(workload, shards), cfg.batch_size, cfg.learning_rate)

    return spare(cfg, cluster, measure, list_shards=list_shards)


def sample_pixels(workload: Workload, shards: list[Path]) -> np.ndarray:
    """One decoded training sample: the shape and dtype of what a step takes."""
    rng = np.random.default_rng(0)
    errors = []
    for shard in shards[:2]:
        for sample in iter_shard(shard):
            try:
                return workload.decode(sample.raw, train=True, rng=rng)
            except Exception as exc:  # noqa: BLE001 - a corrupt sample: try the next
                errors.append(f"{sample.sample_id}: {exc}")
                if len(errors) >= 16:
                    break
    raise UserError(f"no sample of {', '.join(str(s) for s in shards[:2]) or 'the training shards'} decodes "
                    f"({'; '.join(errors[:3]) or 'they are empty'}); set trainer_cpus to a number to skip measuring",
                    headline="cannot measure the training step")


def loop_cpus(workload: Workload, model: torch.nn.Module, device: torch.device, pixels: np.ndarray, batch_size: int,
              learning_rate: float, steps: int = PROBE_STEPS) -> float:
    """vCPUs this process keeps busy while training: CPU seconds over wall seconds of ``steps`` train steps on a
    synthetic batch, with a copy of ``model`` and a fresh optimizer (the model trained is untouched)."""
    net = copy.deepcopy(model).to(device)
    net.train()
    optimizer = workload.optimizer(net.parameters(), learning_rate)
    loss_fn = workload.loss().to(device)
    x_host = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(pixels, (batch_size, *pixels.shape))))
    y_host = torch.zeros(batch_size, dtype=torch.int64)

    def step() -> None:
        x = workload.normalize(x_host.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y_host.to(device))
        loss.backward()
        optimizer.step()
        loss.item()  # waits for the device

    for _ in range(2):
        step()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step()
    wall = time.perf_counter() - wall
    return (time.process_time() - cpu) / wall if wall > 0 else float(available_cpus())


class LocalDecoder:
    """This trainer host's decode workers over its side of the split (``take``), one epoch per `batches` call."""

    def __init__(self, cfg: TrainConfig, host: str, stream: int, workload: Workload, found: Spare, take: Take, *,
                 pinned: bool, epoch: int, consumed: np.ndarray):
        """``stream``: its shuffle stream, one of its own (the data hosts' are 0..len(data_hosts)-1)."""
        self.name = f"{host}/local"
        self.spare = found
        counts = [count_samples(s) for s in found.shards]
        self.dataset = ShardDataset(found.shards, workload, train=True, seed=cfg.seed, stream=stream, take=take)
        self.dataset.resume(epoch, consumed)
        self.samples_per_epoch = self.dataset.samples_per_epoch(counts)
        # the loop keeps the first vCPUs, the decode workers run on the others: they never take the loop's
        self.loader = batch_loader(self.dataset, batch_size=cfg.batch_size, num_workers=found.workers, pin_memory=pinned,
                                   cpus=sorted(os.sched_getaffinity(0))[-found.workers:])

    def batches(self, epoch: int):
        yield from self.loader

    def stop(self) -> None:
        self.loader._stop_workers()
