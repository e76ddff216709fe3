"""Shared fixtures.

``moto_server`` is a real S3-compatible HTTP server (moto) on a free loopback
port, one per test session; ``aws_env`` points boto3 at it with fake
credentials so code under test creates its clients exactly as it would in AWS.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
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


# the test process's cyclic garbage collector: a young collection after every 50,000 allocations (not 700), a full one
# after 100 middle ones (not 10). A worker holds TensorFlow, PyTorch, the SageMaker SDK, the CDK and botocore's models,
# millions of objects, and Python's defaults walked them all 14 times per worker (5-8 s of each worker's 25-30 s of CPU in
# the fast lane). Only this process: the hosts and commands a test starts collect as a user's run does.
GC_THRESHOLDS = (50_000, 20, 100)


def pytest_configure(config):
    share_loaders()  # every worker: botocore parses each of its JSON models once per process (tests/support/botocore_data.py)
    _one_share_of_the_cpus_per_worker()
    gc.set_threshold(*GC_THRESHOLDS)


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


# cluster tests whose hosts must notice a peer's silence within 3-5 s (a frozen host, a link cut off or slowed): they run
# with no other emulated cluster beside them, so a second cluster's CPU use cannot pass for a host falling silent
ALONE_TESTS = (
    "tests/e2e/test_network_faults.py",
    "tests/e2e/ray/test_cluster.py::test_a_frozen_ray_host_is_named_first_by_every_other_host_which_exits_by_itself",
    "tests/e2e/tensorflow/test_pipeline.py::test_frozen_trainer_is_noticed_by_the_tf_workers_and_named_first_by_the_job",
    "tests/e2e/tensorflow/test_pipeline.py::test_losing_the_only_data_host_ends_a_trainer_blocked_in_tensorflow",
)
ALONE_SCOPE = "emulated clusters, each alone"


def _runs_clusters(item) -> bool:
    return bool(item.get_closest_marker("e2e")) and _cluster_nodeid(item.nodeid)


def _cluster_nodeid(nodeid: str) -> bool:
    return nodeid.startswith(CLUSTER_TESTS) and not nodeid.startswith(ONE_HOST_TESTS)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_finish(session):
    """An `ALONE_TESTS` entry that names no test function of its module (a test renamed or removed) is an error, not a
    fault test silently running beside another cluster. Read from the modules collected, not the tests selected: a run
    of one test of such a module (a node id, -k) is no error."""
    modules = {_module(item.nodeid): item.module for item in session.items if getattr(item, "module", None)}
    stale = [p for p in ALONE_TESTS if "::" in p and _module(p) in modules and not hasattr(modules[_module(p)], p.split("::")[1])]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py ALONE_TESTS names no test of its module: {stale}; rename or remove the entry")
    # what collecting imported (the libraries' modules, classes and tables) lives until the process ends: no collection
    # walks it again, pytest's last ones at exit included (three full ones, 0.7 s each, after the last test)
    gc.freeze()


def pytest_xdist_make_scheduler(config, log):
    """One emulated cluster per worker at a time (two on 2 cores), each fault test of `ALONE_TESTS` with none beside
    it, and no worker idle while work is queued. The work units, in the order workers take them: the `ALONE_TESTS`, as one unit, to the first
    worker; the CDK tests, as one (one jsii kernel); every other test one unit of its own, for the other workers (and
    the first, once its unit is done); then each module of the other cluster tests as one unit (its module-scoped runs
    made once), those with the most tests first. So the fault tests run while the other worker has unit tests to do,
    and the cluster modules then spread over every worker, the largest first. (A cluster test of the unit tests' turn
    would wait for the lock behind the fault tests. xdist's loadgroup cannot do this: with pytest 9 the worker's @group
    node-id suffix never reaches the controller, so a group was split across workers.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ClustersInTheirTurn(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(ALONE_TESTS):
                return ALONE_SCOPE
            if nodeid.startswith(CDK_TESTS):
                return "stacks"
            return _module(nodeid) if _cluster_nodeid(nodeid) else nodeid

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "in_turn", False):  # the first unit: schedule() has built the whole queue
                self.in_turn = True
                clusters = sorted((s for s in self.workqueue if _cluster_nodeid(s)), key=lambda s: -len(self.workqueue[s]))
                for scope in clusters:
                    self.workqueue.move_to_end(scope)
                if ALONE_SCOPE in self.workqueue:
                    self.workqueue.move_to_end(ALONE_SCOPE, last=False)
            super()._assign_work_unit(node)

    return ClustersInTheirTurn(config, log)


@pytest.fixture(scope="session")
def cluster_lock(tmp_path_factory):
    """The guarantee behind the scheduler above, whatever runs the tests (a `-n` run with another --dist, several pytest
    processes): a lock in the folder every worker's temp folder shares. Called, it gives a context manager that holds
    it (for a fixture of a wider scope that runs a cluster): shared by default, so clusters run beside one another (at
    most one per xdist worker), exclusive with ``alone=True`` (an `ALONE_TESTS` test), which waits for every cluster
    running and holds off the next."""
    path = tmp_path_factory.getbasetemp().parent / "hetero-clusters.lock"

    @contextlib.contextmanager
    def held(*, alone: bool = False):
        with open(path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            yield

    return held


@pytest.fixture(autouse=True)
def clusters_in_turn(request, cluster_lock):
    """Each test that runs emulated clusters holds `cluster_lock` while it runs: exclusive for `ALONE_TESTS`."""
    if not _runs_clusters(request.node):
        yield
        return
    with cluster_lock(alone=request.node.nodeid.startswith(ALONE_TESTS)):
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
