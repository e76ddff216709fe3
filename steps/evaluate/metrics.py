"""Reading and checking the trainer's ``metrics.json``: the contract between training and evaluation.

The evaluate step (`steps/evaluate/evaluate.py`) reads one file per run, in
any form the pipeline hands it: the file, a directory holding one (searched
recursively), or SageMaker's ``model.tar.gz`` / ``output.tar.gz``. Errors name
the file and the field, and say what to pass instead.
"""

from __future__ import annotations

import json
import math
import tarfile
from pathlib import Path, PurePosixPath

from steps.common.errors import UserError
from steps.contract import METRICS_FILE, METRICS_READABLE_VERSIONS

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
    if not files:
        # A Processing input fed from a training job's S3 output holds model.tar.gz
        # (and output.tar.gz, with the same metrics) as is.
        found = [hit for t in sorted(directory.rglob("*.tar.gz")) if t.is_file() and (hit := _scan_tar(t))]
        if found and len({raw for raw, _ in found}) == 1:
            return found[0]
        files = [where for _, where in found]
    if not files:
        raise UserError(f"metrics not found: no {METRICS_FILE} under {directory} (searched recursively, model.tar.gz included)")
    listing = ", ".join(str(f) for f in files[:5])
    raise UserError(f"{directory} holds {len(files)} {METRICS_FILE} files ({listing}); pass the one to evaluate")


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
            return tar.extractfile(members[0]).read(), f"{tar_path}!{members[0].name}"
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UserError(f"{tar_path} is not a readable tar archive: {exc}") from None


def validate_metrics(doc: object, source: str) -> dict:
    """Check the fields this step reads; errors name the field and the file."""
    if not isinstance(doc, dict):
        raise UserError(f"{source}: top level must be a JSON object")
    version = _field(doc, "schema_version", int, source)
    if version not in METRICS_READABLE_VERSIONS:
        readable = " and ".join(map(str, METRICS_READABLE_VERSIONS))
        raise UserError(
            f"{source}: field 'schema_version' is {version}; this evaluator reads versions {readable}: "
            "evaluate with the release that trained it, or retrain"
        )
    mode = _field(doc, "mode", str, source)
    if mode not in ("heterogeneous", "homogeneous"):
        raise UserError(f"{source}: field 'mode' must be 'heterogeneous' or 'homogeneous', got {mode!r}")
    groups = _field(doc, "instance_groups", list, source)
    if not groups:
        raise UserError(f"{source}: field 'instance_groups' must list at least one group")
    for i, group in enumerate(groups):
        _check_group(group, f"instance_groups[{i}]", source)
    step_time = _field(doc, "step_time_s", dict, source)
    _field(step_time, "mean", float, source, label="step_time_s.mean", low=0, low_open=True)
    _field(doc, "samples_per_second", float, source, low=0, low_open=True)
    _field(doc, "data_wait_share", float, source, low=0, high=1)
    # Null accuracy is allowed: a throughput-only benchmark run need not evaluate.
    if doc.get("accuracy", 0) is not None:
        _field(doc, "accuracy", float, source, low=0, high=1)
    if "config" in doc:
        _field(doc, "config", dict, source)
    if doc.get("isolated_costs") is not None:  # decode alone and step alone, per batch (steps/train/frameworks/pytorch/step.py)
        costs = _field(doc, "isolated_costs", dict, source)
        for name in ("decode_s_per_batch", "step_s_per_batch"):
            _field(costs, name, float, source, label=f"isolated_costs.{name}", low=0, low_open=True)
    if version >= 2:
        _field(doc, "bytes_received_per_sample", float, source, low=0)
        for i, host in enumerate(_field(doc, "data_hosts", list, source)):
            _check_data_host(host, f"data_hosts[{i}]", source)
    return doc


def per_sample(hosts: list[dict], *keys: str) -> float | None:
    """Over ``data_hosts`` lines, the sum of their per-sample ``keys`` averaged by the samples each sent;
    None when none sent any."""
    sent = sum(h["samples_sent"] for h in hosts)
    if not sent:
        return None
    return sum(sum(h[k] for k in keys) * h["samples_sent"] for h in hosts) / sent


def _check_data_host(host, label: str, source: str) -> None:
    if not isinstance(host, dict):
        raise UserError(f"{source}: field {label!r} must be an object, got {host!r}")
    _field(host, "host", str, source, label=f"{label}.host")
    _field(host, "cpus", int, source, label=f"{label}.cpus", low=1)
    _field(host, "samples_sent", int, source, label=f"{label}.samples_sent", low=0)
    for key in ("decode_cpu_s_per_sample", "service_cpu_s_per_sample", "busy_share", "bytes_sent_per_sample"):
        _field(host, key, float, source, label=f"{label}.{key}", low=0)


def _check_group(group, label: str, source: str) -> None:
    if not isinstance(group, dict):
        raise UserError(f"{source}: field {label!r} must be an object, got {group!r}")
    for key in ("name", "instance_type", "role"):
        _field(group, key, str, source, label=f"{label}.{key}")
    _field(group, "count", int, source, label=f"{label}.count", low=1)


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}


def _field(obj: dict, key: str, kind: type, source: str, *, label: str | None = None, low=None, high=None, low_open=False):
    label = label or key
    if key not in obj:
        raise UserError(f"{source}: required field {label!r} is missing")
    value = obj[key]
    ok = isinstance(value, (int, float) if kind is float else kind) and not isinstance(value, bool)
    if ok and kind in (int, float):
        ok = math.isfinite(value) and (low is None or value > low or (value == low and not low_open))
        ok = ok and (high is None or value <= high)
    if not ok:
        bounds = "" if low is None else f" {'>' if low_open else '>='} {low}"
        bounds += "" if high is None else f" and <= {high}"
        raise UserError(f"{source}: field {label!r} must be {_TYPE_NAMES[kind]}{bounds}, got {value!r}")
    return value
