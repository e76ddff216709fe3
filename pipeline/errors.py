"""The pipeline's own errors (the base classes live in `steps.common.errors`)."""

from __future__ import annotations

from steps.common.errors import HeteroError, UserError


class StepFailed(HeteroError):
    """A step's job failed; ``user_error``: a host of it exited with the user-error code (the run exits 2 too)."""

    headline = "step failed"

    def __init__(self, message: str, *, user_error: bool = False) -> None:
        super().__init__(message)
        self.user_error = user_error


class RequestRejected(UserError):
    """SageMaker would reject a job request (`pipeline.sagemaker.validation`), worded like its ValidationException."""

    headline = "ValidationException"
