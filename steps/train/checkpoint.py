"""Checkpoints with the input position: a restarted job resumes the epoch where it stopped, exactly.

SageMaker syncs ``/opt/ml/checkpoints`` (``CheckpointConfig.LocalPath``) to ``CheckpointConfig.S3Uri``
while a job runs and copies it back when a job restarts there (a managed-spot interruption, a retried
step). The trainer writes one file, atomically (`save`: written beside, fsynced, renamed), holding
the model, the optimizer, every RNG, the epoch and step, the step statistics and the *input
position*: the ids of every sample consumed in the current epoch (trained, or counted corrupt).
On resume the data hosts are told that epoch and those ids (`Kind.RESUME`) and serve the rest of
the epoch only, so across an interruption each sample is consumed exactly once per epoch; the
`Ledger` proves it in metrics.json (per epoch: samples, distinct ids, a digest of the id set).

When: every ``checkpoint_every_steps`` steps, every ``checkpoint_every_s`` seconds, at the end of
every epoch, and on SIGTERM (SageMaker's stop and spot-interruption signal) or any failure between
steps. A SIGTERM during a step is noted (`Terminate`) and acted on once the step is over, so the
saved state is always that of a whole number of steps.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from steps.common.errors import Terminated, UserError
from steps.common.files import writing

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_VERSION = 1


class Interrupted(Terminated):
    """SIGTERM reached the trainer: the checkpoint is written, the job ends to be restarted."""

    headline = "interrupted"


class Terminate:
    """SIGTERM while armed is noted, not raised: the training loop ends at the next step boundary.
    Unarmed (start-up, validation, writing outputs) it ends the process at once, as before."""

    def __init__(self):
        self.event = threading.Event()
        self.armed = False

    def handler(self, signum, frame) -> None:
        self.event.set()
        if not self.armed:
            raise Terminated()

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.handler)

    @property
    def requested(self) -> bool:
        return self.event.is_set()


TERMINATE = Terminate()


class Ledger:
    """Which samples this trainer consumed, per epoch: the current epoch's ids, and a summary of each finished one."""

    def __init__(self, epochs: list | None = None, epoch: int = 0, ids: list | None = None):
        self.epochs: list[dict] = list(epochs or [])
        self.epoch = epoch
        self._ids: list = list(ids or [])

    def add(self, epoch: int, ids) -> None:
        if epoch != self.epoch:
            self.epoch, self._ids = epoch, []
        self._ids.extend(int(i) for i in ids)

    @property
    def ids(self) -> np.ndarray:
        return np.asarray(self._ids, dtype=np.int64)

    def close_epoch(self, epoch: int, all_ids: np.ndarray) -> dict:
        """``all_ids``: every trainer's ids of ``epoch`` together. Returns the epoch's summary, also kept."""
        distinct = np.unique(all_ids)
        summary = {"epoch": epoch, "samples": int(all_ids.size), "distinct": int(distinct.size),
                   "duplicates": int(all_ids.size - distinct.size), "digest": digest(distinct)}
        self.epochs.append(summary)
        self.epoch, self._ids = epoch + 1, []
        return summary

    def state(self) -> dict:
        return {"epochs": self.epochs, "epoch": self.epoch, "ids": self.ids}

    @classmethod
    def from_state(cls, state: dict) -> "Ledger":
        return cls(state["epochs"], state["epoch"], [int(i) for i in state["ids"]])


def digest(ids: np.ndarray) -> str:
    """The same set of sample ids, in any order, gives the same digest."""
    return hashlib.sha256(np.sort(np.asarray(ids, dtype=np.int64)).astype("<i8").tobytes()).hexdigest()[:16]


class Checkpoints:
    """Where and when trainers save: every trainer host reads ``folder`` on start, only the ``writer`` (the first) saves."""

    def __init__(self, folder: Path | None, *, every_steps: int = 0, every_s: float = 0.0, writer: bool = True):
        self.folder = folder
        self.writer = writer
        self.every_steps = every_steps
        self.every_s = every_s
        self.saved_at = time.monotonic()
        self.saved_step = -1  # the last save's step and epoch (-1: none by this trainer)
        self.saved_epoch = -1
        self.saves = 0
        self.seconds = 0.0  # spent saving, left out of the step times

    @property
    def path(self) -> Path | None:
        return self.folder / CHECKPOINT_FILE if self.folder else None

    def due(self, step: int) -> bool:
        if self.folder is None or not self.writer or step == self.saved_step:
            return False
        by_steps = self.every_steps and step % self.every_steps == 0
        by_time = self.every_s and time.monotonic() - self.saved_at >= self.every_s
        return bool(by_steps or by_time)

    def save(self, state: dict) -> Path | None:
        """Write ``state`` so that a reader (or SageMaker's upload) sees the old checkpoint or the new one, never half."""
        import torch

        if self.folder is None or not self.writer:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{CHECKPOINT_FILE}.", suffix=".tmp")
        try:
            with writing(self.path), os.fdopen(fd, "wb") as fh:
                torch.save({"version": CHECKPOINT_VERSION, **state}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.saved_at, self.saved_step, self.saved_epoch = time.monotonic(), state["steps"], state["epoch"]
        self.saves += 1
        return self.path

    def load(self) -> dict | None:
        import torch

        if self.path is None or not self.path.is_file():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as exc:  # noqa: BLE001 - a torn or foreign file: say which and what to do
            raise UserError(f"checkpoint {self.path} cannot be read ({type(exc).__name__}: {exc}); delete it (and its copy "
                            "under the job's CheckpointConfig.S3Uri) to start from scratch", headline="bad checkpoint") from None
        if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
            raise UserError(f"checkpoint {self.path} is not a version-{CHECKPOINT_VERSION} checkpoint of this project; delete "
                            "it to start from scratch", headline="bad checkpoint")
        return state


def rng_state() -> dict:
    import torch

    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def restore_rng(state: dict) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
