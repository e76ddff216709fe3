"""Network isolation: the code reaches an isolated job as its `code` channel, and the emulators refuse an isolated job
that would fetch anything from S3 inside its container (SageMaker gives it no route out)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import storage
from pipeline.code import build_code_tarball
from pipeline.emulator.isolation import s3_fetches
from pipeline.emulator.job import EmulatedJob
from pipeline.emulator.processing import run_processing_job
from pipeline.sagemaker.settings import TRAINING_BOOTSTRAP
from pipeline.sagemaker.validation import validate_request
from steps.common.errors import UserError
from steps.contract import DATA_GROUP, DNN_GROUP, SHARDED
from tests.support.harness import isolate, s3_channel, secret_channel, training_request


@pytest.fixture
def request_of(tmp_path, code_uri):
    """A two-group request as the pipeline compiles it (every channel assigned), not yet isolated."""
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(2):
        (shards / f"train-{i:05d}.tar").write_bytes(b"x")

    def make(**hyperparameters) -> dict:
        return training_request(
            code_uri=code_uri,
            output=tmp_path / "output",
            groups=[(DATA_GROUP, "ml.c5.4xlarge", 2), (DNN_GROUP, "ml.g5.xlarge", 1)],
            channels=[s3_channel("train", shards, distribution=SHARDED, groups=(DATA_GROUP,)), secret_channel(tmp_path)],
            hyperparameters={"epochs": 1, **hyperparameters},
        )

    return make


def test_an_isolated_job_gets_its_code_from_the_code_channel_on_every_host(tmp_path, request_of):
    request = isolate(request_of())
    validate_request("CreateTrainingJob", request, step="TrainHeterogeneous")  # channels still all assigned: the service takes it
    job = EmulatedJob(name="job", request=request, job_dir=tmp_path / "job")
    job.prepare()
    assert request["HyperParameters"]["sagemaker_submit_directory"] == "/opt/ml/input/data/code/code.tar.gz"
    for host in job.hosts:
        assert (host.base_dir / "input" / "data" / "code" / "code.tar.gz").is_file()  # the host's own copy, from the channel
        assert (host.base_dir / "code" / "steps" / "train" / "launcher.py").is_file()  # unpacked from it


def test_an_isolated_job_that_would_download_its_code_is_refused_with_the_fix(tmp_path, request_of):
    request = request_of()
    request["EnableNetworkIsolation"] = True  # but sagemaker_submit_directory is still an S3 location
    with pytest.raises(UserError, match=r"HyperParameters.sagemaker_submit_directory = 's3://local/.*code.tar.gz'") as caught:
        EmulatedJob(name="job", request=request, job_dir=tmp_path / "job", step="TrainHeterogeneous")
    assert caught.value.headline == "isolated job needs the network"
    assert "step TrainHeterogeneous" in caught.value.message
    assert (
        "'code' channel on every instance group with sagemaker_submit_directory=/opt/ml/input/data/code/<file>.tar.gz"
        in caught.value.message
    )


@pytest.mark.parametrize(
    "where,key,value",
    [
        ("HyperParameters", "workload_options", '{"lookup": "s3://bucket/table.json"}'),  # read by the step code at run time
        ("Environment", "LABELS", "s3://bucket/labels.csv"),
    ],
)
def test_an_isolated_job_refuses_any_other_location_its_code_would_fetch(tmp_path, request_of, where, key, value):
    request = isolate(request_of())
    request[where][key] = value
    with pytest.raises(UserError, match=f"{where}.{key} = "):
        EmulatedJob(name="job", request=request, job_dir=tmp_path / "job")
    del request[where][key]
    EmulatedJob(name="job", request=request, job_dir=tmp_path / "job")  # without it: accepted


def test_an_isolated_job_without_the_code_on_a_group_names_the_host(tmp_path, request_of):
    request = isolate(request_of())
    code = next(c for c in request["InputDataConfig"] if c["ChannelName"] == "code")
    code["DataSource"]["S3DataSource"]["InstanceGroupNames"] = [DATA_GROUP]
    job = EmulatedJob(name="job", request=request, job_dir=tmp_path / "job")
    with pytest.raises(
        UserError,
        match=r"sagemaker_submit_directory '/opt/ml/input/data/code/code.tar.gz' is not on host "
        r"algo-\d \(dnn_group\).*'code' channel",
    ):
        job.prepare()


def test_the_bootstrap_unpacks_the_code_channels_tar_gz_itself(tmp_path, request_of):
    """In SageMaker /opt/ml/code starts empty: the toolkit's download_and_extract (run by settings.TRAINING_BOOTSTRAP)
    unpacks a local tar.gz path as it would a downloaded one, and the entry point runs from the unpacked code."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "probe.py").write_text("import json, os, sys\nprint(json.dumps({'cwd': os.getcwd(), 'argv0': sys.argv[0]}))\n")
    request = isolate(request_of())
    request["InputDataConfig"] = [c for c in request["InputDataConfig"] if c["ChannelName"] != "code"]
    request["InputDataConfig"].append(
        s3_channel(
            "code",
            build_code_tarball(source=source, destination=tmp_path / "c" / "sourcedir.tar.gz"),
            groups=(DATA_GROUP, DNN_GROUP),
        )
    )
    request["HyperParameters"].update(
        sagemaker_program="src/probe.py", sagemaker_submit_directory="/opt/ml/input/data/code/sourcedir.tar.gz"
    )
    job = EmulatedJob(name="job", request=request, job_dir=tmp_path / "job")
    job.prepare()
    host = job.hosts[0]
    for path in sorted((host.base_dir / "code").rglob("*"), reverse=True):  # the container's empty /opt/ml/code
        path.rmdir() if path.is_dir() else path.unlink()
    config = host.base_dir / "input" / "config" / "hyperparameters.json"  # /opt/ml is the host's folder here
    hyperparameters = json.loads(config.read_text())
    hyperparameters["sagemaker_submit_directory"] = str(host.base_dir / "input" / "data" / "code" / "sourcedir.tar.gz")
    config.write_text(json.dumps(hyperparameters))
    env = {"SAGEMAKER_BASE_DIR": str(host.base_dir), "PATH": os.environ["PATH"], "AWS_EC2_METADATA_DISABLED": "true"}
    out = subprocess.run([sys.executable, "-c", TRAINING_BOOTSTRAP], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ran = json.loads(out.stdout.strip().splitlines()[-1])
    assert ran == {"cwd": str(host.base_dir / "code"), "argv0": "src/probe.py"}


def test_an_isolated_processing_job_refuses_an_s3_argument_and_runs_none(tmp_path):
    request = {
        "AppSpecification": {
            "ImageUri": "x",
            "ContainerEntrypoint": ["python3", "-c", "open('ran', 'w')"],
            "ContainerArguments": ["--store", "s3://bucket/results"],
        },
        "NetworkConfig": {"EnableNetworkIsolation": True},
    }
    with pytest.raises(
        UserError,
        match=r"step Evaluate: the processing job has EnableNetworkIsolation.*"
        r"AppSpecification.ContainerArguments\[1\] = 's3://bucket/results'.*ProcessingInput",
    ):
        run_processing_job(name="p", request=request, job_dir=tmp_path / "job", step="Evaluate", echo=lambda line: None)
    assert not (tmp_path / "job" / "ran").exists()


def test_s3_locations_are_found_in_lists_and_json_values_and_nothing_else_counts():
    assert s3_fetches({"a": ["x", "s3://b/k"], "b": '{"u": "s3://b/k"}', "c": "/opt/ml/input/data/code/code.tar.gz", "d": 3}) == [
        "a[1] = 's3://b/k'",
        'b = \'{"u": "s3://b/k"}\'',
    ]


def test_local_storage_uris_are_s3_uris_too(tmp_path):
    """The local runner's s3://local/ locations stand for S3: an isolated job may not fetch those either."""
    assert s3_fetches({"x": storage.uri(Path(tmp_path))})
