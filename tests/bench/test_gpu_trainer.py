"""bench/gpu_trainer.py run small on the CPU: the bench a GPU machine's time is spent on still runs the real data
service and training loop it times (its figures mean nothing here)."""

from __future__ import annotations

import json

import pytest

from tests.support.bench import run_bench

pytestmark = pytest.mark.e2e


def test_the_gpu_trainer_bench_runs_its_data_plane_and_loop_small_on_a_cpu(no_leftovers):  # noqa: F811
    done = run_bench(
        "bench/gpu_trainer.py",
        "--device",
        "cpu",
        "--size",
        "32",
        "--model",
        "small_cnn",
        "--batches",
        "4",
        "--epochs",
        "2",
        "--anchor-steps",
        "3",
        "--precision",  # bf16: the autocast path (fp32 is the plain one); a second precision would compile twice
        "bf16",
        "--compile",
        "off,on",
        timeout=420,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    runs = result["runs"]
    assert result["device"] == "cpu"
    assert [(r["precision"]["requested"], r["compile"]) for r in runs] == [("bf16", "off"), ("bf16", "on")]
    for run in runs:
        assert run["precision"]["used"] == run["precision"]["requested"]
        assert run["steps"] == 8 and run["samples"] == 8 * 64
        assert run["fed_ratio"] > 0 and run["anchor_step_ms_p50"] > 0
