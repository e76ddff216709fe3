"""Each emulated host imports exactly its image's packages (pipeline.emulator.image_guard, pipeline/manifests/)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from pipeline.emulator import image_guard
from pipeline.local.settings import LOCAL_REGION, local_training_image
from pipeline.sagemaker.images import default_processing_image, default_serving_image, default_training_image
from steps.contract import FRAMEWORKS


def test_every_image_the_pipeline_runs_has_a_manifest():
    for framework in FRAMEWORKS:
        training = local_training_image(framework)
        for image in (training, default_processing_image(LOCAL_REGION, framework)):
            manifest = image_guard.manifest_for(image)
            assert manifest is not None, image
            assert manifest.name.startswith({"ray": "ray" if image == training else "pytorch"}.get(framework, framework))
    assert image_guard.manifest_for("123456789012.dkr.ecr.eu-west-1.amazonaws.com/my-own:1") is None


def test_manifests_name_their_source_and_hold_what_the_step_code_needs():
    needs = {
        "pytorch": {"torch", "numpy", "pillow", "sagemaker-training", "boto3", "matplotlib"},
        "tensorflow": {"tensorflow", "keras", "numpy", "pillow", "sagemaker-training", "boto3", "matplotlib"},
        "ray": {"torch", "ray", "numpy", "pillow", "sagemaker-training", "pyarrow", "pandas", "tensorboardx"},
        # TF Serving's Python service and the handlers (steps/serve/tensorflow.py) around the model server binary
        "tensorflow-inference": {"falcon", "requests", "numpy"},
    }
    for manifest in image_guard.manifests():
        data = json.loads(manifest.path.read_text())
        assert data["source"]["repository"] == "aws/deep-learning-containers" and len(data["source"]["commit"]) == 40
        kind = (
            manifest.name.rsplit("-", 1)[0] if manifest.name.startswith("tensorflow-inference") else manifest.name.split("-")[0]
        )
        assert all(manifest.has(need) for need in needs[kind]), manifest.name
    # facts of the published images the emulator must not forget
    assert image_guard.manifest_for(default_training_image(LOCAL_REGION, "pytorch")).packages["torch"].startswith("2.13.0")
    assert "tensorflow" not in image_guard.manifest_for(default_training_image(LOCAL_REGION, "pytorch")).packages
    assert "ray" not in image_guard.manifest_for(default_training_image(LOCAL_REGION, "tensorflow")).packages
    for gpu in (False, True):  # TF Serving's image: a binary and its Python service, no TensorFlow Python, no image library
        serving = image_guard.manifest_for(default_serving_image(LOCAL_REGION, "tensorflow", gpu=gpu)).packages
        assert not {"tensorflow", "tensorflow-cpu", "keras", "pillow"} & set(serving) and serving["falcon"] == "3.1.0"


@pytest.mark.slow
def test_the_guard_refuses_what_the_image_lacks_and_names_the_image_and_its_manifest():
    pytorch = image_guard.manifest_for(default_training_image(LOCAL_REGION, "pytorch"))
    refused = image_guard.refused(pytorch)
    assert {"tensorflow", "keras", "ray", "moto", "aws_cdk", "pipeline"} <= set(refused)
    assert not {"torch", "numpy", "PIL", "sagemaker_training", "boto3", "steps"} & set(refused)
    tensorflow = image_guard.refused(image_guard.manifest_for(default_training_image(LOCAL_REGION, "tensorflow")))
    assert "tensorflow" not in tensorflow and "ray" in tensorflow  # tensorflow-cpu here stands for the image's tensorflow
    # the TensorFlow image's torch (its SageMaker SDK's dependency, 2.11 / 2.12) is not the torch this project tests with
    assert tensorflow["torch"] == "torch"
    folder = image_guard.install(
        Path(tempfile.mkdtemp()), "tf-image", image_guard.manifest_for(default_training_image(LOCAL_REGION, "tensorflow"))
    )
    explained = image_guard.explain("ModuleNotFoundError: No module named 'torch'", folder)
    assert "[image] tf-image has torch 2.11.0, not the 2.13.0" in explained


@pytest.mark.slow
def test_the_guard_hides_what_the_image_lacks_from_every_finder(tmp_path):
    folder = image_guard.install(tmp_path, "img", image_guard.manifest_for(default_training_image(LOCAL_REGION, "pytorch")))
    saved = list(sys.meta_path)
    try:
        exec(
            compile((folder / "sitecustomize.py").read_text(), "sitecustomize", "exec"),
            {"__file__": str(folder / "sitecustomize.py")},
        )
        finders = list(sys.meta_path)
    finally:
        sys.meta_path[:] = saved
    wrapped = [f for f in finders if hasattr(f, "_finder")]
    assert wrapped and all(f.find_spec("moto.core") is None for f in wrapped)
    assert any(f.find_spec("numpy") is not None for f in wrapped)
    names = {d.metadata["Name"].lower() for f in wrapped for d in f.find_distributions()}
    assert "numpy" in names and "optree" not in names and "moto" not in names  # metadata as the image has it


@pytest.mark.slow
def test_what_a_package_vendors_is_neither_allowed_nor_refused_whatever_the_process_imported_before():
    """Ray puts its vendored copies (colorama, psutil) on sys.path when imported: a guard made by a process that imported
    Ray must not refuse them as distributions of their own, or every Ray host it starts fails at import ray."""
    import subprocess

    probe = (
        "import ray, json\n"
        "from pipeline.emulator import image_guard as g\n"
        "manifest = g.manifest_for(g.manifests()[0].repository + ':' + sorted(g.manifests()[0].tags)[0])\n"
        "ray_image = next(m for m in g.manifests() if 'ray' in m.repository)\n"
        "print(json.dumps(sorted(g.refused(ray_image))))\n"
    )
    root = Path(__file__).resolve().parents[3]
    refused = json.loads(
        subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True).stdout
    )
    assert "colorama" not in refused
