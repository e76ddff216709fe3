"""plan.json: the next run's data group from one heterogeneous run, with the model's error on that run."""

import json

import pytest

from pipeline.commands.plan_view import render_plan
from steps.evaluate.catalogue import load_catalogue
from steps.evaluate.plan import bound_text, plan_document
from steps.evaluate.prices import load_prices
from steps.evaluate.space import Run
from tests.support.metrics import COSTS, DATA_HOST, assert_labels_agree, input_bound_run, metrics

A10G = {"ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge", "ml.g5.12xlarge", "ml.g5.16xlarge"}
A10G |= {"ml.g5.24xlarge", "ml.g5.48xlarge"}
T4 = {"ml.g4dn.xlarge", "ml.g4dn.2xlarge", "ml.g4dn.4xlarge", "ml.g4dn.8xlarge", "ml.g4dn.12xlarge", "ml.g4dn.16xlarge"}
PARAMS = 5_000_000
CLUSTER = ("ml.g5.xlarge", 1, "ml.c5.xlarge", 1)  # input_bound_run's


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
    """Locally a data host named ml.c5.xlarge (4 vCPUs) runs on 1 CPU: the model's self-check uses the 1 CPU, and the
    candidate of that very cluster is predicted at the 4 vCPUs like every other."""
    host = {**DATA_HOST, "cpus": 1, "decode_cpu_s_per_sample": 0.0024, "service_cpu_s_per_sample": 0.0001}
    plan = plan_document(input_bound_run(rate=300.0, host=host), load_prices(), load_catalogue(), execution_id="e1")
    assert plan["current"]["stage_rates"]["data_cpu"] == pytest.approx(300.0)  # 1 CPU / 2.5 ms x the measured scaling
    assert plan["current"]["model_error"] == pytest.approx(0.0, abs=1e-9)
    assert plan["current"]["basis"] == "emulated_cpus" and plan["current"]["cpus"] == {"trainer": 4, "data": 1}
    assert plan["measured"] == [plan["current"]]
    assert plan["notes"][-1] == (
        "e1 ran emulated (the data hosts on 1 CPU(s) where ml.c5.xlarge has 4 vCPUs): its cluster is predicted at the "
        "types' vCPUs like every candidate; as it ran, it only checks the model against its measurement"
    )
    assert plan["basis"]["rows"] == "real_vcpus" and plan["basis"]["emulated_runs"] == ["e1"]
    same = next(c for c in plan["candidates"] if (c["trainer"], c["trainers"], c["data"], c["data_count"]) == CLUSTER)
    assert same["rate_source"] == "predicted" and same["basis"] == "real_vcpus"
    assert same["stage_rates"]["data_cpu"] >= 4 * 300.0  # four times the CPUs, and the trainer's 2 spare vCPUs


def test_the_candidates_are_every_size_of_the_measured_gpu_at_1_to_n_trainers_and_never_another_gpu():
    plan = plan_document(input_bound_run(model_parameters=PARAMS), load_prices(), load_catalogue(), max_trainers=3)
    found = plan["candidates"]
    assert {c["trainer"] for c in found} == A10G  # bigger sizes of the same GPU; no T4, V100 or A100 without a run
    assert {c["trainers"] for c in found} == {1, 2, 3}
    assert {c["data"] for c in found} >= {None, "ml.c5.xlarge", "ml.m5.large"}
    assert [c["samples_per_dollar"] for c in found] == sorted((c["samples_per_dollar"] for c in found), reverse=True)
    stages = {"compute", "trainer_cpu", "data_cpu", "network_flow", "network_instance", "s3"}
    assert {c["bottleneck"] for c in found if c["rate_source"] == "predicted"} <= stages
    assert {c["bottleneck"] for c in found if c["rate_source"] == "measured"} <= stages | {"measured"}
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


# The default run's shape (`hetero run`, docs/quickstart.md): 1 x ml.g5.xlarge (4 vCPUs, $1.408/h) fed by 1 x
# ml.c5.4xlarge (16 vCPUs, $0.816/h), then the 1 x ml.g5.xlarge baseline, every host emulated on one CPU; round numbers.
EMULATED_COSTS = {**COSTS, "cpus": 1, "step_s_per_batch": 0.1, "step_s_per_batch_median": 0.1, "decode_cpu_s_per_batch": 0.0512}
DEFAULT_GROUPS = [
    {"name": "data_group", "instance_type": "ml.c5.4xlarge", "count": 1, "role": "data"},
    {"name": "dnn_group", "instance_type": "ml.g5.xlarge", "count": 1, "role": "trainer"},
]


def _default_run() -> tuple[dict, dict]:
    """The heterogeneous run: 128 ms a step of 64 on its one CPU (2 ms a sample: 500 samples/s), its data host on one CPU
    at 1 ms of CPU a sample (0.8 decode, 0.2 service), 480 samples/s measured, waiting 2% (so scaling is not
    measured: 1.0); the baseline: 300 samples/s measured, decoding and stepping on one CPU."""
    host = {
        **DATA_HOST,
        "cpus": 1,
        "decode_cpu_s_per_sample": 0.0008,
        "service_cpu_s_per_sample": 0.0002,
        "bytes_sent_per_sample": 12288.0,
    }
    common = dict(isolated_costs=EMULATED_COSTS, samples_seen=6400, epochs=2, model_parameters=61_208)
    hetero = input_bound_run(wait=0.02, rate=480.0, host=host, instance_groups=DEFAULT_GROUPS, compute_s_per_step=0.128, **common)
    baseline = metrics(
        case="pt_homogeneous",
        instance_groups=DEFAULT_GROUPS[1:],
        samples_per_second=300.0,
        data_wait_share=0.6,
        **common,
    )
    return hetero, baseline


def test_the_default_runs_plan_picks_the_cheapest_adequate_cluster_at_the_types_vcpus():
    """Worked by hand. At the types' vCPUs (epoch 6,400 / 2 = 3,200 samples):
    - 1 x g5.xlarge alone: compute 1 / 2 ms = 500, its 3 vCPUs beside the loop decode 3 / 0.8 ms = 3,750: 500 samples/s
      at $1.408/h, $1.408 x 3,200 / 500 / 3,600 = $0.0025031 per epoch;
    - 2 x g5.xlarge: the ring moves 61,208 x 4 B x 2(2-1)/2 = 244,832 B a step at 10 Gbps, 0.196 ms on 128: 998.5
      samples/s at $2.816/h, $0.0025071 (0.16% more: within 2% too, and one host more);
    - this run's cluster: compute 500, data 16 / 1 ms + 2 spare vCPUs / 0.8 ms = 18,500: 500 at $2.224/h, $0.0039538.
    The target is 95% of 500 = 475: the pick is 1 x g5.xlarge alone. Compared with the baseline's emulated 300 samples/s
    instead ($1.408 x 3,200 / 300 / 3,600 = $0.0041719), the plan would double the trainers.
    As they ran, on one CPU each: this run 1 / 1 ms = 1,000 data, 500 compute: 500 against 480 measured (+4.2%); the
    baseline decodes between its steps, 1 / (2 ms + 0.8 ms) = 357.1 against 300 (+19.0%)."""
    hetero, baseline = _default_run()
    plan = plan_document(hetero, load_prices(), load_catalogue(), execution_id="e1", baseline=baseline)
    pick = plan["recommendation"]
    assert (pick["trainer"], pick["trainers"], pick["data"]) == ("ml.g5.xlarge", 1, None)
    assert pick["samples_per_second"] == pytest.approx(500) and pick["cost_per_epoch"] == pytest.approx(0.0025031, rel=1e-4)
    assert plan["target_samples_per_second"] == pytest.approx(475)
    adequate = [c for c in plan["candidates"] if c["samples_per_second"] >= 475]
    assert pick["cost_per_epoch"] == min(c["cost_per_epoch"] for c in adequate)
    two = next(c for c in plan["candidates"] if (c["trainer"], c["trainers"], c["data"]) == ("ml.g5.xlarge", 2, None))
    assert two["samples_per_second"] == pytest.approx(998.47, abs=0.01)
    assert two["cost_per_epoch"] == pytest.approx(0.0025071, rel=1e-4)
    ran = next(c for c in plan["candidates"] if (c["trainer"], c["trainers"], c["data"]) == ("ml.g5.xlarge", 1, "ml.c5.4xlarge"))
    assert ran["stage_rates"]["data_cpu"] == pytest.approx(18_500) and ran["cost_per_epoch"] == pytest.approx(0.0039538, rel=1e-4)
    assert {c["rate_source"] for c in plan["candidates"]} == {"predicted"}  # both runs emulated: nothing measured stands
    assert plan["basis"]["emulated_runs"] == ["e1", "e1's baseline"]
    this, base = plan["measured"]
    assert this == plan["current"] and (this["cpus"], base["cpus"]) == ({"trainer": 1, "data": 1}, {"trainer": 1})
    assert (this["samples_per_second"], this["bottleneck"]) == (pytest.approx(500), "compute")
    assert this["model_error"] == pytest.approx(500 / 480 - 1)
    assert (base["samples_per_second"], base["bottleneck"]) == (pytest.approx(357.14, abs=0.01), "trainer_cpu")
    assert base["model_error"] == pytest.approx(357.142857 / 300 - 1)
    assert plan["reason"].startswith("stay homogeneous on 1 x ml.g5.xlarge: ")
    assert plan["parameters"] is None and plan["schema_version"] == 3
    assert_labels_agree(plan)


def test_a_measured_rate_below_every_predicted_stage_is_labelled_measured_with_its_gap():
    """A cloud baseline (its trainer on its type's 4 vCPUs) that measured 300 samples/s where the model's slowest stage
    gives 500: the row keeps the measurement and no stage's name."""
    hetero, baseline = _default_run()
    cloud = {**EMULATED_COSTS, "cpus": 4}
    hetero = {**hetero, "isolated_costs": cloud, "data_hosts": [{**hetero["data_hosts"][0], "cpus": 16}]}
    plan = plan_document(
        hetero, load_prices(), load_catalogue(), execution_id="e1", baseline={**baseline, "isolated_costs": cloud}
    )
    assert plan["basis"]["emulated_runs"] == []
    stay = next(c for c in plan["candidates"] if (c["trainer"], c["trainers"], c["data"]) == ("ml.g5.xlarge", 1, None))
    assert (stay["rate_source"], stay["samples_per_second"], stay["bottleneck"]) == ("measured", 300.0, "measured")
    assert stay["measured_gap"] == pytest.approx(300 / 500 - 1)
    assert "measured 300 samples/s, 40% below its slowest predicted stage (compute, 500)" in stay["notes"][-1]
    assert bound_text(stay) == "measured, -40% vs compute"  # what `hetero plan` and the report show as its bound
    assert_labels_agree(plan)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "ray"])
def test_the_labels_agree_with_the_stage_rates_on_every_row_of_each_frameworks_default_run(framework):
    hetero, baseline = _default_run()
    hetero, baseline = ({**doc, "framework": framework} for doc in (hetero, baseline))
    if framework == "ray":  # Ray Data moves the samples as objects: no data host measures itself
        hetero = {**hetero, "data_hosts": [{**hetero["data_hosts"][0], "bytes_sent_per_sample": 0.0}]}
    plan = plan_document(hetero, load_prices(), load_catalogue(), execution_id="e1", baseline=baseline)
    assert plan["recommendation"] is not None, plan["reason"]
    assert_labels_agree(plan)


def test_each_row_carries_the_date_of_its_oldest_price_and_the_plan_each_sources():
    hetero, baseline = _default_run()
    plan = plan_document(hetero, load_prices(), load_catalogue(), execution_id="e1", baseline=baseline)
    assert {c["price_as_of"] for c in plan["candidates"]} == {"2022-10-27"}
    (bundled,) = plan["prices"]["sources"]
    assert bundled["as_of"] == "2022-10-27" and "ml.g5.xlarge" in bundled["types"]
    text = render_plan(plan)
    assert "prices: us-east-1 on-demand as of 2022-10-27 (" in text
    warnings = [line for line in text.splitlines() if line.startswith("warning: prices")]
    assert len(warnings) == 1 and "`hetero prices refresh`" in warnings[0]
