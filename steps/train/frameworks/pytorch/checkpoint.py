"""Checkpoints with the input position: a restarted job resumes the epoch where it stopped, exactly.

SageMaker syncs ``/opt/ml/checkpoints`` (``CheckpointConfig.LocalPath``) to ``CheckpointConfig.S3Uri``
while a job runs and copies it back when a job restarts there (a managed-spot interruption, a retried
step). Each trainer host writes its part atomically (`Checkpoints.save`: written beside, fsynced,
renamed): every RNG, the epoch, the step statistics and the *input position*, the ids of every
sample it consumed in the current epoch (trained, or counted corrupt); the first trainer's part also
holds the model and the optimizer. On resume the data hosts are told that epoch and the ids of every
trainer (`Kind.RESUME`) and serve the rest of the epoch only, so across an interruption each sample
is consumed exactly once per epoch; the `Ledger` proves it in metrics.json (per epoch: samples,
distinct ids, a digest of the id set).

When: at the end of every epoch; inside an epoch as `Checkpoints` says (with one trainer host also on
SIGTERM, SageMaker's stop and spot-interruption signal, and after any failure between steps). A
SIGTERM during a step is noted (`Terminate`) and acted on once the step is over, so the saved state
is always that of a whole number of steps.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from steps.common.errors import UserError, describe
from steps.common.files import write_atomic
from steps.train.core.errors import Interrupted
from steps.train.core.ledger import Ledger
from steps.train.core.metrics import StepStats
from steps.train.core.progress import Progress

if TYPE_CHECKING:
    import torch

    from steps.train.frameworks.pytorch.step import TrainStep

CHECKPOINT_VERSION = 2


class Checkpoints:
    """Every trainer host saves its own part, at the same points: ``trainer-<rank>.<slot>.pt`` (the first trainer's
    also holds the model and optimizer), then a small ``.json`` beside it naming the point, the tag
    ``(epoch, iteration within the epoch)``. A resume takes the newest tag that every trainer's part carries.

    Slots: ``end`` for the checkpoint at an epoch's end (where all trainers meet), ``a`` and ``b`` in turn for the
    ones inside an epoch. With one trainer host those come every ``every_steps`` steps, every ``every_s`` seconds,
    on SIGTERM and after a failure between steps. With several, only every ``every_steps`` iterations of an epoch
    (a point every host reaches in DistributedDataParallel's lockstep; a host that ran out of batches early writes
    alone, and its lone tags are never complete, so they are never resumed from), and the slot follows the
    iteration, so the hosts' slots hold the same tags."""

    def __init__(self, folder: Path | None, *, rank: int = 0, world: int = 1, every_steps: int = 0, every_s: float = 0.0) -> None:
        self.folder = folder
        self.rank, self.world = rank, world
        self.every_steps = every_steps
        self.every_s = every_s
        self.saved_at = time.monotonic()
        self.saved_tag: tuple[int, ...] | None = None  # (epoch, iteration) of this host's last save
        self.saved_step = -1
        self.saves = 0
        self.seconds = 0.0  # spent saving, left out of the step times

    @property
    def writer(self) -> bool:
        return self.rank == 0

    def due(self, iteration: int, step: int) -> bool:
        """After ``iteration`` (of this epoch; ``step`` of the run) is done: is a checkpoint due?"""
        if self.folder is None or step == self.saved_step:
            return False
        if self.world > 1:  # iterations are points every host reaches; times and run step counts differ between hosts
            return bool(self.every_steps) and iteration % self.every_steps == 0
        by_steps = self.every_steps and step % self.every_steps == 0
        by_time = self.every_s and time.monotonic() - self.saved_at >= self.every_s
        return bool(by_steps or by_time)

    def save(self, tag: tuple[int, int], part: dict, *, steps: int, end_of_epoch: bool = False) -> Path | None:
        """Write this host's ``part`` at ``tag`` so that a reader (or SageMaker's upload) sees a whole file or the
        previous one, never half; the JSON beside it, written last, is the commit."""
        import torch

        if self.folder is None:
            return None
        if end_of_epoch:
            slot = "end"
        elif self.world > 1:
            slot = "ab"[(tag[1] // max(self.every_steps, 1)) % 2]
        else:
            slot = "ab"[self.saves % 2]
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"trainer-{self.rank}.{slot}.pt"
        document = {"version": CHECKPOINT_VERSION, "tag": list(tag), "world_size": self.world, "steps": steps, **part}
        write_atomic(path, lambda fh: torch.save(document, fh))
        write_atomic(
            path.with_suffix(".json"), lambda fh: fh.write(json.dumps({"tag": list(tag), "world_size": self.world}).encode())
        )
        self.saved_at, self.saved_tag, self.saved_step = time.monotonic(), tuple(tag), steps
        self.saves += 1
        return path

    def load(self) -> tuple[tuple[int, int], list[dict]] | None:
        """The newest tag every trainer saved, and every trainer's part there (the first trainer's with the model)."""
        import torch

        if self.folder is None or not self.folder.is_dir():
            return None
        tags: dict[tuple, dict] = {}  # tag -> rank -> slot
        worlds = set()
        for marker in self.folder.glob("trainer-*.json"):
            try:
                rank, slot = marker.stem.removeprefix("trainer-").split(".")
                meta = json.loads(marker.read_text())
                tag, world = tuple(meta["tag"]), int(meta["world_size"])
            except (ValueError, KeyError, TypeError):
                continue  # not one of ours, or torn: never committed
            worlds.add(world)
            tags.setdefault(tag, {})[int(rank)] = slot
        if not tags:
            return None
        if worlds != {self.world}:
            raise UserError(
                f"checkpoints in {self.folder} were written by {sorted(worlds)} trainer host(s); this job has "
                f"{self.world}. Resume with the same DnnInstanceCount, or delete them to start over",
                headline="bad checkpoint",
            )
        for tag in sorted(tags, reverse=True):
            slots = tags[tag]
            if set(slots) != set(range(self.world)):
                continue  # a host that trained on alone after the others ran out: not a point they all reached
            parts = [self._read(self.folder / f"trainer-{r}.{slots[r]}.pt", torch) for r in range(self.world)]
            if all(p.get("tag") == list(tag) for p in parts):
                # what an interruption before the next save falls back to
                self.saved_tag, self.saved_step = tag, parts[self.rank]["steps"]
                return tag, parts
        return None

    def _read(self, path: Path, torch) -> dict:
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # noqa: BLE001 - a torn or foreign file: say which and what to do
            raise UserError(
                f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc}); delete the checkpoint folder "
                "(and its copy under the job's CheckpointConfig.S3Uri) to start from scratch",
                headline="bad checkpoint",
            ) from None
        if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
            raise UserError(
                f"checkpoint {path} is not a version-{CHECKPOINT_VERSION} checkpoint of this project; delete "
                "the checkpoint folder to start from scratch",
                headline="bad checkpoint",
            )
        return state


def rng_state() -> dict:
    import torch

    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def restore_rng(state: dict) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


# -- the PyTorch trainer's run so far in its checkpoints -------------------------------------------------------


def resume_progress(
    tag: tuple[int, int],
    parts: list[dict],
    rank: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    folder: Path | None,
) -> Progress:
    """The run so far from every trainer's part at ``tag`` (`Checkpoints.load`): this trainer's (``rank``) own, the
    model and optimizer from the first's."""
    mine, first = parts[rank], parts[0]
    model.load_state_dict(first["model"])
    optimizer.load_state_dict(first["optimizer"])
    restore_rng(mine["rng"])
    stats = StepStats(first["warmup_steps"])
    stats.restore(mine["stats"])
    ledger = Ledger.from_state(mine["ledger"])
    consumed = np.unique(np.concatenate([np.asarray(p["ledger"]["ids"], dtype=np.int64) for p in parts]))
    progress = Progress(stats, list(mine["corrupt"]), ledger, list(mine["budget_seen"]), consumed, tag[1], first["resumes"] + 1)
    progress.scaler = first.get("scaler")
    print(
        f"[checkpoint] resuming from {folder}: epoch {tag[0]}, iteration {tag[1]} of it, step {stats.steps}, "
        f"{consumed.size} sample(s) of the epoch already consumed by {len(parts)} trainer(s) (resume {progress.resumes})",
        flush=True,
    )
    return progress


def checkpoint_part(progress: Progress, step: TrainStep, *, first: bool) -> dict:
    """This trainer's part of a checkpoint; the first trainer's also holds the model and optimizer (and with fp16
    the loss scaler: a resumed run starts from the scale it had found, not from the first step's guess)."""
    from steps.train.frameworks.pytorch.step import bare

    part = {
        "stats": progress.stats.state(),
        "corrupt": progress.corrupt,
        "ledger": progress.ledger.state(),
        "rng": rng_state(),
        "budget_seen": progress.budget_seen,
        "resumes": progress.resumes,
    }
    if first:
        part.update(
            model=bare(step.model).state_dict(),
            optimizer=step.optimizer.state_dict(),
            warmup_steps=progress.stats.warmup_steps,
            scaler=step.scaler.state_dict() if step.scaler.is_enabled() else None,
        )
    return part


def save_checkpoint(
    checkpoints: Checkpoints,
    progress: Progress,
    step: TrainStep,
    why: str,
    *,
    end_of_epoch: bool = False,
    quiet_failure: bool = False,
) -> None:
    """Save this trainer's part. ``quiet_failure``: a save that itself fails is reported, not raised, so the error
    that led here stays the one the job ends with."""
    started = time.perf_counter()
    try:
        path = checkpoints.save(
            progress.tag,
            checkpoint_part(progress, step, first=checkpoints.writer),
            steps=progress.stats.steps,
            end_of_epoch=end_of_epoch,
        )
    except Exception as exc:  # noqa: BLE001
        if not quiet_failure:
            raise
        print(f"[checkpoint] could not save ({why}): {describe(exc)}", flush=True)
        return
    finally:
        checkpoints.seconds += time.perf_counter() - started
    if path is not None:
        print(
            f"[checkpoint] saved ({why}): epoch {progress.epoch}, step {progress.stats.steps}, "
            f"{progress.ledger.ids.size} sample(s) of the epoch consumed, in {time.perf_counter() - started:.2f} s -> {path}",
            flush=True,
        )


def interrupted(progress: Progress, checkpoints: Checkpoints) -> Interrupted:
    if checkpoints.saved_tag is None:
        where = "no checkpoint written yet"
    else:
        epoch, iteration = checkpoints.saved_tag
        where = f"checkpoint at epoch {epoch}, iteration {iteration} (step {checkpoints.saved_step}) in {checkpoints.folder}"
        if progress.stats.steps > checkpoints.saved_step:
            where += f"; the {progress.stats.steps - checkpoints.saved_step} step(s) since are redone"
    return Interrupted(
        f"SIGTERM (a stop or a spot interruption) during training: {where}; a job restarted on the same "
        "checkpoint location resumes there"
    )
