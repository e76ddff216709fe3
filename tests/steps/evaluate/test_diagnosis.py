"""Each run is labelled input-, compute- or transport-bound, with the numbers that decided it."""

import pytest

from steps.evaluate.diagnosis import diagnose
from tests.support.metrics import DATA_HOST, metrics


def test_a_trainer_that_hardly_waits_is_compute_bound():
    verdict = diagnose(metrics(data_wait_share=0.02, data_hosts=[{**DATA_HOST, "busy_share": 0.5}]))
    assert verdict["label"] == "compute-bound" and "2.0%" in verdict["reason"] and "busy" not in verdict["reason"]
    assert verdict["data_host_busy_share"] == [0.5]


def test_a_compute_bound_run_whose_data_hosts_are_nearly_saturated_says_so():
    verdict = diagnose(metrics(data_wait_share=0.003, data_hosts=[{**DATA_HOST, "busy_share": 0.97}]))
    assert verdict["label"] == "compute-bound" and "busy 97% of their CPUs too" in verdict["reason"]


def test_waiting_on_busy_data_hosts_is_input_bound():
    verdict = diagnose(
        metrics(data_wait_share=0.3, data_hosts=[{**DATA_HOST, "busy_share": 0.95}, {**DATA_HOST, "busy_share": 0.85}])
    )
    assert verdict["label"] == "input-bound" and "90% of their CPUs" in verdict["reason"]


def test_waiting_on_idle_data_hosts_is_transport_bound_and_names_the_wire_rate():
    doc = metrics(
        data_wait_share=0.3,
        data_hosts=[{**DATA_HOST, "busy_share": 0.4}],
        samples_per_second=1000.0,
        bytes_received_per_sample=12_304.0,
    )
    verdict = diagnose(doc)
    assert verdict["label"] == "transport-bound" and verdict["wire_mb_per_s"] == pytest.approx(12.304)
    assert "busy only 40%" in verdict["reason"] and "12.3 MB/s" in verdict["reason"]


def test_a_homogeneous_trainer_that_waits_is_input_bound_on_its_own_cpus():
    verdict = diagnose(metrics(case="tf_homogeneous", data_wait_share=0.4))
    assert verdict["label"] == "input-bound" and "own CPUs" in verdict["reason"] and verdict["wire_mb_per_s"] is None


def test_a_schema_1_heterogeneous_run_says_input_and_transport_are_not_told_apart():
    doc = metrics(data_wait_share=0.4, schema_version=1)
    del doc["data_hosts"]
    verdict = diagnose(doc)
    assert verdict["label"] == "input-bound" and "not told apart" in verdict["reason"]


def test_a_ray_run_waiting_on_idle_data_hosts_blames_ray_datas_scheduling_not_a_wire_rate_it_did_not_measure():
    doc = metrics(
        data_wait_share=0.3,
        data_hosts=[{**DATA_HOST, "busy_share": 0.1}],
        samples_per_second=1000.0,
        bytes_received_per_sample=0.0,
        framework="ray",
    )
    verdict = diagnose(doc)
    assert verdict["label"] == "transport-bound" and verdict["wire_mb_per_s"] is None
    assert "Ray Data's scheduling" in verdict["reason"] and "MB/s" not in verdict["reason"]
