"""A SageMaker training job, heterogeneous or not, emulated on one machine.

Per host it lays out what a container sees under ``/opt/ml``: a base dir with
``input/config/{resourceconfig,hyperparameters,inputdataconfig}.json``, the
input channels provisioned only on the groups that ask for them and split
across hosts as ShardedByS3Key would, and empty ``model/`` and ``output/``.
Host names algo-N are dealt randomly across groups, as SageMaker does. Each
host is one process (its own session, so its DataLoader workers go with it)
with ``SAGEMAKER_BASE_DIR`` set, its own loopback address 127.0.0.N and
optionally its own CPU set, standing in for its instance's vCPUs.

Like SageMaker, the job ends when every host has exited. When one host
fails, the others get ``grace_s`` to exit on their own (the step code must
make them) before the emulator stops them; every process is gone when
`EmulatedJob` is closed, whatever happened.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from steps.common.errors import HeteroError, UserError
from steps.train.cluster import HOSTS_FILE_ENV

REPO_ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINT = "steps/train/launcher.py"
SHARDED, REPLICATED = "ShardedByS3Key", "FullyReplicated"


class StepFailed(HeteroError):
    headline = "step failed"


@dataclass(frozen=True)
class InstanceGroup:
    name: str
    instance_type: str
    count: int
    cpus: tuple[int, ...] | None = None  # CPU set shared by the group's hosts; None: no pinning


@dataclass(frozen=True)
class Channel:
    name: str
    source: Path  # a folder (its files are the S3 objects) or a single file
    distribution: str = REPLICATED
    instance_groups: tuple[str, ...] | None = None  # None: every group
    input_mode: str = "File"


@dataclass
class Host:
    name: str
    group: InstanceGroup
    address: str
    base_dir: Path
    role: str
    process: subprocess.Popen | None = None
    exit_code: int | None = None
    ended_at: float | None = None
    stopped_by_emulator: bool = False

    @property
    def failure(self) -> str:
        path = self.base_dir / "output" / "failure"
        return path.read_text().strip() if path.is_file() else ""


@dataclass
class JobResult:
    name: str
    job_dir: Path
    hosts: list[Host]
    failure: str | None = None
    model_dir: Path | None = None
    output_data_dir: Path | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _objects(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise UserError(f"channel source {source} does not exist", headline="missing channel data")
    return sorted(p for p in source.rglob("*") if p.is_file() and not p.name.startswith("."))


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2))


@dataclass
class EmulatedJob:
    name: str
    groups: list[InstanceGroup]
    channels: list[Channel]
    hyperparameters: dict
    work_dir: Path
    code_dir: Path = REPO_ROOT
    entry_point: str = ENTRY_POINT
    environment: dict = field(default_factory=dict)
    on_line: Callable[[Host, str], None] | None = None
    grace_s: float = 30.0
    timeout_s: float | None = None
    seed: int | None = None
    hosts: list[Host] = field(default_factory=list)
    _readers: list = field(default_factory=list)

    @property
    def job_dir(self) -> Path:
        return self.work_dir / self.name

    def role_of(self, group: str) -> str:
        heterogeneous = len(self.groups) > 1
        return "data" if heterogeneous and group == self.hyperparameters.get("data_group", "data_group") else "trainer"

    # -- layout --------------------------------------------------------------
    def prepare(self) -> None:
        if self.job_dir.exists():
            shutil.rmtree(self.job_dir)
        total = sum(g.count for g in self.groups)
        names = [f"algo-{i}" for i in range(1, total + 1)]
        random.Random(self.seed).shuffle(names)  # SageMaker deals names randomly across groups
        dealt = iter(names)
        for group in self.groups:
            for _ in range(group.count):
                name = next(dealt)
                index = int(name.split("-")[1])
                self.hosts.append(Host(name, group, f"127.0.0.{index + 1}", self.job_dir / name, self.role_of(group.name)))
        self.hosts.sort(key=lambda h: int(h.name.split("-")[1]))
        self.job_dir.mkdir(parents=True)
        (self.job_dir / "hosts").write_text("".join(f"{h.address} {h.name}\n" for h in self.hosts))
        provisioned = self._provision_channels()
        for host in self.hosts:
            self._write_config(host, provisioned[host.name])

    def _provision_channels(self) -> dict[str, dict]:
        provisioned: dict[str, dict] = {h.name: {} for h in self.hosts}
        for channel in self.channels:
            groups = channel.instance_groups or tuple(g.name for g in self.groups)
            unknown = set(groups) - {g.name for g in self.groups}
            if unknown:
                raise UserError(f"channel {channel.name!r} names unknown instance group(s) {sorted(unknown)}", headline="bad channel")
            targets = sorted((h for h in self.hosts if h.group.name in groups), key=lambda h: h.name)
            objects = _objects(channel.source)
            if channel.distribution == SHARDED and len(objects) < len(targets):
                raise UserError(
                    f"channel {channel.name!r} has {len(objects)} object(s) for {len(targets)} hosts with ShardedByS3Key, so some "
                    f"hosts would get no data; re-shard for {len(targets)} hosts or use fewer hosts",
                    headline="more hosts than shards",
                )
            root = channel.source if channel.source.is_dir() else channel.source.parent
            for i, host in enumerate(targets):
                mine = objects[i :: len(targets)] if channel.distribution == SHARDED else objects
                channel_dir = host.base_dir / "input" / "data" / channel.name
                for obj in mine:
                    link = channel_dir / obj.relative_to(root)
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(obj.resolve())
                channel_dir.mkdir(parents=True, exist_ok=True)
                provisioned[host.name][channel.name] = {
                    "ContentType": "application/x-tar",
                    "TrainingInputMode": channel.input_mode,
                    "S3DistributionType": channel.distribution,
                    "RecordWrapperType": "None",
                }
        return provisioned

    def _write_config(self, host: Host, channels: dict) -> None:
        config = host.base_dir / "input" / "config"
        _write_json(config / "resourceconfig.json", {
            "current_host": host.name,
            "current_instance_type": host.group.instance_type,
            "current_group_name": host.group.name,
            "hosts": [h.name for h in self.hosts],
            "instance_groups": [
                {"instance_group_name": g.name, "instance_type": g.instance_type,
                 "hosts": sorted((h.name for h in self.hosts if h.group is g), key=lambda n: int(n.split("-")[1]))}
                for g in self.groups
            ],
            "network_interface_name": "lo",
        })
        hyperparameters = {k: v if isinstance(v, str) else json.dumps(v) for k, v in self.hyperparameters.items()}
        hyperparameters.update(sagemaker_program=json.dumps(self.entry_point), sagemaker_submit_directory=json.dumps(str(self.code_dir)),
                               sagemaker_job_name=json.dumps(self.name))
        _write_json(config / "hyperparameters.json", hyperparameters)
        _write_json(config / "inputdataconfig.json", channels)
        for sub in ("model", "output/data", "code"):
            (host.base_dir / sub).mkdir(parents=True, exist_ok=True)

    # -- processes -----------------------------------------------------------
    def start(self) -> None:
        if not self.hosts:
            self.prepare()
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SAGEMAKER_"))}
        pythonpath = os.pathsep.join(filter(None, [os.getcwd(), base_env.get("PYTHONPATH")]))
        for host in self.hosts:
            env = {**base_env, **self.environment, "SAGEMAKER_BASE_DIR": str(host.base_dir),
                   HOSTS_FILE_ENV: str(self.job_dir / "hosts"), "TRAINING_JOB_NAME": self.name,
                   "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath}
            cpus = host.group.cpus
            host.process = subprocess.Popen(
                [sys.executable, self.entry_point], cwd=self.code_dir, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=(lambda cpus=cpus: os.sched_setaffinity(0, cpus)) if cpus else None,
            )
            reader = threading.Thread(target=self._pump, args=(host,), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _pump(self, host: Host) -> None:
        log = (host.base_dir / "output" / "host.log").open("w")
        with log:
            for raw in host.process.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                log.write(line + "\n")
                if self.on_line:
                    self.on_line(host, line)

    def wait(self) -> JobResult:
        started = time.monotonic()
        failed_at = None
        failure = None
        while True:
            now = time.monotonic()
            for host in self.hosts:
                if host.exit_code is None and host.process.poll() is not None:
                    host.exit_code, host.ended_at = host.process.returncode, now
                    if host.exit_code != 0 and failure is None:
                        failure, failed_at = self._describe(host), now
            running = [h for h in self.hosts if h.exit_code is None]
            if not running:
                break
            if failed_at is not None and now - failed_at > self.grace_s:
                self._stop(running)
            if self.timeout_s is not None and now - started > self.timeout_s and failure is None:
                failure, failed_at = f"step {self.name}: still running after {self.timeout_s:g} s; stopped", now
                self._stop(running)
            time.sleep(0.05)
        self.close()
        return self._result(failure, time.monotonic() - started)

    def _describe(self, host: Host) -> str:
        code = host.exit_code
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        reason = host.failure or "no failure file; see its log"
        return f"step {self.name}: host {host.name} ({host.group.name}, {host.role}) {how}: {reason} [log: {host.base_dir / 'output' / 'host.log'}]"

    def _stop(self, hosts: list[Host]) -> None:
        for host in hosts:
            if host.process.poll() is None:
                host.stopped_by_emulator = True
                _signal_group(host.process, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(h.process.poll() is None for h in hosts):
            time.sleep(0.05)
        for host in hosts:
            _signal_group(host.process, signal.SIGKILL)

    def close(self) -> None:
        """Stop every process of the job (and its children). Safe to call twice."""
        live = [h for h in self.hosts if h.process is not None]
        self._stop([h for h in live if h.process.poll() is None])
        for host in live:
            _signal_group(host.process, signal.SIGKILL)  # orphaned workers of hosts that did exit
            host.process.wait()
            if host.exit_code is None:
                host.exit_code = host.process.returncode
        for reader in self._readers:
            reader.join(timeout=5)

    def _result(self, failure: str | None, wall_s: float) -> JobResult:
        merged = self.job_dir / "model"
        output = self.job_dir / "output" / "data"
        for host in self.hosts:
            for src, dst in ((host.base_dir / "model", merged), (host.base_dir / "output" / "data", output)):
                if src.is_dir():
                    shutil.copytree(src, dst, dirs_exist_ok=True)
        return JobResult(self.name, self.job_dir, self.hosts, failure, merged, output, wall_s)

    def __enter__(self) -> "EmulatedJob":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_training_job(**kwargs) -> JobResult:
    """Prepare, start and wait for an `EmulatedJob`; raises `StepFailed` if any host failed."""
    with EmulatedJob(**kwargs) as job:
        job.start()
        result = job.wait()
    if not result.ok:
        raise StepFailed(result.failure)
    return result
