"""The emulator lays out what SageMaker containers see, and the real toolkit reads it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline import storage
from pipeline.emulator import hosts
from pipeline.emulator.container_env import SERVICE, TWIN, image_env
from pipeline.emulator.job import EmulatedJob
from pipeline.local.settings import LOCAL_REGION
from pipeline.stop import STOP, Signalled
from steps.common.errors import UserError
from steps.contract import SHARDED
from tests.support.harness import s3_channel, training_request
from tests.support.stop import run_stop, signal_when  # noqa: F401 - fixture

FIXTURES = Path(__file__).parents[2] / "fixtures"

READ_ENVIRONMENT = """
import json
from sagemaker_training import environment
env = environment.Environment()
print(json.dumps({
    "current_host": env.current_host, "current_instance_group": env.current_instance_group,
    "current_instance_type": env.current_instance_type, "is_hetero": env.is_hetero,
    "instance_groups": env.instance_groups, "groups_dict": env.instance_groups_dict,
    "current_instance_group_hosts": env.current_instance_group_hosts, "hosts": env.hosts,
    "channel_input_dirs": env.channel_input_dirs, "hyperparameters": env.hyperparameters,
    "network_interface_name": env.network_interface_name, "model_dir": env.model_dir,
}))
"""


def real_environment(base_dir: Path) -> dict:
    """The sagemaker-training toolkit's view of a base dir, read in a fresh process (it reads at import)."""
    out = subprocess.run(
        [sys.executable, "-c", READ_ENVIRONMENT],
        env={"SAGEMAKER_BASE_DIR": str(base_dir), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def shards(tmp_path) -> Path:
    folder = tmp_path / "shards"
    folder.mkdir()
    for i in range(6):
        (folder / f"train-{i:05d}.tar").write_bytes(b"x" * (i + 1))
    return folder


def make_job(tmp_path, shards, code_uri, *, data=2, dnn=1, seed=None) -> EmulatedJob:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    request = training_request(
        code_uri=code_uri,
        output=tmp_path / "output",
        groups=[("data_group", "ml.c5.18xlarge", data), ("dnn_group", "ml.p4d.24xlarge", dnn)],
        channels=[
            s3_channel("train", shards, distribution=SHARDED, groups=("data_group",)),
            s3_channel("manifest", manifest, groups=("data_group", "dnn_group")),
        ],
        hyperparameters={"epochs": 3, "workload_options": {"blur_passes": 2}},
    )
    return EmulatedJob(name="job", request=request, job_dir=tmp_path / "jobs" / "job", seed=seed)


def test_the_real_toolkit_reads_a_two_group_host(tmp_path, shards, code_uri):
    job = make_job(tmp_path, shards, code_uri)
    job.prepare()
    dnn_host = next(h for h in job.hosts if h.group.name == "dnn_group")
    data_hosts = sorted(h.name for h in job.hosts if h.group.name == "data_group")

    env = real_environment(dnn_host.base_dir)

    assert env["current_host"] == dnn_host.name
    assert env["current_instance_group"] == "dnn_group"
    assert env["current_instance_type"] == "ml.p4d.24xlarge"
    assert env["is_hetero"] is True
    assert sorted(env["instance_groups"]) == ["data_group", "dnn_group"]
    assert sorted(env["groups_dict"]["data_group"]["hosts"]) == data_hosts
    assert env["current_instance_group_hosts"] == [dnn_host.name]
    assert env["hyperparameters"]["epochs"] == 3
    assert env["hyperparameters"]["workload_options"] == {"blur_passes": 2}
    assert env["network_interface_name"] == "lo"
    assert env["model_dir"] == str(dnn_host.base_dir / "model")
    # the train channel is provisioned on the data group only
    assert set(env["channel_input_dirs"]) == {"manifest"}
    # the code is the packed step code, unpacked where the toolkit puts it
    assert (dnn_host.base_dir / "code" / "steps" / "train" / "launcher.py").is_file()


def test_resourceconfig_has_the_shape_sagemaker_writes(tmp_path, shards, code_uri):
    job = make_job(tmp_path, shards, code_uri)
    job.prepare()
    real = json.loads((FIXTURES / "resourceconfig_two_groups.json").read_text())
    for host in job.hosts:
        ours = json.loads((host.base_dir / "input/config/resourceconfig.json").read_text())
        assert set(ours) == set(real)
        assert all(set(g) == set(real["instance_groups"][0]) for g in ours["instance_groups"])


def test_the_fixture_copied_from_sagemaker_reads_as_heterogeneous(tmp_path):
    config = tmp_path / "input" / "config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text((FIXTURES / "resourceconfig_two_groups.json").read_text())
    (config / "hyperparameters.json").write_text("{}")
    (config / "inputdataconfig.json").write_text("{}")
    env = real_environment(tmp_path)
    assert env["current_instance_group"] == "dnn_group"
    assert env["groups_dict"]["data_group"]["hosts"] == ["algo-1", "algo-2"]


@pytest.mark.slow
def test_host_names_are_dealt_randomly_across_groups(tmp_path, shards, code_uri):
    layouts = set()
    for seed in range(12):
        job = make_job(tmp_path, shards, code_uri, seed=seed)
        job.prepare()
        layouts.add(tuple(sorted(h.name for h in job.hosts if h.group.name == "dnn_group")))
        job.hosts.clear()
        if len(layouts) > 1:  # each prepare lays out every host's folders: stop at the first other deal
            break
    assert len(layouts) > 1, "the dnn host always got the same name"


@pytest.mark.slow
def test_sharded_channel_splits_objects_and_replicated_copies_them(tmp_path, shards, code_uri):
    job = make_job(tmp_path, shards, code_uri, data=2)
    job.prepare()
    data = sorted((h for h in job.hosts if h.group.name == "data_group"), key=lambda h: h.name)
    seen = [sorted(p.name for p in (h.base_dir / "input/data/train").iterdir()) for h in data]
    assert sorted(seen[0] + seen[1]) == sorted(p.name for p in shards.iterdir())
    assert not set(seen[0]) & set(seen[1])
    assert len(seen[0]) == len(seen[1]) == 3
    for host in job.hosts:
        assert (host.base_dir / "input/data/manifest/manifest.json").is_file()
        config = json.loads((host.base_dir / "input/config/inputdataconfig.json").read_text())
        if host.group.name == "data_group":
            assert config["train"]["S3DistributionType"] == "ShardedByS3Key"
        else:
            assert "train" not in config


def test_more_hosts_than_shards_is_a_clear_error(tmp_path, shards, code_uri):
    job = make_job(tmp_path, shards, code_uri, data=7)
    with pytest.raises(UserError, match="6 object.*7 hosts"):
        job.prepare()


def test_each_host_gets_its_own_loopback_address(tmp_path, shards, code_uri):
    job = make_job(tmp_path, shards, code_uri, data=2, dnn=2)
    job.prepare()
    addresses = [h.address for h in job.hosts]
    assert (
        len(set(addresses)) == 4
        and len({a.rsplit(".", 1)[0] for a in addresses}) == 1
        and all(a.startswith("127.") for a in addresses)
    )
    hosts_file = (job.job_dir / "hosts").read_text()
    for host in job.hosts:
        assert f"{host.address} {host.name}" in hosts_file


def test_checkpoints_come_from_the_s3_uri_on_start_and_go_back_when_the_job_ends(tmp_path, shards, code_uri):
    from pipeline import storage

    job = make_job(tmp_path, shards, code_uri, dnn=2)
    stored = tmp_path / "ckpt"
    (stored / "sub").mkdir(parents=True)
    (stored / "checkpoint.pt").write_bytes(b"saved by the first attempt")
    (stored / "sub" / "part").write_text("kept")
    job.request["CheckpointConfig"] = {"S3Uri": storage.uri(stored), "LocalPath": "/opt/ml/checkpoints"}
    job.__post_init__()
    job.prepare()
    for host in job.hosts:  # every host gets the checkpoint folder, as SageMaker downloads it to each instance
        assert (host.base_dir / "checkpoints" / "checkpoint.pt").read_bytes() == b"saved by the first attempt"
        assert (host.base_dir / "checkpoints" / "sub" / "part").read_text() == "kept"
    writer = job.hosts[1].base_dir / "checkpoints"
    (writer / "checkpoint.pt").write_bytes(b"newer")
    (writer / ".checkpoint.pt.123.tmp").write_bytes(b"half")  # still being written: not uploaded
    job._save_checkpoints()
    # only what a host changed goes back: the others' restored copies do not overwrite the newer file
    assert (stored / "checkpoint.pt").read_bytes() == b"newer"
    assert not list(stored.glob(".*"))


def test_a_checkpoint_path_outside_opt_ml_is_refused_with_the_one_that_works(tmp_path, shards, code_uri):
    job = make_job(tmp_path, shards, code_uri)
    job.request["CheckpointConfig"] = {"S3Uri": "s3://local/tmp/x", "LocalPath": "/checkpoints"}
    with pytest.raises(UserError, match="use /opt/ml/checkpoints"):
        job.__post_init__()


def test_the_first_process_is_the_container_entrypoint_and_only_it_would_get_sigterm(tmp_path, shards, code_uri):
    job = make_job(tmp_path, shards, code_uri)
    entry = job.request["AlgorithmSpecification"]["ContainerEntrypoint"]
    assert job._command("steps/train/launcher.py") == [sys.executable, *entry[1:]] and job.signals_reach_entry_point
    del job.request["AlgorithmSpecification"]["ContainerEntrypoint"]  # plain script mode: the toolkit runs the entry point
    assert job._command("steps/train/launcher.py") == [sys.executable, "steps/train/launcher.py"]
    assert not job.signals_reach_entry_point  # the toolkit does not pass SIGTERM on: an interruption kills the hosts


HOST_SCRIPT = """
import json, os, pathlib, time
config = json.loads(pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"], "input/config/resourceconfig.json").read_text())
output = pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"], "output")
pathlib.Path(os.environ["TMPDIR"], "scratch").write_text("x")
(output / "tmpdir").write_text(os.environ["TMPDIR"])
if config["current_group_name"] == "dnn_group":
    time.sleep(600)  # frozen: it never exits by itself
trainer = next(g["hosts"][0] for g in config["instance_groups"] if g["instance_group_name"] == "dnn_group")
(output / "failure").write_text(f"trainer lost: trainer {trainer} went silent")
raise SystemExit(1)
"""


def _script_job(tmp_path, shards, script: str):
    """A two-group job whose every host runs ``script`` (plain script mode, ``host.py`` in the code) in place of the
    launcher."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "host.py").write_text(script)
    job = make_job(tmp_path, shards, storage.uri(code))
    del job.request["AlgorithmSpecification"]["ContainerEntrypoint"]
    job.hyperparameters["sagemaker_program"] = "host.py"
    return job


@pytest.mark.slow
def test_a_job_fails_naming_the_host_its_first_failure_blames_and_each_hosts_temp_dir_goes_with_it(tmp_path, shards):
    """The data hosts fail first, each blaming the trainer, which never exits (frozen): the job's failure leads with the
    trainer; the emulator stops it after grace_s; every host had a TMPDIR of its own, gone with the job."""
    job = _script_job(tmp_path, shards, HOST_SCRIPT)
    job.grace_s, job.image_guard = 2.0, False  # the data hosts, started together, all fail well within it
    with job:
        job.start()
        result = job.wait()
    trainer = next(h for h in job.hosts if h.role == "trainer")
    data = [h for h in job.hosts if h.role == "data"]
    assert result.failure.startswith(f"step job: host {trainer.name} (dnn_group, trainer) failed, as host algo-"), result.failure
    assert "(data_group, data) reports (exited with code 1): trainer lost" in result.failure
    assert trainer.stopped_by_emulator and not any(h.stopped_by_emulator for h in data)
    temp_dirs = {Path((h.base_dir / "output" / "tmpdir").read_text()) for h in job.hosts}
    assert len(temp_dirs) == len(job.hosts) and temp_dirs == {h.temp_dir for h in job.hosts}
    assert not [d for d in temp_dirs if d.exists()]


KILLED_HOST_SCRIPT = """
import json, os, pathlib, signal
config = json.loads(pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"], "input/config/resourceconfig.json").read_text())
if config["current_group_name"] == "dnn_group":
    os.kill(os.getpid(), signal.SIGKILL)  # the instance goes
trainer = next(g["hosts"][0] for g in config["instance_groups"] if g["instance_group_name"] == "dnn_group")
pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"], "output", "failure").write_text(f"trainer lost: trainer {trainer} crashed")
raise SystemExit(1)
"""


@pytest.mark.slow
def test_hosts_that_ended_together_are_described_by_the_cause_not_the_peer_that_saw_it(tmp_path, shards):
    """A killed trainer and the data hosts that saw it go, all found ended by the same look: the job's failure is the
    trainer's own end (killed by signal 9), whichever host comes first in the job's list."""
    job = _script_job(tmp_path, shards, KILLED_HOST_SCRIPT)
    job.image_guard = False
    with job:
        job.start()
        for host in job.hosts:  # every host ended before the job is first looked at
            host.process.wait(timeout=60)
        job.hosts.sort(key=lambda h: h.role != "data")  # the peers that blame the trainer come first
        result = job.wait()
    trainer = next(h for h in job.hosts if h.role == "trainer")
    assert result.failure.startswith(f"step job: host {trainer.name} (dnn_group, trainer) was killed by signal 9"), result.failure


def test_an_emulated_job_runs_in_the_local_runners_region_unless_told():
    assert EmulatedJob.region == LOCAL_REGION


ENVIRONMENT_SCRIPT = """
import json, os, pathlib
pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"], "output", "environment.json").write_text(json.dumps(dict(os.environ)))
"""


@pytest.mark.slow
def test_a_host_starts_with_its_containers_environment_and_nothing_of_the_callers(tmp_path, shards, monkeypatch):
    """The caller's shell reaches no host (a variable only it has, its AWS region); each host has its image's ENV, the
    request's Environment, what SageMaker sets in a training container and the twin's own, and nothing else."""
    monkeypatch.setenv("HETERO_CALLER_ONLY", "1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    job = _script_job(tmp_path, shards, ENVIRONMENT_SCRIPT)
    job.image_guard, job.region, job.extra_env = False, "eu-west-1", {"HETERO_TWIN_EXTRA": "x"}
    job.request["Environment"] = {"FROM_REQUEST": "yes"}
    with job:
        job.start()
        result = job.wait()
    assert result.ok, result.failure
    image = image_env(job.request["AlgorithmSpecification"]["TrainingImage"])  # the PyTorch GPU training DLC
    explained = set(image) | {"FROM_REQUEST", "HETERO_TWIN_EXTRA"} | {v.name for v in SERVICE} | {a.name for a in TWIN}
    for host in job.hosts:
        env = json.loads((host.base_dir / "output" / "environment.json").read_text())
        assert "HETERO_CALLER_ONLY" not in env and "AWS_DEFAULT_REGION" not in env
        assert set(env) <= explained, sorted(set(env) - explained)
        assert {k: env[k] for k in ("SAGEMAKER_TRAINING_MODULE", "DLC_CONTAINER_TYPE", "LC_ALL", "CUDA_HOME")} == {
            "SAGEMAKER_TRAINING_MODULE": "sagemaker_pytorch_container.training:main",
            "DLC_CONTAINER_TYPE": "training",
            "LC_ALL": "C.UTF-8",
            "CUDA_HOME": "/usr/local/cuda",
        }
        assert {k: env[k] for k in ("TRAINING_JOB_NAME", "TRAINING_JOB_ARN", "AWS_REGION")} == {
            "TRAINING_JOB_NAME": "job",
            "TRAINING_JOB_ARN": "arn:aws:sagemaker:eu-west-1:000000000000:training-job/job",
            "AWS_REGION": "eu-west-1",
        }
        assert env["FROM_REQUEST"] == "yes" and env["HETERO_TWIN_EXTRA"] == "x"
        assert env["SAGEMAKER_BASE_DIR"] == str(host.base_dir) and env["TMPDIR"] == str(host.temp_dir)
        # this machine's Python first, then the image's PATH; none of the image's library folders
        assert env["PATH"] == f"{Path(sys.executable).parent}:{image['PATH']}" and "LD_LIBRARY_PATH" not in env


STUBBORN_HOST_SCRIPT = """
import os, pathlib, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a host slow to stop: only SIGKILL ends it
pathlib.Path(os.environ["SAGEMAKER_BASE_DIR"], "output", "started").write_text("yes")
time.sleep(600)
"""


def _all_started(job) -> threading.Event:
    return _once(lambda: all(((h.view or h.base_dir) / "output" / "started").is_file() for h in job.hosts))


def _once(condition) -> threading.Event:
    """An event set once ``condition()`` holds (polled from a thread)."""
    met = threading.Event()

    def watch() -> None:
        while not condition():
            time.sleep(0.05)
        met.set()

    threading.Thread(target=watch, daemon=True).start()
    return met


@pytest.mark.slow
@pytest.mark.usefixtures("run_stop")
def test_a_stop_of_the_run_whose_raise_was_lost_ends_the_job_at_its_next_wait(tmp_path, shards, monkeypatch, no_leftovers):
    """A stop came, and a finalizer dropped its raise: the job's wait raises it again, every host goes with the job
    (the emulator's SIGTERM, then SIGKILL for a host that ignores it) and so does its temp dir."""
    job = _script_job(tmp_path, shards, STUBBORN_HOST_SCRIPT)
    job.image_guard = False
    with pytest.raises(Signalled), job:
        job.start()
        assert _all_started(job).wait(60)
        monkeypatch.setattr(STOP, "signals", [signal.SIGHUP])
        job.wait()
    assert all(h.stopped_by_emulator and h.exit_code == -signal.SIGKILL for h in job.hosts)
    assert not [h.temp_dir for h in job.hosts if h.temp_dir.exists()]


@pytest.mark.usefixtures("run_stop")
def test_a_second_signal_during_the_stop_kills_the_hosts_at_once(tmp_path, shards, monkeypatch, no_leftovers):
    """The stop gives each host STOP_WAIT_S to exit after SIGTERM; a second signal meanwhile ends that wait: the hosts
    that ignore SIGTERM are killed now (here the wait would be minutes)."""
    monkeypatch.setattr(hosts, "STOP_WAIT_S", 120.0)
    job = _script_job(tmp_path, shards, STUBBORN_HOST_SCRIPT)
    job.image_guard = False
    job.start()
    senders: list[threading.Thread] = []
    try:
        with pytest.raises(Signalled):  # the hosts may have started already: the SIGTERM can come at once
            senders.append(signal_when(_all_started(job), signal.SIGTERM))
            job.wait()
        stopping = time.monotonic()
        # during the stop's wait (every host has had its SIGTERM): never raised
        senders.append(signal_when(_once(lambda: all(h.stopped_by_emulator for h in job.hosts)), signal.SIGINT))
    finally:
        job.close()
    took = time.monotonic() - stopping
    for sender in senders:
        sender.join()
    assert STOP.signals == [signal.SIGTERM, signal.SIGINT] and STOP.hurried
    assert all(h.exit_code == -signal.SIGKILL for h in job.hosts) and took < 60, took
