import json
import os
import re
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from steps.common.errors import UserError
from steps.evaluate import evaluate as ev
from steps.evaluate import pricing
from steps.evaluate.prices import load_prices
from tests.support.metrics import BLOG, C5_18, make_model_tar, metrics, write_json

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "steps" / "evaluate" / "evaluate.py"

# --- the arithmetic against the AWS tables ---


@pytest.mark.parametrize("case", sorted(BLOG))
def test_cluster_price_and_cost_per_100_steps_match_blog(case):
    groups, step_s, usd_per_hour, cost = BLOG[case]
    prices = load_prices()
    doc_groups = metrics(case)["instance_groups"]
    assert pricing.cluster_price_per_hour(doc_groups, prices) == usd_per_hour
    assert round(pricing.cost_per_100_steps(usd_per_hour, step_s), 3) == cost


@pytest.mark.parametrize(
    ("base", "hetero", "costs", "improvement"),
    [
        ("tf_homogeneous", "tf_heterogeneous", (0.201, 0.108), 46),
        ("pt_homogeneous", "pt_heterogeneous", (0.127, 0.029), 77),
    ],
)
def test_price_performance_reproduces_blog_improvement(base, hetero, costs, improvement):
    doc = pricing.price_performance(metrics(hetero), metrics(base), load_prices(), execution_id="e1")
    runs = doc["runs"]
    assert round(runs["baseline"]["cost_per_100_steps"], 3) == costs[0]
    assert round(runs["heterogeneous"]["cost_per_100_steps"], 3) == costs[1]
    assert round(doc["improvement"] * 100) == improvement
    assert doc["speedup"] == pytest.approx(BLOG[base][1] / BLOG[hetero][1])


def test_samples_per_dollar():
    assert pricing.samples_per_dollar(2976.7, 45.032) == pytest.approx(2976.7 * 3600 / 45.032)
    doc = pricing.price_performance(metrics(), None, load_prices())
    run = doc["runs"]["heterogeneous"]
    assert run["samples_per_dollar"] == pytest.approx(run["samples_per_second"] * 3600 / 45.032)


def test_output_schema():
    doc = pricing.price_performance(metrics(), metrics("tf_homogeneous"), load_prices(), execution_id="e1")
    assert set(doc) == {"schema_version", "execution_id", "evaluated_at", "prices", "runs", "speedup", "improvement", "bound"}
    assert doc["bound"] is None  # no isolated_costs in these metrics
    assert doc["schema_version"] == 2 and doc["execution_id"] == "e1"
    assert set(doc["prices"]) == {"source", "as_of", "region", "sources"}  # each source with its date and its types
    assert {t for source in doc["prices"]["sources"] for t in source["types"]} >= {"ml.c5.18xlarge", "ml.p4d.24xlarge"}
    assert set(doc["runs"]) == {"heterogeneous", "baseline"}
    run = doc["runs"]["heterogeneous"]
    assert set(run) == {
        "instance_groups",
        "cluster_usd_per_hour",
        "step_time_s",
        "samples_per_second",
        "cost_per_100_steps",
        "samples_per_dollar",
        "data_wait_share",
        "accuracy",
        "bottleneck",
        "billing",
        "gpus",
        "precision",
        "compile",
        "decode_workers",
    }
    assert run["decode_workers"] == []  # metrics.json from before the retune
    assert run["billing"] is None  # no BillableTimeInSeconds given: priced on demand
    assert run["gpus"] is None  # metrics.json from before gpus were recorded
    assert run["precision"] is None  # nor precision
    assert run["compile"] is None  # nor compile
    assert run["bottleneck"]["label"] == "input-bound"  # waited 5% on data hosts busy 93%
    assert run["instance_groups"][0] == {
        "name": "data_group",
        "instance_type": C5_18,
        "count": 2,
        "role": "data",
        "instance_usd_per_hour": 3.672,
    }
    json.dumps(doc, allow_nan=False)


def test_a_spot_run_is_priced_from_its_billable_time():
    billing = {
        "heterogeneous": pricing.parse_billing("1200/4000", "heterogeneous"),
        "baseline": pricing.parse_billing("4000/4000", "baseline"),
    }
    on_demand = pricing.price_performance(metrics(), metrics("tf_homogeneous"), load_prices())
    spot = pricing.price_performance(metrics(), metrics("tf_homogeneous"), load_prices(), billing=billing)
    hetero, baseline = spot["runs"]["heterogeneous"], spot["runs"]["baseline"]
    assert hetero["billing"] == {"billable_s": 1200, "training_s": 4000, "billed_share": 0.3, "spot_saving": 0.7}
    assert hetero["cluster_usd_per_hour"] == pytest.approx(0.3 * on_demand["runs"]["heterogeneous"]["cluster_usd_per_hour"])
    assert hetero["samples_per_dollar"] == pytest.approx(on_demand["runs"]["heterogeneous"]["samples_per_dollar"] / 0.3)
    assert baseline["cluster_usd_per_hour"] == on_demand["runs"]["baseline"]["cluster_usd_per_hour"]  # billed in full
    assert spot["improvement"] > on_demand["improvement"] and spot["speedup"] == on_demand["speedup"]
    assert "(billed 30% of on-demand: spot)" in pricing.summary_line(spot)


@pytest.mark.parametrize("text", ["1200", "a/b", "10/0", "-1/10"])
def test_billing_that_is_not_two_second_counts_is_refused_naming_it(text):
    with pytest.raises(UserError, match=r"--billing-heterogeneous"):
        pricing.parse_billing(text, "heterogeneous")


def test_without_baseline_comparisons_are_null():
    doc = pricing.price_performance(metrics(), None, load_prices())
    assert doc["runs"]["baseline"] is None and doc["speedup"] is None and doc["improvement"] is None
    assert doc["execution_id"] is None
    assert pricing.summary_line(doc).endswith("no baseline")


def test_summary_is_one_line():
    line = pricing.summary_line(pricing.price_performance(metrics(), metrics("tf_homogeneous"), load_prices()))
    assert "\n" not in line
    assert "$45.032/h" in line and "$0.108/100 steps" in line and "46% lower" in line


def test_unknown_instance_type_names_run_and_type():
    doc = metrics()
    doc["instance_groups"][0]["instance_type"] = "ml.c5.19xlarge"
    with pytest.raises(UserError, match="heterogeneous run: .*'ml.c5.19xlarge'.*ml.c5.18xlarge"):
        pricing.price_performance(doc, None, load_prices())


# --- the step, in process ---


def test_evaluate_writes_output_and_local_store(tmp_path):
    hetero = write_json(tmp_path / "h" / "metrics.json", metrics())
    base = make_model_tar(tmp_path / "b" / "model.tar.gz", metrics("tf_homogeneous"))
    doc = ev.evaluate(
        heterogeneous=hetero.parent,
        baseline=base,
        output=tmp_path / "out",
        execution_id="exec-1",
        store_uri=str(tmp_path / "store"),
    )
    assert json.loads((tmp_path / "out" / "price_performance.json").read_text()) == doc
    registration = json.loads((tmp_path / "out" / "model_metrics.json").read_text())
    assert registration["approval"]["status"] == "PendingManualApproval"  # automatic approval is off by default
    assert registration["metadata"]["execution_id"] == "exec-1"
    stored = sorted(p.name for p in (tmp_path / "store" / "exec-1").iterdir())
    assert stored == [
        "baseline_metrics.json",
        "config.json",
        "heterogeneous_metrics.json",
        "model_metrics.json",
        "plan.json",
        "price_performance.json",
        "report.html",
    ]
    assert json.loads((tmp_path / "store" / "exec-1" / "config.json").read_text()) == metrics()["config"]
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan == json.loads((tmp_path / "store" / "exec-1" / "plan.json").read_text())
    # these metrics carry no isolated_costs: no plan, and the reason says what to do
    assert plan["recommendation"] is None and "rerun with validation shards" in plan["reason"]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"store_uri": "st"}, "--store needs --execution-id"),
        ({"execution_id": "a/b"}, "execution id"),
    ],
)
def test_evaluate_checks_execution_id(tmp_path, kwargs, expected):
    hetero = write_json(tmp_path / "metrics.json", metrics())
    with pytest.raises(UserError, match=expected):
        ev.evaluate(heterogeneous=hetero, baseline=None, output=tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_default_baseline_is_optional(tmp_path, monkeypatch):
    default = tmp_path / "baseline"
    monkeypatch.setattr(ev, "DEFAULT_BASELINE", str(default))
    assert ev.resolve_baseline(None) is None  # absent
    default.mkdir()
    assert ev.resolve_baseline(None) is None  # empty
    write_json(default / "metrics.json", metrics("tf_homogeneous"))
    assert ev.resolve_baseline(None) == default
    assert ev.resolve_baseline("/explicit") == Path("/explicit")


# --- the script, run by path as SageMaker Processing does ---


def run_script(*args, cwd, env=None, python_flags=()):
    env = dict(os.environ if env is None else env)
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, *python_flags, str(SCRIPT), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_script_good_input(tmp_path):
    write_json(tmp_path / "in" / "h" / "metrics.json", metrics("pt_heterogeneous"))
    write_json(tmp_path / "in" / "b" / "metrics.json", metrics("pt_homogeneous"))
    # -S: no site-packages, so `steps` is importable only through the script's own sys.path fix.
    proc = run_script(
        "--heterogeneous",
        "in/h",
        "--baseline",
        "in/b",
        "--output",
        "out",
        "--execution-id",
        "e1",
        "--store",
        f"file://{tmp_path}/store",
        cwd=tmp_path,
        python_flags=["-S"],
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "price_performance.json").read_text())
    assert round(doc["improvement"] * 100) == 77 and doc["execution_id"] == "e1"
    assert "77% lower" in proc.stdout
    assert (tmp_path / "store" / "e1" / "price_performance.json").exists()
    assert not (tmp_path / "out" / "failure").exists()


@pytest.mark.parametrize(
    ("make_input", "expected"),
    [
        (lambda d: d / "missing", "does not exist"),
        (lambda d: write_json(d / "m.json", metrics(samples_per_second="x")), "'samples_per_second'"),
        (
            lambda d: write_json(
                d / "m.json",
                metrics(instance_groups=[{"name": "g", "instance_type": "ml.p3.2xlargee", "count": 1, "role": "trainer"}]),
            ),
            "'ml.p3.2xlargee'.*close matches: ml.p3.2xlarge.*--prices",
        ),
    ],
)
def test_script_bad_input_fails_with_one_line(tmp_path, make_input, expected):
    proc = run_script("--heterogeneous", make_input(tmp_path), "--output", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    failure = (tmp_path / "out" / "failure").read_text().strip()
    assert lines[0] == f"ERROR {failure}"
    assert re.search(expected, failure), failure
    assert not (tmp_path / "out" / "price_performance.json").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bogus", "1"], "unrecognized arguments: --bogus 1"),
        (["--heterogeneous"], "argument --heterogeneous: expected one argument"),
        (["--out", "elsewhere"], "unrecognized arguments: --out elsewhere"),  # no abbreviations: --output is found by name
    ],
)
def test_script_bad_argument_writes_the_failure_file(tmp_path, args, needle):
    proc = run_script(*args, "--output", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    failure = (tmp_path / "out" / "failure").read_text()
    assert failure.startswith("bad arguments: ") and needle in failure and "--help" in failure
    assert not (tmp_path / "elsewhere").exists()


def test_script_help_is_not_a_failure(tmp_path):
    proc = run_script("--help", "--output", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 0 and "--execution-id" in proc.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_script_price_override_makes_unknown_type_known(tmp_path):
    groups = [{"name": "g", "instance_type": "ml.g6.xlarge", "count": 1, "role": "trainer"}]
    write_json(tmp_path / "m.json", metrics(instance_groups=groups))
    write_json(tmp_path / "prices.json", {"source": "test", "prices": {"ml.g6.xlarge": 1.0}})
    proc = run_script("--heterogeneous", "m.json", "--prices", "prices.json", "--output", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "price_performance.json").read_text())
    assert doc["runs"]["heterogeneous"]["cluster_usd_per_hour"] == 1.0
    assert "test" in doc["prices"]["source"]


@pytest.mark.slow
def test_script_writes_to_s3_store(tmp_path, aws_env):
    boto3.client("s3").create_bucket(Bucket="evals")
    write_json(tmp_path / "h" / "metrics.json", metrics())
    make_model_tar(tmp_path / "b" / "model.tar.gz", metrics("tf_homogeneous"))
    proc = run_script(
        "--heterogeneous",
        "h",
        "--baseline",
        "b",
        "--output",
        "out",
        "--execution-id",
        "exec-9",
        "--store",
        "s3://evals/results",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stored s3://evals/results/exec-9/price_performance.json" in proc.stdout
    listed = boto3.client("s3").list_objects_v2(Bucket="evals", Prefix="results/exec-9/")["Contents"]
    assert sorted(o["Key"].rsplit("/", 1)[1] for o in listed) == [
        "baseline_metrics.json",
        "config.json",
        "heterogeneous_metrics.json",
        "model_metrics.json",
        "plan.json",
        "price_performance.json",
        "report.html",
    ]
    body = boto3.client("s3").get_object(Bucket="evals", Key="results/exec-9/price_performance.json")["Body"]
    assert round(json.loads(body.read())["improvement"] * 100) == 46


def test_evaluate_builds_its_aws_clients_in_the_region_it_is_given(tmp_path, aws_env, monkeypatch):
    """A processing container's environment names no region: the results store's and the model registry's clients are
    built in the pipeline's, which the compiled step passes as --region."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    boto3.client("s3", region_name="eu-west-1").create_bucket(
        Bucket="evals", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    made, client = [], boto3.client
    monkeypatch.setattr(
        boto3, "client", lambda service, **kw: made.append((service, kw.get("region_name"))) or client(service, **kw)
    )
    write_json(tmp_path / "h" / "metrics.json", metrics())
    argv = ["--heterogeneous", tmp_path / "h", "--output", tmp_path / "out", "--execution-id", "exec-1"]
    argv += ["--store", "s3://evals/results", "--registry", "sagemaker://hetero-models", "--approve-margin", "0"]
    assert ev.main([*map(str, argv), "--region", "eu-west-1"]) == 0
    assert sorted(set(made)) == [("s3", "eu-west-1"), ("sagemaker", "eu-west-1")]


def test_step_modules_have_no_import_time_effects(tmp_path):
    code = (
        "import os, sys; before = set(os.listdir('.')); env = dict(os.environ)\n"
        "import steps.evaluate.evaluate, steps.evaluate.metrics, steps.evaluate.store, steps.evaluate.prices, steps.common.cli\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'pipeline', 'aws_cdk', 'sagemaker')]\n"
        "assert not bad, bad\n"
        "assert set(os.listdir('.')) == before and dict(os.environ) == env\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
