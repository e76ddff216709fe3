"""An emulated processing job runs its entry point as its container would."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline.container_env import TWIN, image_env
from pipeline.images import default_processing_image
from pipeline.processing import run_processing_job

DUMP_ENVIRONMENT = "import json, os; open('environment.json', 'w').write(json.dumps(dict(os.environ)))"


def test_a_processing_job_starts_with_its_containers_environment_and_nothing_of_the_callers(tmp_path, monkeypatch):
    """The caller's shell reaches no processing job; it has its image's ENV (the TensorFlow CPU image here), the
    request's Environment and the twin's own, and no training job's variables."""
    monkeypatch.setenv("HETERO_CALLER_ONLY", "1")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    image = default_processing_image("us-east-1", "tensorflow")
    request = {
        "AppSpecification": {"ImageUri": image, "ContainerEntrypoint": ["python3", "-c", DUMP_ENVIRONMENT]},
        "Environment": {"FROM_REQUEST": "yes"},
    }
    job_dir = tmp_path / "job"
    result = run_processing_job(
        name="p", request=request, job_dir=job_dir, step="Probe", echo=lambda line: None, extra_env={"HETERO_TWIN_EXTRA": "x"}
    )
    assert result.ok, result.failure
    env = json.loads((job_dir / "environment.json").read_text())
    assert "HETERO_CALLER_ONLY" not in env and "AWS_REGION" not in env and "TRAINING_JOB_NAME" not in env
    container = image_env(image)
    shell = {"PWD"}  # set by the shell of the `python3` shim, as by a container's /bin/sh entry point
    assert set(env) <= set(container) | {"FROM_REQUEST", "HETERO_TWIN_EXTRA"} | {a.name for a in TWIN} | shell
    assert {k: env[k] for k in ("SAGEMAKER_TRAINING_MODULE", "KMP_BLOCKTIME", "LANG")} == {
        "SAGEMAKER_TRAINING_MODULE": "sagemaker_tensorflow_container.training:main",
        "KMP_BLOCKTIME": "1",
        "LANG": "C.UTF-8",
    }
    assert env["FROM_REQUEST"] == "yes" and env["HETERO_TWIN_EXTRA"] == "x"
    # `python3` is the shim for this interpreter, then this machine's Python, then the image's PATH
    assert env["PATH"] == f"{job_dir / 'bin'}:{Path(sys.executable).parent}:{container['PATH']}"
    assert env["PYTHONPATH"] == str(job_dir / ".image") and "LD_LIBRARY_PATH" not in env
