"""Errors shared by every step, and the SageMaker failure-file contract.

A `UserError` is the user's to fix (bad input, bad configuration); anything else
is an internal error. Both end a step the way SageMaker expects: a one-line
reason in ``<base>/output/failure`` (SageMaker shows its first 1,024
characters as the job's FailureReason) and a non-zero exit code.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

FAILURE_REASON_LIMIT = 1024

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1


class HeteroError(Exception):
    """Base error: a one-line headline plus a message that says what to do."""

    headline = "hetero failed"

    def __init__(self, message: str, *, headline: str | None = None):
        super().__init__(message)
        if headline is not None:
            self.headline = headline

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def one_line(self) -> str:
        return f"{self.headline}: {self.message}".replace("\n", " ")


class UserError(HeteroError):
    """Bad input or configuration: the message names the value and the fix."""

    headline = "invalid input"


class InternalError(HeteroError):
    headline = "internal error"


def write_failure(output_dir: str | os.PathLike, reason: str) -> Path:
    """Write the failure file SageMaker reads; returns its path."""
    path = Path(output_dir) / "failure"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reason[:FAILURE_REASON_LIMIT] + "\n", encoding="utf-8")
    return path


def run_step(main, *, output_dir: str | os.PathLike) -> int:
    """Run ``main()`` as a SageMaker step and return the process exit code.

    User errors print one line; internal errors print the traceback. Both
    write the failure file. ``main`` returns 0 or raises.
    """
    try:
        main()
        return 0
    except UserError as exc:
        reason = exc.one_line()
        print(f"ERROR {reason}", file=sys.stderr, flush=True)
        write_failure(output_dir, reason)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        write_failure(output_dir, "interrupted")
        return 130
    except BaseException as exc:  # noqa: BLE001 - the process boundary
        traceback.print_exc()
        reason = exc.one_line() if isinstance(exc, HeteroError) else f"internal error: {type(exc).__name__}: {exc}"
        write_failure(output_dir, reason.replace("\n", " "))
        return EXIT_INTERNAL_ERROR
