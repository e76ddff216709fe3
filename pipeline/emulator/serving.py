"""A SageMaker model container emulated on one machine from its container definition (CreateModel's
``PrimaryContainer``, a model package's ``InferenceSpecification.Containers[0]``: ``Image``, ``ModelDataUrl``,
``Environment``).

The artefact is unpacked where SageMaker hosting unpacks it (the container's ``/opt/ml/model``, a folder of
``work_dir``) and the package's own server starts there (``code/steps/serve/server.py``: the inference toolkit's
Transformer behind ``GET /ping`` and ``POST /invocations``, the handler functions called as the toolkit calls them;
for a TensorFlow package, a SavedModel in ``1/``, TF Serving's stand-in and the container's Python service in front of
it: `pipeline.emulator.tf_serving`), with the container's environment and none of the caller's, confined to the
image's packages (the import guard; an image without a manifest says so), on a loopback port. `ServedModel.close`
ends it and all it started.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import storage
from pipeline.emulator import image_guard
from pipeline.emulator.container_env import serving_env
from pipeline.emulator.sessions import kill_session, start_session
from pipeline.stop import STOP
from steps.common.errors import UserError
from steps.train.frameworks.tensorflow.serving import VERSION as SAVED_MODEL_VERSION

SERVER = Path("code") / "steps" / "serve" / "server.py"  # in the unpacked package (steps/train/core/model_package.py)
SAVED_MODEL = Path(SAVED_MODEL_VERSION) / "saved_model.pb"  # a TensorFlow package's
INFERENCE = Path("code") / "inference.py"  # the handlers TF Serving's Python service loads
TF_SERVING = Path(__file__).with_name("tf_serving.py")  # `pipeline.emulator.tf_serving`
READY = re.compile(r"\[serve\] model .* on http://(?P<host>[\d.]+):(?P<port>\d+) ")
START_TIMEOUT_S = 180.0  # model_fn included: a ResNet-50 loads in seconds; the toolkit's own default is 600


@dataclass
class ServedModel:
    """A model container that answers on ``url`` until `close`."""

    url: str
    log: Path
    process: subprocess.Popen = field(repr=False)
    reader: threading.Thread = field(repr=False)

    def close(self) -> None:
        kill_session(self.process.pid)
        self.process.wait()
        self.reader.join(timeout=5)

    def __enter__(self) -> ServedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unpack_model(model_data_url: str, model_dir: Path) -> Path:
    """``model_data_url`` (a local model.tar.gz: ``s3://local/...`` or a path) unpacked into ``model_dir``."""
    source = storage.path(model_data_url) if model_data_url.startswith(storage.SCHEME) else Path(model_data_url)
    if model_data_url.startswith("s3://") and not model_data_url.startswith(storage.SCHEME):
        raise UserError(
            f"model data {model_data_url} is in S3: serving here reads a local artefact; download it "
            f"(aws s3 cp {model_data_url} model.tar.gz) and pass --model-data model.tar.gz",
            headline="model data not local",
        )
    if not source.is_file():
        raise UserError(f"model data {model_data_url}: no file {source}", headline="model data not found")
    model_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(source) as tar:
        tar.extractall(model_dir, filter="data")  # no absolute paths, links out of the folder, devices
    if (model_dir / SAVED_MODEL).is_file():
        if not (model_dir / INFERENCE).is_file():
            raise UserError(
                f"model data {model_data_url} is a SavedModel without {INFERENCE.as_posix()}: TF Serving would answer "
                "its own JSON, not image bytes; retrain it with this release, which packages the handlers",
                headline="model not servable",
            )
        return model_dir
    if not (model_dir / SERVER).is_file():
        raise UserError(
            f"model data {model_data_url} has no {SERVER.as_posix()}: it was trained by a release that wrote no serving "
            "code into the model folder; retrain it",
            headline="model not servable",
        )
    return model_dir


def serve_model(
    container: dict,
    *,
    work_dir: Path,
    port: int = 8080,
    echo: Callable[[str], object] = print,
    guard_imports: bool = True,
    start_timeout_s: float = START_TIMEOUT_S,
) -> ServedModel:
    """``container`` served on 127.0.0.1:``port`` (0: a free one), answering once this returns."""
    model_dir = unpack_model(container["ModelDataUrl"], work_dir / "opt" / "ml" / "model")
    image = container.get("Image", "")
    guard = image_guard.guard_path(image, work_dir / ".image", enabled=guard_imports, echo=echo)
    where = ["--model-dir", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
    if (model_dir / SAVED_MODEL).is_file():  # TF Serving's stand-in, unguarded (a binary in the image), and its service
        env = serving_env(container=container, guard="")
        service_path = os.pathsep.join(filter(None, [guard, str(model_dir / INFERENCE.parent)]))
        command = [sys.executable, str(TF_SERVING), *where, "--service-path", service_path]
    else:
        env = serving_env(container=container, guard=guard)
        command = [sys.executable, str(model_dir / SERVER), *where]
    log = work_dir / "serve.log"
    ready: dict[str, str] = {}
    started = threading.Event()
    served: ServedModel | None = None
    try:
        with STOP.deferred():  # a stop now is raised once the container's handle is kept: the close below ends it
            process = start_session(command, cwd=model_dir, env=env)
            reader = threading.Thread(target=_pump, args=(process.stdout, log, echo, ready, started), daemon=True)
            reader.start()
            served = ServedModel("", log, process, reader)
        deadline = time.monotonic() + start_timeout_s
        while not started.wait(0.1):
            STOP.check()
            if process.poll() is not None or time.monotonic() > deadline:
                how = (
                    f"exited with code {process.returncode}"
                    if process.poll() is not None
                    else f"did not answer in {start_timeout_s:g} s"
                )
                reason = image_guard.explain(_last_line(log), guard)
                raise UserError(
                    f"model container {how}: {_last_line(log)}{' ' + reason if reason else ''} [log: {log}]",
                    headline="model container failed",
                )
        served.url = f"http://{ready['host']}:{ready['port']}"
        with urllib.request.urlopen(f"{served.url}/ping", timeout=10) as answer:  # noqa: S310 - our own loopback server
            if answer.status != 200:
                raise UserError(
                    f"model container answered /ping with {answer.status} [log: {log}]", headline="model container failed"
                )
        return served
    except BaseException:
        if served is not None:
            served.close()
        raise


def _pump(stream, log: Path, echo, ready: dict, started: threading.Event) -> None:
    with log.open("w") as out:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            out.write(line + "\n")
            out.flush()
            echo(line)
            match = READY.search(line)
            if match and not started.is_set():
                ready.update(match.groupdict())
                started.set()
    stream.close()


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.is_file() else []
    return lines[-1] if lines else "(no output)"
