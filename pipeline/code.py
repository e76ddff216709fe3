"""The code the training and processing jobs run, as one deterministic tar.gz: what SageMaker script mode downloads
(`sagemaker_submit_directory`) and processing jobs unpack, for the CDK asset and the local runner alike.

It holds `steps/` (as the folder ``steps/``) and the contents of each *code folder* the user names
(``hetero run --code-dir DIR``, the CDK context key ``hetero:codeDirs``) at its root, as the SageMaker SDK's
``source_dir`` does: a folder holding ``my_pkg/my_workload.py`` ships ``--workload my_pkg.my_workload``. A
``requirements.txt`` at the root is installed on every host before the entry point starts (the training toolkit's
``install_requirements``, which `pipeline.sagemaker.settings.TRAINING_BOOTSTRAP` runs). Hidden files and folders
(``.git``, ``.venv``, ``.env``), ``__pycache__`` and compiled Python never ship.

The archive is rebuilt from the files alone (sorted names, mtime 0, uid/gid 0, fixed modes, no
gzip timestamp), so the same sources give the same bytes and an asset hash only moves when code does.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterable
from pathlib import Path

from steps.common.errors import UserError

STEPS_DIR = Path(__file__).resolve().parents[1] / "steps"
CODE_DIRS_KEY = "hetero:codeDirs"  # the CDK context key naming the code folders `cdk deploy` ships (infra.settings)
REQUIREMENTS = "requirements.txt"  # at the code's root: installed before the entry point, as the toolkit does
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def _tree(folder: Path, exclude: Iterable[Path] = ()) -> list[tuple[str, Path]]:
    """(relative POSIX name, path) of every file of ``folder`` that ships, by name; none under ``exclude``."""
    skip = [Path(p).resolve() for p in exclude]
    found = []
    for path in folder.rglob("*"):
        parts = path.relative_to(folder).parts
        if (
            not path.is_file()
            or _SKIP_DIRS.intersection(parts)
            or path.suffix in _SKIP_SUFFIXES
            or any(p.startswith(".") for p in parts)
            or any(path.resolve().is_relative_to(s) for s in skip)
        ):
            continue
        found.append((path.relative_to(folder).as_posix(), path))
    return sorted(found)


def shipped_files(*, source: Path = STEPS_DIR, code_dirs: Iterable[Path] = (), exclude: Iterable[Path] = ()) -> dict[str, Path]:
    """Archive name -> file: ``source`` under its own name, each code folder's contents at the root. A code folder that
    is missing, holds a top-level ``steps/`` or ships a name another one ships is refused, naming both."""
    files = {f"{source.name}/{name}": path for name, path in _tree(source)}
    owner = dict.fromkeys(files, source)
    for folder in map(Path, code_dirs):
        if not folder.is_dir():
            raise UserError(
                f"code folder {str(folder)!r} is not a folder; name the folder that holds your package (its "
                "contents ship at the code's root: DIR/my_pkg/my_workload.py ships my_pkg.my_workload)",
                headline="bad code folder",
            )
        if (folder / source.name).exists():
            raise UserError(
                f"code folder {str(folder)!r} holds a {source.name}/ of its own, which would replace the project's "
                f"{source.name} package in the code; name a folder without it (the one holding your package)",
                headline="bad code folder",
            )
        for name, path in _tree(folder, exclude):
            if name in owner:
                raise UserError(
                    f"code folder {str(folder)!r} ships {name}, which {str(owner[name])!r} ships too; keep one "
                    "(every code folder's contents land at the same root)",
                    headline="bad code folder",
                )
            files[name], owner[name] = path, folder
    return dict(sorted(files.items()))


def requirements_file(code_dirs: Iterable[Path]) -> Path | None:
    """The requirements.txt that ships (at most one: two would be the same archive name, which `shipped_files` refuses)."""
    return next((Path(d) / REQUIREMENTS for d in code_dirs if (Path(d) / REQUIREMENTS).is_file()), None)


def build_code_tarball(
    *, destination: Path, source: Path = STEPS_DIR, code_dirs: Iterable[Path] = (), exclude: Iterable[Path] = ()
) -> Path:
    """Pack `source` (kept as the top-level folder, so `steps.*` imports work) and the code folders' contents (at the
    root; nothing under ``exclude``, e.g. the local runner's work folder) into `destination`."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(destination, "wb") as out,
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, path in shipped_files(source=source, code_dirs=code_dirs, exclude=exclude).items():
            info = tarfile.TarInfo(name)
            data = path.read_bytes()
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return destination
