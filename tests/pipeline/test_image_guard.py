"""Each emulated host imports exactly its image's packages (pipeline.image_guard, pipeline/manifests/)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from pipeline import image_guard, storage
from pipeline.emulator import EmulatedJob
from pipeline.harness import training_request
from pipeline.images import default_processing_image, default_training_image
from pipeline.local import LOCAL_REGION, local_training_image
from pipeline.processing import run_processing_job
from steps.contract import FRAMEWORKS

ROOT = Path(__file__).resolve().parents[2]
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
    request = training_request(code_uri=storage.uri(code), output=tmp_path / "out", groups=[("train", "ml.g5.xlarge", 1)],
                               channels=[], hyperparameters={"framework": framework, "sagemaker_program": "probe.py"})
    del request["AlgorithmSpecification"]["ContainerEntrypoint"]  # plain script mode: python3 probe.py
    request["HyperParameters"]["sagemaker_program"] = "probe.py"
    lines = []
    job = EmulatedJob(name="probe", request=request, job_dir=tmp_path / "job", timeout_s=120,
                      on_line=lambda host, line: lines.append(line), echo=lines.append)
    with job:
        job.start()
        result = job.wait()
    assert result.ok, (result.failure, lines)
    (found,) = [json.loads(line[len("PROBE "):]) for line in lines if line.startswith("PROBE ")]
    return found


def test_every_image_the_pipeline_runs_has_a_manifest():
    for framework in FRAMEWORKS:
        training = local_training_image(framework)
        for image in (training, default_processing_image(LOCAL_REGION, framework)):
            manifest = image_guard.manifest_for(image)
            assert manifest is not None, image
            assert manifest.name.startswith({"ray": "ray" if image == training else "pytorch"}.get(framework, framework))
    assert image_guard.manifest_for("123456789012.dkr.ecr.eu-west-1.amazonaws.com/my-own:1") is None


def test_manifests_name_their_source_and_hold_what_the_step_code_needs():
    needs = {"pytorch": {"torch", "numpy", "pillow", "sagemaker-training", "boto3", "matplotlib"},
             "tensorflow": {"tensorflow", "keras", "numpy", "pillow", "sagemaker-training", "boto3", "matplotlib"},
             "ray": {"torch", "ray", "numpy", "pillow", "sagemaker-training", "pyarrow", "pandas", "tensorboardx"}}
    for manifest in image_guard.manifests():
        data = json.loads(manifest.path.read_text())
        assert data["source"]["repository"] == "aws/deep-learning-containers" and len(data["source"]["commit"]) == 40
        assert all(manifest.has(need) for need in needs[manifest.name.split("-")[0]]), manifest.name
    # facts of the published images the emulator must not forget
    assert image_guard.manifest_for(default_training_image(LOCAL_REGION, "pytorch")).packages["torch"].startswith("2.13.0")
    assert "tensorflow" not in image_guard.manifest_for(default_training_image(LOCAL_REGION, "pytorch")).packages
    assert "ray" not in image_guard.manifest_for(default_training_image(LOCAL_REGION, "tensorflow")).packages


def test_the_guard_refuses_what_the_image_lacks_and_names_the_image_and_its_manifest():
    pytorch = image_guard.manifest_for(default_training_image(LOCAL_REGION, "pytorch"))
    refused = image_guard.refused(pytorch)
    assert {"tensorflow", "keras", "ray", "moto", "aws_cdk", "pipeline"} <= set(refused)
    assert not {"torch", "numpy", "PIL", "sagemaker_training", "boto3", "steps"} & set(refused)
    tensorflow = image_guard.refused(image_guard.manifest_for(default_training_image(LOCAL_REGION, "tensorflow")))
    assert "tensorflow" not in tensorflow and "ray" in tensorflow  # tensorflow-cpu here stands for the image's tensorflow
    # the TensorFlow image's torch (its SageMaker SDK's dependency, 2.11 / 2.12) is not the torch this project tests with
    assert tensorflow["torch"] == "torch"
    folder = image_guard.install(Path(tempfile.mkdtemp()), "tf-image", image_guard.manifest_for(
        default_training_image(LOCAL_REGION, "tensorflow")))
    explained = image_guard.explain("ModuleNotFoundError: No module named 'torch'", folder)
    assert "[image] tf-image has torch 2.11.0, not the 2.13.0" in explained


@pytest.mark.e2e
def test_a_pytorch_host_cannot_import_tensorflow_nor_its_children(tmp_path):
    found = _probe(tmp_path, "pytorch", ["torch", "PIL", "sagemaker_training", "pipeline", "tensorflow"])
    assert found["torch"] == found["PIL"] == found["sagemaker_training"] == "ok"
    assert found["tensorflow"] == "No module named 'tensorflow'" and found["pipeline"] == "No module named 'pipeline'"
    assert found["probe"] == "None"  # importlib.util.find_spec finds nothing, as in the container (torch probes so)
    assert "No module named 'tensorflow'" in " ".join(found["child"])  # a process the host starts is guarded too


@pytest.mark.e2e
def test_a_host_that_imports_what_its_image_lacks_fails_naming_the_image_and_its_manifest(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("import ray\n")
    request = training_request(code_uri=storage.uri(code), output=tmp_path / "out", groups=[("train", "ml.g5.xlarge", 1)],
                               channels=[], hyperparameters={"framework": "pytorch"})
    del request["AlgorithmSpecification"]["ContainerEntrypoint"]
    request["HyperParameters"]["sagemaker_program"] = "train.py"
    with EmulatedJob(name="j", request=request, job_dir=tmp_path / "job", timeout_s=120, on_line=lambda *_: None) as job:
        job.start()
        result = job.wait()
    assert not result.ok and "No module named 'ray'" in (result.job_dir / "algo-1" / "output" / "host.log").read_text()
    assert "[image] 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker has no 'ray'" \
        in result.failure and "pipeline/manifests/pytorch-gpu.json" in result.failure


@pytest.mark.e2e
def test_a_tensorflow_host_imports_tensorflow_and_not_ray(tmp_path):
    found = _probe(tmp_path, "tensorflow", ["numpy", "ray"])
    assert found["numpy"] == "ok" and found["ray"] == "No module named 'ray'"


@pytest.mark.e2e
def test_a_processing_job_runs_with_its_images_packages(tmp_path):
    image = default_processing_image(LOCAL_REGION, "pytorch")
    request = {"AppSpecification": {"ImageUri": image, "ContainerEntrypoint": ["python3", "-c", "import tensorflow"]}}
    result = run_processing_job(name="p", request=request, job_dir=tmp_path / "job", step="Probe", echo=lambda line: None)
    assert not result.ok and "[image] 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cpu-amzn2023-sagemaker" in result.failure
    assert "No module named 'tensorflow'" in result.failure


@pytest.mark.e2e
def test_an_image_without_a_manifest_runs_unguarded_and_says_so(tmp_path):
    lines = []
    path = image_guard.guard_path("123456789012.dkr.ecr.eu-west-1.amazonaws.com/mine:1", tmp_path, echo=lines.append)
    assert path == "" and "has no package manifest" in lines[0]


def test_the_guard_hides_what_the_image_lacks_from_every_finder(tmp_path):
    folder = image_guard.install(tmp_path, "img", image_guard.manifest_for(default_training_image(LOCAL_REGION, "pytorch")))
    saved = list(sys.meta_path)
    try:
        exec(compile((folder / "sitecustomize.py").read_text(), "sitecustomize", "exec"), {"__file__": str(folder / "sitecustomize.py")})
        finders = list(sys.meta_path)
    finally:
        sys.meta_path[:] = saved
    wrapped = [f for f in finders if hasattr(f, "_finder")]
    assert wrapped and all(f.find_spec("moto.core") is None for f in wrapped)
    assert any(f.find_spec("numpy") is not None for f in wrapped)
    names = {d.metadata["Name"].lower() for f in wrapped for d in f.find_distributions()}
    assert "numpy" in names and "optree" not in names and "moto" not in names  # metadata as the image has it
