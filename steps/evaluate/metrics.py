"""Reading and checking the trainer's ``metrics.json``: the contract between training and evaluation.

The evaluate step (`steps/evaluate/evaluate.py`) reads one file per run, in
any form the pipeline hands it: the file, a directory holding one (searched
recursively), or SageMaker's ``model.tar.gz`` / ``output.tar.gz``. Errors name
the file and the field, and say what to pass instead.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path, PurePosixPath

from steps.common.errors import UserError
from steps.common.metrics_json import check
from steps.contract import METRICS_FILE

_MAX_METRICS_BYTES = 16 * 1024 * 1024  # metrics are a few KB; refuse to slurp a mislabelled blob


def load_metrics(path: str | Path) -> dict:
    """Validated metrics from a metrics.json, a directory holding one, or a model.tar.gz."""
    raw, where = _read_metrics_bytes(Path(path))
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{where} is not valid UTF-8 JSON: {exc}") from None
    return validate_metrics(doc, where)


def _read_metrics_bytes(path: Path) -> tuple[bytes, str]:
    if not path.exists():
        raise UserError(
            f"metrics not found: {path} does not exist; pass a {METRICS_FILE}, a directory containing one, or a model.tar.gz"
        )
    if path.is_dir():
        return _find_in_dir(path)
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        found = _scan_tar(path)
        if found is None:
            raise UserError(f"metrics not found: {path} contains no {METRICS_FILE}")
        return found
    if path.stat().st_size > _MAX_METRICS_BYTES:
        raise UserError(f"{path} is {path.stat().st_size} bytes, too big to be a {METRICS_FILE}")
    return path.read_bytes(), str(path)


def _find_in_dir(directory: Path) -> tuple[bytes, str]:
    files = sorted(p for p in directory.rglob(METRICS_FILE) if p.is_file())
    # The trainer writes the same metrics.json to the model and the output-data
    # folders, so identical copies of one run are not an ambiguity.
    if files and len({_read_metrics_bytes(f)[0] for f in files}) == 1:
        return _read_metrics_bytes(files[0])
    places: list[Path] | list[str] = files
    if not files:
        # A Processing input fed from a training job's S3 output holds model.tar.gz
        # (and output.tar.gz, with the same metrics) as is.
        found = [hit for t in sorted(directory.rglob("*.tar.gz")) if t.is_file() and (hit := _scan_tar(t))]
        if found and len({raw for raw, _ in found}) == 1:
            return found[0]
        places = [where for _, where in found]
    if not places:
        raise UserError(f"metrics not found: no {METRICS_FILE} under {directory} (searched recursively, model.tar.gz included)")
    listing = ", ".join(str(f) for f in places[:5])
    raise UserError(f"{directory} holds {len(places)} {METRICS_FILE} files ({listing}); pass the one to evaluate")


def _scan_tar(tar_path: Path) -> tuple[bytes, str] | None:
    """(bytes, "archive!member") of the one metrics.json inside, None if there is none."""
    try:
        with tarfile.open(tar_path, "r:*") as tar:
            members = [m for m in tar.getmembers() if m.isfile() and PurePosixPath(m.name).name == METRICS_FILE]
            if len(members) > 1:
                names = ", ".join(m.name for m in members[:5])
                raise UserError(f"{tar_path} holds {len(members)} {METRICS_FILE} files ({names}); pass an extracted one instead")
            if not members:
                return None
            if members[0].size > _MAX_METRICS_BYTES:
                raise UserError(f"{tar_path}!{members[0].name} is too big to be a {METRICS_FILE}")
            # Read the member in place: extracting an untrusted archive invites path tricks.
            member = tar.extractfile(members[0])
            assert member is not None  # members are regular files (chosen above)
            return member.read(), f"{tar_path}!{members[0].name}"
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UserError(f"{tar_path} is not a readable tar archive: {exc}") from None


def validate_metrics(doc: object, source: str) -> dict:
    """``doc`` held against the declaration of metrics.json (`steps.common.metrics_json.check`); errors name the field
    and the file."""
    return check(doc, source)


def per_sample(hosts: list[dict], *keys: str) -> float | None:
    """Over ``data_hosts`` lines, the sum of their per-sample ``keys`` averaged by the samples each sent;
    None when none sent any."""
    sent = sum(h["samples_sent"] for h in hosts)
    if not sent:
        return None
    return sum(sum(h[k] for k in keys) * h["samples_sent"] for h in hosts) / sent
