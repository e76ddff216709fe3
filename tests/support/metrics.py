"""metrics.json documents as the trainer writes them (the contract in steps/evaluate/evaluate.py), for the evaluate
step's tests and the CLI's, and the checks the end-to-end tests of every framework make on a job's metrics.json."""

import json
import os
import re
import tarfile
from pathlib import Path

import pytest

P4D, C5_18, C5_9, P3 = "ml.p4d.24xlarge", "ml.c5.18xlarge", "ml.c5.9xlarge", "ml.p3.2xlarge"

# The AWS blog tables (docs/domain.md): groups, mean step time, $/h, cost per 100 steps.
BLOG = {
    "tf_homogeneous": ([(P4D, 1, "trainer")], 0.192, 37.688, 0.201),
    "tf_heterogeneous": ([(C5_18, 2, "data"), (P4D, 1, "trainer")], 0.086, 45.032, 0.108),
    "pt_homogeneous": ([(P3, 1, "trainer")], 1.193, 3.825, 0.127),
    "pt_heterogeneous": ([(C5_9, 1, "data"), (P3, 1, "trainer")], 0.184, 5.661, 0.029),
}


DATA_HOST = {
    "host": "algo-2",
    "cpus": 4,
    "samples_sent": 12800,
    "batches_sent": {"algo-1": 200},
    "decode_cpu_s_per_sample": 0.0021,
    "service_cpu_s_per_sample": 0.0001,
    "busy_share": 0.93,
    "bytes_sent_per_sample": 12304.0,
    "samples_per_second": 1700.0,
    "measured_over_s": 7.5,
}


def metrics(case="tf_heterogeneous", batch=256, **overrides):
    """A metrics.json document as the trainer writes it (the contract in steps/evaluate/evaluate.py)."""
    groups, step_s, _, _ = BLOG[case]
    hetero = len(groups) > 1
    doc = {
        "schema_version": 2,
        "framework": "pytorch",
        "mode": "heterogeneous" if len(groups) > 1 else "homogeneous",
        "instance_groups": [
            {"name": f"{role}_group", "instance_type": itype, "count": n, "role": role} for itype, n, role in groups
        ],
        "global_batch_size": batch,
        "steps": 500,
        "warmup_steps": 10,
        "step_time_s": {"mean": step_s, "p50": step_s, "p90": step_s * 1.1},
        "data_wait_share": 0.05,
        "samples_per_second": batch / step_s,
        "accuracy": 0.93,
        "epochs": 2,
        "config": {"lr": 0.1, "batch_size": batch},
        "data_hosts": [DATA_HOST] if hetero else [],
        "bytes_received_per_sample": 12304.0 if hetero else 0.0,
    }
    doc.update(overrides)
    return doc


def write_json(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def make_model_tar(path, doc, member="metrics.json"):
    src = write_json(path.parent / "src" / "metrics.json", doc)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src, arcname=member)
    return path


COSTS = {
    "batch_size": 64,
    "cpus": 4,
    "step_s_per_batch": 0.020,
    "step_s_per_batch_median": 0.021,
    "decode_cpu_s_per_batch": 0.128,
    "decode_s_per_batch": 0.032,
}


def input_bound_run(wait=0.4, rate=1200.0, host=None, **overrides):
    """A g5.xlarge trainer fed by one c5.xlarge that decodes at 2.5 ms of CPU per sample."""
    groups = [
        {"name": "data_group", "instance_type": "ml.c5.xlarge", "count": 1, "role": "data"},
        {"name": "dnn_group", "instance_type": "ml.g5.xlarge", "count": 1, "role": "trainer"},
    ]
    host = host or {**DATA_HOST, "cpus": 4, "decode_cpu_s_per_sample": 0.0024, "service_cpu_s_per_sample": 0.0001}
    doc = dict(
        instance_groups=groups,
        isolated_costs=COSTS,
        compute_s_per_step=0.020,
        data_wait_share=wait,
        samples_per_second=rate,
        samples_seen=64_000,
        epochs=2,
        data_hosts=[host],
    )
    return metrics(**{**doc, **overrides})


PIXEL_BYTES = 64 * 64 * 3  # one default-workload sample's uint8 pixels


def assert_data_hosts_measured_themselves(metrics: dict, data_hosts: int) -> None:
    """metrics.json holds every data host's own measurements, consistent with what the trainers saw."""
    if metrics["mode"] == "homogeneous":
        assert metrics["data_hosts"] == [] and metrics["bytes_received_per_sample"] == 0
        return
    hosts = metrics["data_hosts"]
    assert len({h["host"] for h in hosts}) == len(hosts) == data_hosts
    assert abs(sum(h["samples_sent"] for h in hosts) - metrics["samples_seen"]) <= len(hosts)  # all trainers, all epochs
    for h in hosts:
        assert h["cpus"] >= 1 and h["decode_cpu_s_per_sample"] > 0 and 0 < h["busy_share"] < 2, h
        assert h["bytes_sent_per_sample"] >= PIXEL_BYTES, h
    assert metrics["bytes_received_per_sample"] >= PIXEL_BYTES + 16


def assert_every_sample_once_per_epoch(metrics: dict, train_samples: int, *, epochs: int) -> None:
    """Every epoch: each training sample arrived once (distinct == received), and all of them arrived (tf.data.service's
    epoch accounting)."""
    assert [(a["epoch"], a["received"], a["distinct"], a["missing"]) for a in metrics["epoch_accounting"]] == [
        (e, train_samples, train_samples, 0) for e in range(epochs)
    ]
    assert metrics["samples_seen"] == epochs * train_samples


def assert_the_evaluation_and_the_plan(evaluation_dir, hetero: dict, execution_id: str) -> None:
    """A whole pipeline's Evaluate output: both runs priced, each with its bottleneck; the plan for the next run, made
    from this run's own measurements, predicts this run too (``hetero``: the heterogeneous job's metrics.json); the
    report shows the planner's frontier."""
    pp = json.loads((evaluation_dir / "price_performance.json").read_text())
    assert pp["runs"]["baseline"] and pp["runs"]["heterogeneous"]
    assert pp["speedup"] > 0 and pp["execution_id"] == execution_id
    assert pp["runs"]["heterogeneous"]["samples_per_second"] > 0
    for run in pp["runs"].values():
        assert run["bottleneck"]["label"] in ("input-bound", "compute-bound", "transport-bound")
        assert run["bottleneck"]["reason"]
    plan = json.loads((evaluation_dir / "plan.json").read_text())
    assert plan["recommendation"] is not None, plan["reason"]
    assert plan["current"]["measured_samples_per_second"] == hetero["samples_per_second"]
    assert [r["run"] for r in plan["measured"]] == [r["source"] for r in plan["runs"]]  # each run once, as it ran
    trainer = next(g for g in hetero["instance_groups"] if g["role"] == "trainer")
    stay = next(
        c
        for c in plan["candidates"]
        if (c["trainer"], c["trainers"], c["data"]) == (trainer["instance_type"], trainer["count"], None)
    )
    baseline = plan["runs"][1]["source"]
    if baseline in plan["basis"]["emulated_runs"]:  # the local runner's 1-CPU baseline: predicted at the type's vCPUs
        assert stay["rate_source"] == "predicted" and any(baseline in n for n in stay["notes"])
    else:
        assert stay["notes"][0] == "measured: this execution's baseline trained on the same trainer group"
    assert_labels_agree(plan)
    assert len(plan["fallbacks"]) == 3 and len(hetero["step_series"]["step_time_s"]) >= 1
    assert "The planner&#x27;s frontier" in (evaluation_dir / "report.html").read_text()


def assert_labels_agree(plan: dict) -> None:
    """Every row of a plan is labelled by the stage whose rate sets its samples/s: a predicted row by its slowest stage,
    at exactly that rate; a measured one by its slowest stage within the plan's ``stage_match`` of it, else
    ``measured`` with the gap; and every candidate is at the types' own vCPUs."""
    rows = [*plan["candidates"], *plan["frontier"], *plan["fallbacks"], plan["recommendation"], *plan["measured"]]
    for row in rows:
        rates = row["stage_rates"]
        slowest = min(rates, key=rates.get)
        if row["rate_source"] == "predicted":
            assert (row["bottleneck"], row["samples_per_second"]) == (slowest, rates[slowest]), row
            assert row["measured_gap"] is None, row
        else:
            gap = row["samples_per_second"] / rates[slowest] - 1
            assert row["measured_gap"] == pytest.approx(gap), row
            assert row["bottleneck"] == (slowest if abs(gap) <= plan["stage_match"] else "measured"), row
    assert {r["basis"] for r in rows if r not in plan["measured"]} == {"real_vcpus"}


HOST_NAME = re.compile(r"^algo-\d+$")
GOLDENS = Path(__file__).resolve().parents[1] / "steps" / "train" / "goldens"


def shape(value):
    """A metrics.json document's keys and JSON types, its values left out (timings differ from run to run): a list's
    shape is its items' distinct shapes."""
    if isinstance(value, dict):  # a host's name as a key (batches_sent: per trainer) is any host's
        return {HOST_NAME.sub("<host>", key): shape(v) for key, v in sorted(value.items())}
    if isinstance(value, list):
        shapes = []
        for item in value:
            if (s := shape(item)) not in shapes:
                shapes.append(s)
        return shapes
    if value is None:
        return "null"
    return {bool: "bool", str: "str"}.get(type(value), "number")


def assert_metrics_match_golden(metrics: dict, framework: str) -> None:
    """A real run's metrics.json has the keys and types of the framework's golden (tests/steps/train/goldens), which
    ``HETERO_UPDATE_GOLDEN=1`` rewrites from this run."""
    path = GOLDENS / f"metrics.{framework}.json"
    if os.environ.get("HETERO_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(shape(metrics), indent=1) + "\n", encoding="utf-8")
    assert path.exists(), f"no golden for {framework}: run this test with HETERO_UPDATE_GOLDEN=1 to write {path.name}"
    assert not (misfits := _misfits(shape(metrics), json.loads(path.read_text(encoding="utf-8")))), f"not as {path}: {misfits}"


def _misfits(actual, golden, where: str = "") -> list[str]:
    """Where ``actual`` (a shape) departs from ``golden``: an object's keys must be the same and each value fit; a list's
    items must each fit one of the golden's (an empty list fits any list, as some lists, like a retune's changes, fill
    up only in some runs)."""
    if isinstance(golden, dict) and isinstance(actual, dict):
        if actual.keys() != golden.keys():
            return [f"{where or 'top level'}: keys {sorted(actual.keys() ^ golden.keys())} differ"]
        return [m for key in golden for m in _misfits(actual[key], golden[key], f"{where}.{key}".lstrip("."))]
    if isinstance(golden, list) and isinstance(actual, list):
        if not golden or not actual:
            return []
        return [f"{where}[]: {item}" for item in actual if all(_misfits(item, g) for g in golden)]
    return [] if actual == golden else [f"{where}: {actual} where the golden has {golden}"]
