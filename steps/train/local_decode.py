"""Hybrid decode: a trainer host's spare vCPUs decode a share of the data beside the data hosts.

A GPU host's training loop keeps one or two vCPUs busy (launching kernels, the
data plane's receivers); the rest sit idle while the data hosts decode. Here
they run DataLoader workers over the trainer group's view of the training
shards (the ``train_local`` channel, `steps.contract.HYBRID_CHANNEL`) and
their batches join the data hosts' streams in the trainer's merge queue
(`steps.train.data_client.DataServiceClient.add_local`): the same END
accounting, sample-id ledger, RESUME position and failure handling.

How many vCPUs the loop keeps is ``trainer_cpus``. ``auto`` measures it: a few
training steps on a synthetic batch of the workload's shape, before training,
with a copy of the model, timing this process's CPU use against the wall
clock. A step on a GPU keeps about one vCPU busy (the launching thread), a
step on the CPU every vCPU torch uses; one more vCPU is kept for the data
plane. Which samples each host decodes is `steps.train.split`.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from steps.common.errors import UserError
from steps.contract import HYBRID_CHANNEL
from steps.shard.format import count_samples, iter_shard, list_shards
from steps.train.cluster import Cluster, available_cpus
from steps.train.config import TrainConfig
from steps.train.dataset import ShardDataset, batch_loader
from steps.train.manifest import train_channel
from steps.train.split import Take
from steps.train.workload import Workload

PROBE_STEPS = 6  # measured, after two warm-up steps
DATA_PLANE_CPUS = 1  # receivers, the merge, copies to the device: kept beside what the step measures


@dataclass
class Spare:
    """What this trainer host can decode: ``workers`` decode processes over ``shards``, ``kept`` vCPUs for the loop."""

    workers: int
    kept: int
    cpus: int
    shards: list[Path] = field(default_factory=list)
    why: str = ""
    loop_cpus: float | None = None  # measured (trainer_cpus=auto)

    def as_metrics(self) -> dict:
        return {"workers": self.workers, "kept_cpus": self.kept, "cpus": self.cpus, "measured_loop_cpus": self.loop_cpus,
                "why": self.why}


def spare(cfg: TrainConfig, cluster: Cluster, workload: Workload, model: torch.nn.Module, device: torch.device) -> Spare:
    """How many decode workers this trainer host runs beside its training loop (0: none, and why)."""
    cpus = available_cpus()
    if cfg.trainer_cpus == "all":
        return Spare(0, cpus, cpus, why="trainer_cpus=all")
    channel = _channel(cluster)
    if channel is None:
        return Spare(0, cpus, cpus, why=f"no {HYBRID_CHANNEL} channel on group {cluster.current_group} (a definition from "
                                        "before hybrid decode): redeploy to give the dnn hosts the training shards")
    shards = list_shards(train_channel(cluster, cfg.shard_wait_s, name=channel))
    loop = None
    if cfg.trainer_cpus == "auto":
        loop = loop_cpus(workload, model, device, _sample_pixels(workload, shards), cfg.batch_size, cfg.learning_rate)
        kept = min(cpus, max(1, math.ceil(loop - 0.1)) + DATA_PLANE_CPUS)
        why = f"trainer_cpus=auto: a training step keeps {loop:.2f} vCPU(s) busy, +{DATA_PLANE_CPUS} for the data plane"
    else:
        kept = min(cpus, int(cfg.trainer_cpus))
        why = f"trainer_cpus={cfg.trainer_cpus}"
    workers = cpus - kept
    if not shards:
        workers, why = 0, f"no shards in the {channel} channel"
    return Spare(workers, kept, cpus, shards if workers else [], why, loop)


def _channel(cluster: Cluster) -> str | None:
    """The channel this trainer host reads training shards from: its own, or the train channel where a file
    system (FSx) mounts it on every host."""
    if cluster.channel(HYBRID_CHANNEL, required=False) is not None:
        return HYBRID_CHANNEL
    if cluster.channel("train", required=False) is not None:
        return "train"
    return None


def _sample_pixels(workload: Workload, shards: list[Path]) -> np.ndarray:
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

    def __init__(self, cfg: TrainConfig, cluster: Cluster, workload: Workload, found: Spare, take: Take, *, pinned: bool,
                 epoch: int, consumed: np.ndarray):
        self.name = f"{cluster.current_host}/local"
        self.spare = found
        counts = [count_samples(s) for s in found.shards]
        # a stream of its own: the data hosts' streams are 0..len(data_hosts)-1
        self.dataset = ShardDataset(found.shards, workload, train=True, seed=cfg.seed,
                                    stream=len(cluster.data_hosts) + cluster.rank, take=take)
        self.dataset.resume(epoch, consumed)
        self.samples_per_epoch = self.dataset.samples_per_epoch(counts)
        self.loader = batch_loader(self.dataset, batch_size=cfg.batch_size, num_workers=found.workers, pin_memory=pinned)

    def batches(self, epoch: int):
        yield from self.loader

    def stop(self) -> None:
        self.loader._stop_workers()
