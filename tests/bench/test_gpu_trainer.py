"""bench/gpu_trainer.py run small on the CPU: the bench a GPU machine's time is spent on still runs the real data
service and training loop it times (its figures mean nothing here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_trainer_bench_runs_its_data_plane_and_loop_small_on_a_cpu(no_leftovers):  # noqa: F811
    done = subprocess.run(
        [
            sys.executable,
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
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["device"] == "cpu" and list(result["precisions"]) == ["fp32", "bf16"]  # the default: both
    for precision, run in result["precisions"].items():
        assert run["precision"] == {"requested": precision, "used": precision}
        assert run["steps"] == 8 and run["samples"] == 8 * 64
        assert run["fed_ratio"] > 0 and run["anchor_step_ms_p50"] > 0
