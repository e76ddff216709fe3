"""The serving bench (bench/serving.py), run small: a package served as its container serves it, beside the handler
called directly, one JSON document with both rates and latencies."""

from __future__ import annotations

import json

import pytest

from tests.support.bench import run_bench

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_the_serving_bench_times_the_container_and_the_direct_call_on_one_cpu(no_leftovers, framework):
    done = run_bench("bench/serving.py", "--framework", framework, "--requests", "20", "--warmup", "2", timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    for side in ("served", "direct"):
        assert result[side]["per_second"] > 0 and 0 < result[side]["p50_ms"] <= result[side]["p99_ms"]
    assert result["served_over_direct"] > 0 and result["requests"] == 20 and result["framework"] == framework
