"""How many vCPUs of a trainer host decode beside its training loop (hybrid decode), for every framework.

A GPU host's training loop keeps one or two vCPUs busy (launching kernels, the
data plane's receivers); the rest sit idle while the data hosts decode. How many
the loop keeps is ``trainer_cpus``. ``auto`` measures it: a few training steps on
a synthetic batch of the workload's shape, before training, timing this
process's CPU use against the wall clock (``measure``: the framework's probe,
`steps.train.frameworks.pytorch.step.loop_cpus` or `steps.train.frameworks.tensorflow.local_decode.loop_cpus`).
A step on a GPU keeps about one vCPU busy (the launching thread), a step on the
CPU every vCPU the framework uses; one more is kept for the data plane. The rest
decode the samples `steps.train.core.split` gives this trainer, from the trainer
group's view of the training shards (the ``train_local`` channel).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from steps.common.errors import UserError
from steps.contract import HYBRID_CHANNEL
from steps.formats.webdataset import Decoder, iter_shard
from steps.train.core.cluster import Cluster, available_cpus
from steps.train.core.config import TrainConfig
from steps.train.core.manifest import train_channel

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
        return {
            "workers": self.workers,
            "kept_cpus": self.kept,
            "cpus": self.cpus,
            "measured_loop_cpus": self.loop_cpus,
            "why": self.why,
        }


def spare(cfg: TrainConfig, cluster: Cluster, measure: Callable[[list[Path]], float | str], *, list_shards: Callable) -> Spare:
    """How many decode workers this trainer host runs beside its training loop (0: none, and why); ``measure(shards)``:
    the vCPUs a training step keeps busy (trainer_cpus=auto), or why it cannot tell; ``list_shards``: the framework's
    shard files in a folder."""
    cpus = available_cpus()
    if cfg.trainer_cpus == "all":
        return Spare(0, cpus, cpus, why="trainer_cpus=all")
    channel = _channel(cluster)
    if channel is None:
        return Spare(
            0,
            cpus,
            cpus,
            why=f"no {HYBRID_CHANNEL} channel on group {cluster.current_group} (a definition from "
            "before hybrid decode): redeploy to give the dnn hosts the training shards",
        )
    shards = list_shards(train_channel(cluster, cfg.shard_wait_s, name=channel))
    if not shards:
        return Spare(0, cpus, cpus, why=f"no shards in the {channel} channel")
    kept, why, loop = kept_for_loop(cfg.trainer_cpus, cpus, lambda: measure(shards))
    workers = cpus - kept
    return Spare(workers, kept, cpus, shards if workers else [], why, loop)


def kept_for_loop(trainer_cpus: str, cpus: int, measure: Callable[[], float | str]) -> tuple[int, str, float | None]:
    """Of a trainer host's ``cpus``, how many its training loop keeps (``trainer_cpus``: all, a number, or auto:
    ``measure()``, the vCPUs a training step keeps busy, or why it cannot tell), why, and the measured vCPUs (auto).
    The PyTorch and TensorFlow hybrid decode, the Ray Train workers' reservation and the benches decide by it."""
    if trainer_cpus == "all":
        return cpus, "trainer_cpus=all", None
    if trainer_cpus != "auto":
        return min(cpus, int(trainer_cpus)), f"trainer_cpus={trainer_cpus}", None
    loop = measure()
    if isinstance(loop, str):  # why the step could not be measured
        return (
            cpus,
            (
                f"trainer_cpus=auto could not measure the training step ({loop}): set trainer_cpus to a number of "
                "vCPUs to keep for it"
            ),
            None,
        )
    why = f"trainer_cpus=auto: a training step keeps {loop:.2f} vCPU(s) busy, +{DATA_PLANE_CPUS} for the data plane"
    return kept_cpus(loop, cpus), why, loop


def sample_pixels(workload: Decoder, shards: list[Path]) -> np.ndarray:
    """One training sample of ``shards`` decoded by ``workload``: the shape and dtype of what a step takes, for a
    probe's synthetic batch."""
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
    raise UserError(
        f"no sample of {', '.join(str(s) for s in shards[:2]) or 'the training shards'} decodes "
        f"({'; '.join(errors[:3]) or 'they are empty'}); set trainer_cpus to a number to skip measuring",
        headline="cannot measure the training step",
    )


def _channel(cluster: Cluster) -> str | None:
    """The channel this trainer host reads training shards from: its own, or the train channel where a file
    system (FSx) mounts it on every host."""
    if cluster.channel(HYBRID_CHANNEL, required=False) is not None:
        return HYBRID_CHANNEL
    if cluster.channel("train", required=False) is not None:
        return "train"
    return None


def kept_cpus(loop_cpus: float, cpus: int) -> int:
    """vCPUs to keep for a training loop measured to keep ``loop_cpus`` busy: whole vCPUs (a little noise above a whole
    one does not cost another) plus one for the data plane, at most all of them."""
    return min(cpus, max(1, math.ceil(loop_cpus - 0.1)) + DATA_PLANE_CPUS)
