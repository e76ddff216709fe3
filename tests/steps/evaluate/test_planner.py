"""The planner's model: a profile from one measured run, rates as the minimum of three stages, the pick."""

import pytest

from steps.common.errors import UserError
from steps.evaluate.planner import InstanceType, Profile, candidates, frontier, predict, profile_from_metrics, recommend
from tests.support.metrics import DATA_HOST, metrics

GPU = InstanceType("ml.g5.2xlarge", vcpus=8, price_per_hour=1.515, network_gbps=10, gpus=1)
CPU = InstanceType("ml.c5.xlarge", vcpus=4, price_per_hour=0.204, network_gbps=10)
COSTS = {
    "batch_size": 64,
    "cpus": 1,
    "step_s_per_batch": 0.016,
    "step_s_per_batch_median": 0.020,
    "decode_cpu_s_per_batch": 0.128,
    "decode_s_per_batch": 0.128,
}


def _profile(step=1e-3, cpu=4e-3, decode=4e-3, scaling=1.0, wire=12_000.0):
    return Profile(step, cpu, decode, scaling, True, wire)


def test_a_heterogeneous_run_profiles_from_what_its_data_hosts_measured():
    doc = metrics(
        isolated_costs=COSTS,
        compute_s_per_step=0.032,
        data_wait_share=0.5,
        samples_per_second=1500.0,
        data_hosts=[
            {**DATA_HOST, "cpus": 4, "samples_sent": 1000, "decode_cpu_s_per_sample": 0.0024, "service_cpu_s_per_sample": 0.0001}
        ],
    )
    profile = profile_from_metrics(doc)
    assert profile.step_s_per_sample == pytest.approx(0.032 / 64)  # the loop's compute, data resident
    assert profile.cpu_s_per_sample == pytest.approx(0.0025) and profile.decode_cpu_s_per_sample == pytest.approx(0.0024)
    # input-bound (the trainer waited half its steps): the host reached 1500 of an ideal 4 / 0.0025 = 1600 samples/s
    assert profile.scaling_measured and profile.scaling == pytest.approx(1500 / 1600)
    assert profile.bytes_per_sample == DATA_HOST["bytes_sent_per_sample"]


def test_a_data_host_that_was_never_the_bottleneck_leaves_scaling_unmeasured():
    doc = metrics(isolated_costs=COSTS, compute_s_per_step=0.032, data_wait_share=0.01)
    profile = profile_from_metrics(doc)
    assert profile.scaling == 1.0 and not profile.scaling_measured


def test_a_homogeneous_run_profiles_from_its_isolated_costs():
    profile = profile_from_metrics(metrics(case="tf_homogeneous", isolated_costs=COSTS))
    assert profile.step_s_per_sample == pytest.approx(0.020 / 64)  # the median step alone
    assert profile.cpu_s_per_sample == profile.decode_cpu_s_per_sample == pytest.approx(0.128 / 64)
    assert profile.bytes_per_sample is None


def test_a_run_without_isolated_costs_cannot_be_planned_from():
    with pytest.raises(UserError, match="no isolated_costs.*rerun with validation shards"):
        profile_from_metrics(metrics(), "s3://b/metrics.json")


@pytest.mark.parametrize(
    "count,bottleneck,rate",
    [
        (1, "input", 1000.0),  # 1 x 4 vCPUs / 4 ms
        (2, "input", 2000.0),
        (4, "compute", 3000.0),  # the trainer: 1 / 0.333 ms
    ],
)
def test_the_rate_is_the_slowest_stage(count, bottleneck, rate):
    p = predict(_profile(step=1 / 3000), GPU, 1, CPU, count, epoch_samples=1_000_000, spare=0)
    assert (p.bottleneck, p.samples_per_second) == (bottleneck, pytest.approx(rate))
    assert p.gpu_busy_share == pytest.approx(rate / 3000)
    assert p.cluster_price_per_hour == pytest.approx(1.515 + count * 0.204)
    assert p.cost_per_epoch == pytest.approx(p.cluster_price_per_hour * 1_000_000 / rate / 3600)
    assert p.samples_per_dollar == pytest.approx(rate * 3600 / p.cluster_price_per_hour)


def test_transport_binds_when_a_sample_is_large_for_the_network():
    slow = InstanceType("ml.c5.xlarge", vcpus=4, price_per_hour=0.204, network_gbps=0.1)
    p = predict(_profile(cpu=1e-4, wire=1_000_000.0), GPU, 1, slow, 1, epoch_samples=1000, spare=0)
    assert p.bottleneck == "transport" and p.samples_per_second == pytest.approx(0.1e9 / 8 / 1_000_000)


def test_scaling_discounts_the_data_hosts_and_staying_homogeneous_decodes_on_the_trainers_vcpus_but_one():
    assert predict(_profile(scaling=0.5), GPU, 1, CPU, 1, 1000, spare=0).stage_rates["input"] == pytest.approx(500)
    home = predict(_profile(decode=7e-3), GPU, 1, None, 0, 1000)
    assert home.data is None and home.data_count == 0
    assert home.stage_rates["input"] == pytest.approx(7 / 7e-3) and home.cluster_price_per_hour == GPU.price_per_hour


def test_the_pick_is_the_cheapest_per_epoch_within_95_percent_of_the_best_rate():
    found = candidates(_profile(step=1 / 3000), GPU, 1, [CPU], max_count=6, epoch_samples=1_000_000)
    assert [(p.data, p.data_count) for p in found[:2]] == [(None, 0), ("ml.c5.xlarge", 1)] and len(found) == 7
    pick = recommend(found)
    # the trainer's 6 spare vCPUs decode 1500/s beside the data hosts: 2 hosts (+2000) reach 3000, the trainer's rate,
    # where 3 would be needed without them; more cost more for nothing
    assert (pick.data_count, pick.samples_per_second) == (2, pytest.approx(3000))
    assert "6 spare vCPU(s) of ml.g5.2xlarge" in pick.notes[0]
    fast = frontier(found)
    assert [p.samples_per_second for p in fast] == sorted(p.samples_per_second for p in fast)
    assert pick in fast and all(p.data_count <= 2 for p in fast)


def test_staying_homogeneous_is_picked_when_the_trainers_own_vcpus_suffice():
    found = candidates(_profile(step=1 / 500, decode=4e-3), GPU, 1, [CPU], max_count=4, epoch_samples=1000)
    assert recommend(found).data is None  # 7 vCPUs decode 1750 samples/s; the trainer takes 500


def test_a_prediction_bound_by_a_burst_bandwidth_says_so_and_others_do_not():
    burst = InstanceType("ml.c5.xlarge", vcpus=4, price_per_hour=0.204, network_gbps=0.1, network_burst=True)
    bound = predict(_profile(cpu=1e-4, wire=1_000_000.0), GPU, 1, burst, 1, epoch_samples=1000, spare=0)
    assert bound.bottleneck == "transport" and "'up to' 0.1 Gbps, a burst figure" in bound.notes[0]
    fast = InstanceType("ml.c5.xlarge", vcpus=4, price_per_hour=0.204, network_gbps=10, network_burst=True)
    assert predict(_profile(), GPU, 1, fast, 1, epoch_samples=1000, spare=0).notes == ()


def test_a_gpu_trainers_spare_vcpus_decode_beside_the_data_hosts_a_cpu_trainers_do_not():
    p = predict(_profile(), GPU, 2, CPU, 1, epoch_samples=1000)
    # 1 x 4 vCPUs / 4 ms from the data host + 2 trainers x (8 - 2 kept) / 4 ms of their own
    assert p.stage_rates["input"] == pytest.approx(1000 + 2 * 6 / 4e-3)
    kept = Profile(1e-3, 4e-3, 4e-3, 1.0, True, 12_000.0, trainer_kept_cpus=5)  # what the profiled trainers kept
    assert predict(kept, GPU, 1, CPU, 1, 1000).stage_rates["input"] == pytest.approx(1000 + 3 / 4e-3)
    cpu_trainer = InstanceType("ml.c5.9xlarge", vcpus=36, price_per_hour=1.836, network_gbps=10)
    assert predict(_profile(), cpu_trainer, 1, CPU, 1, 1000).stage_rates["input"] == pytest.approx(1000)  # its step uses them all


def test_a_hybrid_run_profiles_its_trainers_decode_workers():
    doc = metrics(
        isolated_costs=COSTS,
        compute_s_per_step=0.032,
        data_wait_share=0.5,
        samples_per_second=1500.0,
        data_hosts=[
            {**DATA_HOST, "cpus": 4, "samples_sent": 1000, "decode_cpu_s_per_sample": 0.0024, "service_cpu_s_per_sample": 0.0001}
        ],
        local_decode=[{"host": "algo-2", "workers": 2, "kept_cpus": 2, "cpus": 4, "samples": 500}],
    )
    profile = profile_from_metrics(doc)
    assert (profile.trainer_kept_cpus, profile.local_workers) == (2, 2.0)
    # input-bound: 1500 of an ideal 4 / 2.5 ms + 2 / 2.4 ms
    assert profile.scaling == pytest.approx(1500 / (4 / 0.0025 + 2 / 0.0024))
