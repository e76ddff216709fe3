from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from pipeline.sample_data import generate


@pytest.fixture(scope="session")
def tiny_images(tmp_path_factory) -> Path:
    """A small raw dataset, class-per-folder JPEGs, shared by the slow tests."""
    return generate(tmp_path_factory.mktemp("raw") / "images", samples=240, image_size=48, seed=1)


def children() -> list[psutil.Process]:
    return [p for p in psutil.Process(os.getpid()).children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def listening_ports() -> set[int]:
    return {c.laddr.port for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


def job_ports(job_dir: Path) -> set[int]:
    """The data-plane and rendezvous ports an emulated job was given."""
    ports = set()
    for config in job_dir.glob("algo-*/input/config/hyperparameters.json"):
        hp = json.loads(config.read_text())
        ports |= {int(json.loads(hp["data_port"])), int(json.loads(hp["dist_port"]))}
    return ports


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()[:3]
    except psutil.Error:  # exited (or became a zombie) meanwhile
        return []


@pytest.fixture
def no_leftovers():
    """Fails the test if it leaves processes behind (and cleans them up either way). Children that
    were there before the test (the jsii kernel of the CDK tests, say) are not its leftovers."""
    before = {p.pid for p in children()}
    yield
    left = [p for p in children() if p.pid not in before]
    described = [(p.pid, _cmdline(p)) for p in left]
    for p in left:
        p.kill()
    assert not left, f"processes left behind: {described}"
