"""Each framework's metrics.json, from a real tiny job (one data host, one trainer, one epoch), has the keys and JSON
types of its golden (tests/steps/train/goldens/metrics.<framework>.json; `HETERO_UPDATE_GOLDEN=1` rewrites them), and
holds up against the declaration every reader checks it with (`steps.common.metrics_json`)."""

from __future__ import annotations

import json

import pytest

from pipeline.emulator.job import EmulatedJob
from steps.common.metrics_json import check
from tests.support.harness import two_group_request
from tests.support.metrics import assert_metrics_match_golden

pytestmark = pytest.mark.e2e

RAY = {"heartbeat_s": 0.5, "silence_timeout_s": 10, "connect_timeout_s": 120}


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "ray"])
def test_a_tiny_job_writes_the_metrics_of_its_framework_golden(tmp_path, request, code_uri, no_leftovers, framework):
    pytest.importorskip({"pytorch": "torch"}.get(framework, framework))
    shards = request.getfixturevalue("tf_shards" if framework == "tensorflow" else "shards")
    hyperparameters = {"framework": framework, "epochs": 1, "batch_size": 16, "workload_options": {"blur_passes": 0}}
    job_request = two_group_request(
        tmp_path, shards, code_uri, data=1, hyperparameters={**hyperparameters, **(RAY if framework == "ray" else {})}
    )
    with EmulatedJob(name="job", request=job_request, job_dir=tmp_path / "job", grace_s=30, timeout_s=300) as job:
        job.start()
        result = job.wait()
    assert result.ok, result.failure
    metrics = json.loads((result.model_dir / "metrics.json").read_text())
    assert check(metrics, "the job's metrics.json") is metrics
    assert metrics["framework"] == framework and metrics["sample_ledger"]["resumes"] == 0
    assert_metrics_match_golden(metrics, framework)
