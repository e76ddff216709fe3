"""plan.json: the next run's data group from one heterogeneous run, with the model's error on that run."""

import json

import pytest

from pipeline.plan_view import render_plan
from steps.evaluate.catalogue import load_catalogue
from steps.evaluate.plan import plan_document
from steps.evaluate.prices import load_prices
from steps.evaluate.space import Run
from tests.support.metrics import COSTS, DATA_HOST, input_bound_run, metrics

A10G = {"ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge", "ml.g5.12xlarge", "ml.g5.16xlarge"}
A10G |= {"ml.g5.24xlarge", "ml.g5.48xlarge"}
T4 = {"ml.g4dn.xlarge", "ml.g4dn.2xlarge", "ml.g4dn.4xlarge", "ml.g4dn.8xlarge", "ml.g4dn.12xlarge", "ml.g4dn.16xlarge"}
PARAMS = 5_000_000


def _g4dn_run(rate=900.0, **overrides):
    """The same workload on one g4dn.xlarge (a T4) fed by one c5.xlarge: a slower GPU, 64 / 40 ms."""
    groups = [
        {"name": "data_group", "instance_type": "ml.c5.xlarge", "count": 1, "role": "data"},
        {"name": "dnn_group", "instance_type": "ml.g4dn.xlarge", "count": 1, "role": "trainer"},
    ]
    doc = dict(instance_groups=groups, compute_s_per_step=0.040, samples_per_second=rate, model_parameters=PARAMS)
    return input_bound_run(**{**doc, **overrides})


def test_an_input_bound_run_is_told_how_many_data_hosts_feed_its_gpu():
    plan = plan_document(input_bound_run(), load_prices(), load_catalogue(), execution_id="e1", max_trainers=1)
    pick = plan["recommendation"]
    # the trainer takes 64 / 20 ms = 3,200 samples/s; one c5.xlarge gives 1,200: three are needed on a g5.xlarge, and
    # any A10G cluster that reaches 95% of that may be cheaper per epoch
    assert plan["target_samples_per_second"] == pytest.approx(0.95 * 3200)
    assert pick["samples_per_second"] >= 0.95 * 3200
    own = [c for c in plan["candidates"] if c["trainer"] == "ml.g5.xlarge" and c["samples_per_second"] >= 0.95 * 3200]
    assert pick["cost_per_epoch"] <= min(c["cost_per_epoch"] for c in own)
    if pick["data"] is not None:
        assert plan["parameters"] == {
            "DnnInstanceType": pick["trainer"],
            "DnnInstanceCount": pick["trainers"],
            "DataInstanceType": pick["data"],
            "DataInstanceCount": pick["data_count"],
        }
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
    assert plan["current"]["stage_rates"]["data_cpu"] == pytest.approx(300.0)  # 1 CPU / 2.5 ms x the measured scaling
    assert plan["current"]["model_error"] == pytest.approx(0.0, abs=1e-9)
    assert plan["notes"][0] == (
        "the data hosts ran on 1 CPU(s), not the 4 vCPUs of ml.c5.xlarge (an emulated run): candidates "
        "scale the measured per-CPU rate to each type's vCPUs"
    )


def test_the_candidates_are_every_size_of_the_measured_gpu_at_1_to_n_trainers_and_never_another_gpu():
    plan = plan_document(input_bound_run(model_parameters=PARAMS), load_prices(), load_catalogue(), max_trainers=3)
    found = plan["candidates"]
    assert {c["trainer"] for c in found} == A10G  # bigger sizes of the same GPU; no T4, V100 or A100 without a run
    assert {c["trainers"] for c in found} == {1, 2, 3}
    assert {c["data"] for c in found} >= {None, "ml.c5.xlarge", "ml.m5.large"}
    assert [c["samples_per_dollar"] for c in found] == sorted((c["samples_per_dollar"] for c in found), reverse=True)
    assert {c["bottleneck"] for c in found} <= {"compute", "trainer_cpu", "data_cpu", "network_flow", "network_instance", "s3"}
    two = next(c for c in found if c["trainers"] == 2 and c["trainer"] == "ml.g5.xlarge" and c["data"] is None)
    assert any("predicted (all-reduce model)" in n for n in two["notes"])
    # per-vCPU cost measured on c5: an m5 data group is extrapolated and says so; a c5 one is not
    assert all(any("extrapolated" in n for n in c["notes"]) for c in found if c["data"] and ".m5." in c["data"])
    assert not any("extrapolated" in n for c in found if c["data"] == "ml.c5.xlarge" for n in c["notes"])
    assert all(c["s3"]["shard_mb"] == 64.0 and c["s3"]["connections"] > 0 for c in found)
    json.dumps(plan, allow_nan=False)


def test_a_run_without_model_parameters_plans_only_its_own_trainer_count_and_says_why():
    plan = plan_document(input_bound_run(), load_prices(), load_catalogue())
    assert {c["trainers"] for c in plan["candidates"]} == {1}
    assert "records no model_parameters: only 1 trainer host(s) planned" in plan["notes"][-1]


def test_two_runs_on_different_gpus_share_one_table_each_measured_where_it_ran_and_predicted_elsewhere():
    g5 = input_bound_run(model_parameters=PARAMS)
    plan = plan_document(g5, load_prices(), load_catalogue(), execution_id="g5-run", others=[Run("g4dn-run", _g4dn_run())])
    found = plan["candidates"]
    assert {c["trainer"] for c in found} == A10G | T4
    for c in found:  # each GPU model predicts from its own run
        assert c["run"] == ("g4dn-run" if c["trainer"] in T4 else "g5-run")
    ran = [c for c in found if c["rate_source"] == "measured"]
    key = [(c["trainer"], c["trainers"], c["data"], c["data_count"]) for c in ran]
    assert sorted(key) == [("ml.g4dn.xlarge", 1, "ml.c5.xlarge", 1), ("ml.g5.xlarge", 1, "ml.c5.xlarge", 1)]
    g4dn = next(c for c in ran if c["trainer"] == "ml.g4dn.xlarge")
    assert g4dn["samples_per_second"] == 900.0 and "measured by g4dn-run" in g4dn["notes"]
    assert [r["source"] for r in plan["runs"]] == ["g5-run", "g4dn-run"]
    # a T4 prediction uses the T4's step: 64 / 40 ms per GPU
    t4 = next(c for c in found if c["trainer"] == "ml.g4dn.xlarge" and c["trainers"] == 1 and c["data"] is None)
    assert t4["stage_rates"]["compute"] == pytest.approx(64 / 0.040)


def test_runs_of_different_workloads_are_refused_naming_both():
    g5 = input_bound_run(config={"workload": "image_classification", "workload_options": {}})
    other = _g4dn_run(config={"workload": "resnet50", "workload_options": {"image_size": 224}})
    plan = plan_document(g5, load_prices(), load_catalogue(), execution_id="a", others=[Run("b", other)])
    assert plan["recommendation"] is None
    assert plan["reason"] == (
        "a ran workload 'image_classification' and b ran 'resnet50' {'image_size': 224}: plan from runs of one workload"
    )


def test_the_plan_lists_the_pick_and_two_fallbacks_on_other_instance_types():
    plan = plan_document(input_bound_run(model_parameters=PARAMS), load_prices(), load_catalogue())
    first, *others = plan["fallbacks"]
    assert len(others) == 2 and {k: v for k, v in first.items() if k != "parameters"} == plan["recommendation"]
    assert first["parameters"] == plan["parameters"]
    assert len({c["trainer"] for c in plan["fallbacks"]}) == 3  # each a trainer type the ones before do not use
    assert all(c["samples_per_second"] >= plan["target_samples_per_second"] for c in plan["fallbacks"])
    costs = [c["cost_per_epoch"] for c in plan["fallbacks"]]
    assert costs == sorted(costs)


def test_a_multi_trainer_run_alone_takes_the_modelled_all_reduce_out_of_its_step_for_one_trainer():
    groups = [
        {"name": "data_group", "instance_type": "ml.c5.xlarge", "count": 1, "role": "data"},
        {"name": "dnn_group", "instance_type": "ml.g5.xlarge", "count": 2, "role": "trainer"},
    ]
    run = input_bound_run(instance_groups=groups, model_parameters=PARAMS)
    found = plan_document(run, load_prices(), load_catalogue(), execution_id="two")["candidates"]
    # 20 ms a step of 64 with 2 x 5M x 4 bytes x 2(2-1)/2 = 20 MB all-reduced at the g5.xlarge's 10 Gbps: 16 ms of it
    one = next(c for c in found if (c["trainer"], c["trainers"], c["data"]) == ("ml.g5.xlarge", 1, None))
    assert one["stage_rates"]["compute"] == pytest.approx(64 / (0.020 - 0.016))
    two = next(c for c in found if (c["trainer"], c["trainers"], c["data"]) == ("ml.g5.xlarge", 2, None))
    assert two["stage_rates"]["compute"] == pytest.approx(2 * 64 / 0.020)  # as it ran
    ran = next(c for c in found if c["rate_source"] == "measured")
    assert (ran["trainer"], ran["trainers"], ran["data"], ran["run"]) == ("ml.g5.xlarge", 2, "ml.c5.xlarge", "two")
