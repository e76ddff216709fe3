"""Checks on a training job's metrics.json shared by the end-to-end tests of every framework."""

from __future__ import annotations

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
    assert [(a["epoch"], a["received"], a["distinct"], a["missing"]) for a in metrics["epoch_accounting"]] == \
        [(e, train_samples, train_samples, 0) for e in range(epochs)]
    assert metrics["samples_seen"] == epochs * train_samples
