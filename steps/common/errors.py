"""Errors shared by every step, and the SageMaker failure-file contract.

A `UserError` is the user's to fix (bad input, bad configuration); anything else
is an internal error. Both end a step the way SageMaker expects: a one-line
reason in ``<base>/output/failure`` (SageMaker shows its first 1,024
characters as the job's FailureReason) and a non-zero exit code.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

FAILURE_FILE = "failure"  # <output>/failure: SageMaker shows its first 1,024 characters as FailureReason
FAILURE_REASON_LIMIT = 1024
# Processing jobs show the first KB of this file as ExitMessage (training jobs read output/failure).
PROCESSING_EXIT_MESSAGE = Path("/opt/ml/output/message")

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1
EXIT_TERMINATED = 128 + 15  # SIGTERM: what a process ended by it exits with
VOLUME_PARAMETER = "VolumeSizeGB"  # the pipeline parameter that sizes a job's storage volume (steps/contract.py)
CONTAINER_BASE_DIR = "/opt/ml"  # a SageMaker container's base folder (SAGEMAKER_BASE_DIR where set): on the job's volume


class HeteroError(Exception):
    """Base error: a one-line headline plus a message that says what to do. ``peer_end``: it says how a peer
    ended (a trainer's STOP with its failure, a trainer gone): the cause is the peer's and this host's stack
    tells nothing, so the step ends with one line, not a traceback."""

    headline = "hetero failed"
    peer_end = False

    def __init__(self, message: str, *, headline: str | None = None) -> None:
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


class Terminated(SystemExit):
    """SIGTERM arrived (StopTrainingJob, a spot interruption): the process unwinds, so peers learn why, and exits
    `EXIT_TERMINATED` with a one-line reason and no traceback. A SystemExit, so no ``except Exception`` swallows it."""

    headline = "terminated"

    def __init__(self, message: str = "SIGTERM (a stop or a spot interruption)") -> None:
        super().__init__(EXIT_TERMINATED)
        self.message = message

    def one_line(self) -> str:
        return f"{self.headline}: {self.message}".replace("\n", " ")


# Storage the user must fix, not a bug: errno -> (cause, fix)
_STORAGE_CAUSES = {
    errno.ENOSPC: ("no space left on the device", "free space there, or point the run at a bigger disk"),
    errno.EDQUOT: ("the disk quota is exceeded", "free space there, or point the run at another folder"),
    errno.EROFS: ("the file system is read-only", "choose a writable folder (e.g. --work-dir)"),
    errno.EACCES: ("permission denied", "choose a folder this user may write, or change its permissions"),
    errno.EPERM: ("operation not permitted", "choose a folder this user may write, or change its permissions"),
}


def storage_error(exc: BaseException | None) -> UserError | None:
    """A full disk or a read-only or forbidden folder anywhere in ``exc``'s chain, as one line naming the path
    and the cause; None for anything else."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _STORAGE_CAUSES:
            cause, fix = _STORAGE_CAUSES[exc.errno]
            where = exc.filename if exc.filename is not None else "a file"
            if exc.errno == errno.ENOSPC and (volume := _job_volume()):
                cause, fix = (
                    f"the job's storage volume is full ({volume})",
                    (
                        f"raise the {VOLUME_PARAMETER} parameter (hetero run --volume-gb), or stream the training shards (InputMode=FastFile)"
                    ),
                )
            return UserError(f"cannot write {where}: {cause} ({errno.errorcode[exc.errno]}); {fix}", headline="storage")
        exc = exc.__cause__ or exc.__context__
    return None


def _job_volume() -> str | None:
    """The size and place of the volume a SageMaker job's container writes to; None outside one."""
    base = Path(os.environ.get("SAGEMAKER_BASE_DIR") or CONTAINER_BASE_DIR)
    if not base.is_dir():
        return None
    total = shutil.disk_usage(base).total
    return f"{total / 2**30:,.1f} GB at {base}" if total >= 2**30 else f"{total / 2**20:,.1f} MB at {base}"


def describe(exc: BaseException) -> str:
    """One line for any exception: ours carry a headline, others their type."""
    text = exc.one_line() if isinstance(exc, (HeteroError, Terminated)) else f"{type(exc).__name__}: {exc}"
    return text.replace("\n", " ")


def write_failure(output_dir: str | os.PathLike, reason: str) -> Path:
    """Write the failure file SageMaker reads; returns its path."""
    path = Path(output_dir) / FAILURE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reason[:FAILURE_REASON_LIMIT] + "\n", encoding="utf-8")
    return path


def processing_exit_message() -> Path | None:
    """Where a Processing container reports why it failed, if this is one."""
    return PROCESSING_EXIT_MESSAGE if PROCESSING_EXIT_MESSAGE.parent.is_dir() else None


def failure_of(exc: BaseException) -> tuple[str, int, str]:
    """What ``exc`` ending a step records: its reason (the failure file's line), the exit code, and what the log shows:
    ``"line"`` (``ERROR <reason>``), ``"traceback"`` (an internal error) or ``"nothing"`` (Ctrl-C).

    User errors and a peer's end (`HeteroError.peer_end`) are one line; internal errors show the traceback."""
    if isinstance(exc, UserError):
        return exc.one_line(), EXIT_USER_ERROR, "line"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130, "nothing"
    if isinstance(exc, Terminated):
        return exc.one_line(), EXIT_TERMINATED, "line"
    storage = storage_error(exc)
    if storage is not None:
        return storage.one_line(), EXIT_USER_ERROR, "line"
    if isinstance(exc, HeteroError) and exc.peer_end:
        return exc.one_line(), EXIT_INTERNAL_ERROR, "line"
    reason = describe(exc) if isinstance(exc, HeteroError) else f"internal error: {describe(exc)}"
    return reason, EXIT_INTERNAL_ERROR, "traceback"


def record_failure(output_dir: str | os.PathLike, exc: BaseException) -> None:
    """The failure file for ``exc``, written now, as `run_step` will write it: for a process that may be ended before it
    returns there (a Ray driver whose node is about to be killed: `steps.train.frameworks.ray.trainer`)."""
    try:
        write_failure(output_dir, failure_of(exc)[0])
    except OSError:  # no room: run_step's ERROR line says why
        pass


def run_step(main: Callable[[], object], *, output_dir: str | os.PathLike, exit_message: Path | None = None) -> int:
    """Run ``main()`` as a SageMaker step and return the process exit code.

    A failure is logged as `failure_of` says and written to the failure file (and ``exit_message``, for Processing
    jobs). ``main`` returns 0 or raises.
    """
    try:
        main()
        return 0
    except BaseException as exc:  # noqa: BLE001 - the process boundary
        reason, code, shown = failure_of(exc)
        if shown == "traceback":
            traceback.print_exc()
        elif shown == "line":
            print(f"ERROR {reason}", file=sys.stderr, flush=True)
    try:
        write_failure(output_dir, reason)
        if exit_message is not None:
            exit_message.write_text(reason[:FAILURE_REASON_LIMIT] + "\n", encoding="utf-8")
    except OSError:  # a full volume has no room for it either: the ERROR line above, in the log, says why
        pass
    return code
