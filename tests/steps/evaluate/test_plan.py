"""plan.json: the next run's data group from one heterogeneous run, with the model's error on that run."""

import json

import pytest

from pipeline.plan_view import render_plan
from steps.evaluate.catalogue import load_catalogue
from steps.evaluate.plan import plan_document
from steps.evaluate.prices import load_prices
from tests.support.metrics import COSTS, DATA_HOST, input_bound_run, metrics


def test_an_input_bound_run_is_told_how_many_data_hosts_feed_its_gpu():
    plan = plan_document(input_bound_run(), load_prices(), load_catalogue(), execution_id="e1")
    pick = plan["recommendation"]
    # the trainer takes 64 / 20 ms = 3,200 samples/s; one c5.xlarge gives 1,200: three are needed
    assert pick["samples_per_second"] >= 0.95 * 3200 and pick["data"] is not None
    assert plan["parameters"] == {"DataInstanceType": pick["data"], "DataInstanceCount": pick["data_count"]}
    assert plan["current"]["model_error"] == pytest.approx(0.0, abs=1e-9)  # scaling was measured on this very run
    assert plan["epoch_samples"] == 32_000 and plan["execution_id"] == "e1"
    assert "samples/s predicted" in plan["reason"] and "this run: 1 x ml.c5.xlarge" in plan["reason"]
    frontier = plan["frontier"]
    assert [f["samples_per_second"] for f in frontier] == sorted(f["samples_per_second"] for f in frontier)
    assert "ml.c7i.xlarge" in plan["unpriced"]  # known hardware, no bundled price: never recommended
    assert all(c["data"] not in plan["unpriced"] for c in plan["candidates"])
    json.dumps(plan, allow_nan=False)


def test_a_compute_bound_run_with_few_cpus_needed_stays_homogeneous():
    # 0.1 ms of CPU per sample: the g5.xlarge's own 3 spare vCPUs decode 30,000 samples/s
    host = {**DATA_HOST, "cpus": 4, "decode_cpu_s_per_sample": 0.0001, "service_cpu_s_per_sample": 0.0}
    cheap = {**COSTS, "decode_cpu_s_per_batch": 0.0064}
    plan = plan_document(
        input_bound_run(wait=0.01, rate=3200.0, host=host, isolated_costs=cheap), load_prices(), load_catalogue()
    )
    assert plan["recommendation"]["data"] is None and plan["parameters"] is None
    assert plan["reason"].startswith("stay homogeneous")


@pytest.mark.parametrize(
    "doc,reason",
    [
        (metrics(case="tf_homogeneous"), "made from a heterogeneous run"),
        (metrics(), "no isolated_costs"),
    ],
)
def test_a_run_that_cannot_be_planned_from_says_why(doc, reason):
    plan = plan_document(doc, load_prices(), load_catalogue())
    assert plan["recommendation"] is None and reason in plan["reason"]


@pytest.mark.parametrize("run", [input_bound_run(), metrics()], ids=["planned", "not-planned"])
def test_every_catalogue_type_is_priced_or_listed_unpriced_with_the_fix(run):
    prices, catalogue = load_prices(), load_catalogue()
    plan = plan_document(run, prices, catalogue)
    assert set(catalogue.specs) == set(prices.usd_per_hour) | set(plan["unpriced"])  # none dropped unseen
    assert not set(prices.usd_per_hour) & set(plan["unpriced"])
    assert {"ml.g6.xlarge", "ml.p5.48xlarge", "ml.c7i.xlarge"} <= set(plan["unpriced"])  # GPU types too
    text = render_plan(plan)
    assert "ml.g6.xlarge" in text and "hetero prices refresh" in text and "--prices FILE" in text


def test_an_unpriced_trainer_is_named_with_the_command_that_prices_it():
    run = input_bound_run()
    run["instance_groups"] = [
        {**g, "instance_type": "ml.g6.xlarge"} if g["role"] == "trainer" else g for g in run["instance_groups"]
    ]
    plan = plan_document(run, load_prices(), load_catalogue())
    assert plan["recommendation"] is None and "ml.g6.xlarge" in plan["reason"]
    assert "hetero prices refresh" in plan["reason"] and "ml.g6.xlarge" in plan["unpriced"]


def test_every_catalogue_type_has_its_hardware_and_the_families_users_pick():
    catalogue = load_catalogue()
    families = {name.split(".")[1] for name in catalogue.specs}
    assert {"c5", "c5n", "c6i", "c7i", "m5", "m6i", "m7i", "g4dn", "g5", "g6", "g6e", "p3", "p4d", "p5"} <= families
    for spec in catalogue.specs.values():
        assert spec.vcpus > 0 and spec.memory_gib > 0 and spec.network_gbps > 0
        assert (spec.gpus > 0) == (spec.gpu_model is not None) == (spec.gpu_memory_gib > 0), spec
    assert set(load_prices().usd_per_hour) <= set(catalogue.specs)  # every priced type has its hardware
    assert catalogue.describe()["as_of"].startswith("2026-11-24")


def test_an_emulated_run_is_predicted_as_it_ran_and_the_plan_says_its_hosts_were_smaller():
    """Locally a data host named ml.c5.xlarge (4 vCPUs) runs on 1 CPU: the model's self-check uses the 1 CPU."""
    host = {**DATA_HOST, "cpus": 1, "decode_cpu_s_per_sample": 0.0024, "service_cpu_s_per_sample": 0.0001}
    plan = plan_document(input_bound_run(rate=300.0, host=host), load_prices(), load_catalogue())
    assert plan["current"]["stage_rates"]["input"] == pytest.approx(300.0)  # 1 CPU / 2.5 ms x the measured scaling
    assert plan["current"]["model_error"] == pytest.approx(0.0, abs=1e-9)
    assert plan["notes"] == [
        "the data hosts ran on 1 CPU(s), not the 4 vCPUs of ml.c5.xlarge (an emulated run): candidates "
        "scale the measured per-CPU rate to each type's vCPUs"
    ]
