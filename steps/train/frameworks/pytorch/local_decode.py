"""Hybrid decode, PyTorch: a trainer host's spare vCPUs (`steps.train.core.spare_cpus`) decode its share of every shard.

Its DataLoader workers read the trainer group's view of the training shards
(the ``train_local`` channel) and their batches join the data hosts' streams in
the trainer's merge queue (`steps.train.frameworks.pytorch.data.DataServiceClient.add_local`):
the same END accounting, sample-id ledger, RESUME position and failure handling.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from steps.formats.webdataset import count_samples, list_shards
from steps.train.core.cluster import Cluster
from steps.train.core.config import TrainConfig
from steps.train.core.spare_cpus import Spare, sample_pixels, spare
from steps.train.core.split import Take
from steps.train.frameworks.pytorch.dataset import Batch, ShardDataset, batch_loader, worker_start_method
from steps.train.frameworks.pytorch.step import loop_cpus
from steps.train.frameworks.pytorch.throttle import Throttle
from steps.train.workload import Workload


def spare_workers(
    cfg: TrainConfig, cluster: Cluster, workload: Workload, model: torch.nn.Module, device: torch.device, precision: str
) -> Spare:
    """This trainer host's decode workers beside its loop; ``auto`` probes the step (`steps.train.frameworks.pytorch.step.loop_cpus`)
    with a copy of ``model``, in the ``precision`` it trains in."""

    def measure(shards: list[Path]) -> float:
        pixels = sample_pixels(workload, shards)
        return loop_cpus(workload, model, device, pixels, cfg.batch_size, cfg.learning_rate, precision=precision)

    return spare(cfg, cluster, measure, list_shards=list_shards)


class LocalDecoder:
    """This trainer host's decode workers over its side of the split (``take``), one epoch per `batches` call."""

    def __init__(
        self,
        cfg: TrainConfig,
        host: str,
        stream: int,
        workload: Workload,
        found: Spare,
        take: Take,
        *,
        pinned: bool,
        epoch: int,
        consumed: np.ndarray,
    ) -> None:
        """``stream``: its shuffle stream, one of its own (the data hosts' are 0..len(data_hosts)-1)."""
        self.name = f"{host}/local"
        self.spare = found
        counts = [count_samples(s) for s in found.shards]
        self.dataset = ShardDataset(found.shards, workload, train=True, seed=cfg.seed, stream=stream, take=take)
        self.dataset.resume(epoch, consumed)
        # bounds [1, the spare workers]: more would take the vCPUs measured to be the loop's
        method = worker_start_method()  # the loader's workers and the semaphore they share start alike
        self.throttle = self.dataset.throttle = Throttle(found.workers, start_method=method)
        self.samples_per_epoch = self.dataset.samples_per_epoch(counts)
        # the loop keeps the first vCPUs, the decode workers run on the others: they never take the loop's
        self.loader = batch_loader(
            self.dataset,
            batch_size=cfg.batch_size,
            num_workers=found.workers,
            pin_memory=pinned,
            cpus=sorted(os.sched_getaffinity(0))[-found.workers :],
            start_method=method,
        )

    def batches(self, epoch: int) -> Iterator[Batch]:
        yield from self.loader

    def stop(self) -> None:
        self.throttle.open()
        self.loader._stop_workers()
