"""Evaluation step: price-performance of a heterogeneous run against a baseline.

Reads the ``metrics.json`` the trainer writes (a file, a directory holding one,
or SageMaker's ``model.tar.gz``), prices each cluster with the on-demand table
in ``prices.py`` and writes ``price_performance.json``. "Cost per 100 steps"
is the figure the AWS heterogeneous-clusters blog tables call cost per step.

Locally::

    python steps/evaluate/evaluate.py --heterogeneous runs/hetero/metrics.json \\
        --baseline runs/homog/model.tar.gz --output runs/eval \\
        --execution-id local-1 --store runs/store

In SageMaker Processing (inputs mounted at the defaults)::

    python3 steps/evaluate/evaluate.py --execution-id <PipelineExecutionId> --store s3://bucket/results

Defaults: ``--heterogeneous /opt/ml/processing/input/heterogeneous``,
``--baseline /opt/ml/processing/input/baseline`` (skipped when that folder is
absent or empty; an explicit ``--baseline`` must hold metrics),
``--output /opt/ml/processing/output/evaluation``. On failure the one-line
reason goes to ``<output>/failure`` (and, in a Processing container, to
``/opt/ml/output/message``, shown as ExitMessage) and the exit code is non-zero.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tarfile
from pathlib import Path, PurePosixPath

if not __package__:
    # SageMaker Processing runs this file by path, so the repository root (two
    # levels up) is not on sys.path and the `steps.` imports below would fail.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from steps.common.errors import UserError, processing_exit_message, run_step  # noqa: E402
from steps.evaluate.prices import PriceTable, load_prices  # noqa: E402
from steps.common.files import write_json_atomic  # noqa: E402
from steps.evaluate.store import open_store, validate_execution_id  # noqa: E402

SCHEMA_VERSION = 1
METRICS_NAME = "metrics.json"
OUTPUT_NAME = "price_performance.json"
DEFAULT_HETEROGENEOUS = "/opt/ml/processing/input/heterogeneous"
DEFAULT_BASELINE = "/opt/ml/processing/input/baseline"
DEFAULT_OUTPUT = "/opt/ml/processing/output/evaluation"
_MAX_METRICS_BYTES = 16 * 1024 * 1024  # metrics are a few KB; refuse to slurp a mislabelled blob


# --- the arithmetic (checked against the AWS blog tables in the tests) ---

def cluster_price_per_hour(instance_groups, prices: PriceTable) -> float:
    """On-demand USD/hour of the whole cluster: every instance bills while the job runs."""
    total = math.fsum(g["count"] * prices.hourly(g["instance_type"]) for g in instance_groups)
    # List prices carry at most 4 decimals: this drops float noise (45.032000000000004), not cents.
    return round(total, 9)


def cost_per_100_steps(price_per_hour: float, step_seconds: float) -> float:
    return price_per_hour * step_seconds / 3600 * 100


def samples_per_dollar(samples_per_second: float, price_per_hour: float) -> float:
    return samples_per_second * 3600 / price_per_hour


def run_summary(metrics: dict, prices: PriceTable) -> dict:
    """One RUN entry of price_performance.json from one validated metrics document."""
    usd_per_hour = cluster_price_per_hour(metrics["instance_groups"], prices)
    step_s = metrics["step_time_s"]["mean"]
    sps = metrics["samples_per_second"]
    groups = [
        {"name": g["name"], "instance_type": g["instance_type"], "count": g["count"], "role": g["role"],
         "instance_usd_per_hour": prices.hourly(g["instance_type"])}
        for g in metrics["instance_groups"]
    ]
    return {
        "instance_groups": groups,
        "cluster_usd_per_hour": usd_per_hour,
        "step_time_s": step_s,
        "samples_per_second": sps,
        "cost_per_100_steps": cost_per_100_steps(usd_per_hour, step_s),
        "samples_per_dollar": samples_per_dollar(sps, usd_per_hour),
        "data_wait_share": metrics["data_wait_share"],
        "accuracy": metrics["accuracy"],
    }


def price_performance(hetero_metrics: dict, baseline_metrics: dict | None, prices: PriceTable,
                      *, execution_id: str | None = None) -> dict:
    """The price_performance.json document; speedup and improvement are null without a baseline."""
    hetero = _priced(validate_metrics(hetero_metrics, "heterogeneous metrics"), prices, "heterogeneous run")
    baseline = None
    if baseline_metrics is not None:
        baseline = _priced(validate_metrics(baseline_metrics, "baseline metrics"), prices, "baseline run")
    return {
        "schema_version": SCHEMA_VERSION,
        "execution_id": execution_id,
        "prices": prices.describe(),
        "runs": {"heterogeneous": hetero, "baseline": baseline},
        "speedup": baseline["step_time_s"] / hetero["step_time_s"] if baseline else None,
        "improvement": 1 - hetero["cost_per_100_steps"] / baseline["cost_per_100_steps"] if baseline else None,
    }


def _priced(metrics: dict, prices: PriceTable, label: str) -> dict:
    try:
        return run_summary(metrics, prices)
    except UserError as exc:
        raise UserError(f"{label}: {exc.message}") from None


def summary_line(doc: dict) -> str:
    def describe(run):
        cluster = " + ".join(f"{g['count']}x {g['instance_type']}" for g in run["instance_groups"])
        return (f"{cluster} ${run['cluster_usd_per_hour']:.3f}/h, {run['step_time_s'] * 1000:.0f} ms/step, "
                f"${run['cost_per_100_steps']:.3f}/100 steps")

    line = f"heterogeneous: {describe(doc['runs']['heterogeneous'])}"
    if doc["runs"]["baseline"] is None:
        return line + "; no baseline"
    return (f"{line}; baseline: {describe(doc['runs']['baseline'])}; "
            f"speedup {doc['speedup']:.2f}x, cost per step {abs(doc['improvement']):.0%} "
            f"{'lower' if doc['improvement'] >= 0 else 'higher'}")


# --- reading and checking the trainer's metrics.json (the contract) ---

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
        raise UserError(f"metrics not found: {path} does not exist; pass a {METRICS_NAME}, "
                        "a directory containing one, or a model.tar.gz")
    if path.is_dir():
        return _find_in_dir(path)
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        found = _scan_tar(path)
        if found is None:
            raise UserError(f"metrics not found: {path} contains no {METRICS_NAME}")
        return found
    if path.stat().st_size > _MAX_METRICS_BYTES:
        raise UserError(f"{path} is {path.stat().st_size} bytes, too big to be a {METRICS_NAME}")
    return path.read_bytes(), str(path)


def _find_in_dir(directory: Path) -> tuple[bytes, str]:
    files = sorted(p for p in directory.rglob(METRICS_NAME) if p.is_file())
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
        raise UserError(f"metrics not found: no {METRICS_NAME} under {directory} (searched recursively, "
                        "model.tar.gz included)")
    listing = ", ".join(str(f) for f in files[:5])
    raise UserError(f"{directory} holds {len(files)} {METRICS_NAME} files ({listing}); pass the one to evaluate")


def _scan_tar(tar_path: Path) -> tuple[bytes, str] | None:
    """(bytes, "archive!member") of the one metrics.json inside, None if there is none."""
    try:
        with tarfile.open(tar_path, "r:*") as tar:
            members = [m for m in tar.getmembers() if m.isfile() and PurePosixPath(m.name).name == METRICS_NAME]
            if len(members) > 1:
                names = ", ".join(m.name for m in members[:5])
                raise UserError(f"{tar_path} holds {len(members)} {METRICS_NAME} files ({names}); "
                                "pass an extracted one instead")
            if not members:
                return None
            if members[0].size > _MAX_METRICS_BYTES:
                raise UserError(f"{tar_path}!{members[0].name} is too big to be a {METRICS_NAME}")
            # Read the member in place: extracting an untrusted archive invites path tricks.
            return tar.extractfile(members[0]).read(), f"{tar_path}!{members[0].name}"
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UserError(f"{tar_path} is not a readable tar archive: {exc}") from None


def validate_metrics(doc, source: str) -> dict:
    """Check the fields this step reads; errors name the field and the file."""
    if not isinstance(doc, dict):
        raise UserError(f"{source}: top level must be a JSON object")
    version = _field(doc, "schema_version", int, source)
    if version != SCHEMA_VERSION:
        raise UserError(f"{source}: field 'schema_version' is {version}; this evaluator reads {SCHEMA_VERSION}")
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
    return doc


def _check_group(group, label: str, source: str) -> None:
    if not isinstance(group, dict):
        raise UserError(f"{source}: field {label!r} must be an object, got {group!r}")
    for key in ("name", "instance_type", "role"):
        _field(group, key, str, source, label=f"{label}.{key}")
    _field(group, "count", int, source, label=f"{label}.count", low=1)


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}


def _field(obj: dict, key: str, kind: type, source: str, *, label: str | None = None,
           low=None, high=None, low_open=False):
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


# --- the step ---

def evaluate(*, heterogeneous: str | Path, baseline: str | Path | None, output: str | Path,
             prices_file: str | Path | None = None, execution_id: str | None = None,
             store_uri: str | None = None) -> dict:
    """Write price_performance.json to ``output`` (and to the store if given); return it."""
    if execution_id is not None:
        validate_execution_id(execution_id)
    if store_uri and execution_id is None:
        raise UserError("--store needs --execution-id: results are keyed by pipeline execution id")
    prices = load_prices(prices_file)
    hetero_metrics = load_metrics(heterogeneous)
    baseline_metrics = load_metrics(baseline) if baseline is not None else None
    doc = price_performance(hetero_metrics, baseline_metrics, prices, execution_id=execution_id)
    write_json_atomic(Path(output) / OUTPUT_NAME, doc)
    print(summary_line(doc), flush=True)
    if store_uri:
        store = open_store(store_uri)
        # Metrics and config sit next to the verdict so a result can be audited later.
        store.put_json(execution_id, "heterogeneous_metrics.json", hetero_metrics)
        if baseline_metrics is not None:
            store.put_json(execution_id, "baseline_metrics.json", baseline_metrics)
        if "config" in hetero_metrics:
            store.put_json(execution_id, "config.json", hetero_metrics["config"])
        # Written last: its presence means the whole set is there.
        print(f"stored {store.put_json(execution_id, OUTPUT_NAME, doc)}", flush=True)
    return doc


def resolve_baseline(arg: str | None) -> Path | None:
    """An explicit --baseline must exist; the default folder may be absent or empty (no baseline run)."""
    if arg is not None:
        return Path(arg)
    default = Path(DEFAULT_BASELINE)
    if default.is_dir() and any(default.iterdir()):
        return default
    return None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--heterogeneous", default=DEFAULT_HETEROGENEOUS,
                        help="metrics.json, a directory holding one, or model.tar.gz (default: %(default)s)")
    parser.add_argument("--baseline", default=None,
                        help=f"same forms; default {DEFAULT_BASELINE} if present, else no baseline")
    parser.add_argument("--prices", default=None, help="JSON price override file (schema: steps/evaluate/prices.py)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="where price_performance.json goes (default: %(default)s)")
    parser.add_argument("--execution-id", default=None, help="pipeline execution id; required with --store")
    parser.add_argument("--store", default=None, help="results store: s3://bucket/prefix, file:///dir or a path")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_step(
        lambda: evaluate(
            heterogeneous=args.heterogeneous, baseline=resolve_baseline(args.baseline), output=args.output,
            prices_file=args.prices, execution_id=args.execution_id, store_uri=args.store,
        ),
        output_dir=args.output,
        exit_message=processing_exit_message(),
    )


if __name__ == "__main__":
    sys.exit(main())
