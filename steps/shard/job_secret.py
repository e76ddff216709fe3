"""The job secret as a file: random per pipeline execution, never in a job's Environment, never derived from a name.

The Shard step, the execution's first job, draws it (``secrets.token_hex(32)``) and writes
``<output>/secret/job-secret``; the pipeline hands that object to every training job as the
``secret`` input channel (a channel reaches a network-isolated container too), and each training
host reads it once from ``/opt/ml/input/data/secret/job-secret`` (`steps.train.dataplane.auth.load_job_secret`).
Written here, the folder is 0700 and the file 0600, so a local run's copy under the run folder is
readable by its owner only.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from steps.common.files import write_text_atomic
from steps.contract import SECRET_FILE

SECRET_BYTES = 32


def new_secret() -> str:
    return secrets.token_hex(SECRET_BYTES)


def write_job_secret(folder: str | Path) -> Path:
    """A fresh secret in ``<folder>/job-secret`` (folder 0700, file 0600); returns the file."""
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)  # a folder that was already there too
    return write_text_atomic(folder / SECRET_FILE, new_secret())  # written through mkstemp: 0600 from the start
