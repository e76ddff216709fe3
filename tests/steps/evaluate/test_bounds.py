"""The bound a speedup must respect: (decode + step) / max(decode, step), from the trainer's isolated costs."""

from __future__ import annotations

import pytest

from steps.evaluate.bounds import speedup_bound
from steps.evaluate.prices import load_prices
from steps.evaluate.pricing import price_performance, summary_line
from tests.support.metrics import metrics


def costs(decode_ms: float, step_ms: float) -> dict:
    return {
        "decode_s_per_batch": decode_ms / 1e3,
        "step_s_per_batch": step_ms / 1e3,
        "cpus": 1,
        "device": "cpu",
        "decode_cpu_s_per_batch": decode_ms / 1e3,
        "batches": 5,
        "batch_size": 32,
    }


def run(step_ms: float, mode: str, isolated: dict | None, data_hosts: list | None = None) -> dict:
    """A run of 32-sample batches; a heterogeneous one whose data hosts did not measure themselves unless given."""
    case = "pt_homogeneous" if mode == "homogeneous" else "pt_heterogeneous"
    return metrics(
        case,
        step_time_s={"mean": step_ms / 1e3, "p50": step_ms / 1e3, "p90": step_ms / 1e3},
        samples_per_second=32 / (step_ms / 1e3),
        isolated_costs=isolated,
        global_batch_size=32,
        data_hosts=data_hosts or [],
    )


def test_a_fair_baseline_and_a_speedup_below_the_bound():
    # decode 80 + step 100 back to back = 180 ms; overlapped, at best max = 100 ms: bound 1.8x
    bound = speedup_bound(run(182, "homogeneous", costs(80, 100)), run(110, "heterogeneous", None), 182 / 110)
    assert bound["ideal_speedup"] == pytest.approx(1.8)
    assert bound["speedup_over_back_to_back"] == pytest.approx(180 / 110)
    assert bound["efficiency"] == pytest.approx((180 / 110) / 1.8)
    assert bound["baseline_over_back_to_back"] == pytest.approx(182 / 180)
    assert not bound["over_bound"] and bound["notes"] == []


def test_a_slow_baseline_is_named_and_the_fair_figure_given():
    # the 2.70x of a 240 ms baseline where decode 64 + step 86 allow at most 1.74x: the baseline pays for contention
    bound = speedup_bound(run(240, "homogeneous", costs(64, 86)), run(89, "heterogeneous", None), 240 / 89)
    assert bound["ideal_speedup"] == pytest.approx(150 / 86) and not bound["over_bound"]
    assert any(
        "60% slower than decode + step back to back (150 ms, median batches)" in n and "1.69x is the fair figure" in n
        for n in bound["notes"]
    )


def test_a_heterogeneous_step_faster_than_the_slower_stage_alone_is_not_a_result():
    bound = speedup_bound(run(180, "homogeneous", costs(80, 100)), run(70, "heterogeneous", None), 180 / 70)
    assert bound["over_bound"]
    assert any("(70 ms) beats the slower stage (100 ms)" in n and "not a result" in n for n in bound["notes"])


def test_each_stage_takes_the_lower_of_the_two_trainers_measurements():
    bound = speedup_bound(run(180, "homogeneous", costs(80, 120)), run(100, "heterogeneous", costs(90, 100)), 1.8)
    assert (bound["decode_s_per_batch"], bound["step_s_per_batch"]) == (pytest.approx(0.080), pytest.approx(0.100))


def test_the_baseline_is_compared_with_typical_stage_costs_the_bound_built_from_the_fastest():
    typical = costs(80, 100) | {"decode_s_per_batch_median": 0.090, "step_s_per_batch_median": 0.110}
    bound = speedup_bound(run(200, "homogeneous", typical), run(110, "heterogeneous", None), 200 / 110)
    assert bound["ideal_speedup"] == pytest.approx(1.8) and bound["baseline_over_back_to_back"] == pytest.approx(1.0)


def test_a_baseline_faster_than_back_to_back_says_it_overlaps():
    bound = speedup_bound(run(120, "homogeneous", costs(80, 100)), run(100, "heterogeneous", None), 1.2)
    assert any("faster than decode + step back to back" in n for n in bound["notes"])


def test_without_isolated_costs_there_is_no_bound_and_the_heterogeneous_run_serves_without_a_baseline():
    assert speedup_bound(run(180, "homogeneous", None), run(100, "heterogeneous", None), 1.8) is None
    only = speedup_bound(None, run(100, "heterogeneous", costs(80, 100)), None)
    assert only["ideal_speedup"] == pytest.approx(1.8) and only["measured_speedup"] is None and not only["over_bound"]


def test_price_performance_carries_the_bound_and_the_summary_line_flags_it():
    doc = price_performance(run(70, "heterogeneous", None), run(180, "homogeneous", costs(80, 100)), load_prices())
    assert doc["bound"]["over_bound"]
    assert "bound 1.80x from decode 80 ms + step 100 ms alone, 2.57x over them back to back - ABOVE THE BOUND" in summary_line(
        doc
    )


def test_the_data_hosts_own_decode_sets_the_heterogeneous_stage_where_they_measured_it():
    """Decode timed on the trainer's core (80 ms) is not what the data host spends on its own (60 ms): the bound
    is the baseline's back to back over the slower stage of the heterogeneous run, the data host's decode there."""
    host = {
        "host": "algo-2",
        "cpus": 1,
        "samples_sent": 3200,
        "decode_cpu_s_per_sample": 0.060 / 32 - 0.0001,
        "service_cpu_s_per_sample": 0.0001,
        "busy_share": 0.97,
        "bytes_sent_per_sample": 12304.0,
        "batches_sent": {},
    }
    bound = speedup_bound(run(182, "homogeneous", costs(80, 50)), run(62, "heterogeneous", None, [host]), 182 / 62)
    assert bound["data_host_decode_s_per_batch"] == pytest.approx(0.060)
    assert bound["ideal_speedup"] == pytest.approx(130 / 60)  # not 130 / 80
    assert not bound["over_bound"]  # 130 / 62 = 2.10x: above the trainer-core bound 1.63x, within the true one
    two = dict(host, cpus=2)  # two CPUs on the data host halve its time per batch; then the step (50 ms) is slower
    assert speedup_bound(run(182, "homogeneous", costs(80, 50)), run(52, "heterogeneous", None, [two]), 3.5)[
        "ideal_speedup"
    ] == pytest.approx(130 / 50)


def test_a_data_host_slower_under_load_than_decode_alone_does_not_tighten_the_bound():
    """Its in-run cost carries its service and contention, and batches buffered at epoch boundaries let steps run ahead
    of it for a while: the bound keeps the lower decode cost, so it stays a bound."""
    host = {
        "host": "algo-2",
        "cpus": 1,
        "samples_sent": 3200,
        "decode_cpu_s_per_sample": 0.090 / 32,
        "service_cpu_s_per_sample": 0.0,
        "busy_share": 0.97,
        "bytes_sent_per_sample": 12304.0,
        "batches_sent": {},
    }
    bound = speedup_bound(run(160, "homogeneous", costs(75, 60)), run(82, "heterogeneous", None, [host]), 160 / 82)
    assert bound["data_host_decode_s_per_batch"] == pytest.approx(0.090)
    assert bound["ideal_speedup"] == pytest.approx(135 / 75) and not bound["over_bound"]
