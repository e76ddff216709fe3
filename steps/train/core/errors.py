"""The training step's own errors, framework-free (the base classes live in `steps.common.errors`)."""

from __future__ import annotations

from steps.common.errors import Terminated, UserError


class CorruptData(UserError):
    """An epoch's samples failed to decode beyond ``max_corrupt_share`` (`steps.train.core.corrupt`)."""

    headline = "corrupt data"


class Interrupted(Terminated):
    """SIGTERM reached the trainer: the checkpoint is written, the job ends to be restarted."""

    headline = "interrupted"
