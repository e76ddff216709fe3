"""A bench script of bench/ run as a user runs it: in a process of its own, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python <args>`` from the repository root with the step code importable; its output captured as text."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
