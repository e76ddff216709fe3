"""The hosts of an emulated training job: its instance groups, its channels as the request names them, each host (a
process standing in for an instance), the cluster's name service, and how the emulator stops a host.

Host names algo-N are dealt randomly across groups, as SageMaker does (`pipeline.emulator.layout`); each host has its own
loopback address (127.X.Y.N, one /24 per job, so fixed ports never collide across jobs).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import storage
from pipeline.emulator.sessions import kill_session
from pipeline.stop import STOP
from steps.contract import DATA_GROUP, FAILURE_FILE

HOMOGENEOUS_GROUP = "homogeneousCluster"  # the group SageMaker names when a request has no InstanceGroups
CONTAINER_ROOT = "/opt/ml/"  # what a host's base folder stands for
HOST_NAME = re.compile(r"\balgo-\d+\b")  # SageMaker's host names
STOP_WAIT_S = 5.0  # a host the emulator stops gets SIGTERM, and SIGKILL this long after


@dataclass(frozen=True)
class InstanceGroup:
    name: str
    instance_type: str
    count: int
    cpus: tuple[int, ...] | None = None  # CPU set shared by the group's hosts; None: no pinning


@dataclass(frozen=True)
class Channel:
    name: str
    objects: tuple[tuple[str, Path], ...]  # (key, path) of each object, by key
    distribution: str  # ShardedByS3Key, FullyReplicated, or "FileSystem" (mounted whole on every host)
    instance_groups: tuple[str, ...] | None  # None: every group
    input_mode: str
    mount: Path | None = None  # a file-system channel's directory

    @classmethod
    def from_request(cls, channel: dict) -> Channel:
        source = channel["DataSource"]
        mode = channel.get("InputMode", "File")
        if "FileSystemDataSource" in source:
            directory = Path(source["FileSystemDataSource"]["DirectoryPath"])
            return cls(channel["ChannelName"], (), "FileSystem", None, mode, directory)
        s3 = source["S3DataSource"]
        groups = tuple(s3["InstanceGroupNames"]) if s3.get("InstanceGroupNames") else None
        return cls(
            channel["ChannelName"],
            tuple(storage.objects(s3["S3Uri"])),
            s3.get("S3DataDistributionType", "FullyReplicated"),
            groups,
            mode,
        )


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
    checkpoints_restored: dict = field(default_factory=dict)  # relative path -> (mtime, size) as restored
    progress_at: float | None = None  # when it last reported progress (a PROGRESS_LINE), or started
    progress_line: str = ""  # that line
    view: Path | None = None  # its folder as its processes see it, while its volume is mounted (`pipeline.emulator.volumes`)
    temp_dir: Path | None = None  # its TMPDIR, removed with the job

    @property
    def popen(self) -> subprocess.Popen:
        """Its process, once started (`EmulatedJob.start`)."""
        if self.process is None:
            raise RuntimeError(f"host {self.name}: not started")
        return self.process

    @property
    def failure(self) -> str:
        path = (self.view or self.base_dir) / "output" / FAILURE_FILE
        return path.read_text().strip() if path.is_file() else ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def instance_groups(request: dict, cpus: dict | None) -> list[InstanceGroup]:
    """The request's instance groups (SageMaker's one homogeneous group where it names none), each with the CPU set of
    its hosts' role in ``cpus``."""
    rc = request["ResourceConfig"]
    specs = rc.get("InstanceGroups") or [
        {"InstanceGroupName": HOMOGENEOUS_GROUP, "InstanceType": rc["InstanceType"], "InstanceCount": rc["InstanceCount"]}
    ]
    data_group = request.get("HyperParameters", {}).get("data_group", DATA_GROUP)
    return [
        InstanceGroup(
            g["InstanceGroupName"],
            g["InstanceType"],
            int(g["InstanceCount"]),
            (cpus or {}).get(role(g["InstanceGroupName"], len(specs), data_group)),
        )
        for g in specs
    ]


def role(group: str, group_count: int, data_group: str) -> str:
    """What the launcher will run on a group's hosts: the data service on the data group of a heterogeneous job."""
    return "data" if group_count > 1 and group == data_group else "trainer"


def write_hosts(path: Path, hosts: list[Host]) -> None:
    """The emulated cluster's name service (HOSTS_FILE_ENV), replaced whole: a host never reads half a file."""
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text("".join(f"{h.address} {h.name}\n" for h in sorted(hosts, key=lambda h: int(h.name.split("-")[1]))))
    os.replace(partial, path)


def stop_hosts(hosts: list[Host]) -> None:
    """SIGTERM to each host still running, SIGKILL to all of them `STOP_WAIT_S` later (at once after a second stop
    signal of the run: `pipeline.stop`)."""
    for host in hosts:
        if host.popen.poll() is None:
            host.stopped_by_emulator = True
            signal_group(host.popen, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline and not STOP.hurried and any(h.popen.poll() is None for h in hosts):
        time.sleep(0.05)  # a second stop signal of the run (`pipeline.stop`) cuts this wait short
    for host in hosts:
        signal_group(host.popen, signal.SIGKILL)


def send_signal(process: subprocess.Popen, sig: int) -> None:
    try:
        process.send_signal(sig)
    except ProcessLookupError:
        pass


def signal_group(process: subprocess.Popen, sig: int) -> None:
    """``sig`` to a host's process group; SIGKILL to its whole session too (`pipeline.emulator.sessions`: Ray's workers
    lead groups of their own)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    if sig == signal.SIGKILL:
        kill_session(process.pid)
