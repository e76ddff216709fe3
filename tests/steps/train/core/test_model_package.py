"""The code every host writes into its model folder: the steps package, the workload's own package, the training
code's requirements and an inference.py naming the handler, as the inference container loads them."""

from __future__ import annotations

import pytest

from steps.train.core.model_package import write_serving_code


@pytest.fixture
def code_root(tmp_path, monkeypatch):
    """A training code folder as a host has it: the steps package, a user's workload package, its requirements."""
    root = tmp_path / "opt-ml-code"
    (root / "steps" / "serve").mkdir(parents=True)
    (root / "steps" / "__init__.py").write_text("")
    (root / "steps" / "serve" / "pytorch.py").write_text("# the handler\n")
    (root / "steps" / "__pycache__").mkdir()
    (root / "steps" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / "my_pkg").mkdir()
    (root / "my_pkg" / "__init__.py").write_text("")
    (root / "my_pkg" / "w.py").write_text("WORKLOAD = None\n")
    (root / "my_single.py").write_text("WORKLOAD = None\n")
    (root / "requirements.txt").write_text("timm==1.0.0\n")
    (root / "unrelated").mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def _files(folder) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_a_user_workload_ships_its_package_and_the_code_its_requirements(tmp_path, code_root):
    model = tmp_path / "model"
    model.mkdir()
    code = write_serving_code(model, "my_pkg.w", code_root)
    assert code == model / "code"
    assert _files(code) == {
        "inference.py",
        "requirements.txt",
        "steps/__init__.py",
        "steps/serve/pytorch.py",
        "my_pkg/__init__.py",
        "my_pkg/w.py",
    }
    assert "from steps.serve.pytorch import input_fn, model_fn, output_fn, predict_fn" in (code / "inference.py").read_text()
    assert (code / "requirements.txt").read_text() == "timm==1.0.0\n"


def test_a_builtin_workload_ships_the_steps_package_alone_and_writing_again_replaces_it(tmp_path, code_root):
    model = tmp_path / "model"
    model.mkdir()
    write_serving_code(model, "my_single", code_root)
    assert "my_single.py" in _files(model / "code")
    (code_root / "requirements.txt").unlink()
    code = write_serving_code(model, "steps.train.workloads.shapes", code_root)
    assert _files(code) == {"inference.py", "steps/__init__.py", "steps/serve/pytorch.py"}
    assert [p.name for p in model.iterdir()] == ["code"]  # no partial folder left beside it


def test_the_default_code_root_is_the_one_this_package_runs_from(tmp_path):
    code = write_serving_code(tmp_path, "steps.train.workloads.shapes")
    assert (code / "steps" / "serve" / "pytorch.py").is_file() and (code / "steps" / "train" / "workload.py").is_file()
    assert not list(code.rglob("__pycache__"))
