"""Shard step: turn a class-per-folder image dataset into balanced shards for training.

Input layout (how raw image datasets usually arrive)::

    <input>/<class_name>/<any/sub/path>.jpg|.jpeg|.png

Output, in one of two formats with the same samples and manifest (``--format``):
WebDataset tar shards for PyTorch (`steps.shard.format`, the default) or TFRecord
shards for TensorFlow (`steps.shard.tfrecord`, ``.tfrecord`` instead of ``.tar``)::

    <output>/train/train-00000.tar ...            one S3 prefix, split per host by ShardedByS3Key
    <output>/validation/validation-00000.tar ...
    <output>/quarantine/<class>/<file>            images Pillow could not decode
    <output>/manifest.json                        format, classes, shards, sizes, sha256
    <output>/report.json                          per-class counts, quarantined and skipped files

Every image is decoded once here so a corrupt file fails this cheap CPU step, not a
GPU training job hours later. Nothing is dropped silently: bad images are quarantined
and other files are listed as skipped.

Run locally::

    python steps/shard/shard.py --input runs/data/raw --output runs/data/shards --data-hosts 2
    python steps/shard/shard.py --input runs/data/raw --output runs/data/tfrecords --format tfrecord

Run in SageMaker Processing (the `steps` package uploaded as the code folder; the
defaults are Processing's conventional paths)::

    python3 /opt/ml/processing/input/code/steps/shard/shard.py --data-hosts 2 [--format tfrecord]

``--format tfrecord`` needs TensorFlow in the Processing image; tar shards need only Pillow.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

if not __package__:
    # SageMaker Processing runs this file by path, so only its own folder is on
    # sys.path; add the repository root so the `steps` package imports work.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from PIL import Image  # noqa: E402

from steps.common.errors import UserError, processing_exit_message, run_step  # noqa: E402
from steps.shard.format import sha256_file, write_shard  # noqa: E402
from steps.shard.tfrecord import FRAME_BYTES, SUFFIX as TFRECORD_SUFFIX  # noqa: E402
from steps.shard.tfrecord import check_tensorflow, write_tfrecord_shard  # noqa: E402

DEFAULT_INPUT = "/opt/ml/processing/input/raw"
DEFAULT_OUTPUT = "/opt/ml/processing/output"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
# S3 moves 1-128 MB objects best; outside that range either request overhead or
# per-host imbalance dominates.
MIN_SHARD_MB, MAX_SHARD_MB = 1, 128
MB = 1024 * 1024
LAYOUT_HINT = "expected <input>/<class_name>/<image>.jpg|.jpeg|.png, one folder per class"
# A tf.train.Example's feature names, tags and lengths around the image bytes: 71-76 bytes
# measured for 1 KB-1 MB images and 9-digit ids; rounded up so shards err on the small side.
EXAMPLE_OVERHEAD = 80


@dataclass(frozen=True)
class ShardFormat:
    """How one output format names, writes and sizes shards."""

    suffix: str
    write: Callable[[Path, Iterable[tuple[int, int, str, bytes]]], int]
    sample_bytes: Callable[[int], int]  # image file size -> bytes the sample adds to a shard


@dataclass(frozen=True)
class Candidate:
    """An image file found in the input, before validation."""

    path: Path
    rel: str  # relative to the input folder, POSIX separators
    class_name: str
    label: int


@dataclass(frozen=True)
class Item:
    """A validated image that will go into a shard."""

    sample_id: int
    label: int
    path: Path
    ext: str
    size: int


def shard_dataset(input_dir, output_dir, *, target_shard_mb: float = 64, data_hosts: int = 1,
                  validation_fraction: float = 0.1, seed: int = 0, shard_format: str = "webdataset") -> dict:
    """Validate, split and shard ``input_dir`` into ``output_dir``; return the manifest.

    ``shard_format`` is ``"webdataset"`` (tar) or ``"tfrecord"``.
    """
    target_bytes = _check_options(target_shard_mb, data_hosts, validation_fraction, shard_format)
    input_dir, output_dir = Path(input_dir), Path(output_dir)
    if output_dir.resolve().is_relative_to(input_dir.resolve()):
        raise UserError(f"output folder {output_dir} is inside input folder {input_dir}; "
                        "it would be read as a class on the next run, choose another --output")
    classes, candidates, skipped = scan_input(input_dir)
    _clear_previous_output(output_dir)
    quarantined = quarantine_corrupt(candidates, input_dir, output_dir)
    bad = {q["path"] for q in quarantined}
    items = _assign_ids([c for c in candidates if c.rel not in bad])
    if not items:
        raise UserError(f"no readable images in {input_dir} ({len(quarantined)} corrupt, "
                        f"{len(skipped)} skipped); {LAYOUT_HINT}", headline="empty dataset")
    train, validation = split(items, validation_fraction, seed)
    if len(train) < data_hosts:
        raise UserError(f"{data_hosts} data hosts but only {len(train)} training samples; "
                        "lower --data-hosts or add data")
    train_count = plan_shard_count(train, target_bytes, data_hosts, shard_format=shard_format)
    train_groups = _deal(_shuffled(train, seed), train_count)
    val_groups = _deal(validation, plan_shard_count(validation, target_bytes, 1, shard_format=shard_format))
    splits = {"train": _write_split(output_dir, "train", train_groups, shard_format),
              "validation": _write_split(output_dir, "validation", val_groups, shard_format)}
    manifest = {"format": shard_format, "version": 1, "classes": classes,
                "target_shard_bytes": target_bytes, "data_hosts": data_hosts, "splits": splits,
                "quarantined": len(quarantined), "skipped": len(skipped)}
    _write_json(output_dir / "manifest.json", manifest)
    _write_json(output_dir / "report.json",
                _report(input_dir, classes, candidates, train, validation, quarantined, skipped))
    return manifest


def _check_options(target_shard_mb, data_hosts, validation_fraction, shard_format) -> int:
    if not isinstance(shard_format, str) or shard_format not in FORMATS:
        raise UserError(f"--format {shard_format!r} is not a shard format; choose one of {', '.join(FORMATS)}")
    if shard_format == "tfrecord":
        check_tensorflow()
    if not isinstance(target_shard_mb, (int, float)) or not MIN_SHARD_MB <= target_shard_mb <= MAX_SHARD_MB:
        raise UserError(f"--target-shard-mb {target_shard_mb!r} is outside the allowed range "
                        f"{MIN_SHARD_MB}..{MAX_SHARD_MB} MB (S3 transfers objects of that size best)")
    if isinstance(data_hosts, bool) or not isinstance(data_hosts, int) or data_hosts < 1:
        raise UserError(f"--data-hosts {data_hosts!r} must be an integer >= 1")
    if not isinstance(validation_fraction, (int, float)) or not 0 <= validation_fraction < 1:
        raise UserError(f"--validation-fraction {validation_fraction!r} must be >= 0 and < 1")
    return int(target_shard_mb * MB)


# --- finding and validating images -------------------------------------------------------

def scan_input(input_dir: Path) -> tuple[list[str], list[Candidate], list[dict]]:
    """Return (classes, image candidates in id order, skipped files with reasons)."""
    if not input_dir.is_dir():
        raise UserError(f"input folder {input_dir} does not exist or is not a folder; {LAYOUT_HINT}",
                        headline="missing input")
    top = sorted(p for p in input_dir.iterdir() if not p.name.startswith("."))
    classes = [p.name for p in top if p.is_dir()]
    if not classes:
        raise UserError(f"no class folders in {input_dir}; {LAYOUT_HINT}", headline="empty dataset")
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


def quarantine_corrupt(candidates: list[Candidate], input_dir: Path, output_dir: Path) -> list[dict]:
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


def _assign_ids(valid: list[Candidate]) -> list[Item]:
    # Candidates are already in (sorted class, sorted relative path) order.
    return [Item(i, c.label, c.path, c.path.suffix.lower().lstrip("."), c.path.stat().st_size)
            for i, c in enumerate(valid)]


# --- splitting and planning ----------------------------------------------------------------

def split(items: list[Item], validation_fraction: float, seed: int) -> tuple[list[Item], list[Item]]:
    """Stratified, seeded train/validation split; both lists sorted by sample id."""
    train, validation = [], []
    for label in sorted({i.label for i in items}):
        members = [i for i in items if i.label == label]
        # Seed per class so adding a class does not reshuffle the others.
        random.Random(f"{seed}/split/{label}").shuffle(members)
        n_val = validation_count(len(members), validation_fraction)
        validation += members[:n_val]
        train += members[n_val:]
    return sorted(train, key=_id), sorted(validation, key=_id)


def validation_count(n: int, fraction: float) -> int:
    """Validation samples for a class of ``n``: >= 1 when possible, always leaving 1 to train."""
    if fraction <= 0 or n < 2:
        return 0
    return min(n - 1, max(1, math.floor(n * fraction + 0.5)))


def plan_shard_count(items: list[Item], target_bytes: int, multiple: int, *,
                     shard_format: str = "webdataset") -> int:
    """Shards for ``items``: enough to stay near ``target_bytes``, a multiple of ``multiple``.

    ShardedByS3Key hands each data host len(shards) / hosts objects, so a multiple of
    the host count (with sample counts within 1) gives every host equal work. More
    shards than samples would leave shards empty; then we take the largest multiple
    that fits (the caller guarantees len(items) >= multiple).
    """
    if not items:
        return 0
    sample_bytes = FORMATS[shard_format].sample_bytes
    by_size = math.ceil(sum(sample_bytes(i.size) for i in items) / target_bytes)
    count = math.ceil(max(1, by_size) / multiple) * multiple
    if count > len(items):
        count = len(items) // multiple * multiple
    return count


def _tar_bytes(size: int) -> int:
    # A 512-byte header plus the payload padded to 512 for the image, and the same for the label.
    return 512 + math.ceil(size / 512) * 512 + 1024


def _tfrecord_bytes(size: int) -> int:
    # The record frame (length and two CRCs) around one Example holding the image bytes.
    return FRAME_BYTES + EXAMPLE_OVERHEAD + size


FORMATS = {
    "webdataset": ShardFormat(suffix=".tar", write=write_shard, sample_bytes=_tar_bytes),
    "tfrecord": ShardFormat(suffix=TFRECORD_SUFFIX, write=write_tfrecord_shard, sample_bytes=_tfrecord_bytes),
}


def _shuffled(items: list[Item], seed: int) -> list[Item]:
    # Mixed classes inside every train shard, so a streaming reader needs only a small buffer.
    items = list(items)
    random.Random(f"{seed}/train-order").shuffle(items)
    return items


def _deal(items: list[Item], count: int) -> list[list[Item]]:
    """Cut ``items`` into ``count`` contiguous groups whose sizes differ by at most 1."""
    base, extra = divmod(len(items), count) if count else (0, 0)
    groups, start = [], 0
    for index in range(count):
        end = start + base + (1 if index < extra else 0)
        groups.append(items[start:end])
        start = end
    return groups


def _id(item: Item) -> int:
    return item.sample_id


# --- writing --------------------------------------------------------------------------------

def _clear_previous_output(output_dir: Path) -> None:
    """Remove what an earlier run of this step wrote, so stale shards never mix in.

    Only this step's own names are touched; anything else in the folder stays.
    """
    for split_name in ("train", "validation"):
        for shard_format in FORMATS.values():  # a run in one format removes the other's shards too
            for stale in (output_dir / split_name).glob(f"{split_name}-*{shard_format.suffix}*"):
                stale.unlink()
    shutil.rmtree(output_dir / "quarantine", ignore_errors=True)
    for name in ("manifest.json", "report.json", "failure"):
        (output_dir / name).unlink(missing_ok=True)
    output_dir.mkdir(parents=True, exist_ok=True)


def _write_split(output_dir: Path, split_name: str, groups: list[list[Item]], shard_format: str) -> dict:
    """Write one split's shards; return its manifest entry (bytes are whole shard files)."""
    shards, fmt = [], FORMATS[shard_format]
    if groups:
        (output_dir / split_name).mkdir(parents=True, exist_ok=True)
    for index, group in enumerate(groups):
        name = f"{split_name}/{split_name}-{index:05d}{fmt.suffix}"
        path = output_dir / name
        fmt.write(path, ((i.sample_id, i.label, i.ext, i.path.read_bytes()) for i in group))
        shards.append({"name": name, "samples": len(group), "bytes": path.stat().st_size,
                       "sha256": sha256_file(path)})
    return {"samples": sum(s["samples"] for s in shards), "bytes": sum(s["bytes"] for s in shards),
            "shards": shards}


def _report(input_dir: Path, classes: list[str], candidates: list[Candidate], train: list[Item],
            validation: list[Item], quarantined: list[dict], skipped: list[dict]) -> dict:
    per_class = {name: {"label": label, "images": 0, "train": 0, "validation": 0, "quarantined": 0}
                 for label, name in enumerate(classes)}
    for cand in candidates:
        per_class[cand.class_name]["images"] += 1
    for split_name, items in (("train", train), ("validation", validation)):
        for item in items:
            per_class[classes[item.label]][split_name] += 1
    for entry in quarantined:
        per_class[entry["path"].split("/", 1)[0]]["quarantined"] += 1
    return {"input": str(input_dir), "classes": per_class,
            "quarantined": quarantined, "skipped": skipped}


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def summary_line(manifest: dict) -> str:
    train, val = manifest["splits"]["train"], manifest["splits"]["validation"]
    return (f"shard: {train['samples']} train samples in {len(train['shards'])} shards, "
            f"{val['samples']} validation samples in {len(val['shards'])} shards, "
            f"{manifest['quarantined']} quarantined, {manifest['skipped']} skipped")


# --- command line --------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would exit(2) without writing the failure file
        raise UserError(f"{message} (run with --help for usage)", headline="bad arguments")


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: _output_dir() must find --output by its full name.
    parser = _Parser(description="Validate a class-per-folder image dataset and write tar or TFRecord shards.",
                     allow_abbrev=False)
    parser.add_argument("--input", default=DEFAULT_INPUT, help="class-per-folder images (default: %(default)s)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="shards, manifest, report (default: %(default)s)")
    parser.add_argument("--target-shard-mb", type=float, default=64.0,
                        help=f"shard size aim, {MIN_SHARD_MB}..{MAX_SHARD_MB} MB (default: %(default)s)")
    parser.add_argument("--data-hosts", type=int, default=1,
                        help="train shard count is a multiple of this (default: %(default)s)")
    parser.add_argument("--validation-fraction", type=float, default=0.1, help="per class (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="split and shuffle seed (default: %(default)s)")
    parser.add_argument("--format", dest="shard_format", choices=list(FORMATS), default="webdataset",
                        help="webdataset tar shards (PyTorch) or tfrecord (TensorFlow) (default: %(default)s)")
    return parser


def _output_dir(argv: list[str]) -> str:
    """Where the failure file goes, found even when the other arguments are bad."""
    output = DEFAULT_OUTPUT
    for index, arg in enumerate(argv):  # the last one wins, as in argparse
        if arg == "--output" and index + 1 < len(argv):
            output = argv[index + 1]
        elif arg.startswith("--output="):
            output = arg.split("=", 1)[1]
    return output


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        return 0

    def step() -> None:
        args = parser.parse_args(argv)
        manifest = shard_dataset(args.input, args.output, target_shard_mb=args.target_shard_mb,
                                 data_hosts=args.data_hosts, validation_fraction=args.validation_fraction,
                                 seed=args.seed, shard_format=args.shard_format)
        print(summary_line(manifest), flush=True)

    return run_step(step, output_dir=_output_dir(argv), exit_message=processing_exit_message())


if __name__ == "__main__":
    sys.exit(main())
