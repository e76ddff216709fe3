"""Results that take seconds to make (a compiled pipeline definition, a synthesised stack), made once per test session
however many xdist workers ask for them.

The first worker to ask makes the result in a folder every worker of the session shares, under an exclusive lock;
the others wait on that lock, then read what it wrote. The folder lives in the session's own temp folder, so a
result never outlives the run that made it (nothing from an earlier run, made from other sources, can be read back).
The pattern is pytest-xdist's "Making session-scoped fixtures execute only once".
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

DONE = ".done"  # written last: a folder without it was left half made by a maker that failed


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temp folder of the whole session: each xdist worker's base temp folder is one level below it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def key_of(*parts: object) -> str:
    """A folder name for the inputs (their reprs: frozen dataclasses and sorted JSON spell every field)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def made_once(tmp_path_factory: pytest.TempPathFactory, kind: str, key: str, make: Callable[[Path], None]) -> Path:
    """The folder ``make`` filled for this ``kind`` and ``key``, filling it now if no worker has yet."""
    folder = session_root(tmp_path_factory) / "shared" / kind / key
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (folder / DONE).exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            (folder / DONE).touch()
    return folder


_made: dict[tuple[str, str], str] = {}  # this worker's copy of what it has read: (kind, key) -> JSON text


def shared_json(tmp_path_factory: pytest.TempPathFactory, kind: str, key: str, make: Callable[[], object]):
    """``make()``'s JSON value, made once per session: each call returns a fresh copy the caller may change."""
    if (kind, key) not in _made:
        folder = made_once(tmp_path_factory, kind, key, lambda into: (into / "value.json").write_text(json.dumps(make())))
        _made[kind, key] = (folder / "value.json").read_text()
    return json.loads(_made[kind, key])
