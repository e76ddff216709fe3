from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import psutil
import pytest

from pipeline.emulator import SHARDED, Channel, EmulatedJob, InstanceGroup, free_port
from pipeline.sample_data import generate
from steps.train.auth import new_secret


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


def start_training_job(tmp_path: Path, shards: Path, *, silence_timeout_s: float = 30.0, data: int = 2,
                       hyperparameters: dict | None = None) -> EmulatedJob:
    """A 2-group emulated job on ``shards`` that trains "forever"; returns once the first step is logged."""
    training = threading.Event()

    def on_line(host, line):
        if "step_time_ms=" in line:
            training.set()

    job = EmulatedJob(
        name="job",
        groups=[InstanceGroup("data_group", "ml.c5.9xlarge", data), InstanceGroup("dnn_group", "ml.p3.2xlarge", 1)],
        channels=[Channel("train", shards / "train", SHARDED, ("data_group",)),
                  Channel("validation", shards / "validation", instance_groups=("dnn_group",)),
                  Channel("manifest", shards / "manifest.json")],
        hyperparameters={"epochs": 1000, "batch_size": 8, "log_every": 1, "workload_options": {"blur_passes": 0},
                         "data_port": free_port(), "dist_port": free_port(), "heartbeat_s": 0.5,
                         "silence_timeout_s": silence_timeout_s, "connect_timeout_s": 60, **(hyperparameters or {})},
        work_dir=tmp_path, environment={"HETERO_JOB_SECRET": new_secret()}, on_line=on_line,
        grace_s=120, timeout_s=240,
    )
    job.start()
    assert training.wait(120), "training never started"
    return job


def by_role(job: EmulatedJob, role: str) -> list:
    return [h for h in job.hosts if h.role == role]

