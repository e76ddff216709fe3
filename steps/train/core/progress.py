"""One trainer's run so far, kept the same way by every torch loop (the PyTorch trainer and each Ray Train worker):
step statistics, the corrupt samples met, the sample ledger and how many times the job resumed, and the
bookkeeping of a step done, an epoch closed and the ledger's report in metrics.json.

What a checkpoint holds of it, and how a resume rebuilds it, stays with each framework's checkpoint: their files
differ (the PyTorch trainer's parts per trainer inside an epoch, Ray's one file per epoch end).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from steps.train.core.ledger import Ledger
from steps.train.core.metrics import StepStats

if TYPE_CHECKING:
    from steps.train.core.config import TrainConfig


@dataclass
class Progress:
    """Everything a checkpoint restores besides the model and optimizer: one trainer's run so far."""

    stats: StepStats
    corrupt: list
    ledger: Ledger
    budget_seen: list = field(default_factory=list)  # corrupt samples of the current epoch, for the budget
    consumed: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # every trainer's ids of the epoch
    iteration: int = 0  # steps trained in the current epoch: DistributedDataParallel's lockstep count
    resumes: int = 0
    in_step: bool = False
    scaler: dict | None = None  # the fp16 loss scaler's state a checkpoint held, for the step to resume with

    @property
    def epoch(self) -> int:
        return self.ledger.epoch

    @property
    def tag(self) -> tuple[int, int]:
        return self.ledger.epoch, self.iteration

    @classmethod
    def fresh(cls, cfg: TrainConfig) -> Progress:
        return cls(StepStats(cfg.warmup_steps), [], Ledger())

    def stepped(self, cfg: TrainConfig, *, epoch: int, wait: float, compute: float, samples: int, loss: float) -> None:
        """A training step done: its time waiting for data and computing, its samples; every ``log_every`` steps a line."""
        self.stats.record(wait=wait, compute=compute, samples=samples)
        self.iteration += 1
        if self.stats.steps % cfg.log_every == 0:
            print(self.stats.last_step_line(epoch=epoch, loss=loss), flush=True)

    def reached(self, max_steps: int) -> bool:
        """Whether the run has trained ``max_steps`` steps (0: no limit)."""
        return bool(max_steps and self.stats.steps >= max_steps)

    def close_epoch(self, epoch: int, gather: Callable[[np.ndarray], list[np.ndarray]]) -> None:
        """``epoch`` is over on every trainer: the ledger summarises every trainer's ids of it (``gather``: this
        trainer's ids -> every trainer's), and the next epoch starts with no corrupt sample and no step."""
        self.ledger.close_epoch(epoch, np.concatenate(gather(self.ledger.ids)))
        self.budget_seen, self.iteration = [], 0

    def ledger_report(self) -> dict:
        """metrics.json's sample_ledger: every closed epoch, the resumes, and the epoch a max_steps stop left open."""
        partial = self.ledger.ids
        return {
            "epochs": self.ledger.epochs,
            "resumes": self.resumes,
            "partial_epoch": {"epoch": self.ledger.epoch, "samples": int(partial.size)} if partial.size else None,
        }
