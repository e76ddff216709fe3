"""A SageMaker training job, heterogeneous or not, emulated on one machine from its CreateTrainingJob request.

The request is the one the pipeline definition carries, with every expression evaluated and every location an
``s3://local/...`` URI (`pipeline.storage`); it is the emulator's only description of the job. `EmulatedJob` runs it:

* lays out what each host's container sees under ``/opt/ml`` (`pipeline.emulator.layout`), its checkpoints restored
  (`pipeline.emulator.checkpoints`); a request with ``EnableNetworkIsolation`` that names an s3:// location the
  container would fetch at run time is refused before any host starts (`pipeline.emulator.isolation`);
* starts one process per host (its own session, so its DataLoader workers go with it) with the environment its
  container would have and none of the caller's (`pipeline.emulator.container_env`: the image's ENV, the request's
  ``Environment``, SageMaker's variables, then the twin's own, ``SAGEMAKER_BASE_DIR`` among them, and ``extra_env``),
  its own loopback address (`pipeline.emulator.hosts`), optionally its own CPU set standing in for its instance's
  vCPUs, its volume (`pipeline.emulator.volumes`) and a faulted link (`pipeline.emulator.links`). Every host has
  ``HETERO_EMULATED_HOST`` set: its instance type's GPUs are not there. A host imports what its container would, and
  nothing of the caller's (its folder, its PYTHONPATH): the image's packages (`pipeline.emulator.image_guard`), the
  code, and what the code's ``requirements.txt`` installed when the request's ContainerEntrypoint ran the training
  toolkit's install (a container's pip installs into the image's Python; a host's into
  ``<job_dir>/site-packages/<host>``, `image_guard.pip_into`). In plain script mode the emulator runs the entry point
  directly, without that install. ``late_hostnames_s`` emulates a cluster whose host names do not resolve at first
  (SageMaker's guide warns of it): each host's entry appears in the hosts file at its own time, the last that many
  seconds after the hosts start;
* watches them: like SageMaker, the job ends when every host has exited, or when
  ``StoppingCondition.MaxRuntimeInSeconds`` has passed; and, unlike SageMaker, when none of its hosts has reported
  progress for ``progress_timeout_s`` (`pipeline.emulator.failures`). When one host fails, the others get ``grace_s``
  to exit on their own (the step code must make them) before the emulator stops them (SIGTERM, then SIGKILL
  `pipeline.emulator.hosts.STOP_WAIT_S` later); every process is gone when `EmulatedJob` is closed, whatever happened,
  and so is each host's temp dir (``TMPDIR``, its instance's /tmp, which goes with the instance however it ends);
* restarts it after a spot interruption, ``interrupt_after_steps`` (`pipeline.emulator.interruption`);
* packs its results (`pipeline.emulator.results`).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.emulator import checkpoints, failures, image_guard, interruption, layout, links, results, volumes
from pipeline.emulator.container_env import training_host_env
from pipeline.emulator.failures import PROGRESS_LINE, PROGRESS_TIMEOUT_S, STEP_LINE
from pipeline.emulator.hosts import CONTAINER_ROOT, Channel, Host, instance_groups, role, signal_group, stop_hosts, write_hosts
from pipeline.emulator.isolation import refuse_training_fetches
from pipeline.emulator.results import JobResult
from pipeline.emulator.sessions import start_session
from pipeline.stop import STOP
from steps.common.errors import UserError
from steps.contract import CHECKPOINT_LOCAL_PATH, DATA_GROUP

SITE_PACKAGES = "site-packages"  # <job_dir>/site-packages/<host>: what pip installs on a host (its container's own)


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
    image_guard: bool = True  # each host imports only its image's packages (pipeline.emulator.image_guard)
    volume_scale: float | None = (
        1.0  # a GB of a host's volume is this many GiB here (`pipeline.emulator.volumes`; None: not enforced)
    )
    echo: Callable[[str], None] = print  # the emulator's own lines
    region: str = "us-east-1"  # where the job runs (its hosts' AWS_REGION, TRAINING_JOB_ARN): the local runner's
    extra_env: dict | None = None  # variables the twin gives every host for itself (the call ledger's notes file)
    network_faults: bool = False  # each host in a cgroup of its own, so `degrade` can fault its link (`pipeline.emulator.links`)
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
        self.groups = instance_groups(self.request, self.cpus)
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
            refuse_training_fetches(self.request, step=self.step)

    def role_of(self, group: str) -> str:
        return role(group, len(self.groups), self.hyperparameters.get("data_group", DATA_GROUP))

    # -- layout --------------------------------------------------------------
    def prepare(self) -> None:
        """Each host's folder as its container sees it (`pipeline.emulator.layout`), its checkpoints restored."""
        if self.job_dir.exists():
            shutil.rmtree(self.job_dir)
        rng = random.Random(None if self.seed is None else self.seed + self.interruptions)
        self.hosts.extend(layout.deal_hosts(self.groups, self.job_dir, rng, self.role_of))
        self.job_dir.mkdir(parents=True)
        if not self.late_hostnames_s:
            write_hosts(self.job_dir / "hosts", self.hosts)
        provisioned = layout.provision_channels(self.channels, self.hosts, self.groups)
        for host in self.hosts:
            layout.write_config(
                host,
                hosts=self.hosts,
                groups=self.groups,
                hyperparameters=self.hyperparameters,
                job_name=self.name,
                channels=provisioned[host.name],
            )
            layout.unpack_code(layout.code_of(host, self.hyperparameters), host.base_dir / "code")
            checkpoints.restore(self.checkpoints, host)
        if self.volume_scale is not None:
            self._volume_plan = volumes.plan(self.request, self.hosts)
            volumes.check_downloads(self._volume_plan, self.volume_scale, step=self.step)

    def _save_checkpoints(self) -> None:
        checkpoints.save(self.checkpoints, self.hosts)

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
            # a host imports what a container has: the image's packages (the guard goes first, pipeline.emulator.image_guard), the
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
                host.process = start_session(
                    command, cwd=code, env=env, preexec_fn=enter if cpus or cgroup or self._volumes.enforced else None
                )
                reader = threading.Thread(target=self._pump, args=(host,), daemon=True)
                reader.start()
                self._readers.append(reader)
        if self.late_hostnames_s:
            self._publish_names_late(self.late_hostnames_s)

    def degrade(self, host: Host, fault: links.LinkFault | None) -> None:
        """``host``'s link from now on: ``fault`` (`pipeline.emulator.links`), or healthy again (None); the job must have been
        started with ``network_faults``."""
        if not self.network_faults:
            raise RuntimeError(f"job {self.name}: give it network_faults=True to fault a host's link")
        self._open_links().set(host.name, fault)
        self.echo(f"network: {host.name} ({host.group.name}, {host.role}) {fault or links.LinkFault()}")

    def _open_links(self) -> links.Links:
        """The job's links (`pipeline.emulator.links`), with a cgroup for each host: a fault may be set before the hosts start."""
        if not self.hosts:
            self.prepare()
        if self._links is None:
            with STOP.deferred():  # a stop now is raised once the links are kept: `close` removes them
                self._links = links.Links.open()
        for host in self.hosts:
            self._links.cgroup_procs(host.name, host.address)
        return self._links

    def link_counters(self) -> dict[str, dict[str, int]]:
        """Packets each faulted host's link rules dropped, lost or delayed so far, or until the job was closed
        (`pipeline.emulator.links.Links.counters`)."""
        return self._links.counters() if self._links else self._link_counts

    def _mount_volumes(self) -> None:
        """Each host's volume (`pipeline.emulator.volumes`), said once per job: its size per group, or why it is not enforced."""
        if not self._volume_plan or self.volume_scale is None:  # a plan is made for a volume scale (`prepare`)
            return
        self._volumes = volumes.Volumes.mount(self._volume_plan, self.hosts, self.volume_scale)
        for host in self.hosts:
            host.view = self._volumes.live_dir(host.base_dir) if self._volumes.enforced else None
        sizes = {v.group: v.describe(self.volume_scale) for v in self._volume_plan}
        enforced = "" if self._volumes.enforced else f"; not enforced: {self._volumes.reason}"
        self.echo(f"volume per host: {', '.join(f'{g} {d}' for g, d in sizes.items())}{enforced}")

    def _publish_names_late(self, after_s: float) -> None:
        rng = random.Random(None if self.seed is None else self.seed + self.interruptions)
        self._names_stop, thread = layout.publish_names_late(self.hosts, self.job_dir / "hosts", rng, after_s)
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
            for raw in host.popen.stdout or ():  # stdout=PIPE: always a stream
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

    def interrupt(self) -> None:
        """A spot interruption as soon as `wait` sees it, then the restart (once per job): what ``interrupt_after_steps``
        triggers, for a caller that decides the moment itself."""
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
            exited = [h for h in self.hosts if h.exit_code is None and h.popen.poll() is not None]
            for host in exited:
                host.exit_code, host.ended_at = host.popen.returncode, now
            failed = [h for h in exited if h.exit_code != 0]
            if failed and failure is None:
                # hosts that ended together (a killed host and the peer that saw it go): the one whose failure blames
                # no other host is the cause, whatever order the hosts are listed in
                failed.sort(key=lambda h: failures.blamed(h, self.hosts) is not None)
                failure, failed_at, failed_in_order = self._describe(failed[0]), now, [failed[0]]
            failed_in_order += [h for h in failed if failed_in_order and h not in failed_in_order]
            running = [h for h in self.hosts if h.exit_code is None]
            if not running:
                break
            if failed_at is not None and now - failed_at > self.grace_s:
                stop_hosts(running)
            if self.timeout_s is not None and now - started > self.timeout_s and failure is None:
                failure, failed_at = f"step {self.step}: still running after {self.timeout_s:g} s; stopped", now
                stop_hosts(running)
            if self.progress_timeout_s and failure is None and (stuck := self._stuck(now, self.progress_timeout_s)):
                failure, failed_at = stuck, now
                stop_hosts(running)
            time.sleep(0.05)
        if failed_in_order:  # the job's failure is a host's
            failure = self._describe(failures.cause(failed_in_order, self.hosts))
        self.close()
        self._save_checkpoints()
        return self._result(failure, time.monotonic() - started)

    def _stuck(self, now: float, timeout_s: float) -> str | None:
        return failures.stuck(self.hosts, now, timeout_s=timeout_s, step=self.step)

    def _interrupt_and_restart(self) -> None:
        """A spot interruption (`pipeline.emulator.interruption`), then the same job again on fresh hosts (names dealt
        anew) that find the checkpoints where the first ones left them."""
        live = [h for h in self.hosts if h.popen.poll() is None]
        if not live:  # the job ended before the interruption came: nothing to interrupt
            return
        self.interruptions += 1
        reach = self.signals_reach_entry_point
        exited = interruption.signal_and_wait(live, grace_s=self.grace_s, signals_reach_entry_point=reach)
        self.close()  # what did not exit in time, and every host's leftover children
        self.interrupted = interruption.record(live, exited, signals_reach_entry_point=reach)
        self._save_checkpoints()
        interruption.keep_attempt(self.job_dir, self.interruptions)
        self.hosts, self._readers = [], []
        self.prepare()
        self.start()

    def _describe(self, host: Host) -> str:
        return failures.describe(
            host, self.hosts, step=self.step, job_dir=self.job_dir, volume_plan=self._volume_plan, volume_scale=self.volume_scale
        )

    def close(self) -> None:
        """Stop every process of the job (and its children). Safe to call twice."""
        self._names_stop.set()
        live = [h for h in self.hosts if h.process is not None]
        stop_hosts([h for h in live if h.popen.poll() is None])
        for host in live:
            signal_group(host.popen, signal.SIGKILL)  # orphaned workers of hosts that did exit
            host.popen.wait()
            if host.exit_code is None:
                host.exit_code = host.popen.returncode
        self._volumes.unmount(self.hosts)
        if self._links is not None:
            try:
                self._link_counts = self._links.counters()
            finally:  # the rules, cgroups and delay processes go even if the counters cannot be read
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
        merged, output, artifacts = results.pack(
            name=self.name, request=self.request, job_dir=self.job_dir, hosts=self.hosts, failed=failure is not None
        )
        return JobResult(
            self.name, self.job_dir, self.hosts, failure, merged, output, artifacts, wall_s, self.interruptions, self.interrupted
        )

    def __enter__(self) -> EmulatedJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
