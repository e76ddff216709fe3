"""The Ray node's lock-down and clean-up, without starting Ray: the token, its free ports, its temp folder, and ending every
process of a node."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from steps.train.frameworks.ray.errors import RayNodeFailed
from steps.train.frameworks.ray.node import (
    NODE_ENV,
    TEMP_DIR_ROOM,
    _free_port,
    _kill_marked,
    _node_folder,
    ray_token,
)


def test_the_ray_token_is_bound_to_the_job_secret_and_never_is_the_secret():
    a, b = ray_token(b"s" * 32), ray_token(b"t" * 32)
    assert a != b and len(a) == 64 and a == ray_token(b"s" * 32)


def test_every_process_with_the_nodes_marker_is_killed_whatever_its_group_and_no_other(tmp_path):
    """Ray's workers rename themselves and lead process groups of their own: the node finds them by the marker in their
    environment."""
    folder = tmp_path / "hray-node"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    mine = subprocess.Popen(sleeper, env={**os.environ, NODE_ENV: str(folder)}, process_group=0)  # a group of its own
    other = subprocess.Popen(sleeper, env={**os.environ, NODE_ENV: f"{folder}-someone-else"})
    try:
        _kill_marked(f"{NODE_ENV}={folder}")
        assert mine.wait(timeout=5) == -signal.SIGKILL
        assert other.poll() is None
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()


def test_the_nodes_folder_is_in_the_hosts_temp_dir_unless_that_is_too_long_for_rays_sockets(tmp_path, monkeypatch):
    short = Path(tempfile.mkdtemp(prefix="h-", dir="/tmp"))
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(short))
        assert _node_folder().parent == short
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # pytest's: longer than TEMP_DIR_ROOM
        assert len(str(tmp_path)) > TEMP_DIR_ROOM
        folder = _node_folder()
        assert folder.parent == Path("/tmp") and folder.name.startswith("hray-")
        folder.rmdir()
    finally:
        shutil.rmtree(short)


def test_a_free_port_is_free_on_every_address_asked_and_the_search_is_bounded():
    port = _free_port("127.0.0.5", "127.0.0.1")
    for address in ("127.0.0.5", "127.0.0.1"):
        with socket.socket() as probe:
            probe.bind((address, port))
    with pytest.raises(RayNodeFailed, match="no TCP port free on 127.0.0.5 and 203.0.113.7 in 100 tries"):
        _free_port("127.0.0.5", "203.0.113.7")  # not an address of this machine: never bindable
