"""The shard step's write stage: the planned shards in the chosen format, the manifest and the report.

Output, in either format with the same samples and manifest::

    <output>/train/train-00000.tar ...            one S3 prefix, split per host by ShardedByS3Key
    <output>/validation/validation-00000.tar ...  (.tfrecord instead of .tar for --format tfrecord)
    <output>/quarantine/<class>/<file>            images Pillow could not decode (the scan stage)
    <output>/manifest.json                        format, classes, shards, sizes, sha256
    <output>/report.json                          per-class counts, quarantined and skipped files
    <output>/secret/job-secret                    the execution's job secret (written by the step's command line)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from steps.contract import FAILURE_FILE, MANIFEST_FILE, SHARD_REPORT_FILE
from steps.formats.registry import FORMATS
from steps.formats.webdataset import sha256_file
from steps.shard.plan import Item
from steps.shard.scan import Candidate


def clear_previous_output(output_dir: Path) -> None:
    """Remove what an earlier run of this step wrote, so stale shards never mix in.

    Only this step's own names are touched; anything else in the folder stays.
    """
    for split_name in ("train", "validation"):
        for shard_format in FORMATS.values():  # a run in one format removes the other's shards too
            for stale in (output_dir / split_name).glob(f"{split_name}-*{shard_format.suffix}*"):
                stale.unlink()
    shutil.rmtree(output_dir / "quarantine", ignore_errors=True)
    for name in (MANIFEST_FILE, SHARD_REPORT_FILE, FAILURE_FILE):
        (output_dir / name).unlink(missing_ok=True)
    output_dir.mkdir(parents=True, exist_ok=True)


def write_split(output_dir: Path, split_name: str, groups: list[list[Item]], shard_format: str) -> dict:
    """Write one split's shards; return its manifest entry (bytes are whole shard files)."""
    shards, fmt = [], FORMATS[shard_format]
    if groups:
        (output_dir / split_name).mkdir(parents=True, exist_ok=True)
    for index, group in enumerate(groups):
        name = f"{split_name}/{split_name}-{index:05d}{fmt.suffix}"
        path = output_dir / name
        fmt.write(path, ((i.sample_id, i.label, i.ext, i.path.read_bytes()) for i in group))
        shards.append({"name": name, "samples": len(group), "bytes": path.stat().st_size, "sha256": sha256_file(path)})
    return {"samples": sum(s["samples"] for s in shards), "bytes": sum(s["bytes"] for s in shards), "shards": shards}


def report(
    source: str,
    classes: list[str],
    candidates: list[Candidate],
    train: list[Item],
    validation: list[Item],
    quarantined: list[dict],
    skipped: list[dict],
) -> dict:
    """report.json: per-class counts, and every quarantined and skipped file with its reason. ``source``: the input as
    the user named it."""
    per_class = {
        name: {"label": label, "images": 0, "train": 0, "validation": 0, "quarantined": 0} for label, name in enumerate(classes)
    }
    for cand in candidates:
        per_class[cand.class_name]["images"] += 1
    for split_name, items in (("train", train), ("validation", validation)):
        for item in items:
            per_class[classes[item.label]][split_name] += 1
    for entry in quarantined:
        per_class[entry["path"].split("/", 1)[0]]["quarantined"] += 1
    return {"input": source, "classes": per_class, "quarantined": quarantined, "skipped": skipped}


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
