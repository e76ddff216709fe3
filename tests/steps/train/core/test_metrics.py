"""Step statistics and the metric lines SageMaker scrapes."""

from __future__ import annotations

import re

import pytest

from steps.contract import METRIC_DEFINITIONS
from steps.train.core.metrics import StepStats, metric_line


def test_metric_definitions_scrape_the_metric_lines():
    line = metric_line(epoch=1, step=20, step_time_ms=86.1234, samples_per_sec=744.2, data_wait_pct=3.1, loss=0.25, accuracy=0.93)
    scraped = {d["Name"]: float(re.search(d["Regex"], line).group(1)) for d in METRIC_DEFINITIONS}
    assert scraped == {
        "train:step_time_ms": 86.1234,
        "train:samples_per_sec": 744.2,
        "train:data_wait_pct": 3.1,
        "train:loss": 0.25,
        "validation:accuracy": 0.93,
    }


def test_step_stats_leave_out_warm_up():
    stats = StepStats(warmup_steps=2)
    for wait, compute in ((5.0, 5.0), (5.0, 5.0), (0.1, 0.3), (0.3, 0.3)):
        stats.record(wait=wait, compute=compute, samples=10)
    summary = stats.summary()
    assert summary["measured_steps"] == 2 and summary["seen"] == 40 and summary["samples"] == 20
    assert summary["step_time_s"]["mean"] == pytest.approx(0.5)
    assert summary["data_wait_share"] == pytest.approx(0.4)
    assert summary["warmup_steps_excluded"] == 2


def test_a_run_shorter_than_its_warm_up_measures_every_step():
    stats = StepStats(warmup_steps=5)
    for _ in range(3):
        stats.record(wait=0.1, compute=0.3, samples=8)
    summary = stats.summary()
    assert summary["measured_steps"] == 3 and summary["warmup_steps_excluded"] == 0
    assert summary["step_time_s"]["mean"] == pytest.approx(0.4) and summary["samples"] == 24
