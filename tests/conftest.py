"""Shared fixtures.

``moto_server`` is a real S3-compatible HTTP server (moto) on a free loopback
port, one per test session; ``aws_env`` points boto3 at it with fake
credentials so code under test creates its clients exactly as it would in AWS.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import urllib.request

import pytest

from tests.support.botocore_data import share_loaders

# tiny_images, code_uri, no_leftovers: for every folder (the end-to-end tests, the benches' tests, the emulator's)
pytest_plugins = ["tests.support.fixtures"]

CLUSTER_TESTS = "tests/e2e/"  # where the tests that run emulated clusters and pipelines live
# e2e tests there that start one single-host job or a Shard step at most: light enough to run beside a cluster, as the
# unit tests do
ONE_HOST_TESTS = ("tests/e2e/test_cli_runs.py", "tests/e2e/test_image_guard.py", "tests/e2e/test_run_stops_early.py")
# the tests that synthesise stacks: each worker that runs one starts a jsii kernel (a Node.js process that loads the CDK
# library, seconds of CPU) and waits while another worker synthesises a stack it needs (tests/support/stacks.py)
CDK_TESTS = "tests/infra/"


def pytest_configure(config):
    share_loaders()  # every worker: botocore parses each of its JSON models once per process (tests/support/botocore_data.py)
    _one_share_of_the_cpus_per_worker()


def _one_share_of_the_cpus_per_worker():
    """Each xdist worker's PyTorch intra-op pool gets the worker's share of the CPUs: every pool sized to the whole
    machine, several workers at once, and the pools' threads spin-wait for CPUs the other workers hold (a 0.6 s PyTorch
    test took 3 to 15 s beside another worker on 2 CPUs). Only this process's pool: the processes a test starts (an
    emulated host, `hetero run`) see the machine as a user's run does, not a test setting in their environment."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch  # collecting imports it anyway

        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # Linux or not
        torch.set_num_threads(max(1, cpus // workers))


def _runs_clusters(item) -> bool:
    return bool(item.get_closest_marker("e2e")) and _cluster_nodeid(item.nodeid)


def _cluster_nodeid(nodeid: str) -> bool:
    return nodeid.startswith(CLUSTER_TESTS) and not nodeid.startswith(ONE_HOST_TESTS)


def pytest_xdist_make_scheduler(config, log):
    """Every test that runs emulated clusters goes to ONE worker, as one unit of work, and so do the CDK tests, as
    another; every other test is a unit of its own, spread over the other workers (and those, once their unit is done).
    xdist's loadgroup cannot do this here: with pytest 9 the worker's @group node-id suffix never reaches the
    controller, so a group was split across workers, and the lock below then left a worker idle behind the other's
    cluster runs with its queue of unit tests waiting."""
    from xdist.scheduler import LoadScopeScheduling

    class ClustersOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if _cluster_nodeid(nodeid):
                return "emulated clusters"
            return "stacks" if nodeid.startswith(CDK_TESTS) else nodeid

    return ClustersOnOneWorker(config, log)


@pytest.fixture(scope="session")
def cluster_lock(tmp_path_factory):
    """The guarantee behind the scheduler above, whatever runs the tests (a `-n` run with another --dist, several pytest
    processes): an exclusive lock in the folder every worker's temp folder shares runs one emulated cluster at a time.
    Called, it gives a context manager that holds the lock (for a fixture of a wider scope that runs a cluster)."""
    path = tmp_path_factory.getbasetemp().parent / "hetero-clusters.lock"

    @contextlib.contextmanager
    def held():
        with open(path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    return held


@pytest.fixture(autouse=True)
def one_cluster_at_a_time(request, cluster_lock):
    """Each test that runs emulated clusters holds `cluster_lock` while it runs."""
    if not _runs_clusters(request.node):
        yield
        return
    with cluster_lock():
        yield


@pytest.fixture(scope="session")
def moto_server():
    """Endpoint URL of a moto server on 127.0.0.1 (port chosen by the OS); stopped at session end."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        # stop() ends the serve loop but leaves the listening socket open until
        # garbage collection; close it so the port is released now.
        server._server.server_close()


@pytest.fixture
def aws_env(moto_server, monkeypatch, tmp_path):
    """Fake credentials, region and endpoint for boto3; fresh (empty) moto state. Returns the endpoint."""
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    # Never read a developer's real AWS config or credentials.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    opener.open(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST"), timeout=10).close()
    return moto_server
