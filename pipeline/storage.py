"""Local storage for the local runner: ``s3://local/<absolute path>`` is the folder or file at that path.

The local runner compiles the pipeline with this bucket, so every S3 location in the requests
it executes names a local path, and binding a request to this machine changes nothing else.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from steps.common.errors import UserError

LOCAL_BUCKET = "local"
SCHEME = f"s3://{LOCAL_BUCKET}/"


def uri(path: str | Path) -> str:
    """The local S3 URI of ``path``."""
    resolved = Path(path).resolve()
    if shlex.quote(str(resolved)) != str(resolved):
        raise UserError(
            f"path {str(resolved)!r} has characters a container's shell command would split (spaces, quotes, ...); "
            "use a work folder and input folder whose paths have none",
            headline="bad local path",
        )
    return SCHEME + str(resolved).lstrip("/")


def path(s3_uri: str) -> Path:
    """The local path an ``s3://local/...`` URI names."""
    if not isinstance(s3_uri, str) or not s3_uri.startswith(SCHEME):
        raise UserError(
            f"{s3_uri!r} is not a local location: the local runner reads and writes {SCHEME}<absolute path> "
            "only (pass local folders, not S3 URIs, to `hetero run`)",
            headline="not a local location",
        )
    return Path("/" + s3_uri[len(SCHEME) :].rstrip("/"))


def objects(s3_uri: str) -> list[tuple[str, Path]]:
    """(key relative to the prefix, path) of every object under an S3Prefix, sorted by key; hidden files are not objects."""
    root = path(s3_uri)
    if root.is_file():
        return [(root.name, root)]
    if not root.is_dir():
        raise UserError(f"no objects under {s3_uri} (the folder {root} does not exist)", headline="missing data")
    found = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not found:
        raise UserError(f"no objects under {s3_uri} (the folder {root} is empty)", headline="missing data")
    return found


def link_objects(items: list[tuple[str, Path]], destination: Path) -> None:
    """Provision objects into a folder, as a File-mode download does (as links: nothing is copied)."""
    destination.mkdir(parents=True, exist_ok=True)
    for key, source in items:
        link = destination / key
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(source.resolve())


def upload(folder: Path, s3_uri: str) -> None:
    """Put a folder's files under an S3 prefix (EndOfJob upload)."""
    target = path(s3_uri)
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(folder, target, dirs_exist_ok=True, symlinks=False)
