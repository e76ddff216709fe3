"""The whole pipeline on an emulated cluster, end to end, on tiny data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipeline import cli, storage
from pipeline.commands.parameters import parameter_layers
from pipeline.commands.plan_view import execution_report
from pipeline.commands.run import validate_run
from pipeline.emulator.job import SITE_PACKAGES
from pipeline.graph import resolve_parameters
from pipeline.local.runner import LocalRunner
from pipeline.local.settings import LocalOptions, local_registry
from pipeline.sagemaker.definition import all_steps
from steps.evaluate.registration import metadata_value
from tests.fixtures.wheels import write_wheel
from tests.support.harness import listeners_on, own_listening_ports, tiny_pipeline
from tests.support.metrics import assert_data_hosts_measured_themselves, assert_the_evaluation_and_the_plan
from tests.support.prices import refreshed_price_file

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("data_hosts,dnn_hosts", [(2, 2)])  # 1 + 1, the default: the README run (tests/e2e/test_run_command.py)
def test_local_pipeline_end_to_end(tmp_path, tiny_images, no_leftovers, data_hosts, dnn_hosts):
    ports_before = own_listening_ports()
    runner, lines = tiny_pipeline(
        tmp_path, tiny_images, {"DataInstanceCount": data_hosts, "DnnInstanceCount": dnn_hosts, "BatchSize": 16}
    )
    result = runner.run()

    manifest = json.loads((result.outputs["Shard"] / "manifest.json").read_text())
    train_samples = manifest["splits"]["train"]["samples"]
    assert len(manifest["splits"]["train"]["shards"]) % data_hosts == 0
    for step, mode in (("TrainBaseline", "homogeneous"), ("TrainHeterogeneous", "heterogeneous")):
        metrics = json.loads((result.jobs[step].model_dir / "metrics.json").read_text())
        assert metrics["mode"] == mode
        # an epoch is exactly the samples in the shards, each once, over all trainers
        assert metrics["samples_seen"] == 2 * train_samples
        assert metrics["corrupt_samples"]["count"] == 0
        assert metrics["accuracy"] is not None and 0 <= metrics["accuracy"] <= 1
        assert metrics["global_batch_size"] == 16 * dnn_hosts
        groups = {g["name"]: g for g in metrics["instance_groups"]}
        assert groups["dnn_group"]["count"] == dnn_hosts
        if mode == "heterogeneous":
            assert groups["data_group"] == {
                "name": "data_group",
                "instance_type": "ml.c5.4xlarge",
                "count": data_hosts,
                "role": "data",
            }
        assert metrics["config"]["epochs"] == 2
        assert_data_hosts_measured_themselves(metrics, data_hosts)
        if mode == "heterogeneous":
            assert {t for h in metrics["data_hosts"] for t in h["batches_sent"]} == {
                h.name for h in result.jobs[step].hosts if h.role == "trainer"
            }
    hetero_metrics = json.loads((result.jobs["TrainHeterogeneous"].model_dir / "metrics.json").read_text())
    assert_the_evaluation_and_the_plan(result.evaluation_dir, hetero_metrics, result.execution_id)
    assert hetero_metrics["model_parameters"] > 0
    assert (tmp_path / "results" / result.execution_id / "price_performance.json").is_file()
    # every host exited cleanly, and metric lines were streamed while it ran
    for job in result.jobs.values():
        assert all(h.exit_code == 0 and not h.stopped_by_emulator for h in job.hosts)
    for host in (h for h in result.jobs["TrainHeterogeneous"].hosts if h.role == "data"):  # the trainers' end is no error
        log = (host.base_dir / "output" / "host.log").read_text()
        assert "Traceback" not in log and log.rstrip().endswith(f"[data] {host.name}: all trainers stopped; exiting"), log[-3000:]
    assert any("step_time_ms=" in line for line in lines)
    # no port the run opened is still open
    assert not own_listening_ports() - ports_before
    assert not listeners_on(result.jobs.values())
    # every data host holds a copy of the results (and trainer rank 0, the first trainer host, the
    # original), so algo-1 has them whatever its role, whichever host's model dir SageMaker packs
    trainer_metrics = (result.jobs["TrainHeterogeneous"].model_dir / "metrics.json").read_bytes()
    for host in (h for h in result.jobs["TrainHeterogeneous"].hosts if h.role == "data"):
        assert (host.base_dir / "model" / "metrics.json").read_bytes() == trainer_metrics, host.name
        assert (host.base_dir / "model" / "model.pt").is_file()
    for step in ("TrainBaseline", "TrainHeterogeneous"):
        assert_emulator_ran_the_definition(result, step)
    if data_hosts == dnn_hosts == 1:
        # Same seed, same shards: the data plane must hand the trainer exactly the bytes, labels and order
        # that the baseline's own DataLoader produced, so the two trained models are bit-identical.
        base, het = (torch.load(result.jobs[s].model_dir / "model.pt") for s in ("TrainBaseline", "TrainHeterogeneous"))
        assert base.keys() == het.keys() and all(torch.equal(base[k], het[k]) for k in base)


def test_no_input_no_baseline_a_user_workload_and_a_price_file_in_one_run(tmp_path, no_leftovers):
    """Five options that change the graph, the hosts' code or the evaluation, one pipeline run (the cheapest: no baseline,
    one epoch): no InputData (the run generates its dataset), RunBaseline=false (the baseline branch is skipped, the
    evaluation has no comparison), a user workload module from a folder outside the repository that ships with the code
    (every host of the job imports it, and the package its requirements.txt names, installed from a vendored wheel),
    network isolation (the code reaches every host as the code channel; nothing in a container fetches from S3 or a
    package index) and the price file `hetero prices refresh` writes (about 100 types, several KB: `--prices`), which
    reaches Evaluate as a processing input, through the same compiled request as in the cloud, and prices the run."""
    user = tmp_path / "usercode"
    (user / "my_workloads").mkdir(parents=True)
    (user / "my_workloads" / "__init__.py").write_text("")
    tiny = (Path(__file__).parents[2] / "fixtures" / "tiny_workload.py").read_text()
    (user / "my_workloads" / "tiny.py").write_text(
        "import tiny_dep  # from requirements.txt\n"
        + tiny.replace('int(self.options.get("hidden", 8))', 'int(self.options.get("hidden", tiny_dep.HIDDEN))')
    )
    write_wheel(user / "wheels", "tiny-dep", "0.0.1", {"tiny_dep.py": "HIDDEN = 4\n"})
    (user / "requirements.txt").write_text("--no-index --find-links wheels\ntiny-dep==0.0.1\n")
    prices = refreshed_price_file(tmp_path / "prices-override.json", prices={"ml.g5.xlarge": 2.5, "ml.c5.4xlarge": 1.25})
    args = cli.build_parser().parse_args(
        [
            "run",
            "--prices",
            str(prices),
            "--no-baseline",
            "--workload",
            "my_workloads.tiny",
            "--epochs",
            "1",
            "--batch-size",
            "32",
            "--shard-size-mb",
            "1",
            "--approve-margin",
            "0.5",
        ]
    )
    params = resolve_parameters(*parameter_layers(args))  # the parameters `hetero run` takes from these options
    validate_run(params, (user,))
    assert params["InputData"] == ""
    result = LocalRunner(
        params,
        LocalOptions(
            work_dir=tmp_path / "w", sample_images=80, grace_s=10, network_isolation=True, code_dirs=(user,), echo=lambda _: None
        ),
    ).run()

    manifest = json.loads((result.outputs["Shard"] / "manifest.json").read_text())
    assert manifest["splits"]["train"]["samples"] + manifest["splits"]["validation"]["samples"] == 80
    assert len(manifest["classes"]) == 8
    assert (tmp_path / "w" / "sample-data").is_dir()

    assert {"TrainBaseline", "Evaluate", "CheckImprovement"} <= set(
        result.skipped
    ) and "EvaluateWithoutBaseline" in result.outputs
    assert set(result.jobs) == {"TrainHeterogeneous"}
    assert result.price_performance["runs"]["baseline"] is None
    assert result.price_performance["improvement"] is None

    job = result.jobs["TrainHeterogeneous"]
    metrics = json.loads((job.model_dir / "metrics.json").read_text())
    assert metrics["config"]["workload"] == "my_workloads.tiny"
    state = torch.load(job.model_dir / "model.pt")
    assert state["1.weight"].shape == (4, 16 * 16 * 3)  # the installed package's HIDDEN
    assert all(h.exit_code == 0 for h in job.hosts)
    for host in job.hosts:  # each host installed it into its own folder, as each container does
        assert (job.job_dir / SITE_PACKAGES / host.name / "tiny_dep.py").is_file(), host.name
    request = result.requests["TrainHeterogeneous"]
    assert request["EnableNetworkIsolation"] is True
    assert request["HyperParameters"]["sagemaker_submit_directory"] == "/opt/ml/input/data/code/code.tar.gz"
    assert_emulator_ran_the_definition(result, "TrainHeterogeneous")
    # the job secret: drawn by Shard into the run (owner only), a channel of the job, in no request and no environment
    secret = result.outputs["Shard"] / "secret" / "job-secret"
    assert oct(secret.stat().st_mode & 0o777) == "0o600" and oct(secret.parent.stat().st_mode & 0o777) == "0o700"
    assert len(secret.read_text()) == 64 and secret.read_text() not in json.dumps(result.requests) + json.dumps(result.definition)
    assert "Environment" not in request or not request["Environment"]
    for host in job.hosts:  # each launcher read its copy once, then removed it
        assert not (host.base_dir / "input" / "data" / "secret" / "job-secret").is_symlink()
        assert (host.base_dir / "input" / "data" / "code" / "code.tar.gz").is_symlink()
    # the price file: an input of the Evaluate step only, never in a container's command line
    assert "PriceOverrides" not in json.dumps(
        [s.get("Arguments", {}).get("AppSpecification") for s in all_steps(result.definition).values()]
    )
    doc = json.loads((result.run_dir / "EvaluateWithoutBaseline" / "price_performance.json").read_text())
    hetero = doc["runs"]["heterogeneous"]
    assert {g["instance_type"]: g["instance_usd_per_hour"] for g in hetero["instance_groups"]} == {
        "ml.c5.4xlarge": 1.25,
        "ml.g5.xlarge": 2.5,
    }
    assert hetero["cluster_usd_per_hour"] == 3.75
    assert "AWS Price List API" in doc["prices"]["source"] and doc["prices"]["as_of"].endswith(
        json.loads(prices.read_text())["as_of"]
    )
    linked = result.run_dir / "jobs" / "EvaluateWithoutBaseline" / "opt" / "ml" / "processing" / "input" / "prices" / prices.name
    assert linked.resolve() == prices.resolve()  # provisioned as the input's object, as SageMaker downloads it
    # its figures, as the embedded-metric-format line CloudWatch Logs would turn into metrics, named by the pipeline
    (emf,) = [
        json.loads(line)
        for line in (result.run_dir / "jobs" / "EvaluateWithoutBaseline" / "job.log").read_text().splitlines()
        if line.startswith('{"_aws"')
    ]
    assert emf["PipelineName"] == "HeteroTraining" and emf["SamplesPerSecond"] == hetero["samples_per_second"]
    assert emf["ExecutionId"] == result.execution_id and "ImprovementPercent" not in emf
    assert_registered(result, tmp_path / "w", metrics)


def assert_registered(result, work_dir: Path, metrics: dict) -> None:
    """The register step filed the heterogeneous model in the local registry, as CreateModelPackage would, with
    Evaluate's figures; AutoApproveMargin is set and no package was approved before: approved. The report links it."""
    assert "RegisterModel" in result.skipped and "RegisterModelWithoutBaseline" in result.requests
    package = result.model_package
    assert package == json.loads((local_registry(work_dir) / "1.json").read_text())
    assert (package["ModelPackageVersion"], package["ModelApprovalStatus"]) == (1, "Approved")
    metadata = package["CustomerMetadataProperties"]
    assert metadata["execution_id"] == result.execution_id and metadata["accuracy"] == metadata_value(metrics["accuracy"])
    assert metadata["improvement"] == "none" and metadata["approval"] == "no approved package to compare with"
    (container,) = package["InferenceSpecification"]["Containers"]
    assert container["ModelDataUrl"] == result.jobs["TrainHeterogeneous"].model_artifacts and container["Image"]
    statistics = storage.path(package["ModelMetrics"]["ModelQuality"]["Statistics"]["S3Uri"])
    assert json.loads(statistics.read_text())["price_performance"]["accuracy"] == metrics["accuracy"]
    _, page = execution_report(results=str(work_dir / "results"), execution_id=result.execution_id)
    assert "Registered models" in page and package["ModelPackageArn"] in page


def _same_where_literal(compiled, executed, path="") -> None:
    """``executed`` is ``compiled`` with its expressions evaluated: equal wherever the definition holds a literal."""
    if isinstance(compiled, dict) and len(compiled) == 1 and next(iter(compiled)) in ("Get", "Std:Join", "Std:JsonGet"):
        return
    if isinstance(compiled, dict):
        assert isinstance(executed, dict) and set(compiled) == set(executed), (path, compiled, executed)
        for key in compiled:
            _same_where_literal(compiled[key], executed[key], f"{path}.{key}")
    elif isinstance(compiled, list):
        assert isinstance(executed, list) and len(compiled) == len(executed), path
        for i, (c, e) in enumerate(zip(compiled, executed)):
            _same_where_literal(c, e, f"{path}[{i}]")
    else:
        assert compiled == executed, (path, compiled, executed)


def assert_emulator_ran_the_definition(result, step: str) -> None:
    """What each emulated host saw is the request of the compiled definition's step, and nothing else."""
    request = result.requests[step]
    _same_where_literal(all_steps(result.definition)[step]["Arguments"], request)
    groups = {g["InstanceGroupName"]: g for g in request["ResourceConfig"]["InstanceGroups"]}
    job = result.jobs[step]
    for host in job.hosts:
        config = host.base_dir / "input" / "config"
        hyperparameters = json.loads((config / "hyperparameters.json").read_text())
        assert hyperparameters == {**request["HyperParameters"], "sagemaker_job_name": job.name}
        resources = json.loads((config / "resourceconfig.json").read_text())
        assert {g["instance_group_name"]: (g["instance_type"], len(g["hosts"])) for g in resources["instance_groups"]} == {
            n: (g["InstanceType"], g["InstanceCount"]) for n, g in groups.items()
        }
        channels = json.loads((config / "inputdataconfig.json").read_text())
        assigned = {
            c["ChannelName"]: c
            for c in request["InputDataConfig"]
            if host.group.name in c["DataSource"]["S3DataSource"]["InstanceGroupNames"]
        }
        assert set(channels) == set(assigned), (host.name, host.group.name)
        for name, channel in assigned.items():
            assert channels[name]["TrainingInputMode"] == channel["InputMode"]
            assert channels[name]["S3DistributionType"] == channel["DataSource"]["S3DataSource"]["S3DataDistributionType"]
