"""This host's Ray node: started from the SageMaker Environment, locked down, and ended with the host.

The first trainer host is the head; every other host of the job joins it at
the head's address (resolved from the Environment's host name, never a
hard-coded one). Each node advertises one custom resource saying what its
host is (`TRAINER_RESOURCE` or `DATA_RESOURCE`), which places the Ray Train
workers on the trainer hosts while Ray Data's decode tasks run on every CPU.

Ray listens on every interface and, left to its defaults, lets anyone who
reaches a port run code on the cluster. The launcher confines every process
of a Ray host to the host's cluster address (`steps.train.dataplane.bind_guard`), and
every node here runs with token authentication (``RAY_AUTH_MODE=token``),
the token derived from the job secret and read from a file only this user
can read, never from the environment. The node is ``ray start --block`` in a
child process leading a process group of its own (a signal to the host's group is the host's to act on);
`stop` ends it and every process Ray started for it (raylet, GCS, workers: found by
the marker `NODE_ENV` each inherits in its environment; Ray's workers rename themselves and lead process groups of
their own, so neither their command lines nor the node's group name them all) and removes the node's temp folder,
so no Ray process or file outlives its host: gracefully after a job that completed, at once after a failure (the
job's other hosts are waiting on this one to exit).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from steps.train.core.cluster import DATA, Cluster, available_cpus, resolve
from steps.train.core.config import TrainConfig
from steps.train.core.terminate import TERMINATE
from steps.train.dataplane.auth import job_secret
from steps.train.frameworks.ray.errors import RayNodeFailed

TRAINER_RESOURCE, DATA_RESOURCE = "hetero_trainer", "hetero_data"
OBJECT_STORE_BYTES = 512 * 1024**2  # per node: batches in flight, not the dataset
NODE_ENV = "HETERO_RAY_NODE"  # in every Ray process of a node: the node's temp folder
# Ray's deepest unix socket is <folder>/ray/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store, about 70 characters
# below the folder, and a socket path has at most 107 (sun_path): a temp dir longer than this gives way to /tmp
TEMP_DIR_ROOM = 24
LOOPBACK = "127.0.0.1"  # where Ray's node-local servers (the job API's dashboard, the client server) also listen
STOP_WAIT_S = 15.0  # for ray start to stop its processes, then for the last of them to go


# What every Ray process of a node (and a driver connecting to it) runs with, beside the node's own (`RayNode.environment`)
RAY_SETTINGS = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_COLOR_PREFIX": "0",  # workers' lines reach the log as "(RayTrainWorker pid=N) ...", no ANSI codes
    # no progress bars (Ray Data redraws one per operator every second: thousands of lines a minute in the job's
    # log), and Ray Train workers' print() stays print(): its logging redirect wrote each line twice
    "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    # ray start's SIGTERM first drains the node (for Ray Serve: up to 30 s); a head never finishes draining (its
    # raylet waits for leases nobody returns once the job is over), so every job ended 15 s (`STOP_WAIT_S`)
    # late, billed. The job's work is done when a node is stopped: no drain.
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    # Ray Train's controller polls its workers this often (default 2 s): the end of training, and a worker's
    # failure, are heard within it
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
    # CPU of the head's as training starts, for what no host here uses: the preemption watcher is one more Ray
    # worker process, polling Ray's node drains (an autoscaler's; SageMaker stops a spot host with SIGTERM,
    # `TERMINATE`); Ray Train's and Ray's own metrics are recorded for a Prometheus export no node serves (no
    # dashboard): the job's are in metrics.json
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_METRICS_ENABLED": "0",
    "RAY_enable_metrics_collection": "0",
    # what Ray Train gives its controller through a runtime environment, given to every process of the node
    # instead (`steps.train.frameworks.ray.job_trainer`): no warning for its async controller's blocking gets
    "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC": "0",
}


def per_trainer_host(resource: str) -> int:
    """How much of ``resource`` (CPU, GPU) the smallest trainer host of the Ray cluster has (0: none)."""
    import ray

    return int(
        min(
            (n["Resources"].get(resource, 0) for n in ray.nodes() if n.get("Alive") and n["Resources"].get(TRAINER_RESOURCE)),
            default=0,
        )
    )


def ray_token(secret: bytes) -> str:
    """The cluster's Ray auth token: the job secret, bound to this use."""
    return hmac.new(secret, b"hetero/ray-auth-token", hashlib.sha256).hexdigest()


class RayNode:
    """``ray start --block`` for this host, as head (the first trainer host) or joining the head."""

    def __init__(self, cfg: TrainConfig, cluster: Cluster) -> None:
        self.cfg, self.cluster = cfg, cluster
        self.head_host = cluster.trainer_hosts[0]
        self.is_head = cluster.current_host == self.head_host
        self.address = ""  # the head's GCS, host:port: the head picks it, the others learn it from its START
        self.folder = _node_folder()
        self.process: subprocess.Popen | None = None

    def environment(self) -> dict:
        """What every Ray process of this host (and a driver connecting to it) needs in its environment."""
        token = self.folder / "token"
        if not token.exists():
            token.touch(mode=0o600)
            token.write_text(ray_token(job_secret()))
        # a head gone for silence_timeout_s is gone: raylets and drivers stop waiting for it then; and a joining raylet
        # waits as long for the head's first answer (Ray's 5 s default: over a lossy link a data host's `ray start`
        # failed "Failed to get cluster ID from GCS server: TimedOut" while the head was up)
        timeout = str(max(5, int(self.cfg.silence_timeout_s)))
        code = str(Path(__file__).resolve().parents[4])  # Ray's worker processes import the step code from here
        path = os.pathsep.join(p for p in (code, os.environ.get("PYTHONPATH", "")) if p)
        return {
            **os.environ,
            NODE_ENV: str(self.folder),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token),
            "RAY_gcs_rpc_server_reconnect_timeout_s": timeout,
            "RAY_gcs_rpc_server_connect_timeout_s": timeout,
            "PYTHONPATH": path,
            **RAY_SETTINGS,
        }

    @property
    def ip(self) -> str:
        return resolve(self.cluster.current_host)

    def start(self, head: str = "", *, log=None) -> RayNode:
        """Start the node, joining the GCS at ``head`` (host:port; the head picks its own: ``ray_port``, or a free
        port when 0). ``log``: where Ray's own output goes, this process's by default. A head is up when this
        returns, a joining node once the head answered."""
        ip = self.ip
        resource = DATA_RESOURCE if self.cluster.role == DATA else TRAINER_RESOURCE
        command = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--block",
            f"--node-ip-address={ip}",
            f"--num-cpus={available_cpus()}",
            f"--num-gpus={_gpus()}",
            f"--resources={json.dumps({resource: 1})}",
            "--disable-usage-stats",
            f"--temp-dir={self.folder / 'ray'}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
        ]
        if self.cluster.role == DATA:  # its workers only decode: nothing of theirs to stream to the driver's log
            command += ["--include-log-monitor=false"]
        if self.is_head:
            self.address = f"{ip}:{self.cfg.ray_port or _free_port(ip)}"
            # the job API's minimal dashboard listens on 127.0.0.1 even without the dashboard: a free port, not 8265
            command += [
                "--head",
                "--no-monitor",  # the autoscaler's monitor: a training job's instance groups are fixed, nothing scales
                f"--port={self.address.rsplit(':', 1)[1]}",
                "--include-dashboard=false",
                f"--dashboard-port={_free_port(LOOPBACK)}",
            ]
            if _has_grpc():  # Ray runs its client server whenever grpc is there (the Ray image has none): a free port, not 10001
                command += [f"--ray-client-server-port={_free_port(ip, LOOPBACK)}"]
        else:
            self.address = head
            self._await_head()
            command += [f"--address={self.address}"]
        # a process group of its own: a stop signals the host's group (the local run's stop does), and a raylet that went
        # with the signal ended this driver at once from Ray's C++ ("the local Raylet is dead": a quick exit, no failure
        # file) before its SIGTERM handler ran; the node ends when the host says (`stop`), as on SageMaker, where the
        # stop signals the container's first process alone
        self.process = subprocess.Popen(
            command, env=self.environment(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, process_group=0
        )
        print(
            f"[ray] {self.cluster.current_host}: {f'head at {self.address}' if self.is_head else f'node at {ip}'} "
            f"({available_cpus()} CPU(s), {resource}){'' if self.is_head else f', joining {self.address}'}; "
            f"temp folder {self.folder}",
            file=log or sys.stdout,
            flush=True,
        )
        if self.is_head:
            self._await_head()
        return self

    def _await_head(self) -> None:
        """Until the head's port answers: joining (or connecting a driver) earlier fails."""
        import socket

        host, port = self.address.rsplit(":", 1)
        deadline = time.monotonic() + self.cfg.connect_timeout_s
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                return
            except OSError as exc:
                if self.process is not None and self.process.poll() is not None:
                    raise RayNodeFailed(
                        f"the Ray head on {self.head_host} exited with code {self.process.returncode} "
                        "before it listened; its log is above"
                    ) from None
                if time.monotonic() > deadline:
                    raise RayNodeFailed(
                        f"the Ray head on {self.head_host} ({self.address}) did not come up within "
                        f"connect_timeout_s={self.cfg.connect_timeout_s:g}: {exc}"
                    ) from None
                time.sleep(0.5)

    def connect(self) -> None:
        """This process as a Ray driver on this host's node. Ray reads its auth settings once, when first imported:
        a process that imported ray before this call connects without the token, and is refused."""
        import logging

        os.environ.update({k: v for k, v in self.environment().items() if k.startswith("RAY_")})
        import ray  # after the environment: see above

        ray.init(
            address=self.address,
            _node_ip_address=self.ip,
            logging_level=logging.WARNING,
            configure_logging=False,
            log_to_driver=self.is_head,
        )
        TERMINATE.install()  # ray.init replaced it with sys.exit(15): a SIGTERM would end the driver as an internal error

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, *, graceful: bool = True) -> None:
        """End the node and every process Ray started for it, and remove its temp folder. ``graceful``: let ``ray start``
        stop its processes first (up to `STOP_WAIT_S`); else kill them at once. Idempotent."""
        if graceful and self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # ray start --block stops its processes on SIGTERM
            try:
                self.process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        _kill_marked(f"{NODE_ENV}={self.folder}")  # whatever survived it (a raylet whose parent was killed, its workers)
        shutil.rmtree(self.folder, ignore_errors=True)


def _has_grpc() -> bool:
    """Whether Ray will start its client server (ray://): it does when grpc imports (ray[client]); the training image
    (images/ray/Dockerfile: ray[data,train]) has no grpc, and a client server port asked of a Ray without it is an error."""
    try:
        import grpc  # noqa: F401
    except ImportError:
        return False
    return True


def _free_port(ip: str, *also: str) -> int:
    """A port free on ``ip`` (and on every address of ``also``) now, the OS's pick; Ray binds it a moment later."""
    import socket

    for _ in range(100):  # the OS's pick on ``ip`` taken on another address: pick again, a bounded number of times
        with socket.socket() as probe:
            probe.bind((ip, 0))
            port = probe.getsockname()[1]
            try:
                for other in also:
                    with socket.socket() as second:
                        second.bind((other, port))
            except OSError:
                continue
            return port
    raise RayNodeFailed(f"no TCP port free on {ip} and {', '.join(also)} in 100 tries: is the loopback interface up?")


def _node_folder() -> Path:
    """A new temp folder for the node, in the host's temp dir (its instance's /tmp), or /tmp where that is too long a
    path for Ray's unix sockets (`TEMP_DIR_ROOM`)."""
    root = tempfile.gettempdir()
    return Path(tempfile.mkdtemp(prefix="hray-", dir=root if len(root) <= TEMP_DIR_ROOM else "/tmp"))


def _kill_marked(marker: str, timeout_s: float = STOP_WAIT_S) -> None:
    """SIGKILL every process with ``marker`` ("NAME=value") in its environment, this one excepted, until none is left
    (one may start another while it goes), for at most ``timeout_s``. Done after two scans in a row found none: a
    process just started shows an empty environment for an instant (/proc/PID/environ right after Popen returned: empty
    in 93 of 300 tries, the marker there within a millisecond)."""
    needle = f"{marker}\0".encode()
    deadline = time.monotonic() + timeout_s
    clean_scans = 0
    while time.monotonic() < deadline:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if needle in (entry / "environ").read_bytes() and not (entry / "stat").read_text().rsplit(")", 1)[
                        1
                    ].startswith(" Z"):
                        found.append(int(entry.name))
                except OSError:  # exited meanwhile, or another user's
                    continue
        clean_scans = 0 if found else clean_scans + 1
        if clean_scans == 2:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def _gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0
