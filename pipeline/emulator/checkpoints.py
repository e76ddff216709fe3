"""``CheckpointConfig`` as SageMaker runs it: its ``S3Uri`` is copied into every host's ``LocalPath``
(``/opt/ml/checkpoints``, under the host's folder) when the job starts, and what the hosts wrote there is copied back
when it ends, however it ends (`save`, new and changed files only)."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline import storage
from pipeline.emulator.hosts import CONTAINER_ROOT, Host
from steps.contract import CHECKPOINT_LOCAL_PATH


def local_dir(checkpoints: dict, host: Host) -> Path:
    """The request's LocalPath on ``host``."""
    local = checkpoints.get("LocalPath", CHECKPOINT_LOCAL_PATH)
    return host.base_dir / local[len(CONTAINER_ROOT) :]


def restore(checkpoints: dict | None, host: Host) -> None:
    """S3Uri -> every host's LocalPath, as SageMaker does when a job (re)starts."""
    if not checkpoints:
        return
    stored = storage.path(checkpoints["S3Uri"])
    local = local_dir(checkpoints, host)
    local.mkdir(parents=True, exist_ok=True)
    if stored.is_dir():
        shutil.copytree(stored, local, dirs_exist_ok=True)
    host.checkpoints_restored = _files(local)


def save(checkpoints: dict | None, hosts: list[Host]) -> None:
    """What each host wrote to its LocalPath -> S3Uri: new and changed files only, as SageMaker's sync uploads
    them (a host that only holds the restored copy must not put it back over a newer one)."""
    if not checkpoints:
        return
    stored = storage.path(checkpoints["S3Uri"])
    for host in hosts:
        local = local_dir(checkpoints, host)
        for relative, stamp in _files(local).items():
            if host.checkpoints_restored.get(relative) != stamp:
                target = stored / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(local / relative, target)


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """Whole files under ``folder`` (not one still being written: dot-named) -> (mtime_ns, size)."""
    found = {}
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.is_file() and not path.name.startswith("."):
            stat = path.stat()
            found[path.relative_to(folder).as_posix()] = (stat.st_mtime_ns, stat.st_size)
    return found
