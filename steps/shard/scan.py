"""The shard step's scan stage: find the class folders and their images, decode each, quarantine the bad.

Input layout (how raw image datasets usually arrive)::

    <input>/<class_name>/<any/sub/path>.jpg|.jpeg|.png

Every image is decoded once here so a corrupt file fails this cheap CPU step,
not a GPU training job hours later. Nothing is dropped silently: undecodable
images are copied to ``<output>/quarantine/`` and other files are listed as
skipped, both with reasons, for the report.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from steps.common.errors import UserError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
LAYOUT_HINT = "expected <input>/<class_name>/<image>.jpg|.jpeg|.png, one folder per class"


@dataclass(frozen=True)
class Candidate:
    """An image file found in the input, before validation."""

    path: Path
    rel: str  # relative to the input folder, POSIX separators
    class_name: str
    label: int


def scan_input(input_dir: Path, *, source: str | None = None) -> tuple[list[str], list[Candidate], list[dict]]:
    """Return (classes, image candidates in id order, skipped files with reasons). ``source``: how messages name the
    input (the user's name for it, when ``input_dir`` is a copy)."""
    source = source or str(input_dir)
    if not input_dir.is_dir():
        raise UserError(f"input folder {source} does not exist or is not a folder; {LAYOUT_HINT}", headline="missing input")
    top = sorted(p for p in input_dir.iterdir() if not p.name.startswith("."))
    classes = [p.name for p in top if p.is_dir()]
    if not classes:
        raise UserError(f"no class folders in {source}; {LAYOUT_HINT}", headline="empty dataset")
    skipped = [{"path": p.name, "reason": "not inside a class folder"} for p in top if not p.is_dir()]
    candidates = []
    for label, name in enumerate(classes):
        for path in _visible_files(input_dir / name):
            rel = path.relative_to(input_dir).as_posix()
            if path.suffix.lower() in IMAGE_SUFFIXES:
                candidates.append(Candidate(path, rel, name, label))
            else:
                skipped.append({"path": rel, "reason": f"extension not one of {', '.join(IMAGE_SUFFIXES)}"})
    return classes, candidates, skipped


def _visible_files(folder: Path) -> list[Path]:
    """Regular files under ``folder``, sorted by relative path, skipping hidden files and folders."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [Path(root, f) for f in files if not f.startswith(".")]
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def decode_error(path: Path) -> str | None:
    """Why Pillow cannot fully decode ``path``, or None when it can."""
    try:
        with Image.open(path) as im:
            im.load()  # open() only reads the header; load() decodes every pixel
        return None
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for bad files
        return f"{type(exc).__name__}: {exc}"


def quarantine_corrupt(candidates: list[Candidate], output_dir: Path) -> list[dict]:
    """Copy undecodable images to ``<output>/quarantine/`` and return them with reasons."""
    # Pillow releases the GIL while decoding, so threads use every core of the host.
    with ThreadPoolExecutor(max_workers=min(32, os.cpu_count() or 1)) as pool:
        errors = list(pool.map(decode_error, [c.path for c in candidates]))
    quarantined = []
    for cand, reason in zip(candidates, errors):
        if reason is None:
            continue
        target = output_dir / "quarantine" / cand.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(cand.path, target)
        except OSError as exc:
            reason += f" (could not copy to quarantine: {exc})"
        quarantined.append({"path": cand.rel, "reason": reason})
    return quarantined
