from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from pipeline import storage
from pipeline.code import STEPS_DIR, build_code_tarball
from pipeline.harness import children
from pipeline.sample_data import generate


@pytest.fixture(scope="session")
def tiny_images(tmp_path_factory) -> Path:
    """A small raw dataset, class-per-folder JPEGs, shared by the slow tests."""
    return generate(tmp_path_factory.mktemp("raw") / "images", samples=240, image_size=48, seed=1)


@pytest.fixture(scope="session")
def code_uri(tmp_path_factory) -> str:
    """The step code packed as the pipeline packs it, at its local S3 URI."""
    return storage.uri(build_code_tarball(source=STEPS_DIR, destination=tmp_path_factory.mktemp("code") / "code.tar.gz"))


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


PIXEL_BYTES = 64 * 64 * 3  # one default-workload sample's uint8 pixels


def assert_data_hosts_measured_themselves(metrics: dict, data_hosts: int) -> None:
    """metrics.json holds every data host's own measurements, consistent with what the trainers saw."""
    if metrics["mode"] == "homogeneous":
        assert metrics["data_hosts"] == [] and metrics["bytes_received_per_sample"] == 0
        return
    hosts = metrics["data_hosts"]
    assert len({h["host"] for h in hosts}) == len(hosts) == data_hosts
    assert abs(sum(h["samples_sent"] for h in hosts) - metrics["samples_seen"]) <= len(hosts)  # all trainers, all epochs
    for h in hosts:
        assert h["cpus"] >= 1 and h["decode_cpu_s_per_sample"] > 0 and 0 < h["busy_share"] < 2, h
        assert h["bytes_sent_per_sample"] >= PIXEL_BYTES, h
    assert metrics["bytes_received_per_sample"] >= PIXEL_BYTES + 16
