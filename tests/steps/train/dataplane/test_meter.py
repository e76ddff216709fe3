"""A data host's measurements of itself, and how a trainer turns them into metrics.json lines."""

import time
from dataclasses import dataclass

import pytest

from steps.train.dataplane.meter import ProcessMeter, ServiceMeter, data_host_metrics


class _Link:
    bytes_sent = 5000


class _Trainer:
    def __init__(self, host, batches):
        self.host, self.batches, self.link = host, batches, _Link()


@dataclass
class _Batch:
    """What the meter reads of a batch (a framework's batch has these too): its length, corrupt samples and CPU time."""

    n: int
    corrupt: list
    cpu_s: float

    def __len__(self) -> int:
        return self.n


def _batch(n, cpu_s, corrupt=0):
    return _Batch(n, [(100 + i, "bad") for i in range(corrupt)], cpu_s)


def test_the_service_meter_counts_samples_corrupt_ones_included_and_worker_cpu():
    meter = ServiceMeter()
    meter.count(_batch(4, 0.5, corrupt=1))
    meter.count(_batch(4, 0.25))
    report = meter.report([_Trainer("algo-1", 1), _Trainer("algo-2", 1)])
    assert (report["samples"], report["batches"], report["decode_cpu_s"]) == (9, 2, 0.75)
    assert report["bytes_sent"] == 10000 and report["batches_sent"] == {"algo-1": 1, "algo-2": 1}
    assert report["cpus"] >= 1 and report["wall_s"] > 0 and report["service_cpu_s"] >= 0


def test_a_trainer_served_over_two_streams_is_one_line_of_batches_and_two_streams():
    report = ServiceMeter().report([_Trainer("algo-1", 3), _Trainer("algo-1", 2), _Trainer("algo-2", 1), _Trainer("algo-2", 4)])
    assert report["batches_sent"] == {"algo-1": 5, "algo-2": 5} and report["streams"] == 2
    assert report["bytes_sent"] == 4 * 5000
    assert data_host_metrics("algo-3", report)["streams"] == 2
    assert data_host_metrics("algo-3", {})["streams"] == 1  # a report from before streams per flow


def test_per_sample_figures_are_the_difference_between_the_first_and_the_latest_report():
    """Start-up before the first batch (workers starting, buffers filling) is not serving."""
    first = {"cpus": 2, "samples": 100, "wall_s": 5.0, "decode_cpu_s": 3.0, "service_cpu_s": 1.0, "bytes_sent": 1_000_000}
    last = {
        "cpus": 2,
        "samples": 1100,
        "wall_s": 10.0,
        "decode_cpu_s": 12.0,
        "service_cpu_s": 1.5,
        "bytes_sent": 11_000_000,
        "batches_sent": {"algo-1": 11},
    }
    line = data_host_metrics("algo-2", last, first)
    assert line["samples_sent"] == 1100 and line["batches_sent"] == {"algo-1": 11}
    assert line["decode_cpu_s_per_sample"] == pytest.approx(9.0 / 1000)
    assert line["service_cpu_s_per_sample"] == pytest.approx(0.5 / 1000)
    assert line["busy_share"] == pytest.approx(9.5 / (5.0 * 2))
    assert line["bytes_sent_per_sample"] == pytest.approx(10_000)
    assert line["samples_per_second"] == pytest.approx(200)
    # one report only (a short run): the totals
    assert data_host_metrics("algo-2", last, last)["decode_cpu_s_per_sample"] == pytest.approx(12.0 / 1100)
    assert data_host_metrics("algo-2", last)["busy_share"] == pytest.approx(13.5 / 20)


def test_a_host_that_sent_nothing_reports_zeros_not_a_division_error():
    line = data_host_metrics("algo-2", {"cpus": 1, "samples": 0, "wall_s": 0.0})
    assert line["samples_sent"] == 0 and line["busy_share"] == 0 and line["samples_per_second"] == 0


def test_the_process_meter_reads_this_process_cpu_time():
    meter = ProcessMeter()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    report = meter.report()
    assert report["decode_cpu_s"] >= 0.05 and report["service_cpu_s"] == 0 and report["wall_s"] >= 0.04
