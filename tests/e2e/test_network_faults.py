"""Network faults on the emulated cluster (`pipeline.emulator.links`), each framework: a whole pipeline run whose data host's
link loses 2% of its packets and adds 50 ms each way completes with every sample of every epoch trained on once; a
data host cut off (every packet dropped, its processes alive) fails the job naming that host, every host ending by
itself, nothing left. bench/faults.py measures the same cells against their bounds."""

from __future__ import annotations

import json

import pytest

from pipeline.emulator.hosts import HOST_NAME
from pipeline.emulator.links import LinkFault, unavailable
from steps.contract import DATA_GROUP
from steps.frameworks import FRAMEWORKS
from tests.support.harness import by_role, listeners_on, start_training_job, tiny_pipeline

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(unavailable()), reason=f"link faults cannot be emulated here: {unavailable()}"),
]

LOSSY = LinkFault(loss=0.02, delay_ms=50)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_run_over_a_lossy_slow_link_trains_on_every_sample(framework, tmp_path, tiny_images, no_leftovers):
    runner, lines = tiny_pipeline(
        tmp_path, tiny_images, {"RunBaseline": False, "BatchSize": 8}, framework=framework, link_fault=LOSSY
    )
    result = runner.run()

    job = result.jobs["TrainHeterogeneous"]
    victim = by_role(job, "data")[0]
    assert f"[TrainHeterogeneous] network: {victim.name} ({DATA_GROUP}, data) {LOSSY}" in lines
    counted = next(line for line in lines if line.startswith(f"[TrainHeterogeneous] network: {victim.name}'s link"))
    assert "packets delayed" in counted, counted  # the fault acted on the job's traffic
    train = json.loads((result.outputs["Shard"] / "manifest.json").read_text())["splits"]["train"]["samples"]
    metrics = json.loads((job.model_dir / "metrics.json").read_text())
    if framework == "tensorflow":
        accounted = [(a["epoch"], a["missing"], a["received"] - a["distinct"]) for a in metrics["epoch_accounting"]]
    else:
        accounted = [(e["epoch"], train - e["distinct"], e["duplicates"]) for e in metrics["sample_ledger"]["epochs"]]
    assert accounted == [(0, 0, 0), (1, 0, 0)]  # per epoch: none lost, none twice
    assert metrics["samples_seen"] == 2 * train
    assert not listeners_on(result.jobs.values())


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_data_host_cut_off_fails_the_job_naming_it(framework, tmp_path, shards, tf_shards, code_uri, no_leftovers):
    job = start_training_job(
        tmp_path,
        tf_shards if framework == "tensorflow" else shards,
        code_uri,
        silence_timeout_s=5,
        grace_s=10,
        hyperparameters={"framework": framework},
        network_faults=True,
    )
    with job:
        victim = by_role(job, "data")[0]
        job.degrade(victim, LinkFault(cut=True))
        result = job.wait()
    assert not result.ok and HOST_NAME.search(result.failure).group() == victim.name, result.failure
    for host in job.hosts:
        assert not host.stopped_by_emulator, f"{host.name} had to be stopped by the emulator"
        assert host.exit_code != 0
    for host in (h for h in job.hosts if h is not victim):
        assert HOST_NAME.search(host.failure).group() == victim.name, host.failure
    assert job.link_counters()[victim.name]["dropped"] > 0
    assert not listeners_on([job])
