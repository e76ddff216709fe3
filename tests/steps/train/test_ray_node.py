"""The Ray node's lock-down and clean-up, without starting Ray: the token, and finding every process of a node."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from steps.train.ray_node import _processes_under, ray_token


def test_the_ray_token_is_bound_to_the_job_secret_and_never_is_the_secret():
    a, b = ray_token(b"s" * 32), ray_token(b"t" * 32)
    assert a != b and len(a) == 64 and a == ray_token(b"s" * 32)


def test_every_process_naming_the_nodes_folder_is_found_and_no_other():
    folder = Path(tempfile.mkdtemp(prefix="hray-"))
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--temp-dir={folder}/ray"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--temp-dir=/tmp/hray-someone-else"])
    try:
        found = _processes_under(folder)
        assert mine.pid in found and other.pid not in found
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()
