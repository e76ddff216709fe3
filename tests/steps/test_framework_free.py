"""The tests of framework-free code import no framework: collecting them loads neither torch, TensorFlow nor Ray (the
test side of pyproject.toml's "core and the data plane are framework-free" contract)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORK_FREE = ["tests/steps/common", "tests/steps/train/core", "tests/steps/train/dataplane"]
FRAMEWORKS = ("torch", "tensorflow", "ray")


@pytest.mark.parametrize("folder", FRAMEWORK_FREE)
def test_collecting_a_framework_free_folder_loads_no_framework(folder):
    tests = [p.relative_to(ROOT) for p in sorted((ROOT / folder).rglob("test_*.py"))]
    modules = [".".join(p.with_suffix("").parts) for p in tests]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(sorted(f for f in {FRAMEWORKS!r} if f in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", f"{folder}: its tests load {loaded.strip()}"
