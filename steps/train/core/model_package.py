"""The model package's code: what every host writes into ``code/`` of its model folder when training ends, so that
whichever host's folder SageMaker packs into model.tar.gz serves.

The inference containers unpack model.tar.gz into /opt/ml/model and load ``code/inference.py``, with ``code/`` on the
import path and ``code/requirements.txt`` installed first. So ``code/`` holds this project's ``steps`` package (the
handler, the server and the workload interface) and an ``inference.py`` that names the framework's handler; for a
PyTorch model, which the handler builds from the workload, also the workload's own package when it is not one of ours
(shipped with the training code: ``--code-dir``) and the training code's requirements.txt when it has one. A
TensorFlow model's SavedModel decodes and scores by itself (steps/train/frameworks/tensorflow/serving.py): its handler
needs neither, and a requirements.txt would only make the container install the training code's packages as it
starts. A host copies them from its own code folder: files a trainer hands over are plain files only.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

CODE_FOLDER = "code"  # where the inference toolkits look, in the model folder
REQUIREMENTS = "requirements.txt"
SHIPPED = "steps"  # the project's package that ships with the training code (pipeline.emulator.image_guard.SHIPPED)
# the handler each framework's inference container loads from code/ (by module name, or by file for TensorFlow's)
INFERENCE_MODULES = {
    "pytorch": '''"""This model package's inference handler: steps/serve/pytorch.py (SageMaker's PyTorch inference toolkit and
steps/serve/server.py load this module and call its functions)."""

from steps.serve.pytorch import input_fn, model_fn, output_fn, predict_fn  # noqa: F401
''',
    "tensorflow": '''"""This model package's inference handler: steps/serve/tensorflow.py (the Python service of SageMaker's
TensorFlow Serving container loads this file and calls its functions around TF Serving)."""

from steps.serve.tensorflow import input_handler, output_handler  # noqa: F401
''',
}
_LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc")


def write_serving_code(
    model_dir: Path, workload_module: str, code_root: Path | None = None, *, serves_as: str = "pytorch"
) -> Path:
    """``model_dir``/code as ``serves_as``'s inference container loads it, for a model whose workload is
    ``workload_module``; ``code_root``: the training code's folder (/opt/ml/code on a host; by default the one this
    file is in)."""
    code_root = code_root or Path(__file__).resolve().parents[3]
    steps = code_root / SHIPPED
    code = model_dir / CODE_FOLDER
    partial = model_dir / f".{CODE_FOLDER}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(steps, partial / SHIPPED, ignore=_LEFT_OUT)
    if serves_as == "pytorch":  # the handler builds the model from the workload, with the training code's packages
        top = workload_module.split(".")[0]
        if top != SHIPPED:
            _copy_module(top, partial)
        requirements = code_root / REQUIREMENTS
        if requirements.is_file():
            shutil.copy2(requirements, partial / REQUIREMENTS)
    (partial / "inference.py").write_text(INFERENCE_MODULES[serves_as])
    shutil.rmtree(code, ignore_errors=True)
    partial.rename(code)
    return code


def _copy_module(name: str, into: Path) -> None:
    """The top-level package (or module) ``name`` as this host imports it, into ``into``."""
    spec = importlib.util.find_spec(name)
    if spec is None or (spec.origin is None and not spec.submodule_search_locations):
        raise ValueError(f"workload package {name!r} is not importable here, so it cannot ship with the model")
    if spec.submodule_search_locations:  # a package: its folder
        folder = Path(next(iter(spec.submodule_search_locations)))
        shutil.copytree(folder, into / folder.name, ignore=_LEFT_OUT)
    else:  # one module file
        shutil.copy2(str(spec.origin), into / Path(str(spec.origin)).name)
