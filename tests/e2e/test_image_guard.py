"""Each emulated host, and each processing job, imports exactly its image's packages (pipeline.emulator.image_guard,
pipeline/manifests/): what the image lacks fails the import, naming the image and its manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import storage
from pipeline.emulator import image_guard
from pipeline.emulator.job import EmulatedJob
from pipeline.emulator.processing import run_processing_job
from pipeline.local.settings import LOCAL_REGION
from pipeline.sagemaker.images import default_processing_image
from tests.support.harness import training_request

pytestmark = pytest.mark.e2e

PROBE = """
import importlib, importlib.util, json, subprocess, sys
results = {}
for name in MODULES:
    try:
        importlib.import_module(name)
        results[name] = "ok"
    except ModuleNotFoundError as exc:
        results[name] = str(exc)
results["probe"] = repr(importlib.util.find_spec(MODULES[-1]))
child = subprocess.run([sys.executable, "-c", "import " + MODULES[-1]], capture_output=True, text=True)
results["child"] = child.stderr.strip().splitlines()[-2:] if child.returncode else "ok"
print("PROBE " + json.dumps(results), flush=True)
"""


def _probe(tmp_path: Path, framework: str, modules: list[str]) -> dict:
    """Run the probe as an emulated host of ``framework``'s training image; what each import did."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(f"MODULES = {modules!r}\n{PROBE}")
    request = training_request(
        code_uri=storage.uri(code),
        output=tmp_path / "out",
        groups=[("train", "ml.g5.xlarge", 1)],
        channels=[],
        hyperparameters={"framework": framework, "sagemaker_program": "probe.py"},
    )
    del request["AlgorithmSpecification"]["ContainerEntrypoint"]  # plain script mode: python3 probe.py
    request["HyperParameters"]["sagemaker_program"] = "probe.py"
    lines = []
    job = EmulatedJob(
        name="probe",
        request=request,
        job_dir=tmp_path / "job",
        timeout_s=120,
        on_line=lambda host, line: lines.append(line),
        echo=lines.append,
    )
    with job:
        job.start()
        result = job.wait()
    assert result.ok, (result.failure, lines)
    (found,) = [json.loads(line[len("PROBE ") :]) for line in lines if line.startswith("PROBE ")]
    return found


def test_a_pytorch_host_cannot_import_tensorflow_nor_its_children(tmp_path):
    found = _probe(tmp_path, "pytorch", ["torch", "PIL", "sagemaker_training", "pipeline", "tensorflow"])
    assert found["torch"] == found["PIL"] == found["sagemaker_training"] == "ok"
    assert found["tensorflow"] == "No module named 'tensorflow'" and found["pipeline"] == "No module named 'pipeline'"
    assert found["probe"] == "None"  # importlib.util.find_spec finds nothing, as in the container (torch probes so)
    assert "No module named 'tensorflow'" in " ".join(found["child"])  # a process the host starts is guarded too


def test_a_host_that_imports_what_its_image_lacks_fails_naming_the_image_and_its_manifest(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("import ray\n")
    request = training_request(
        code_uri=storage.uri(code),
        output=tmp_path / "out",
        groups=[("train", "ml.g5.xlarge", 1)],
        channels=[],
        hyperparameters={"framework": "pytorch"},
    )
    del request["AlgorithmSpecification"]["ContainerEntrypoint"]
    request["HyperParameters"]["sagemaker_program"] = "train.py"
    with EmulatedJob(name="j", request=request, job_dir=tmp_path / "job", timeout_s=120, on_line=lambda *_: None) as job:
        job.start()
        result = job.wait()
    assert not result.ok and "No module named 'ray'" in (result.job_dir / "algo-1" / "output" / "host.log").read_text()
    assert (
        "[image] 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker has no 'ray'"
        in result.failure
        and "pipeline/manifests/pytorch-gpu.json" in result.failure
    )


def test_a_tensorflow_host_imports_tensorflow_and_not_ray(tmp_path):
    found = _probe(tmp_path, "tensorflow", ["numpy", "ray"])
    assert found["numpy"] == "ok" and found["ray"] == "No module named 'ray'"


def test_a_processing_job_runs_with_its_images_packages(tmp_path):
    image = default_processing_image(LOCAL_REGION, "pytorch")
    request = {"AppSpecification": {"ImageUri": image, "ContainerEntrypoint": ["python3", "-c", "import tensorflow"]}}
    result = run_processing_job(name="p", request=request, job_dir=tmp_path / "job", step="Probe", echo=lambda line: None)
    assert (
        not result.ok
        and "[image] 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cpu-amzn2023-sagemaker" in result.failure
    )
    assert "No module named 'tensorflow'" in result.failure


def test_an_image_without_a_manifest_runs_unguarded_and_says_so(tmp_path):
    lines = []
    path = image_guard.guard_path("123456789012.dkr.ecr.eu-west-1.amazonaws.com/mine:1", tmp_path, echo=lines.append)
    assert path == "" and "has no package manifest" in lines[0]
