"""report.html: one self-contained page with the execution's table, its charts, its plan and the history."""

import base64
import re

from steps.evaluate import evaluate as ev
from steps.evaluate import pricing
from steps.evaluate.catalogue import load_catalogue
from steps.evaluate.plan import plan_document
from steps.evaluate.prices import load_prices
from steps.evaluate.report import report_html
from steps.evaluate.store import open_store
from steps.train.core.gpus import gpu_use
from steps.train.core.precision import precision_document
from tests.support.metrics import input_bound_run, metrics, write_json

SERIES = {"window_steps": 2, "step_time_s": [0.4, 0.1, 0.1], "data_wait_s": [0.3, 0.0, 0.0]}


def _images(page: str) -> dict[str, bytes]:
    return {alt: base64.b64decode(data) for alt, data in re.findall(r'alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)}


def test_the_page_holds_every_chart_inline_and_escapes_what_it_quotes():
    hetero = input_bound_run(step_series=SERIES)
    baseline = metrics(case="tf_homogeneous", step_series=SERIES)
    doc = pricing.price_performance(hetero, baseline, load_prices(), execution_id="<e1>")
    plan = plan_document(hetero, load_prices(), load_catalogue(), baseline=baseline)
    page = report_html(
        execution_id="<e1>", price_performance=doc, plan=plan, heterogeneous=hetero, baseline=baseline, history=[doc, doc]
    )
    images = _images(page)
    assert set(images) == {
        "Step time over training",
        "Data-wait share",
        "The planner&#x27;s frontier",
        "Price-performance across executions",
    }
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in images.values())
    assert "<h1>hetero report: &lt;e1&gt;</h1>" in page and "<e1>" not in page
    assert "speedup" in page and "input-bound" in page and 'src="http' not in page  # nothing fetched from elsewhere
    for point in plan["frontier"]:  # each frontier point with the resource that binds it
        assert f"<td>{point['bottleneck']}</td>" in page
    assert page.count("<td>pick</td>") == 1


def test_a_run_without_a_plan_or_series_still_reports_what_it_has():
    doc = pricing.price_performance(metrics(), None, load_prices(), execution_id="e1")
    plan = plan_document(metrics(), load_prices(), load_catalogue())
    page = report_html(execution_id="e1", price_performance=doc, plan=plan, heterogeneous=metrics(), baseline=None, history=[])
    assert "No plan: " in page and set(_images(page)) == {"Step time over training", "Data-wait share"}


def test_gpus_a_run_left_idle_are_said_with_the_fix():
    doc = pricing.price_performance(
        input_bound_run(gpus=gpu_use(1, 8, "pytorch")), metrics(gpus=gpu_use(8, 8, "tensorflow")), load_prices()
    )
    assert doc["runs"]["heterogeneous"]["gpus"]["used_per_host"] == 1
    page = report_html(
        execution_id="e1", price_performance=doc, plan=None, heterogeneous=input_bound_run(), baseline=None, history=[]
    )
    assert "heterogeneous run: framework=pytorch trains one process per trainer host, on 1 of its 8 GPUs" in page
    assert "baseline run: framework" not in page  # every GPU used: nothing to say


def test_history_is_every_stored_execution_oldest_first(tmp_path):
    store = open_store(tmp_path)
    for execution, when in (("b", "2026-11-02T00:00:00+00:00"), ("a", "2026-11-03T00:00:00+00:00")):
        store.put_json(execution, "price_performance.json", {"execution_id": execution, "evaluated_at": when, "runs": {}})
    (tmp_path / "c").mkdir()  # an execution that stopped before Evaluate
    current = {"execution_id": "d", "evaluated_at": "2026-11-04T00:00:00+00:00", "runs": {}}
    assert [d["execution_id"] for d in ev.history(store, current)] == ["b", "a", "d"]


def test_evaluate_writes_the_report_beside_the_json_and_into_the_store(tmp_path):
    hetero = write_json(tmp_path / "h" / "metrics.json", input_bound_run(step_series=SERIES))
    ev.evaluate(
        heterogeneous=hetero, baseline=None, output=tmp_path / "out", execution_id="e9", store_uri=str(tmp_path / "store")
    )
    page = (tmp_path / "out" / "report.html").read_text()
    assert page == (tmp_path / "store" / "e9" / "report.html").read_text()
    assert "The planner&#x27;s frontier" in page


def test_each_runs_precision_is_in_the_table():
    hetero = input_bound_run(precision=precision_document("auto", "fp32"))
    doc = pricing.price_performance(hetero, metrics(precision=precision_document("bf16", "bf16")), load_prices())
    page = report_html(execution_id="e1", price_performance=doc, plan=None, heterogeneous=hetero, baseline=None, history=[])
    assert "<tr><th>precision</th><td>bf16</td><td>fp32 (auto)</td></tr>" in page  # baseline, heterogeneous


def test_whether_each_run_compiled_its_step_is_in_the_table():
    doc = pricing.price_performance(input_bound_run(compile="on"), metrics(compile="off"), load_prices())
    page = report_html(execution_id="e1", price_performance=doc, plan=None, heterogeneous=None, baseline=None, history=[])
    assert "<tr><th>compile</th><td>off</td><td>on</td></tr>" in page  # baseline, heterogeneous


def test_each_decoding_hosts_retune_is_one_line():
    retuned = {"start": 4, "end": 2, "changed": 3, "changes": [], "bounds": [1, 4]}
    host = {**input_bound_run()["data_hosts"][0], "host": "algo-1", "decode_workers": retuned}
    local = {"host": "algo-2", "workers": 1, "decode_workers": {"start": 1, "end": 1, "changed": 0, "changes": [], "off": "x"}}
    hetero = input_bound_run(host=host, local_decode=[local])
    doc = pricing.price_performance(hetero, None, load_prices())
    assert doc["runs"]["heterogeneous"]["decode_workers"] == [
        {"host": "algo-1", "start": 4, "end": 2, "changed": 3, "off": None},
        {"host": "algo-2", "start": 1, "end": 1, "changed": 0, "off": "x"},
    ]
    page = report_html(execution_id="e1", price_performance=doc, plan=None, heterogeneous=None, baseline=None, history=[])
    assert "<li>decode workers (retune): algo-1 4 -&gt; 2 (3 change(s)), algo-2 1 (unchanged)</li>" in page


def test_each_executions_registered_package_is_linked():
    doc = pricing.price_performance(metrics(), None, load_prices(), execution_id="e2")
    history = [{**doc, "execution_id": "e1"}, doc]
    arn = "arn:aws:sagemaker:us-east-1:1:model-package/g/1"
    packages = {
        "e2": {
            "ModelPackageArn": arn,
            "ModelPackageVersion": 1,
            "ModelApprovalStatus": "Approved",
            "href": "file:///r/1.json?a&b",
        }
    }
    page = report_html(
        execution_id="e2", price_performance=doc, plan=None, heterogeneous=None, baseline=None, history=history, packages=packages
    )
    assert "<h2>Registered models</h2>" in page
    assert f'<td>e2</td><td>1</td><td>Approved</td><td><a href="file:///r/1.json?a&amp;b">{arn}</a></td>' in page
    assert "<td>e1</td><td>-</td><td>not registered</td>" in page
    none = report_html(execution_id="e2", price_performance=doc, plan=None, heterogeneous=None, baseline=None, history=history)
    assert "Registered models" not in none  # no registry read: nothing said


def test_the_report_states_the_plans_basis_and_shows_each_run_as_it_ran_apart_from_the_frontier():
    """An emulated run (its data host on 1 CPU of a 4-vCPU ml.c5.xlarge): the frontier's rows are at the types' vCPUs,
    the run as it ran only in its own table, with its prices' date and the warning that they are old."""
    host = {"host": "algo-2", "cpus": 1, "decode_cpu_s_per_sample": 0.0024, "service_cpu_s_per_sample": 0.0001}
    hetero = input_bound_run(rate=300.0, host={**input_bound_run()["data_hosts"][0], **host}, step_series=SERIES)
    doc = pricing.price_performance(hetero, None, load_prices(), execution_id="e1")
    plan = plan_document(hetero, load_prices(), load_catalogue(), execution_id="e1")
    page = report_html(execution_id="e1", price_performance=doc, plan=plan, heterogeneous=hetero, baseline=None, history=[])
    assert "basis: every row at the instance types&#x27; own vCPUs, predicted: e1 ran emulated" in page
    assert "<h2>The model against each run, as it ran</h2>" in page
    assert "<td>trainer 4 CPU, data 1 CPU</td><td>300</td><td>data_cpu</td><td>300</td><td>+0.0%</td>" in page
    assert "prices: us-east-1 on-demand as of 2022-10-27 (ml.c5.xlarge, ml.g5.xlarge)" in page
    assert page.count("warning: prices as of 2022-10-27") == 1 and "hetero prices refresh" in page
