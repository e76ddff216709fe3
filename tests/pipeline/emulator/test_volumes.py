"""Each emulated host has the volume SageMaker gives its instance: a write past it fails with ENOSPC from the write itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import storage
from pipeline.emulator.job import EmulatedJob
from pipeline.emulator.volumes import GIB, plan
from steps.common.errors import UserError
from tests.support.harness import s3_channel, training_request

# writes SMALL bytes, then BIG bytes, to the model folder; ends as a step ends (steps.common.errors.run_step)
PROBE = """
import os
from pathlib import Path
from steps.common.errors import run_step
base = Path(os.environ["SAGEMAKER_BASE_DIR"])
def main():
    (base / "model" / "small").write_bytes(b"s" * int(os.environ["SMALL"]))
    with open(base / "model" / "big", "wb") as f:
        f.write(b"b" * int(os.environ["BIG"]))
raise SystemExit(run_step(main, output_dir=base / "output"))
"""
MB = 2**20


def probe_job(
    tmp_path: Path,
    *,
    volume_mb: float,
    small: int,
    big: int,
    channel_bytes: int = 1000,
    input_mode: str = "File",
    instance_type: str = "ml.c5.xlarge",
    lines: list | None = None,
) -> EmulatedJob:
    code = tmp_path / "code"
    code.mkdir(parents=True)
    (code / "probe.py").write_text(PROBE)
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.tar").write_bytes(b"d" * channel_bytes)
    request = training_request(
        code_uri=storage.uri(code),
        output=tmp_path / "out",
        groups=[("train", instance_type, 1)],
        channels=[s3_channel("train", data, input_mode=input_mode)],
        hyperparameters={},
    )
    request["HyperParameters"]["sagemaker_program"] = "probe.py"
    del request["AlgorithmSpecification"]["ContainerEntrypoint"]
    request["ResourceConfig"]["VolumeSizeInGB"] = 1
    request["Environment"] = {"SMALL": str(small), "BIG": str(big)}
    return EmulatedJob(
        name="probe",
        request=request,
        job_dir=tmp_path / "job",
        volume_scale=volume_mb * MB / GIB,
        image_guard=False,
        echo=(lines if lines is not None else []).append,
    )


def run(job: EmulatedJob, lines: list):
    with job:
        job.start()
        if any("not enforced" in line for line in lines):
            pytest.skip(f"this machine allows no user namespaces: {lines}")
        return job.wait()


def test_a_write_past_the_volume_fails_with_enospc_naming_the_volume_and_the_parameter(tmp_path, no_leftovers):
    lines = []
    result = run(probe_job(tmp_path, volume_mb=2, small=1000, big=3 * MB, lines=lines), lines)
    assert lines == ["volume per host: train 1 GB (VolumeSizeInGB; 2.0 MB here at volume scale 0.00195312)"]
    host = result.hosts[0]
    assert host.exit_code == 2  # a user error: the volume is the user's to size
    assert (
        "host algo-1 (train, trainer) exited with code 2: storage: cannot write a file: the job's storage volume is full"
        in result.failure
    )
    assert "ENOSPC" in result.failure and "raise the VolumeSizeGB parameter" in result.failure
    log = (host.base_dir / "output" / "host.log").read_text()
    assert log.count("\n") == 1 and log.startswith("ERROR storage:") and "Traceback" not in log  # one line, no traceback
    # what the host wrote is in its folder once the job ends: all of the small file, what fitted of the big one
    assert (host.base_dir / "model" / "small").stat().st_size == 1000
    assert 1 * MB < (host.base_dir / "model" / "big").stat().st_size < 2 * MB


def test_what_fits_the_volume_is_written_and_kept(tmp_path, no_leftovers):
    lines = []
    result = run(probe_job(tmp_path, volume_mb=4, small=1000, big=2 * MB, lines=lines), lines)
    assert result.ok, result.failure
    assert (result.hosts[0].base_dir / "model" / "big").stat().st_size == 2 * MB
    assert result.model_dir.joinpath("big").stat().st_size == 2 * MB


def test_file_mode_channels_take_their_bytes_off_the_volume_first(tmp_path, no_leftovers):
    lines = []  # 3 MB volume, 2 MB downloaded: 1.5 MB more does not fit
    result = run(probe_job(tmp_path, volume_mb=3, small=1000, big=int(1.5 * MB), channel_bytes=2 * MB, lines=lines), lines)
    assert "ENOSPC" in result.failure


def test_channels_that_do_not_fit_fail_the_job_before_it_starts_and_fastfile_ones_take_nothing(tmp_path):
    job = probe_job(tmp_path / "file", volume_mb=1, small=0, big=0, channel_bytes=2 * MB)
    with pytest.raises(
        UserError,
        match=r"step probe: host algo-1 \(train\): ClientError: Data download failed: insufficient disk "
        r"space: its File-mode channels hold 2.0 MB and its volume is 1 GB \(VolumeSizeInGB; "
        r"1.0 MB here .*\): raise the VolumeSizeGB parameter",
    ):
        job.prepare()
    streamed = probe_job(tmp_path / "fastfile", volume_mb=1, small=0, big=0, channel_bytes=2 * MB, input_mode="FastFile")
    streamed.prepare()
    assert plan(streamed.request, streamed.hosts)[0].channel_bytes == 0


def test_an_nvme_type_has_its_instance_store_whatever_the_request_asks(tmp_path):
    job = probe_job(tmp_path, volume_mb=1, small=0, big=0, instance_type="ml.g5.xlarge")
    job.prepare()
    (volume,) = plan(job.request, job.hosts)
    assert (volume.gb, volume.instance_store) == (250, True)
    assert volume.describe() == "250 GB (ml.g5.xlarge NVMe instance store; VolumeSizeInGB does not apply)"
