"""The step code (`steps/`) as a deterministic tar.gz: what SageMaker script mode downloads
(`sagemaker_submit_directory`) and processing jobs unpack, for the CDK asset and the local runner alike.

The archive is rebuilt from the files alone (sorted names, mtime 0, uid/gid 0, fixed modes, no
gzip timestamp), so the same sources give the same bytes and an asset hash only moves when code does.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

STEPS_DIR = Path(__file__).resolve().parents[1] / "steps"
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def build_code_tarball(*, source: Path, destination: Path) -> Path:
    """Pack `source` (kept as the top-level folder, so `steps.*` imports work) into `destination`."""
    files = sorted(
        p for p in source.rglob("*")
        if p.is_file() and not _SKIP_DIRS.intersection(p.relative_to(source).parts) and p.suffix not in _SKIP_SUFFIXES
    )
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            info = tarfile.TarInfo(f"{source.name}/{path.relative_to(source).as_posix()}")
            data = path.read_bytes()
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    destination.parent.mkdir(parents=True, exist_ok=True)
    with open(destination, "wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return destination
