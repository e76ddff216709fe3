"""The Ray path's checkpoints: one file per epoch end, in the head's checkpoint folder (synced to S3 by SageMaker).

At an epoch's end rank 0 sends every worker's run so far, with its model, optimizer and (fp16) loss scaler, to the
results actor on the head (`steps.train.frameworks.ray.trainer`), which writes ``ray_checkpoint.pt`` atomically
before the next epoch starts. A restarted job's driver finds it there and hands it to every worker, each of which
restores its own part; an interrupted epoch is redone whole.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

from steps.common.errors import UserError
from steps.common.files import write_atomic
from steps.train.core.ledger import Ledger
from steps.train.core.metrics import StepStats
from steps.train.core.progress import Progress

RAY_CHECKPOINT = "ray_checkpoint.pt"  # in the head's checkpoint folder: model, optimizer and the run so far, per epoch
VERSION = 1


def saved_checkpoint(folder: Path) -> bytes | None:
    """The last epoch-end checkpoint in the head's checkpoint folder (a restarted job finds it there), or None."""
    path = folder / RAY_CHECKPOINT
    return path.read_bytes() if path.is_file() else None


def write_checkpoint(folder: Path, data: bytes, epoch: int, step: int) -> None:
    """The results actor's side: ``data`` into the head's checkpoint folder, atomically."""
    started = time.perf_counter()
    path = write_atomic(folder / RAY_CHECKPOINT, lambda fh: fh.write(data))
    print(
        f"[checkpoint] saved (end of epoch): epoch {epoch}, step {step}, in {time.perf_counter() - started:.2f} s -> {path}",
        flush=True,
    )


def save(results: str, rank: int, world: int, net, step, epoch: int, progress: Progress) -> None:
    """At an epoch's end: every worker's run so far, with rank 0's model, optimizer and (fp16) loss scaler, to the
    results actor, which writes it into the head's checkpoint folder before the next epoch starts. ``epoch``: the next
    one to run."""
    import ray
    import torch

    from steps.train.frameworks.pytorch.step import all_objects

    ranks = all_objects({"stats": progress.stats.state(), "corrupt": [list(c) for c in progress.corrupt]})
    if rank == 0:
        buffer = io.BytesIO()
        torch.save(
            {
                "version": VERSION,
                "epoch": epoch,
                "world": world,
                "model": net.state_dict(),
                "optimizer": step.optimizer.state_dict(),
                "scaler": step.scaler.state_dict() if step.scaler.is_enabled() else None,
                "ranks": ranks,
                "ledger": progress.ledger.epochs,
                "resumes": progress.resumes,
            },
            buffer,
        )
        ray.get(ray.get_actor(results).checkpoint.remote(buffer.getvalue(), epoch, progress.stats.steps))


def resumed(ref, world: int) -> dict | None:
    """The checkpoint the driver found (an object reference to its bytes), or None. A checkpoint of another number of
    trainer hosts is refused: each worker restores its own part."""
    if ref is None:
        return None
    import ray
    import torch

    state = torch.load(io.BytesIO(ray.get(ref)), map_location="cpu", weights_only=False)
    if state.get("version") != VERSION or state.get("world") != world:
        raise UserError(
            f"the Ray checkpoint {RAY_CHECKPOINT} was written by {state.get('world')} trainer host(s) (version "
            f"{state.get('version')}), this job has {world}: restart with the same instance groups, or remove "
            "the checkpoint to start over",
            headline="checkpoint does not fit",
        )
    return state


def resumed_progress(saved: dict, rank: int, cfg, folder: str) -> Progress:
    """This worker's run so far from the checkpoint: its statistics and corrupt samples, the ledger's closed epochs.
    What each node decoded is not restored: it counts this attempt, as the data hosts' own figures do on the other
    paths (nodes and their addresses change with a restart)."""
    mine = saved["ranks"][rank]
    stats = StepStats(cfg.warmup_steps)
    stats.restore(mine["stats"])
    start = saved["epoch"]
    progress = Progress(stats, [tuple(c) for c in mine["corrupt"]], Ledger(saved["ledger"], start), resumes=saved["resumes"] + 1)
    if rank == 0:
        print(
            f"[checkpoint] resuming from {folder}: epoch {start}, step {stats.steps} (resume {progress.resumes}); an "
            "interrupted epoch is redone whole",
            flush=True,
        )
    return progress
