from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import psutil
import pytest

from pipeline import storage
from pipeline.code import STEPS_DIR, build_code_tarball
from pipeline.emulator import EmulatedJob
from pipeline.sample_data import generate
from steps.contract import DATA_GROUP, DNN_GROUP, REPLICATED, SECRET_ENV, SHARDED, TRAIN_ENTRY_POINT
from steps.train.auth import new_secret


@pytest.fixture(scope="session")
def tiny_images(tmp_path_factory) -> Path:
    """A small raw dataset, class-per-folder JPEGs, shared by the slow tests."""
    return generate(tmp_path_factory.mktemp("raw") / "images", samples=240, image_size=48, seed=1)


@pytest.fixture(scope="session")
def code_uri(tmp_path_factory) -> str:
    """The step code packed as the pipeline packs it, at its local S3 URI."""
    return storage.uri(build_code_tarball(source=STEPS_DIR, destination=tmp_path_factory.mktemp("code") / "code.tar.gz"))


def s3_channel(name: str, source: Path, *, distribution: str = REPLICATED, groups: tuple[str, ...] | None = None,
               input_mode: str = "File") -> dict:
    """One InputDataConfig entry reading a local folder (or file) as an S3 prefix."""
    s3 = {"S3DataType": "S3Prefix", "S3Uri": storage.uri(source), "S3DataDistributionType": distribution}
    if groups:
        s3["InstanceGroupNames"] = list(groups)
    return {"ChannelName": name, "DataSource": {"S3DataSource": s3}, "InputMode": input_mode}


def training_request(*, code_uri: str, output: Path, groups: list[tuple[str, str, int]], channels: list[dict],
                     hyperparameters: dict, environment: dict | None = None, max_runtime_s: int = 3600) -> dict:
    """A CreateTrainingJob request as a pipeline step carries it (every value a string where the API wants one)."""
    hp = {k: v if isinstance(v, str) else json.dumps(v) for k, v in hyperparameters.items()}
    return {
        "AlgorithmSpecification": {"TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker",
                                   "TrainingInputMode": "File"},
        "RoleArn": "arn:aws:iam::000000000000:role/hetero-local",
        "ResourceConfig": {"InstanceGroups": [{"InstanceGroupName": n, "InstanceType": t, "InstanceCount": c} for n, t, c in groups],
                           "VolumeSizeInGB": 100},
        "InputDataConfig": channels,
        "OutputDataConfig": {"S3OutputPath": storage.uri(output)},
        "StoppingCondition": {"MaxRuntimeInSeconds": max_runtime_s},
        "HyperParameters": {**hp, "sagemaker_program": TRAIN_ENTRY_POINT, "sagemaker_submit_directory": code_uri},
        "Environment": environment or {},
    }


def children() -> list[psutil.Process]:
    return [p for p in psutil.Process(os.getpid()).children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def own_listening_ports() -> set[int]:
    """TCP ports listened on by this process and its descendants: what a test run could leave open
    (whatever else the machine, or a parallel test worker, listens on is not counted)."""
    ports = set()
    for process in [psutil.Process(os.getpid()), *children()]:
        try:
            ports |= {c.laddr.port for c in process.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:  # exited meanwhile
            pass
    return ports


def listeners_on(jobs) -> set[tuple[str, int]]:
    """Sockets listening, anywhere on this machine, on an address of the emulated jobs' hosts (each job has its
    own 127.X.Y.0/24): catches a host process that outlived its job even outside this process tree."""
    addresses = {h.address for job in jobs for h in job.hosts}
    return {(c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.ip in addresses}


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


def two_group_request(tmp_path: Path, shards: Path, code_uri: str, *, data: int, hyperparameters: dict,
                      distribution: str = SHARDED) -> dict:
    """A heterogeneous job on the shard step's output, its channels assigned as the pipeline assigns them."""
    return training_request(
        code_uri=code_uri, output=tmp_path / "output",
        groups=[(DATA_GROUP, "ml.c5.4xlarge", data), (DNN_GROUP, "ml.g5.xlarge", 1)],
        channels=[s3_channel("train", shards / "train", distribution=distribution, groups=(DATA_GROUP,)),
                  s3_channel("validation", shards / "validation", groups=(DNN_GROUP,)),
                  s3_channel("manifest", shards / "manifest.json", groups=(DATA_GROUP, DNN_GROUP))],
        hyperparameters=hyperparameters, environment={SECRET_ENV: new_secret()})


def start_training_job(tmp_path: Path, shards: Path, code_uri: str, *, silence_timeout_s: float = 30.0, data: int = 2,
                       hyperparameters: dict | None = None) -> EmulatedJob:
    """A 2-group emulated job on ``shards`` that trains "forever"; returns once the first step is logged."""
    training = threading.Event()

    def on_line(host, line):
        if "step_time_ms=" in line:
            training.set()

    request = two_group_request(
        tmp_path, shards, code_uri, data=data,
        hyperparameters={"epochs": 1000, "batch_size": 8, "log_every": 1, "workload_options": {"blur_passes": 0},
                         "heartbeat_s": 0.5, "silence_timeout_s": silence_timeout_s, "connect_timeout_s": 60, **(hyperparameters or {})})
    job = EmulatedJob(name="job", request=request, job_dir=tmp_path / "job", on_line=on_line, grace_s=120, timeout_s=240)
    job.start()
    assert training.wait(120), "training never started"
    return job


def by_role(job: EmulatedJob, role: str) -> list:
    return [h for h in job.hosts if h.role == role]



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
