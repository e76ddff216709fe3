"""Emulated training jobs as the tests and the fault bench build and watch them.

A CreateTrainingJob request in the form a pipeline step carries it (local folders as S3 prefixes,
channels assigned to instance groups as the pipeline assigns them), a two-group job that trains
until stopped, and the process and port views that check nothing outlives a job. Used by
``tests/`` and ``bench/faults.py``; needs psutil (a dev dependency).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

import psutil

from pipeline import storage
from pipeline.emulator.hosts import Host
from pipeline.emulator.job import EmulatedJob
from pipeline.emulator.results import JobResult
from pipeline.emulator.sessions import kill_session, session_members
from pipeline.graph import resolve_parameters
from pipeline.local.runner import LocalRunner
from pipeline.local.settings import LocalOptions, local_training_image
from pipeline.sagemaker.settings import CODE_CHANNEL_DIR, TRAINING_ENTRYPOINT
from steps.contract import (
    CHECKPOINT_LOCAL_PATH,
    CODE_CHANNEL,
    DATA_GROUP,
    DNN_GROUP,
    HOSTS_FILE_ENV,
    HYBRID_CHANNEL,
    MANIFEST_FILE,
    REPLICATED,
    SECRET_CHANNEL,
    SECRET_FILE,
    SHARDED,
    TRAIN_ENTRY_POINT,
)
from steps.shard.job_secret import write_job_secret


def s3_channel(
    name: str, source: Path, *, distribution: str = REPLICATED, groups: tuple[str, ...] | None = None, input_mode: str = "File"
) -> dict:
    """One InputDataConfig entry reading a local folder (or file) as an S3 prefix."""
    s3 = {"S3DataType": "S3Prefix", "S3Uri": storage.uri(source), "S3DataDistributionType": distribution}
    if groups:
        s3["InstanceGroupNames"] = list(groups)
    return {"ChannelName": name, "DataSource": {"S3DataSource": s3}, "InputMode": input_mode}


def training_request(
    *,
    code_uri: str,
    output: Path,
    groups: list[tuple[str, str, int]],
    channels: list[dict],
    hyperparameters: dict,
    environment: dict | None = None,
    max_runtime_s: int = 3600,
) -> dict:
    """A CreateTrainingJob request as a pipeline step carries it (every value a string where the API wants one)."""
    hp = {k: v if isinstance(v, str) else json.dumps(v) for k, v in hyperparameters.items()}
    framework = hyperparameters.get("framework", "pytorch")  # the image the pipeline gives its training jobs
    image = local_training_image(framework)
    return {
        "AlgorithmSpecification": {
            "TrainingImage": image,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": list(TRAINING_ENTRYPOINT),
        },
        "RoleArn": "arn:aws:iam::000000000000:role/hetero-local",
        "ResourceConfig": {
            "InstanceGroups": [{"InstanceGroupName": n, "InstanceType": t, "InstanceCount": c} for n, t, c in groups],
            "VolumeSizeInGB": 100,
        },
        "InputDataConfig": channels,
        "OutputDataConfig": {"S3OutputPath": storage.uri(output)},
        "StoppingCondition": {"MaxRuntimeInSeconds": max_runtime_s},
        "HyperParameters": {**hp, "sagemaker_program": TRAIN_ENTRY_POINT, "sagemaker_submit_directory": code_uri},
        "Environment": environment or {},
    }


def secret_channel(tmp_path: Path, *, groups: tuple[str, ...] = (DATA_GROUP, DNN_GROUP)) -> dict:
    """The ``secret`` channel as the pipeline gives it: a fresh job secret, written as the Shard step writes it, in a new
    0700 folder under ``tmp_path`` (one per job: jobs never share a secret)."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path, prefix="secret-"))
    write_job_secret(folder)
    return s3_channel(SECRET_CHANNEL, folder, groups=groups)


def job_secret_of(job: EmulatedJob) -> bytes:
    """The secret the job's ``secret`` channel holds."""
    (channel,) = [c for c in job.channels if c.name == SECRET_CHANNEL]
    return dict(channel.objects)[SECRET_FILE].read_bytes().strip()


def isolate(request: dict) -> dict:
    """``request`` as the pipeline compiles it with network isolation: the code as the ``code`` channel on every group,
    ``sagemaker_submit_directory`` its file in the container."""
    code = request["HyperParameters"]["sagemaker_submit_directory"]
    groups = tuple(g["InstanceGroupName"] for g in request["ResourceConfig"]["InstanceGroups"])
    request["InputDataConfig"].append(s3_channel(CODE_CHANNEL, storage.path(code), groups=groups))
    request["HyperParameters"]["sagemaker_submit_directory"] = f"{CODE_CHANNEL_DIR}/{storage.path(code).name}"
    request["EnableNetworkIsolation"] = True
    return request


def children() -> list[psutil.Process]:
    return [
        p for p in psutil.Process(os.getpid()).children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ]


def listeners(processes: Iterable[psutil.Process]) -> set[tuple[str, int]]:
    """The TCP addresses ``processes`` listen on (one that exited meanwhile counts none)."""
    found = set()
    for process in processes:
        try:
            found |= {(c.laddr.ip, c.laddr.port) for c in process.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:  # exited meanwhile
            pass
    return found


def host_processes(host: Host) -> list[psutil.Process]:
    """An emulated host's process and all it started (TensorFlow servers, a local tf.data.service worker, Ray's GCS,
    raylets and workers)."""
    root = psutil.Process(host.process.pid)
    return [root, *root.children(recursive=True)]


def own_listening_ports() -> set[int]:
    """TCP ports listened on by this process and its descendants: what a test run could leave open
    (whatever else the machine, or a parallel test worker, listens on is not counted)."""
    return {port for _, port in listeners([psutil.Process(os.getpid()), *children()])}


def listeners_on(jobs: Iterable[EmulatedJob]) -> set[tuple[str, int]]:
    """Sockets listening, anywhere on this machine, on an address of the emulated jobs' hosts (each job has its
    own 127.X.Y.0/24): catches a host process that outlived its job even outside this process tree."""
    addresses = {h.address for job in jobs for h in job.hosts}
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.ip in addresses
    }


def confinement_breaches(job: EmulatedJob, *, host_local: tuple[str, ...] = ()) -> list[str]:
    """What breaks a host's confinement (steps.train.dataplane.bind_guard), for every process of every host (the host process
    and all it started: TensorFlow servers, a local tf.data.service worker, Ray's GCS, raylets and workers): a listener
    on any address but the host's own (or one of ``host_local``, addresses a real instance reaches only from itself),
    a host with no listener on its own address, one of its ports answering on another address of this machine, the
    job secret in a process's environment, and the host's copy of the secret still on disk (the launcher removes it once
    read: a dataset graph could read the file). Empty: confined."""
    breaches = []
    secret = job_secret_of(job)
    for host in job.hosts:
        processes = host_processes(host)
        listening = listeners(processes)
        for process in processes:
            try:
                if secret in Path(f"/proc/{process.pid}/environ").read_bytes():
                    breaches.append(f"{host.name}: the job secret is in the environment of {process.pid} {process.name()}")
            except (psutil.Error, FileNotFoundError, ProcessLookupError):  # exited meanwhile
                continue
        if os.path.lexists((host.view or host.base_dir) / "input" / "data" / SECRET_CHANNEL / SECRET_FILE):  # as the host sees it
            breaches.append(f"{host.name}: its copy of the job secret is still in its {SECRET_CHANNEL!r} channel")
        own = {host.address, f"::ffff:{host.address}"}
        allowed = own | set(host_local) | {f"::ffff:{a}" for a in host_local}
        if not {ip for ip, _ in listening} & own:
            breaches.append(f"{host.name}: nothing listens on its own address {host.address}: {sorted(listening)}")
        breaches += [f"{host.name}: listens on {ip}:{port}" for ip, port in sorted(listening) if ip not in allowed]
        for port in sorted({port for ip, port in listening if ip in own}):
            try:  # 127.0.0.2: another address of this machine, never an emulated host's (127.X.Y.N, X >= 1)
                socket.create_connection(("127.0.0.2", port), timeout=5).close()
                breaches.append(f"{host.name}: port {port} answers on 127.0.0.2 too")
            except ConnectionRefusedError:
                pass
    return breaches


def two_group_request(
    tmp_path: Path,
    shards: Path,
    code_uri: str,
    *,
    data: int,
    hyperparameters: dict,
    distribution: str = SHARDED,
    dnn: int = 1,
    checkpoints: Path | None = None,
    network_isolation: bool = False,
) -> dict:
    """A heterogeneous job on the shard step's output, its channels assigned as the pipeline assigns them (the job
    secret included); ``checkpoints``: the folder its CheckpointConfig.S3Uri stands for; ``network_isolation``: as
    the pipeline compiles it with hetero:networkIsolation (`isolate`)."""
    request = training_request(
        code_uri=code_uri,
        output=tmp_path / "output",
        groups=[(DATA_GROUP, "ml.c5.4xlarge", data), (DNN_GROUP, "ml.g5.xlarge", dnn)],
        channels=[
            s3_channel("train", shards / "train", distribution=distribution, groups=(DATA_GROUP,)),
            s3_channel(HYBRID_CHANNEL, shards / "train", groups=(DNN_GROUP,)),
            s3_channel("validation", shards / "validation", groups=(DNN_GROUP,)),
            s3_channel("manifest", shards / MANIFEST_FILE, groups=(DATA_GROUP, DNN_GROUP)),
            secret_channel(tmp_path),
        ],
        hyperparameters=hyperparameters,
    )
    if checkpoints is not None:
        request["CheckpointConfig"] = {"S3Uri": storage.uri(checkpoints), "LocalPath": CHECKPOINT_LOCAL_PATH}
    if hyperparameters.get("framework") == "ray":
        ray_layout(request)
    return isolate(request) if network_isolation else request


def ray_layout(request: dict) -> dict:
    """``request``'s channels as the pipeline lays them out for Ray: the train channel replicated to both groups (Ray
    Data's read tasks run on any node and open the files the driver listed), no hybrid channel."""
    channels = [c for c in request["InputDataConfig"] if c["ChannelName"] != HYBRID_CHANNEL]
    train = next(c for c in channels if c["ChannelName"] == "train")["DataSource"]["S3DataSource"]
    train.update(S3DataDistributionType=REPLICATED, InstanceGroupNames=[DATA_GROUP, DNN_GROUP])
    request["InputDataConfig"] = channels
    return request


def start_training_job(
    tmp_path: Path,
    shards: Path,
    code_uri: str,
    *,
    silence_timeout_s: float = 30.0,
    data: int = 2,
    dnn: int = 1,
    hyperparameters: dict | None = None,
    grace_s: float = 120.0,
    **job_options,
) -> EmulatedJob:
    """A 2-group emulated job on ``shards`` that trains "forever"; returns once the first step is logged (a Ray cluster
    takes longest to get there). ``job_options``: more of `EmulatedJob`'s fields (``network_faults``)."""
    training = threading.Event()

    def on_line(host, line):
        if "step_time_ms=" in line:
            training.set()

    request = two_group_request(
        tmp_path,
        shards,
        code_uri,
        data=data,
        dnn=dnn,
        hyperparameters={
            "epochs": 1000,
            "batch_size": 8,
            "log_every": 1,
            "workload_options": {"blur_passes": 0},
            "heartbeat_s": 0.5,
            "silence_timeout_s": silence_timeout_s,
            "connect_timeout_s": 60,
            **(hyperparameters or {}),
        },
    )
    job = EmulatedJob(
        name="job", request=request, job_dir=tmp_path / "job", on_line=on_line, grace_s=grace_s, timeout_s=240, **job_options
    )
    job.start()
    if not training.wait(180 if request["HyperParameters"].get("framework") == "ray" else 120):
        job.close()  # every host ended before the error goes up
        raise RuntimeError(f"training never started: see the hosts' logs under {tmp_path / 'job'}")
    return job


def by_role(job: EmulatedJob, role: str) -> list:
    return [h for h in job.hosts if h.role == role]


def fault(host: Host, sig: int) -> None:
    """``sig`` to every process of an emulated host (its session: Ray's workers lead process groups of their own), as a
    fault hits a whole instance: SIGKILL, a lost instance; SIGSTOP, a frozen one; SIGCONT thaws it."""
    if sig == signal.SIGKILL:
        kill_session(host.process.pid)  # until none is left: one may start another meanwhile
        return
    for pid in session_members(host.process.pid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:  # exited meanwhile
            pass


def job_processes(*jobs: EmulatedJob | JobResult) -> list[psutil.Process]:
    """Live processes the hosts of ``jobs`` (EmulatedJob or JobResult) started, wherever they went: each inherits its
    job's hosts file (HOSTS_FILE_ENV) in its environment. A search by command line misses Ray's workers, which rename
    themselves ``ray::<Actor>``, and one by process group the processes that lead groups of their own, as they do."""
    return marked_processes(*(f"{HOSTS_FILE_ENV}={job.job_dir / 'hosts'}" for job in jobs))


RAY_FOLDER = re.compile(
    r"; temp folder (\S+)$", re.M
)  # a Ray node's start line names its folder (steps.train.frameworks.ray.node)


def ray_folders(*job_dirs: Path) -> dict[str, list[Path]]:
    """Host -> the temp folders its Ray nodes said they use, from the host logs under ``job_dirs`` (a job and its
    earlier attempts)."""
    found: dict[str, list[Path]] = {}
    for log in sorted(log for d in job_dirs for log in Path(d).glob("algo-*/output/host.log")):
        found.setdefault(log.parent.parent.name, []).extend(Path(f) for f in RAY_FOLDER.findall(log.read_text(errors="replace")))
    return found


def temp_left(job: EmulatedJob | JobResult, *earlier: Path) -> list[str]:
    """Temp folders the job (and its ``earlier`` attempts' folders) left: a host's TMPDIR (its instance's /tmp), a Ray
    node's folder."""
    folders = [h.temp_dir for h in job.hosts if h.temp_dir is not None]
    folders += [f for listed in ray_folders(job.job_dir, *earlier).values() for f in listed]
    return sorted(str(f) for f in folders if f.exists())


def marked_processes(*markers: str, mentioning: tuple[str, ...] = ()) -> list[psutil.Process]:
    """Live processes (zombies left out) with one of ``markers`` ("NAME=value") in their environment, or whose
    environment mentions one of the ``mentioning`` texts anywhere (a work folder: emulated hosts start from the
    service's environment, not the caller's, so they carry no marker of the caller's, but their folders lie there)."""
    needles = {f"{marker}\0".encode() for marker in markers} | {text.encode() for text in mentioning}
    found = []
    for process in psutil.process_iter():
        try:
            environ = Path(f"/proc/{process.pid}/environ").read_bytes()
            if any(needle in environ for needle in needles) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.Error, OSError):  # exited meanwhile, or another user's
            continue
    return found


# the tiny dataset's pipeline: 1 MB shards (several per host), two epochs, a light decode
TINY_PIPELINE = {"ShardSizeMB": 1, "Epochs": 2, "WorkloadOptions": '{"blur_passes": 1}'}


def tiny_pipeline(work_dir: Path, images: Path, parameters: dict | None = None, **options) -> tuple[LocalRunner, list[str]]:
    """The whole pipeline on ``images`` (the tiny dataset) with `TINY_PIPELINE` under ``parameters``, and the list its
    lines go to; ``options``: `LocalOptions` over a 10 s grace and a 300 s step timeout."""
    lines: list[str] = []
    params = resolve_parameters({"InputData": str(images), **TINY_PIPELINE, **(parameters or {})})
    settings = {"work_dir": work_dir, "grace_s": 10, "step_timeout_s": 300, "echo": lines.append, **options}
    return LocalRunner(params, LocalOptions(**settings)), lines
