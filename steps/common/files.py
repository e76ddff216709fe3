"""Small file helpers shared by the steps."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Name ``path`` in an OSError raised inside that lacks a file name (a full disk surfaces in write() or
    close(), which do not say which file), so the error the user reads says where."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as JSON so that readers see the old file or the new one, never half."""
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def write_text_atomic(path: str | os.PathLike, data: str) -> Path:
    """Write ``data`` so that readers see the old file or the new one, never half."""
    return write_atomic(path, lambda fh: fh.write(data.encode("utf-8")))


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write`` on a binary file beside ``path``, flush it to disk, then rename it over ``path``: readers
    (and an uploader syncing the folder) see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same directory as the target so os.replace is a rename, not a copy.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with writing(path), os.fdopen(fd, "wb") as fh:
            sink = _Sink(fh)
            try:
                write(cast(BinaryIO, sink))  # a proxy of the file: what it does not define is the file's (__getattr__)
            except Exception as exc:
                if sink.error is None or sink.error is exc:
                    raise
                raise sink.error from exc  # the write's own error (a full disk), not what a C++ writer made of it
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


class _Sink:
    """A binary file that remembers the OSError its write raised: torch.save's writer reports a failed write as its own
    RuntimeError ("unexpected pos"), which says nothing of a full disk."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self._fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)
