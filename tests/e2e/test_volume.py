"""A full volume during training: the host that runs out says so in one line (its volume and the parameter to raise), its
peers end in one line each, and the emulator prints no traceback of its own."""

from __future__ import annotations

import pytest

from pipeline.emulator.volumes import GIB
from pipeline.errors import StepFailed
from pipeline.graph import resolve_parameters
from pipeline.local.runner import LocalRunner
from pipeline.local.settings import LocalOptions

pytestmark = pytest.mark.e2e


def test_a_trainer_whose_volume_fills_up_ends_the_step_in_one_line_per_host(tmp_path, tiny_images, no_leftovers, capfd):
    # ml.p3.2xlarge: a GPU type with EBS storage only, so VolumeSizeGB sizes the trainer's volume too. 1 GB at this scale
    # is 2 MiB: the code (0.6 MB) and the channels fit, the trainer's checkpoint and model do not
    params = resolve_parameters(
        {
            "InputData": str(tiny_images),
            "Epochs": 2,
            "BatchSize": 8,
            "ShardSizeMB": 1,
            "RunBaseline": False,
            "DnnInstanceType": "ml.p3.2xlarge",
            "VolumeSizeGB": 1,
            "WorkloadOptions": '{"blur_passes": 0}',
        }
    )
    lines = []
    runner = LocalRunner(
        params, LocalOptions(work_dir=tmp_path, grace_s=10, step_timeout_s=300, echo=lines.append, volume_scale=2 * 2**20 / GIB)
    )
    with pytest.raises(StepFailed) as failed:
        runner.run()
    volume_line = next(line for line in lines if "volume per host:" in line)
    if "not enforced" in volume_line:
        pytest.skip(f"this machine allows no user namespaces: {volume_line}")
    message = failed.value.one_line()
    assert "step TrainHeterogeneous: host algo-" in message and "(dnn_group, trainer) exited with code 2" in message
    assert "the job's storage volume is full" in message and "ENOSPC" in message
    assert "raise the VolumeSizeGB parameter" in message and "(its volume: 1 GB (VolumeSizeInGB; 2.0 MB here" in message
    assert failed.value.user_error
    job = runner.result.jobs["TrainHeterogeneous"]
    for host in job.hosts:  # one error line each: the trainer's full volume, the data host's stop
        errors = [line for line in lines if f" {host.name} " in line and " ERROR " in line]
        assert len(errors) == 1, (host.name, errors)
    assert any("No space left on device" in line for line in lines if " data_group ERROR " in line)
    assert "Traceback" not in "\n".join(lines) + capfd.readouterr().err  # neither the hosts nor the emulator's threads
