"""A model package's container emulated from its container definition: the artefact unpacked at /opt/ml/model, the
package's own server answering on a loopback port with the container's environment; `hetero models predict` and
`serve` through it. The model: a workload's untrained network as training would save it."""

from __future__ import annotations

import io
import json
import signal
import socket
import tarfile
import threading
import time
import urllib.request

import numpy as np
import pytest
import torch
from PIL import Image

from pipeline import storage
from pipeline.cli import main
from pipeline.emulator.results import pack_folder
from pipeline.emulator.serving import serve_model
from steps.common.errors import UserError
from steps.contract import METRICS_FILE
from steps.evaluate.registry import LocalRegistry
from steps.train.core.model_package import write_serving_code
from steps.train.workload import load_workload
from tests.support.stop import run_stop, signal_when  # noqa: F401 - fixture

CLASSES = ["circle", "square", "triangle"]
WORKLOAD = "steps.train.workloads.shapes"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.6.0-cpu-py312-ubuntu22.04-sagemaker"

pytestmark = pytest.mark.slow  # each starts a container process (torch and the inference toolkit imported)


@pytest.fixture
def model_tar(tmp_path):
    """model.tar.gz as SageMaker packs a training host's model folder."""
    folder = tmp_path / "model"
    folder.mkdir()
    torch.manual_seed(0)
    torch.save(load_workload(WORKLOAD, {}).build_model(len(CLASSES)).state_dict(), folder / "model.pt")
    (folder / METRICS_FILE).write_text(json.dumps({"classes": CLASSES, "config": {"workload": WORKLOAD}}))
    write_serving_code(folder, WORKLOAD)
    tar_path = tmp_path / "model.tar.gz"
    pack_folder(folder, tar_path)
    return tar_path


@pytest.fixture
def registry(tmp_path, model_tar):
    """A local registry whose version 1 names the artefact, as the register step files it."""
    local = LocalRegistry(tmp_path / "registry" / "HeteroTraining-models")
    containers = [{"Image": IMAGE, "ModelDataUrl": storage.uri(model_tar)}]
    local.create({"InferenceSpecification": {"Containers": containers}}, arn_prefix="arn:aws:sagemaker:us-east-1:123456789012")
    return local.folder


def _png(path, seed: int):
    pixels = np.random.default_rng(seed).integers(0, 256, (70, 70, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, format="PNG")
    return path


def test_the_container_answers_on_its_port_and_goes_with_close(tmp_path, model_tar, no_leftovers):
    container = {"Image": IMAGE, "ModelDataUrl": storage.uri(model_tar), "Environment": {"SAGEMAKER_MODEL_SERVER_TIMEOUT": "30"}}
    lines = []
    with serve_model(container, work_dir=tmp_path / "c", port=0, echo=lines.append) as served:
        body = _png(tmp_path / "a.png", 0).read_bytes()
        request = urllib.request.Request(f"{served.url}/invocations", data=body, headers={"Content-Type": "image/png"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            predictions = json.loads(answer.read())["predictions"]
        assert sorted(p["class"] for p in predictions) == CLASSES
        assert (tmp_path / "c" / "opt" / "ml" / "model" / "code" / "inference.py").is_file()  # unpacked where hosting does
    assert served.process.poll() is not None
    assert any("has no package manifest" in line for line in lines)  # the AWS inference DLC's packages are not known here


def test_on_the_projects_serving_image_the_container_has_exactly_its_packages(tmp_path, model_tar, no_leftovers):
    """A package naming images/pytorch-serve's image serves under the import guard of its manifest."""
    mine = "123456789012.dkr.ecr.us-east-1.amazonaws.com/hetero-pytorch-serve:2.13.0-cpu"
    lines = []
    with serve_model(
        {"Image": mine, "ModelDataUrl": str(model_tar)}, work_dir=tmp_path / "c", port=0, echo=lines.append
    ) as served:
        body = _png(tmp_path / "a.png", 0).read_bytes()
        request = urllib.request.Request(f"{served.url}/invocations", data=body, headers={"Content-Type": "image/png"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert len(json.loads(answer.read())["predictions"]) == len(CLASSES)
    guard = json.loads((tmp_path / "c" / ".image" / "image_guard.json").read_text())
    assert guard["manifest"] == "pipeline/manifests/pytorch-serve-cpu.json" and "moto" in guard["refused_distributions"]
    assert not any("has no package manifest" in line for line in lines)


def test_an_artefact_without_serving_code_is_refused_naming_the_fix(tmp_path):
    bare = tmp_path / "bare.tar.gz"
    with tarfile.open(bare, "w:gz") as tar:
        info = tarfile.TarInfo("model.pt")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(UserError, match=r"has no code/steps/serve/server\.py: .* retrain it"):
        serve_model({"Image": IMAGE, "ModelDataUrl": str(bare)}, work_dir=tmp_path / "c")
    with pytest.raises(UserError, match=r"is in S3: .*aws s3 cp s3://bucket/model\.tar\.gz model\.tar\.gz"):
        serve_model({"Image": IMAGE, "ModelDataUrl": "s3://bucket/model.tar.gz"}, work_dir=tmp_path / "c")


def test_predict_prints_each_images_top_classes_and_a_refusal_in_one_line(tmp_path, registry, capsys, no_leftovers):
    good = _png(tmp_path / "good.png", 1)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 not a jpeg")
    code = main(["models", "predict", "1", str(good), str(bad), "--registry", str(registry)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[0].startswith(f"{good}  ") and len(out[0].split("  ")) == 4  # the image, then three classes
    assert out[1].startswith(f"{bad}  400 the image does not decode")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.usefixtures("run_stop")
def test_serve_answers_until_a_stop_signal_and_leaves_nothing(tmp_path, registry, capsys, no_leftovers):
    port, answered = _free_port(), threading.Event()

    def ping_until_answered():
        while not answered.is_set():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as answer:
                    if answer.status == 200:
                        answered.set()
            except OSError:  # not listening yet
                time.sleep(0.2)

    client = threading.Thread(target=ping_until_answered, daemon=True)
    client.start()
    sender = signal_when(answered, signal.SIGINT)  # Ctrl-C once it has answered
    code = main(["models", "serve", "1", "--port", str(port), "--registry", str(registry)])
    sender.join()
    client.join(timeout=10)
    assert answered.is_set() and code == 128 + signal.SIGINT
    out, err = capsys.readouterr()
    assert f"on http://127.0.0.1:{port}: POST an image to" in out
    assert "interrupted (SIGINT)" in err
