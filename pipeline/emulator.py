"""A SageMaker training job, heterogeneous or not, emulated on one machine from its CreateTrainingJob request.

The request is the one the pipeline definition carries, with every expression evaluated
and every location an ``s3://local/...`` URI (`pipeline.storage`); it is the emulator's
only description of the job. Per host it lays out what a container sees under ``/opt/ml``:
``input/config/resourceconfig.json`` from ``ResourceConfig.InstanceGroups``,
``hyperparameters.json`` from ``HyperParameters``, ``inputdataconfig.json`` and the channels
from ``InputDataConfig`` (provisioned only on the groups a channel names, split across hosts
as ShardedByS3Key does, a file-system channel mounted whole), the code from
``sagemaker_submit_directory`` unpacked into ``code/`` (an S3 location, or under network isolation
the host's own copy in the ``code`` channel), and empty ``model/`` and ``output/``. A request with
``EnableNetworkIsolation`` that names an s3:// location the container would fetch at run time is
refused before any host starts (`pipeline.isolation`).
Host names algo-N are dealt randomly across groups, as SageMaker does. Each host is one
process (its own session, so its DataLoader workers go with it) with the environment its container would have and
none of the caller's (`pipeline.container_env`: the image's ENV, the request's ``Environment``, SageMaker's variables,
then the twin's own, ``SAGEMAKER_BASE_DIR`` among them, and ``extra_env``), its own loopback address (127.X.Y.N, one
/24 per job, so fixed ports never collide across jobs) and optionally its own CPU set, standing in for its instance's
vCPUs.

``CheckpointConfig`` works as in SageMaker: its ``S3Uri`` is copied into every host's ``LocalPath``
(``/opt/ml/checkpoints``, under the host's folder) when the job starts, and what the hosts wrote
there is copied back when it ends, however it ends. ``interrupt_after_steps`` emulates a spot
interruption: once a trainer logs that step, every host's first process gets SIGTERM (the request's
``ContainerEntrypoint``; in plain script mode that is the toolkit, which does not pass it on, so the
hosts are killed), has ``grace_s`` to exit, and the job starts again on fresh hosts from its
checkpoints; the first attempt's folders stay beside, as ``<job_dir>.attempt-1``. ``late_hostnames_s``
emulates a cluster whose host names do not resolve at first (SageMaker's guide warns of it): each host's
entry appears in the hosts file at its own time, the last that many seconds after the hosts start.
Every host has ``HETERO_EMULATED_HOST`` set: its instance type's GPUs are not there. A host imports what its
container would, and nothing of the caller's (its folder, its PYTHONPATH): the image's packages (`pipeline.image_guard`),
the code, and what the code's ``requirements.txt`` installed when the request's ContainerEntrypoint ran the training
toolkit's install (a container's pip installs into the image's Python; a host's into ``<job_dir>/site-packages/<host>``,
`image_guard.pip_into`). In plain script mode the emulator runs the entry point directly, without that install.

Like SageMaker, the job ends when every host has exited, or when
``StoppingCondition.MaxRuntimeInSeconds`` has passed; and, unlike SageMaker, when none of its hosts has
reported progress (a status or metric line of the step code, `PROGRESS_LINE`) for ``progress_timeout_s``:
it fails naming the hosts still running, the one silent longest first, with the last line each reported. When one host fails, the others get
``grace_s`` to exit on their own (the step code must make them) before the emulator stops
them (SIGTERM, then SIGKILL `STOP_WAIT_S` later); every process is gone when `EmulatedJob` is closed, whatever
happened, and so is each host's temp dir (``TMPDIR``, its instance's /tmp, which goes with the instance however it
ends). The job's failure is the first failed host's; where that host's reason blames another host of the job (a
trainer that went silent, a data host lost), the failure leads with the blamed host: a frozen host never exits by
itself, and the first to fail is the peer that noticed. The model and
output folders are packed as ``<S3OutputPath>/<job name>/output/{model,output}.tar.gz``.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import image_guard, links, storage, volumes
from pipeline.container_env import training_host_env
from pipeline.isolation import refuse_s3_fetches
from pipeline.sessions import kill_session
from pipeline.stop import STOP
from steps.common.errors import UserError
from steps.contract import CHECKPOINT_LOCAL_PATH, CODE_CHANNEL, DATA_GROUP, FAILURE_FILE, SHARDED

HOMOGENEOUS_GROUP = "homogeneousCluster"  # the group SageMaker names when a request has no InstanceGroups
CONTAINER_ROOT = "/opt/ml/"  # what a host's base folder stands for
# a trainer's metric line (steps.train.core.metrics); on the Ray path the head's driver prints its workers' lines after
# Ray's "(RayTrainWorker pid=N[, ip=...]) " prefix
STEP_LINE = re.compile(r"^(?:\([\w:.-]+ pid=\d+(?:, ip=[\d.]+)?\) )?\[metrics\] .*\bstep=(\d+)\b")
# a status or metric line of the step code ("[metrics] ...", "[data] ...", "[ray] ...", on the Ray path also after a
# worker's prefix): what the progress watchdog counts. A framework's own output does not: it can repeat while nothing
# advances (Ray Data redraws its progress bars, Ray retries a warning every second)
PROGRESS_LINE = re.compile(r"^(?:\((?:[\w:.-]+ )?pid=\d+(?:, ip=[\d.]+)?\) )?\[[a-z][a-z_-]*\] ")
# no host of a job reporting progress this long: the job is stuck (its longest legitimate silence, start-up, validation
# or the cost measurement at the end, takes seconds to minutes)
PROGRESS_TIMEOUT_S = 600.0
SITE_PACKAGES = "site-packages"  # <job_dir>/site-packages/<host>: what pip installs on a host (its container's own)
STOP_WAIT_S = 5.0  # a host the emulator stops gets SIGTERM, and SIGKILL this long after
HOST_NAME = re.compile(r"\balgo-\d+\b")  # SageMaker's host names


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
    view: Path | None = None  # its folder as its processes see it, while its volume is mounted (`pipeline.volumes`)
    temp_dir: Path | None = None  # its TMPDIR, removed with the job

    @property
    def failure(self) -> str:
        path = (self.view or self.base_dir) / "output" / FAILURE_FILE
        return path.read_text().strip() if path.is_file() else ""


@dataclass
class JobResult:
    name: str
    job_dir: Path
    hosts: list[Host]
    failure: str | None = None
    model_dir: Path | None = None
    output_data_dir: Path | None = None
    model_artifacts: str | None = None  # S3ModelArtifacts
    wall_s: float = 0.0  # every attempt: TrainingTimeInSeconds (BillableTimeInSeconds too: no spot market here)
    interruptions: int = 0
    interrupted: dict | None = None  # the interruption: how long the hosts took to exit after SIGTERM, their exit codes

    @property
    def ok(self) -> bool:
        return self.failure is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2))


def _groups(request: dict, cpus: dict | None) -> list[InstanceGroup]:
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
            (cpus or {}).get(_role(g["InstanceGroupName"], len(specs), data_group)),
        )
        for g in specs
    ]


def _role(group: str, group_count: int, data_group: str) -> str:
    """What the launcher will run on a group's hosts: the data service on the data group of a heterogeneous job."""
    return "data" if group_count > 1 and group == data_group else "trainer"


@dataclass
class EmulatedJob:
    """``request``: CreateTrainingJob's arguments, evaluated, locations bound by `pipeline.storage`.
    ``cpus``: role ("data" / "trainer") -> CPU set of each host of that role."""

    name: str  # TrainingJobName
    request: dict
    job_dir: Path
    step: str = ""  # the pipeline step, for messages
    cpus: dict | None = None
    on_line: Callable[[Host, str], None] | None = None
    grace_s: float = 30.0
    timeout_s: float | None = None  # None: the request's StoppingCondition
    seed: int | None = None
    interrupt_after_steps: int | None = None  # a spot interruption once a trainer logs this step, then a restart
    progress_timeout_s: float | None = PROGRESS_TIMEOUT_S  # no host reporting progress this long: the job fails (None: never)
    late_hostnames_s: float | None = None  # host names resolve only this long after the hosts start (each at its own time)
    image_guard: bool = True  # each host imports only its image's packages (pipeline.image_guard)
    volume_scale: float | None = 1.0  # a GB of a host's volume is this many GiB here (`pipeline.volumes`; None: not enforced)
    echo: Callable[[str], None] = print  # the emulator's own lines
    region: str = "us-east-1"  # where the job runs (its hosts' AWS_REGION, TRAINING_JOB_ARN): the local runner's
    extra_env: dict | None = None  # variables the twin gives every host for itself (the call ledger's notes file)
    network_faults: bool = False  # each host in a cgroup of its own, so `degrade` can fault its link (`pipeline.links`)
    hosts: list[Host] = field(default_factory=list)
    interruptions: int = 0
    interrupted: dict | None = None
    _readers: list = field(default_factory=list)
    _interrupt: threading.Event = field(default_factory=threading.Event)
    _names_stop: threading.Event = field(default_factory=threading.Event)
    _volumes: volumes.Volumes = field(default_factory=lambda: volumes.Volumes(None, [], "not mounted"))
    _volume_plan: list = field(default_factory=list)
    _links: links.Links | None = None
    _link_counts: dict = field(default_factory=dict)  # the links' counters when they were removed

    def __post_init__(self) -> None:
        self.groups = _groups(self.request, self.cpus)
        self.channels = [Channel.from_request(c) for c in self.request.get("InputDataConfig", [])]
        self.hyperparameters = dict(self.request.get("HyperParameters", {}))
        self.environment = dict(self.request.get("Environment", {}))
        self.checkpoints = self.request.get("CheckpointConfig")
        if self.checkpoints and not self.checkpoints.get("LocalPath", CHECKPOINT_LOCAL_PATH).startswith(CONTAINER_ROOT):
            raise UserError(
                f"CheckpointConfig.LocalPath {self.checkpoints['LocalPath']!r}: the emulator lays out only "
                f"{CONTAINER_ROOT}; use {CHECKPOINT_LOCAL_PATH}",
                headline="unsupported request",
            )
        if self.timeout_s is None:
            self.timeout_s = self.request.get("StoppingCondition", {}).get("MaxRuntimeInSeconds")
        self.step = self.step or self.name
        if self.request.get("EnableNetworkIsolation"):
            spec = self.request.get("AlgorithmSpecification", {})
            refuse_s3_fetches(
                step=self.step,
                job="training job",
                fields={
                    **{f"HyperParameters.{k}": v for k, v in self.hyperparameters.items()},
                    **{f"Environment.{k}": v for k, v in self.environment.items()},
                    **{
                        f"AlgorithmSpecification.{k}": spec[k] for k in ("ContainerEntrypoint", "ContainerArguments") if k in spec
                    },
                },
                fix=f"Give the container what it reads as input channels: the code as a {CODE_CHANNEL!r} channel on every instance "
                f"group with sagemaker_submit_directory={CONTAINER_ROOT}input/data/{CODE_CHANNEL}/<file>.tar.gz (what "
                "`hetero run --network-isolation` and hetero:networkIsolation compile), anything else as a channel of its own",
            )

    def role_of(self, group: str) -> str:
        return _role(group, len(self.groups), self.hyperparameters.get("data_group", DATA_GROUP))

    # -- layout --------------------------------------------------------------
    def prepare(self) -> None:
        if self.job_dir.exists():
            shutil.rmtree(self.job_dir)
        total = sum(g.count for g in self.groups)
        names = [f"algo-{i}" for i in range(1, total + 1)]
        rng = random.Random(None if self.seed is None else self.seed + self.interruptions)
        rng.shuffle(names)  # SageMaker deals names randomly across groups
        subnet = f"127.{rng.randint(1, 254)}.{rng.randint(0, 255)}"
        dealt = iter(names)
        for group in self.groups:
            for _ in range(group.count):
                name = next(dealt)
                index = int(name.split("-")[1])
                self.hosts.append(Host(name, group, f"{subnet}.{index}", self.job_dir / name, self.role_of(group.name)))
        self.hosts.sort(key=lambda h: int(h.name.split("-")[1]))
        self.job_dir.mkdir(parents=True)
        if not self.late_hostnames_s:
            _write_hosts(self.job_dir / "hosts", self.hosts)
        provisioned = self._provision_channels()
        for host in self.hosts:
            self._write_config(host, provisioned[host.name])
            self._unpack_code(self._code(host), host.base_dir / "code")
            self._restore_checkpoints(host)
        if self.volume_scale is not None:
            self._volume_plan = volumes.plan(self.request, self.hosts)
            volumes.check_downloads(self._volume_plan, self.volume_scale, step=self.step)

    # -- checkpoints ---------------------------------------------------------
    def _checkpoint_dir(self, host: Host) -> Path:
        local = self.checkpoints.get("LocalPath", CHECKPOINT_LOCAL_PATH)
        return host.base_dir / local[len(CONTAINER_ROOT) :]

    def _restore_checkpoints(self, host: Host) -> None:
        """S3Uri -> every host's LocalPath, as SageMaker does when a job (re)starts."""
        if not self.checkpoints:
            return
        stored = storage.path(self.checkpoints["S3Uri"])
        local = self._checkpoint_dir(host)
        local.mkdir(parents=True, exist_ok=True)
        if stored.is_dir():
            shutil.copytree(stored, local, dirs_exist_ok=True)
        host.checkpoints_restored = _files(local)

    def _save_checkpoints(self) -> None:
        """What each host wrote to its LocalPath -> S3Uri: new and changed files only, as SageMaker's sync uploads
        them (a host that only holds the restored copy must not put it back over a newer one)."""
        if not self.checkpoints:
            return
        stored = storage.path(self.checkpoints["S3Uri"])
        for host in self.hosts:
            local = self._checkpoint_dir(host)
            for relative, stamp in _files(local).items():
                if host.checkpoints_restored.get(relative) != stamp:
                    target = stored / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(local / relative, target)

    def _provision_channels(self) -> dict[str, dict]:
        provisioned: dict[str, dict] = {h.name: {} for h in self.hosts}
        for channel in self.channels:
            groups = channel.instance_groups or tuple(g.name for g in self.groups)
            targets = sorted((h for h in self.hosts if h.group.name in groups), key=lambda h: int(h.name.split("-")[1]))
            if channel.distribution == SHARDED and len(channel.objects) < len(targets):
                raise UserError(
                    f"channel {channel.name!r} has {len(channel.objects)} object(s) for {len(targets)} hosts with ShardedByS3Key, so some "
                    f"hosts would get no data; re-shard for {len(targets)} hosts or use fewer hosts",
                    headline="more hosts than shards",
                )
            for i, host in enumerate(targets):
                channel_dir = host.base_dir / "input" / "data" / channel.name
                if channel.mount is not None:
                    channel_dir.parent.mkdir(parents=True, exist_ok=True)
                    channel_dir.symlink_to(channel.mount)
                else:
                    mine = channel.objects[i :: len(targets)] if channel.distribution == SHARDED else channel.objects
                    storage.link_objects(list(mine), channel_dir)
                config = {"TrainingInputMode": channel.input_mode, "RecordWrapperType": "None"}
                if channel.mount is None:
                    config.update(ContentType="application/x-tar", S3DistributionType=channel.distribution)
                provisioned[host.name][channel.name] = config
        return provisioned

    def _write_config(self, host: Host, channels: dict) -> None:
        config = host.base_dir / "input" / "config"
        _write_json(
            config / "resourceconfig.json",
            {
                "current_host": host.name,
                "current_instance_type": host.group.instance_type,
                "current_group_name": host.group.name,
                "hosts": [h.name for h in self.hosts],
                "instance_groups": [
                    {
                        "instance_group_name": g.name,
                        "instance_type": g.instance_type,
                        "hosts": sorted((h.name for h in self.hosts if h.group is g), key=lambda n: int(n.split("-")[1])),
                    }
                    for g in self.groups
                ],
                "network_interface_name": "lo",
            },
        )
        _write_json(config / "hyperparameters.json", {**self.hyperparameters, "sagemaker_job_name": self.name})
        _write_json(config / "inputdataconfig.json", channels)
        for sub in ("model", "output/data", "code"):
            (host.base_dir / sub).mkdir(parents=True, exist_ok=True)

    def _code(self, host: Host) -> Path:
        """The code ``host`` unpacks: an S3 location, or a path in the host's container (its ``code`` channel's file)."""
        source = self.hyperparameters.get("sagemaker_submit_directory")
        if not source:
            raise UserError(
                "HyperParameters has no sagemaker_submit_directory: script mode needs the code's location", headline="no code"
            )
        if not source.startswith(CONTAINER_ROOT):
            return storage.path(source)
        local = host.base_dir / source[len(CONTAINER_ROOT) :]
        if not local.exists():
            raise UserError(
                f"sagemaker_submit_directory {source!r} is not on host {host.name} ({host.group.name}): no input "
                f"channel put it there; give the job a {CODE_CHANNEL!r} channel holding the code tar.gz on every "
                "instance group, or an s3:// location (without network isolation)",
                headline="no code",
            )
        return local

    @staticmethod
    def _unpack_code(code: Path, destination: Path) -> None:
        if code.is_dir():
            shutil.copytree(code, destination, dirs_exist_ok=True)
            return
        with tarfile.open(code, "r:gz") as tar:
            tar.extractall(destination, filter="data")

    # -- processes -----------------------------------------------------------
    def start(self) -> None:
        STOP.check()  # a stop of the run whose raise was lost: no host starts
        if not self.hosts:
            self.prepare()
        program = self.hyperparameters.get("sagemaker_program", "")
        guard = self._image_guard()
        self._mount_volumes()
        if self.network_faults:
            self._open_links()
        for host in self.hosts:
            STOP.check()
            code = host.base_dir / "code"
            if not (code / program).is_file():
                raise UserError(
                    f"sagemaker_program {program!r} is not in the code at {self.hyperparameters['sagemaker_submit_directory']}",
                    headline="no entry point",
                )
            command = self._command(program)
            # a host imports what a container has: the image's packages (the guard goes first, pipeline.image_guard), the
            # code as shipped (the toolkit runs the program from /opt/ml/code) and what the code's requirements.txt
            # installed; never the caller's folder or PYTHONPATH
            packages = self.job_dir / SITE_PACKAGES / host.name
            with STOP.deferred():  # a stop now is raised once the host's folder is kept: `close` removes it
                host.temp_dir = Path(tempfile.mkdtemp(prefix="hetero-"))  # short: Ray puts unix sockets under it
            env = training_host_env(
                request=self.request,
                job_name=self.name,
                region=self.region,
                base_dir=host.base_dir,
                hosts_file=self.job_dir / "hosts",
                pythonpath=[guard, str(code), str(packages)],
                site_packages=packages,
                temp_dir=host.temp_dir,
                extra_env=self.extra_env,
            )
            cpus = host.group.cpus
            cgroup = self._links.cgroup_procs(host.name, host.address) if self._links else None

            def enter(cpus=cpus, cwd=str(code), cgroup=cgroup) -> None:  # in the host's process, before it executes
                if cgroup:  # first: every process the host starts stays in its cgroup
                    with open(cgroup, "w") as procs:
                        procs.write(str(os.getpid()))
                if cpus:
                    os.sched_setaffinity(0, cpus)
                self._volumes.enter(cwd)

            with STOP.deferred():  # a stop now is raised once the host's process is kept: `close` stops it
                host.process = subprocess.Popen(
                    command,
                    cwd=code,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=enter if cpus or cgroup or self._volumes.enforced else None,
                )
                reader = threading.Thread(target=self._pump, args=(host,), daemon=True)
                reader.start()
                self._readers.append(reader)
        if self.late_hostnames_s:
            self._publish_names_late()

    def degrade(self, host: Host, fault: links.LinkFault | None) -> None:
        """``host``'s link from now on: ``fault`` (`pipeline.links`), or healthy again (None); the job must have been
        started with ``network_faults``."""
        if not self.network_faults:
            raise RuntimeError(f"job {self.name}: give it network_faults=True to fault a host's link")
        self._open_links()
        self._links.set(host.name, fault)
        self.echo(f"network: {host.name} ({host.group.name}, {host.role}) {fault or links.LinkFault()}")

    def _open_links(self) -> None:
        """The job's links (`pipeline.links`), with a cgroup for each host: a fault may be set before the hosts start."""
        if not self.hosts:
            self.prepare()
        if self._links is None:
            with STOP.deferred():  # a stop now is raised once the links are kept: `close` removes them
                self._links = links.Links.open()
        for host in self.hosts:
            self._links.cgroup_procs(host.name, host.address)

    def link_counters(self) -> dict[str, dict[str, int]]:
        """Packets each faulted host's link rules dropped, lost or delayed so far, or until the job was closed
        (`pipeline.links.Links.counters`)."""
        return self._links.counters() if self._links else self._link_counts

    def _mount_volumes(self) -> None:
        """Each host's volume (`pipeline.volumes`), said once per job: its size per group, or why it is not enforced."""
        if not self._volume_plan:
            return
        self._volumes = volumes.Volumes.mount(self._volume_plan, self.hosts, self.volume_scale)
        for host in self.hosts:
            host.view = self._volumes.live_dir(host.base_dir) if self._volumes.enforced else None
        sizes = {v.group: v.describe(self.volume_scale) for v in self._volume_plan}
        enforced = "" if self._volumes.enforced else f"; not enforced: {self._volumes.reason}"
        self.echo(f"volume per host: {', '.join(f'{g} {d}' for g, d in sizes.items())}{enforced}")

    def _publish_names_late(self) -> None:
        """Each host's entry appears in the hosts file at its own time, in random order, the last ``late_hostnames_s``
        after now (the file itself with the first): until then a host finds names missing."""
        hosts = list(self.hosts)
        random.Random(None if self.seed is None else self.seed + self.interruptions).shuffle(hosts)
        stop = self._names_stop = threading.Event()
        started = time.monotonic()

        def publish() -> None:
            for i in range(len(hosts)):
                if stop.wait(max(0.0, started + self.late_hostnames_s * (i + 1) / len(hosts) - time.monotonic())):
                    return
                _write_hosts(self.job_dir / "hosts", hosts[: i + 1])

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        self._readers.append(thread)

    def _image_guard(self) -> str:
        """The folder of the import guard of the job's image (first on every host's PYTHONPATH); "" when it is off."""
        image = self.request.get("AlgorithmSpecification", {}).get("TrainingImage", "")
        return image_guard.guard_path(image, self.job_dir / ".image", enabled=self.image_guard, echo=self.echo)

    def _command(self, program: str) -> list[str]:
        """The container's first process: ``AlgorithmSpecification.ContainerEntrypoint`` + ``ContainerArguments`` (with
        this interpreter for the image's python3), or, in plain script mode, the entry point as the toolkit runs it."""
        spec = self.request.get("AlgorithmSpecification", {})
        entry = spec.get("ContainerEntrypoint")
        if not entry:
            return [sys.executable, program]
        return [
            sys.executable if entry[0] in ("python", "python3") else entry[0],
            *entry[1:],
            *spec.get("ContainerArguments", []),
        ]

    @property
    def signals_reach_entry_point(self) -> bool:
        """A container's first process gets SIGTERM. In plain script mode that is the toolkit, which does not pass it
        on to the entry point (aws/sagemaker-training-toolkit#125); with a ContainerEntrypoint it can be the entry point."""
        return bool(self.request.get("AlgorithmSpecification", {}).get("ContainerEntrypoint"))

    def _pump(self, host: Host) -> None:
        log = (host.base_dir / "output" / "host.log").open("w", buffering=1)  # line by line: readable while the job runs
        host.progress_at = time.monotonic()
        with log:
            for raw in host.process.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                log.write(line + "\n")
                if PROGRESS_LINE.match(line):
                    host.progress_at, host.progress_line = time.monotonic(), line
                if self.on_line:
                    self.on_line(host, line)
                if self.interrupt_after_steps and not self.interruptions and host.role == "trainer":
                    step = STEP_LINE.match(line)
                    if step and int(step.group(1)) >= self.interrupt_after_steps:
                        self._interrupt.set()

    def wait(self) -> JobResult:
        if not self.hosts:
            raise RuntimeError(f"job {self.name}: wait() before start(): no host is running")
        started = time.monotonic()
        failed_at = None
        failure = None
        failed_in_order: list[Host] = []  # once the job's failure is a host's: the failed hosts, in order
        while True:
            STOP.check()  # a stop of the run whose raise was lost: `close` stops every host
            if self._interrupt.is_set() and not self.interruptions:
                self._interrupt.clear()
                self._interrupt_and_restart()
            now = time.monotonic()
            exited = [h for h in self.hosts if h.exit_code is None and h.process.poll() is not None]
            for host in exited:
                host.exit_code, host.ended_at = host.process.returncode, now
            failed = [h for h in exited if h.exit_code != 0]
            if failed and failure is None:
                # hosts that ended together (a killed host and the peer that saw it go): the one whose failure blames
                # no other host is the cause, whatever order the hosts are listed in
                failed.sort(key=lambda h: self._blamed(h) is not None)
                failure, failed_at, failed_in_order = self._describe(failed[0]), now, [failed[0]]
            failed_in_order += [h for h in failed if failed_in_order and h not in failed_in_order]
            running = [h for h in self.hosts if h.exit_code is None]
            if not running:
                break
            if failed_at is not None and now - failed_at > self.grace_s:
                self._stop(running)
            if self.timeout_s is not None and now - started > self.timeout_s and failure is None:
                failure, failed_at = f"step {self.step}: still running after {self.timeout_s:g} s; stopped", now
                self._stop(running)
            if self.progress_timeout_s and failure is None and (stuck := self._stuck(now)):
                failure, failed_at = stuck, now
                self._stop(running)
            time.sleep(0.05)
        if failed_in_order:  # the job's failure is a host's
            failure = self._describe(self._cause(failed_in_order))
        self.close()
        self._save_checkpoints()
        return self._result(failure, time.monotonic() - started)

    def _cause(self, failed: list[Host]) -> Host:
        """Of the failed hosts, in the order they failed, the one whose failure the job's is: the first, unless it
        blames another host and the hosts that failed after it blame a different one more often (a host cut off from
        the others hears from none of them, and the first to give up may be the isolated host, blaming its peer;
        every peer that lost it blames it). The hosts the emulator stopped have no vote."""
        first = failed[0]
        if self._blamed(first) is None:
            return first
        votes = collections.Counter(
            blamed.name for h in failed if not h.stopped_by_emulator and (blamed := self._blamed(h)) is not None
        ).most_common()
        if len(votes) > 1 and votes[0][1] == votes[1][1]:
            return first
        return next(h for h in failed if (blamed := self._blamed(h)) is not None and blamed.name == votes[0][0])

    def _stuck(self, now: float) -> str | None:
        """Why the job is stuck: none of its hosts has reported progress, or exited, for ``progress_timeout_s``; the hosts
        still running, the one silent longest first, each with the last line it reported. None while it advances."""
        running = sorted((h for h in self.hosts if h.exit_code is None), key=lambda h: h.progress_at or now)
        last = max([h.progress_at or now for h in self.hosts] + [h.ended_at for h in self.hosts if h.ended_at is not None])
        if not running or now - last <= self.progress_timeout_s:
            return None
        hosts = "; ".join(
            f"host {h.name} ({h.group.name}, {h.role}) "
            + (
                f"silent {now - h.progress_at:.0f} s since {h.progress_line[:200]!r}"
                if h.progress_line
                else "reported nothing since it started"
            )
            + f" [log: {h.base_dir / 'output' / 'host.log'}]"
            for h in running
        )
        return (
            f"step {self.step}: no host reported progress (a status or metric line of the step code) for "
            f"{self.progress_timeout_s:g} s, so it is stuck: {hosts}; stopped"
        )

    def _interrupt_and_restart(self) -> None:
        """A spot interruption: SIGTERM to every host's entry process, ``grace_s`` to exit, then the same job again
        on fresh hosts (names dealt anew) that find the checkpoints where the first ones left them."""
        live = [h for h in self.hosts if h.process.poll() is None]
        if not live:  # the job ended before the interruption came: nothing to interrupt
            return
        self.interruptions += 1
        signalled = time.monotonic()
        for host in live:
            if self.signals_reach_entry_point:
                _signal(host.process, signal.SIGTERM)
            else:  # script mode: the toolkit holds the signal, and the instance goes when the notice runs out
                _signal_group(host.process, signal.SIGKILL)
        deadline = signalled + self.grace_s
        exited: dict[str, float] = {}
        while time.monotonic() < deadline and len(exited) < len(live):
            STOP.check()
            for host in live:
                if host.name not in exited and host.process.poll() is not None:
                    exited[host.name] = round(time.monotonic() - signalled, 2)
            time.sleep(0.05)
        self.close()  # what did not exit in time, and every host's leftover children
        self.interrupted = {
            "signal": "SIGTERM" if self.signals_reach_entry_point else "none (script mode): killed",
            "hosts_exited_s": exited,
            "all_exited_s": max(exited.values(), default=0.0),
            "stopped_by_emulator": [h.name for h in live if h.name not in exited],
            "exit_codes": {h.name: h.exit_code for h in live},
            "roles": {h.name: h.role for h in live},
        }
        self._save_checkpoints()
        attempt = self.job_dir.with_name(f"{self.job_dir.name}.attempt-{self.interruptions}")
        if attempt.exists():
            shutil.rmtree(attempt)
        self.job_dir.rename(attempt)
        self.hosts, self._readers = [], []
        self.prepare()
        self.start()

    def _describe(self, host: Host) -> str:
        code = host.exit_code
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        log = host.base_dir / "output" / "host.log"
        reason = host.failure or _last_error(log) or "no failure file; see its log"
        image = image_guard.explain(reason if host.failure else _tail(log), self.job_dir / ".image")
        volume = next((v for v in self._volume_plan if v.host == host.name), None)
        full = f" {volumes.full_volume(volume, self.volume_scale)}" if volume and "ENOSPC" in reason else ""
        who, tail = (
            f"host {host.name} ({host.group.name}, {host.role})",
            f"{reason}{full}{' ' + image if image else ''} [log: {log}]",
        )
        blamed = self._blamed(host)
        if blamed is not None:
            return f"step {self.step}: host {blamed.name} ({blamed.group.name}, {blamed.role}) failed, as {who} reports ({how}): {tail}"
        return f"step {self.step}: {who} {how}: {tail}"

    def _blamed(self, host: Host) -> Host | None:
        """The other host of the job that ``host``'s failure names first (the step code's failures lead with the host
        that failed), or None."""
        named = HOST_NAME.search(host.failure)
        return next((h for h in self.hosts if named and h.name == named.group() and h is not host), None)

    def _stop(self, hosts: list[Host]) -> None:
        for host in hosts:
            if host.process.poll() is None:
                host.stopped_by_emulator = True
                _signal_group(host.process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and not STOP.hurried and any(h.process.poll() is None for h in hosts):
            time.sleep(0.05)  # a second stop signal of the run (`pipeline.stop`) cuts this wait short
        for host in hosts:
            _signal_group(host.process, signal.SIGKILL)

    def close(self) -> None:
        """Stop every process of the job (and its children). Safe to call twice."""
        self._names_stop.set()
        live = [h for h in self.hosts if h.process is not None]
        self._stop([h for h in live if h.process.poll() is None])
        for host in live:
            _signal_group(host.process, signal.SIGKILL)  # orphaned workers of hosts that did exit
            host.process.wait()
            if host.exit_code is None:
                host.exit_code = host.process.returncode
        self._volumes.unmount(self.hosts)
        if self._links is not None:
            self._link_counts = self._links.counters()
            self._links.close()
            self._links = None
            for name, counts in self._link_counts.items():
                self.echo(f"network: {name}'s link {', '.join(f'{n} packets {kind}' for kind, n in sorted(counts.items()))}")
        for host in self.hosts:
            host.view = None
            if host.temp_dir is not None:
                shutil.rmtree(host.temp_dir, ignore_errors=True)
        for reader in self._readers:
            reader.join(timeout=5)

    def _result(self, failure: str | None, wall_s: float) -> JobResult:
        merged = self.job_dir / "model"
        output = self.job_dir / "output" / "data"
        for host in self.hosts:
            for src, dst in ((host.base_dir / "model", merged), (host.base_dir / "output" / "data", output)):
                if src.is_dir():
                    shutil.copytree(src, dst, dirs_exist_ok=True)
        artifacts = None
        if failure is None and "OutputDataConfig" in self.request:
            prefix = f"{self.request['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{self.name}/output"
            _pack(merged, storage.path(f"{prefix}/model.tar.gz"))
            _pack(output, storage.path(f"{prefix}/output.tar.gz"))
            artifacts = f"{prefix}/model.tar.gz"
        return JobResult(
            self.name, self.job_dir, self.hosts, failure, merged, output, artifacts, wall_s, self.interruptions, self.interrupted
        )

    def __enter__(self) -> EmulatedJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_hosts(path: Path, hosts: list[Host]) -> None:
    """The emulated cluster's name service (HOSTS_FILE_ENV), replaced whole: a host never reads half a file."""
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text("".join(f"{h.address} {h.name}\n" for h in sorted(hosts, key=lambda h: int(h.name.split("-")[1]))))
    os.replace(partial, path)


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """Whole files under ``folder`` (not one still being written: dot-named) -> (mtime_ns, size)."""
    found = {}
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.is_file() and not path.name.startswith("."):
            stat = path.stat()
            found[path.relative_to(folder).as_posix()] = (stat.st_mtime_ns, stat.st_size)
    return found


def _last_error(log: Path) -> str:
    """The step code's last one-line error in a host's log (`steps.common.errors.run_step`): its reason where the failure
    file could not be written (a full volume has no room for it)."""
    errors = [line[len("ERROR ") :] for line in _tail(log, 50).splitlines() if line.startswith("ERROR ")]
    return errors[-1] if errors else ""


def _tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.is_file() else ""


def _signal(process: subprocess.Popen, sig: int) -> None:
    try:
        process.send_signal(sig)
    except ProcessLookupError:
        pass


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    """``sig`` to a host's process group; SIGKILL to its whole session too (`pipeline.sessions`: Ray's workers lead groups
    of their own)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    if sig == signal.SIGKILL:
        kill_session(process.pid)


def _pack(folder: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(destination, "w:gz") as tar:
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
