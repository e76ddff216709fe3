"""The Ray node's lock-down and clean-up, without starting Ray: the token, its free ports, and finding every process of a node."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from steps.train.frameworks.ray.node import RayNodeFailed, _free_port, _processes_under, ray_token


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


def test_a_free_port_is_free_on_every_address_asked_and_the_search_is_bounded():
    port = _free_port("127.0.0.5", "127.0.0.1")
    for address in ("127.0.0.5", "127.0.0.1"):
        with socket.socket() as probe:
            probe.bind((address, port))
    with pytest.raises(RayNodeFailed, match="no TCP port free on 127.0.0.5 and 203.0.113.7 in 100 tries"):
        _free_port("127.0.0.5", "203.0.113.7")  # not an address of this machine: never bindable
