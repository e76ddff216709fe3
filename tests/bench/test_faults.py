"""bench/faults.py run small (one cell, once): its JSON goes to --out, and nothing else to stdout (the emulator's lines
and each cell's summary go to stderr), so ``bench/faults.py > faults.json`` is JSON too."""

from __future__ import annotations

import json

import pytest

from tests.support.bench import run_bench

pytestmark = pytest.mark.e2e


def test_the_fault_benchs_json_goes_to_out_and_nothing_else_to_stdout(tmp_path, cluster_lock, no_leftovers):
    out = tmp_path / "faults.json"
    with cluster_lock():  # an emulated cluster: in its turn (tests/conftest.py)
        done = run_bench("bench/faults.py", "--repeats", "1", "--only", "pytorch-kill-data", "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == ""
    assert "volume per host" in done.stderr  # the emulator's own lines: there, not on stdout
    cell = json.loads(out.read_text())["cells"]["pytorch-kill-data"]
    assert cell["all_blame_the_victim"] and cell["processes_left"] == 0, cell
