"""TensorFlow checkpoints, at epoch boundaries: model, optimizer and the run so far.

The variables go through ``tf.train.Checkpoint`` into a folder of their own per epoch
(``tf-epoch-<n>/``); the small JSON beside them (`POINTER`, written atomically last) names the
folder and holds the epoch to resume at, the step statistics and the per-epoch accounting. The JSON
is the commit point: a folder without it is an interrupted save, ignored and replaced. A resumed job
starts at the epoch after the last one saved, and redoes the steps of the epoch it was interrupted in
(tf.data.service has no position inside an epoch to resume from: the issue is open upstream).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from steps.common.errors import UserError
from steps.common.files import write_json_atomic

if TYPE_CHECKING:  # TensorFlow is imported where used, as the methods below do
    import keras

POINTER = "tf_checkpoint.json"
VERSION = 1


class Checkpoints:
    def __init__(self, folder: Path, *, writer: bool = True) -> None:
        self.folder = folder
        self.writer = writer
        self.saved_epoch = -1
        self.resumes = 0  # how many times this run was resumed from a checkpoint

    def save(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, state: dict) -> Path | None:
        """``state["epoch"]``: the next epoch to run."""
        import tensorflow as tf

        if not self.writer:
            return None
        name = f"tf-epoch-{state['epoch']}"
        target = self.folder / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(target / "variables"))
        pointer = {"version": VERSION, "variables": f"{name}/variables", "loss_scaled": _loss_scaled(optimizer), **state}
        write_json_atomic(self.folder / POINTER, pointer)
        for old in self.folder.glob("tf-epoch-*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        self.saved_epoch = state["epoch"]
        return self.folder / POINTER

    def load(self, model: keras.Model, optimizer: keras.optimizers.Optimizer) -> dict | None:
        """Restore the variables into ``model`` and ``optimizer`` (built); returns the saved state, or None."""
        import tensorflow as tf

        pointer = self.folder / POINTER
        if not pointer.is_file():
            return None
        try:
            state = json.loads(pointer.read_text())
            if state.get("version") != VERSION:
                raise ValueError(f"version {state.get('version')!r}, not {VERSION}")
            _check_loss_scaling(pointer, state.get("loss_scaled", False), _loss_scaled(optimizer))
            tf.train.Checkpoint(model=model, optimizer=optimizer).read(
                str(self.folder / state["variables"])
            ).assert_existing_objects_matched()
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a torn, foreign or mismatched checkpoint: say which and what to do
            raise UserError(
                f"checkpoint {pointer} cannot be restored ({type(exc).__name__}: {str(exc)[:300]}); delete the "
                "checkpoint folder (and its copy under CheckpointConfig.S3Uri) to start from scratch",
                headline="bad checkpoint",
            ) from None
        self.saved_epoch = state["epoch"]  # the checkpoint an interruption before the next save falls back to
        return state


def _loss_scaled(optimizer: keras.optimizers.Optimizer) -> bool:
    import tensorflow as tf

    return isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer)


def _check_loss_scaling(pointer: Path, saved: bool, now: bool) -> None:
    """fp16's optimizer is a LossScaleOptimizer, whose variables do not restore into a plain one or back."""
    if saved != now:
        was, fix = ("fp16", "Precision=fp16") if saved else ("fp32 or bf16", "Precision=fp32 or bf16")
        raise UserError(
            f"checkpoint {pointer} was written in {was} and this run trains in {'fp16' if now else 'fp32 or bf16'}: resume "
            f"with {fix}, or delete the checkpoint folder (and its copy under CheckpointConfig.S3Uri) to start from scratch",
            headline="checkpoint does not fit",
        )
