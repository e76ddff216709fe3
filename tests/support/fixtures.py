"""Fixtures of the tests that run emulated jobs (a pytest plugin: tests/conftest.py loads it for every folder)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from pipeline import storage
from pipeline.code import STEPS_DIR, build_code_tarball
from pipeline.local.sample_data import generate
from tests.support.harness import children


@pytest.fixture(scope="session")
def tiny_images(tmp_path_factory) -> Path:
    """A small raw dataset, class-per-folder JPEGs, shared by the slow tests."""
    return generate(tmp_path_factory.mktemp("raw") / "images", samples=240, image_size=48, seed=1)


@pytest.fixture(scope="session")
def code_uri(tmp_path_factory) -> str:
    """The step code packed as the pipeline packs it, at its local S3 URI."""
    return storage.uri(build_code_tarball(source=STEPS_DIR, destination=tmp_path_factory.mktemp("code") / "code.tar.gz"))


@pytest.fixture(scope="session")
def compile_once(tmp_path_factory):
    """build_definition for tests that read a definition, not test its building: each distinct settings compiles once
    per session, whichever worker asks first (tests/support/deploy.py)."""
    from tests.support.deploy import compiled_once

    return lambda settings: compiled_once(tmp_path_factory, settings)


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
