"""The SageMaker pipeline definition compiled from the logical graph (SDK v3, offline).

The public pipeline-definition JSON schema is out of date (no InstanceGroups, no
Std:JsonGet), so these tests read the parsed JSON directly instead of validating it.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import replace

import pytest

pytest.importorskip("sagemaker.core", reason="the cloud extra (SageMaker SDK v3) is not installed")

from pipeline.cli import main  # noqa: E402
from pipeline.graph import DATA_GROUP, DNN_GROUP, REPLICATED, build_graph  # noqa: E402
from pipeline.sagemaker.definition import DeploySettings, FsxSettings, all_steps, build_definition, definition_json  # noqa: E402
from pipeline.sagemaker.images import default_processing_image, default_training_image  # noqa: E402
from pipeline.sagemaker.serving import GPU_SPECIFICATION  # noqa: E402
from steps.common.errors import UserError  # noqa: E402
from steps.contract import (  # noqa: E402
    HYBRID_CHANNEL,
    METRIC_DEFINITIONS,
    TUNABLES,  # noqa: E402
)
from steps.train.core.config import TrainConfig  # noqa: E402
from steps.train.core.metrics import metric_line  # noqa: E402
from tests.support.shared import key_of, shared_json  # noqa: E402

ROLE, BUCKET, CODE = "${Token[TOKEN.101]}", "${Token[TOKEN.102]}", "${Token[TOKEN.103]}"
SETTINGS = DeploySettings(pipeline_name="hetero-test", region="eu-west-1", role_arn=ROLE, bucket=BUCKET, code_uri=CODE)
FSX = FsxSettings(
    file_system_id="${Token[TOKEN.201]}",
    directory_path="${Token[TOKEN.202]}",
    subnets=("${Token[TOKEN.203]}",),
    security_group_ids=("${Token[TOKEN.204]}", "${Token[TOKEN.205]}"),
)
FSX_SETTINGS = DeploySettings(
    pipeline_name="hetero-fsx",
    region="us-west-2",
    role_arn=ROLE,
    bucket=BUCKET,
    code_uri=CODE,
    prefix="team/hetero",
    training_image="111122223333.dkr.ecr.us-west-2.amazonaws.com/mine:gpu",
    processing_image="111122223333.dkr.ecr.us-west-2.amazonaws.com/mine:cpu",
    fsx=FSX,
)
TF_SETTINGS = replace(SETTINGS, pipeline_name="hetero-tf", framework="tensorflow")
PROCESSING_STEPS = ("Shard", "Evaluate", "EvaluateWithoutBaseline")
SDK_ENV = ("AWS_DEFAULT_REGION", "SAGEMAKER_VALIDATE_ROLE", "AWS_EC2_METADATA_DISABLED")
TYPES = {bool: "Boolean", int: "Integer", float: "Float", str: "String"}


class NetworkBlocked(AssertionError):
    pass


def _built_offline() -> dict:
    """Two builds of the same settings, one FSx build and one TensorFlow build, all with every socket connect refused."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(repr(args))
        raise NetworkBlocked(f"network call while building the definition: {args!r}")

    env_before = {k: os.environ.get(k) for k in SDK_ENV}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", refuse)
        mp.setattr(socket.socket, "connect_ex", refuse)
        mp.setattr(socket, "create_connection", refuse)
        mp.setattr(socket, "getaddrinfo", refuse)
        first, second = definition_json(SETTINGS), definition_json(SETTINGS)
        fsx = build_definition(FSX_SETTINGS)
        tensorflow = build_definition(TF_SETTINGS)
    return {
        "text": first,
        "again": second,
        "fsx": fsx,
        "tensorflow": tensorflow,
        "attempts": attempts,
        "env_before": env_before,
        "env_after": {k: os.environ.get(k) for k in SDK_ENV},
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The builds above, made once per session whichever worker runs this module first (four compiles take seconds)."""
    builds = shared_json(tmp_path_factory, "offline-builds", key_of(__name__), _built_offline)
    return {**builds, "definition": json.loads(builds["text"])}


@pytest.fixture(scope="module")
def definition(built):
    return built["definition"]


@pytest.fixture(scope="module")
def steps(definition):
    return all_steps(definition)


def refs(node, found=None) -> set[str]:
    """Every {"Get": ...} target in a JSON tree."""
    found = set() if found is None else found
    if isinstance(node, dict):
        if set(node) == {"Get"}:
            found.add(node["Get"])
        for value in node.values():
            refs(value, found)
    elif isinstance(node, list):
        for value in node:
            refs(value, found)
    return found


def param(name: str) -> dict:
    return {"Get": f"Parameters.{name}"}


def as_string(name: str) -> dict:
    return {"Std:Join": {"On": "", "Values": [param(name)]}}


def args_of(step: dict) -> dict:
    """A processing step's ContainerArguments as flag -> value."""
    arguments = step["Arguments"]["AppSpecification"]["ContainerArguments"]
    return dict(zip(arguments[::2], arguments[1::2]))


# -- building ----------------------------------------------------------------------------------


def test_builds_without_network_and_restores_the_environment(built):
    assert built["attempts"] == []
    assert built["env_after"] == built["env_before"]


def test_same_settings_give_byte_identical_json(built):
    assert built["text"] == built["again"]
    assert built["text"] == json.dumps(json.loads(built["text"]), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def test_cloudformation_tokens_pass_through_unchanged(built, steps):
    for name in ("Shard", "TrainHeterogeneous", "TrainBaseline", "Evaluate", "EvaluateWithoutBaseline"):
        assert steps[name]["Arguments"]["RoleArn"] == ROLE
    assert steps["TrainHeterogeneous"]["Arguments"]["HyperParameters"]["sagemaker_submit_directory"] == CODE
    assert args_of(steps["Evaluate"])["--store"] == f"s3://{BUCKET}/hetero/results"
    for text in (built["text"], json.dumps(built["fsx"])):
        assert "placeholder" not in text
    fsx_text = json.dumps(built["fsx"])
    for token in (FSX.file_system_id, FSX.directory_path, *FSX.subnets, *FSX.security_group_ids):
        assert token in fsx_text


def test_empty_settings_are_refused_before_the_sdk_runs():
    with pytest.raises(UserError, match="role_arn"):
        build_definition(
            DeploySettings(pipeline_name="p", region="eu-west-1", role_arn="", bucket="b", code_uri="s3://b/c.tar.gz")
        )
    with pytest.raises(UserError, match="prefix"):
        build_definition(
            DeploySettings(pipeline_name="p", region="eu-west-1", role_arn="r", bucket="b", code_uri="c", prefix="/x/")
        )


def test_every_reference_points_at_a_declared_parameter_or_step(definition, steps):
    declared = {p["Name"] for p in definition["Parameters"]}
    for target in refs(definition["Steps"]):
        kind, _, rest = target.partition(".")
        if kind == "Parameters":
            assert rest in declared, target
        elif kind == "Steps":
            assert rest.split(".")[0] in steps, target
        else:
            # execution variables the local runner's scope and `hetero start`'s request check both supply
            assert target in ("Execution.PipelineExecutionId", "Execution.PipelineExecutionArn", "Execution.PipelineName"), target


# -- parameters --------------------------------------------------------------------------------


def test_every_graph_parameter_is_a_pipeline_parameter_with_its_default(definition):
    declared = {p["Name"]: p for p in definition["Parameters"]}
    assert list(declared) == [p.name for p in TUNABLES]
    for p in TUNABLES:
        assert declared[p.name]["Type"] == TYPES[p.type], p.name
        if p.name not in ("InputData", "DataSource", "PriceOverrides"):
            assert declared[p.name]["DefaultValue"] == p.default, p.name
    assert declared["InputData"]["DefaultValue"] == f"s3://{BUCKET}/hetero/raw/"
    assert declared["DataSource"]["DefaultValue"] == "S3"
    # an object holding {} (a processing input cannot be empty): where it is unless the deployment names one (CDK: an asset)
    assert declared["PriceOverrides"]["DefaultValue"] == f"s3://{BUCKET}/hetero/price-overrides/none.json"


# -- training ----------------------------------------------------------------------------------


def test_heterogeneous_job_has_two_parameterised_instance_groups(steps):
    groups = steps["TrainHeterogeneous"]["Arguments"]["ResourceConfig"]["InstanceGroups"]
    assert groups == [
        {"InstanceGroupName": DATA_GROUP, "InstanceType": param("DataInstanceType"), "InstanceCount": param("DataInstanceCount")},
        {"InstanceGroupName": DNN_GROUP, "InstanceType": param("DnnInstanceType"), "InstanceCount": param("DnnInstanceCount")},
    ]


def test_baseline_is_the_dnn_group_alone(steps):
    groups = steps["TrainBaseline"]["Arguments"]["ResourceConfig"]["InstanceGroups"]
    assert groups == [
        {"InstanceGroupName": DNN_GROUP, "InstanceType": param("DnnInstanceType"), "InstanceCount": param("DnnInstanceCount")}
    ]


def channels(step: dict) -> dict:
    return {c["ChannelName"]: c for c in step["Arguments"]["InputDataConfig"]}


def test_training_channel_is_sharded_by_parameter_onto_the_data_group_only(steps):
    train = channels(steps["TrainHeterogeneous"])["train"]
    s3 = train["DataSource"]["S3DataSource"]
    assert s3["S3DataDistributionType"] == param("DataDistribution")
    assert s3["InstanceGroupNames"] == [DATA_GROUP]
    assert train["InputMode"] == param("InputMode")
    assert s3["S3Uri"]["Std:Join"]["Values"] == [
        {"Get": "Steps.Shard.ProcessingOutputConfig.Outputs['output'].S3Output.S3Uri"},
        "train",
    ]


def test_the_dnn_hosts_stream_the_training_shards_and_hold_no_copy_of_them(steps):
    """Hybrid decode: the dnn group sees every shard, read on demand (FastFile), so with TrainerCpus=all (no decode there)
    nothing moves and nothing lands on its volume; the baseline's trainers decode everything and download it."""
    local = channels(steps["TrainHeterogeneous"])[HYBRID_CHANNEL]
    assert (local["InputMode"], local["DataSource"]["S3DataSource"]["InstanceGroupNames"]) == ("FastFile", [DNN_GROUP])
    assert channels(steps["TrainBaseline"])["train"]["InputMode"] == param("InputMode")
    assert HYBRID_CHANNEL not in channels(steps["TrainBaseline"])


def test_every_job_sizes_its_volume_by_the_parameter(steps):
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        assert steps[name]["Arguments"]["ResourceConfig"]["VolumeSizeInGB"] == param("VolumeSizeGB")
    for name in ("Shard", "Evaluate"):
        assert steps[name]["Arguments"]["ProcessingResources"]["ClusterConfig"]["VolumeSizeInGB"] == param("VolumeSizeGB")


def test_validation_reaches_the_trainers_and_the_manifest_every_host(steps):
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        chans = channels(steps[name])
        assert chans["validation"]["DataSource"]["S3DataSource"]["InstanceGroupNames"] == [DNN_GROUP]
        assert chans["validation"]["DataSource"]["S3DataSource"]["S3DataDistributionType"] == REPLICATED
        assert chans["manifest"]["DataSource"]["S3DataSource"]["S3Uri"]["Std:Join"]["Values"][-1] == "manifest.json"
    baseline_train = channels(steps["TrainBaseline"])["train"]["DataSource"]["S3DataSource"]
    assert (baseline_train["S3DataDistributionType"], baseline_train["InstanceGroupNames"]) == (REPLICATED, [DNN_GROUP])
    # data hosts (the TensorFlow workers) and trainers read the manifest
    assert channels(steps["TrainHeterogeneous"])["manifest"]["DataSource"]["S3DataSource"]["InstanceGroupNames"] == [
        DATA_GROUP,
        DNN_GROUP,
    ]
    assert channels(steps["TrainBaseline"])["manifest"]["DataSource"]["S3DataSource"]["InstanceGroupNames"] == [DNN_GROUP]


def test_every_channel_of_a_job_names_its_instance_groups(steps):
    """CreateTrainingJob rejects a heterogeneous job where some channels are assigned to groups and others not."""
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        assert all(
            c["DataSource"]["S3DataSource"].get("InstanceGroupNames") for c in steps[name]["Arguments"]["InputDataConfig"]
        ), name


def test_metric_definitions_scrape_the_trainers_metric_lines(steps):
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        assert steps[name]["Arguments"]["AlgorithmSpecification"]["MetricDefinitions"] == METRIC_DEFINITIONS
    line = metric_line(step=120, step_time_ms=86.1, samples_per_sec=744.2, data_wait_pct=3.5, loss=0.25, accuracy=0.94)
    for metric in METRIC_DEFINITIONS:
        assert re.search(metric["Regex"], line), metric["Name"]


def test_gpu_image_is_passed_explicitly(steps, built):
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        image = steps[name]["Arguments"]["AlgorithmSpecification"]["TrainingImage"]
        assert image == default_training_image("eu-west-1", "pytorch") and ".eu-west-1." in image, image
    processing = steps["Shard"]["Arguments"]["AppSpecification"]["ImageUri"]
    assert processing == default_processing_image("eu-west-1", "pytorch") and "-cpu-" in processing
    fsx_steps = all_steps(built["fsx"])
    assert fsx_steps["TrainHeterogeneous"]["Arguments"]["AlgorithmSpecification"]["TrainingImage"] == FSX_SETTINGS.training_image
    assert fsx_steps["Evaluate"]["Arguments"]["AppSpecification"]["ImageUri"] == FSX_SETTINGS.processing_image


def test_the_entry_point_runs_as_the_containers_first_process_so_sigterm_reaches_it(steps):
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        entry = steps[name]["Arguments"]["AlgorithmSpecification"]["ContainerEntrypoint"]
        assert entry[:2] == ["python3", "-c"] and all(len(part) <= 256 for part in entry)  # the service's limit per item
        assert "download_and_extract(v.module_dir" in entry[2] and "os.execv(" in entry[2]  # script mode's code, then exec
        assert "entry_point as p" in entry[2] and "p.install(u,c)" in entry[2]  # the toolkit installs requirements.txt first


def test_script_mode_hyperparameters_and_the_graphs_own(steps):
    hp = steps["TrainHeterogeneous"]["Arguments"]["HyperParameters"]
    assert hp["sagemaker_program"] == "steps/train/launcher.py"
    assert hp["sagemaker_submit_directory"] == CODE
    assert (
        hp["epochs"] == as_string("Epochs")
        and hp["batch_size"] == as_string("BatchSize")
        and hp["max_steps"] == as_string("MaxSteps")
    )
    assert hp["workload"] == param("Workload") and hp["workload_options"] == param("WorkloadOptions")
    assert (hp["data_group"], hp["dnn_group"]) == (DATA_GROUP, DNN_GROUP)
    known = set(TrainConfig.help())
    assert {k for k in hp if not k.startswith("sagemaker_")} <= known
    assert all(isinstance(v, (str, dict)) for v in hp.values())  # SageMaker takes strings only
    assert "SourceCode" not in json.dumps(steps["TrainHeterogeneous"])


def test_the_job_secret_is_a_channel_from_shard_never_the_environment(steps):
    """DescribeTrainingJob shows a job's Environment: the secret is the random file Shard writes for the execution."""
    assert args_of(steps["Shard"])["--output"] == "/opt/ml/processing/output"  # the CLI writes <output>/secret/job-secret
    for name, groups in (("TrainHeterogeneous", [DATA_GROUP, DNN_GROUP]), ("TrainBaseline", [DNN_GROUP])):
        a = steps[name]["Arguments"]
        assert "Environment" not in a and "HETERO_JOB_SECRET" not in json.dumps(a)
        s3 = channels(steps[name])["secret"]["DataSource"]["S3DataSource"]
        assert s3["S3Uri"]["Std:Join"]["Values"] == [
            {"Get": "Steps.Shard.ProcessingOutputConfig.Outputs['output'].S3Output.S3Uri"},
            "secret",
        ]
        assert (s3["InstanceGroupNames"], s3["S3DataDistributionType"]) == (groups, REPLICATED)
        assert channels(steps[name])["secret"]["InputMode"] == "File"  # a file the host can remove once read


def test_outputs_and_checkpoints_are_keyed_by_the_execution(steps):
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        a = steps[name]["Arguments"]
        assert a["OutputDataConfig"]["S3OutputPath"]["Std:Join"]["Values"] == [
            f"s3://{BUCKET}/hetero",
            {"Get": "Execution.PipelineExecutionId"},
            name,
        ]
        # checkpoints per execution and step: a spot restart or a retry of the step resumes from them
        assert a["CheckpointConfig"] == {
            "LocalPath": "/opt/ml/checkpoints",
            "S3Uri": {
                "Std:Join": {
                    "On": "/",
                    "Values": [f"s3://{BUCKET}/hetero", {"Get": "Execution.PipelineExecutionId"}, name, "checkpoints"],
                }
            },
        }
        assert "EnableManagedSpotTraining" not in a and "MaxWaitTimeInSeconds" not in a["StoppingCondition"]
        assert steps[name]["RetryPolicies"] == [
            {
                "ExceptionType": ["SageMaker.CAPACITY_ERROR", "SageMaker.JOB_INTERNAL_ERROR"],
                "MaxAttempts": 3,
                "IntervalSeconds": 60,
                "BackoffRate": 2.0,
            }
        ]
        assert "VpcConfig" not in a


# -- processing --------------------------------------------------------------------------------


def test_shard_runs_the_script_from_the_code_tarball(steps):
    shard = steps["Shard"]["Arguments"]
    entry = shard["AppSpecification"]["ContainerEntrypoint"]
    assert entry[:2] == ["/bin/sh", "-c"] and "tar -xzf" in entry[2] and "python3 steps/shard/shard.py" in entry[2]
    inputs = {i["InputName"]: i["S3Input"] for i in shard["ProcessingInputs"]}
    assert inputs["code"]["S3Uri"] == CODE
    assert inputs["input"]["S3Uri"] == param("InputData")
    flags = args_of(steps["Shard"])
    assert flags["--input"] == inputs["input"]["LocalPath"]
    assert flags["--target-shard-mb"] == as_string("ShardSizeMB") and flags["--data-hosts"] == as_string("DataInstanceCount")
    output = shard["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]
    assert output["LocalPath"] == flags["--output"]
    assert output["S3Uri"]["Std:Join"]["Values"] == [f"s3://{BUCKET}/hetero", {"Get": "Execution.PipelineExecutionId"}, "Shard"]


def test_evaluate_reads_both_models_and_exposes_price_performance(steps):
    evaluate = steps["Evaluate"]
    assert evaluate["PropertyFiles"] == [
        {"PropertyFileName": "PricePerformance", "OutputName": "output", "FilePath": "price_performance.json"},
        {"PropertyFileName": "ModelMetrics", "OutputName": "output", "FilePath": "model_metrics.json"},
    ]
    inputs = {i["InputName"]: i["S3Input"]["S3Uri"] for i in evaluate["Arguments"]["ProcessingInputs"]}
    assert inputs["heterogeneous"] == {"Get": "Steps.TrainHeterogeneous.ModelArtifacts.S3ModelArtifacts"}
    assert inputs["baseline"] == {"Get": "Steps.TrainBaseline.ModelArtifacts.S3ModelArtifacts"}
    flags = args_of(evaluate)
    assert flags["--execution-id"] == {"Get": "Execution.PipelineExecutionId"}
    assert flags["--store"] == f"s3://{BUCKET}/hetero/results"
    for run, step in (("heterogeneous", "TrainHeterogeneous"), ("baseline", "TrainBaseline")):  # a spot run is priced as billed
        assert flags[f"--billing-{run}"] == {
            "Std:Join": {
                "On": "/",
                "Values": [{"Get": f"Steps.{step}.BillableTimeInSeconds"}, {"Get": f"Steps.{step}.TrainingTimeInSeconds"}],
            }
        }
    assert "python3 steps/evaluate/evaluate.py" in evaluate["Arguments"]["AppSpecification"]["ContainerEntrypoint"][2]


def test_the_price_file_reaches_evaluate_as_an_input_never_as_an_argument(steps, built):
    """A refreshed table (about 100 types, several KB) is far over a ContainerArguments item's 256 characters and a
    parameter value's 1024: the parameter is the file's S3 URI, and each Evaluate job downloads the file."""
    for name in ("Evaluate", "EvaluateWithoutBaseline"):
        args = steps[name]["Arguments"]
        inputs = {i["InputName"]: i["S3Input"] for i in args["ProcessingInputs"]}
        assert inputs["prices"]["S3Uri"] == param("PriceOverrides") and inputs["prices"]["S3DataType"] == "S3Prefix"
        flags = args_of(steps[name])
        assert flags["--prices"] == inputs["prices"]["LocalPath"] == "/opt/ml/processing/input/prices"
        assert "PriceOverrides" not in json.dumps(args["AppSpecification"])
    declared = {p["Name"]: p for p in built["tensorflow"]["Parameters"]}
    assert declared["PriceOverrides"]["DefaultValue"] == f"s3://{BUCKET}/hetero/price-overrides/none.json"
    named = build_definition(replace(SETTINGS, price_overrides_uri="${Token[TOKEN.301]}"))  # the CDK app's asset
    assert {p["Name"]: p for p in named["Parameters"]}["PriceOverrides"]["DefaultValue"] == "${Token[TOKEN.301]}"


def test_a_refreshed_100_type_price_file_passes_every_request_check(tmp_path, compile_once):
    from pipeline.sagemaker.validation import validate_execution
    from tests.support.deploy import CONCRETE_SETTINGS
    from tests.support.prices import refreshed_price_file

    file = refreshed_price_file(tmp_path / "prices-override.json")
    assert len(json.loads(file.read_text())["prices"]) == 100 and file.stat().st_size > 2048
    definition = compile_once(CONCRETE_SETTINGS)
    params = {p["Name"]: p.get("DefaultValue") for p in definition["Parameters"]}
    params["PriceOverrides"] = "s3://my-bucket/hetero/price-overrides/0123456789abcdef.json"  # what `hetero start` uploads
    validate_execution(
        definition,
        params,
        {
            "PipelineExecutionId": "abcdef123456",
            "PipelineName": "hetero-test",
            "PipelineExecutionArn": "arn:aws:sagemaker:eu-west-1:123456789012:pipeline/hetero-test/execution/abcdef123456",
        },
    )


def test_shard_names_the_users_input_in_its_messages(steps):
    assert args_of(steps["Shard"])["--input-source"] == param("InputData")


# -- control flow ------------------------------------------------------------------------------


def names(steps_list) -> list[str]:
    return [s["Name"] for s in steps_list]


def test_baseline_is_skipped_by_a_condition_with_evaluation_in_both_branches(definition, steps):
    assert names(definition["Steps"]) == ["CheckParameters", "TrainHeterogeneous", "RunBaselineGate"]
    gate = steps["RunBaselineGate"]["Arguments"]
    assert gate["Conditions"] == [{"Type": "Equals", "LeftValue": param("RunBaseline"), "RightValue": True}]
    assert names(gate["IfSteps"]) == ["TrainBaseline", "Evaluate", "RegisterModel", "CheckImprovement"]
    assert names(gate["ElseSteps"]) == ["EvaluateWithoutBaseline", "RegisterModelWithoutBaseline"]
    without = steps["EvaluateWithoutBaseline"]
    assert "TrainBaseline" not in json.dumps(without) and "--baseline" not in args_of(without)
    assert "--billing-baseline" not in args_of(without) and "--billing-heterogeneous" in args_of(without)
    assert args_of(without)["--heterogeneous"] == "/opt/ml/processing/input/heterogeneous"


def test_a_serving_image_of_the_deployments_own_is_the_packages_only_one():
    mine = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/hetero-pytorch-serve:2.13.0-cpu"
    request = all_steps(build_definition(replace(SETTINGS, serving_image=mine)))["RegisterModel"]["Arguments"]
    assert [c["Image"] for c in request["InferenceSpecification"]["Containers"]] == [mine]
    assert "AdditionalInferenceSpecifications" not in request


@pytest.mark.parametrize(
    "register, evaluate", [("RegisterModel", "Evaluate"), ("RegisterModelWithoutBaseline", "EvaluateWithoutBaseline")]
)
def test_register_files_the_heterogeneous_model_with_evaluates_metrics(steps, register, evaluate):
    request = steps[register]["Arguments"]
    assert steps[register]["Type"] == "RegisterModel"
    assert request["ModelPackageGroupName"] == "hetero-test-models"  # derived from the pipeline name
    serving = request["InferenceSpecification"]
    (container,) = serving["Containers"]
    assert container == {  # the inference image: the package deploys (its code/ written by every training host)
        "Image": "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-inference:2.6.0-cpu-py312-ubuntu22.04-sagemaker",
        "ModelDataUrl": {"Get": "Steps.TrainHeterogeneous.ModelArtifacts.S3ModelArtifacts"},
    }
    assert serving["SupportedContentTypes"] == ["application/x-image", "image/jpeg", "image/png"]
    assert serving["SupportedResponseMIMETypes"] == ["application/json"]
    for kind in ("SupportedRealtimeInferenceInstanceTypes", "SupportedTransformInstanceTypes"):  # the catalogue's CPU types
        assert {"ml.c5.xlarge", "ml.m5.large", "ml.c7i.48xlarge"} <= set(serving[kind])
        assert not [t for t in serving[kind] if t.startswith(("ml.g", "ml.p"))]
    (gpu,) = request["AdditionalInferenceSpecifications"]  # the same artefact on the GPU image, for the GPU types
    assert gpu["Name"] == GPU_SPECIFICATION and gpu["Containers"] == [
        {
            **container,
            "Image": "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-inference:2.6.0-gpu-py312-cu124-ubuntu22.04-sagemaker",
        }
    ]
    assert gpu["SupportedContentTypes"] == serving["SupportedContentTypes"]
    assert gpu["SupportedResponseMIMETypes"] == serving["SupportedResponseMIMETypes"]
    for kind in ("SupportedRealtimeInferenceInstanceTypes", "SupportedTransformInstanceTypes"):
        assert "ml.g5.xlarge" in gpu[kind] and all(t.startswith(("ml.g", "ml.p")) for t in gpu[kind])

    def field(path):
        return {"Std:JsonGet": {"PropertyFile": {"Get": f"Steps.{evaluate}.PropertyFiles.ModelMetrics"}, "Path": path}}

    assert request["ModelApprovalStatus"] == field("approval.status")
    metadata = request["CustomerMetadataProperties"]
    assert metadata["execution_id"] == {"Get": "Execution.PipelineExecutionId"}
    for key in ("accuracy", "samples_per_second", "samples_per_dollar", "improvement", "bottleneck", "recommendation"):
        assert metadata[key] == field(f"metadata.{key}")
    statistics = request["ModelMetrics"]["ModelQuality"]["Statistics"]
    output = {"Get": f"Steps.{evaluate}.ProcessingOutputConfig.Outputs['output'].S3Output.S3Uri"}
    assert statistics == {
        "ContentType": "application/json",
        "S3Uri": {"Std:Join": {"On": "/", "Values": [output, "model_metrics.json"]}},
    }
    flags = args_of(steps[evaluate])
    assert flags["--registry"] == "sagemaker://hetero-test-models"
    assert flags["--approve-margin"] == as_string("AutoApproveMargin")
    assert flags["--improvement-threshold"] == as_string("ImprovementThreshold")


@pytest.mark.slow  # compiles a definition of its own (0.7-0.8 s)
def test_a_named_model_package_group_is_registered_in():
    definition = build_definition(replace(SETTINGS, model_package_group="team-models"))
    register = all_steps(definition)["RegisterModel"]["Arguments"]
    assert register["ModelPackageGroupName"] == "team-models"
    assert args_of(all_steps(definition)["Evaluate"])["--registry"] == "sagemaker://team-models"


def test_a_bad_model_package_group_name_is_refused():
    with pytest.raises(UserError, match="model package group 'team_models'"):
        build_definition(replace(SETTINGS, model_package_group="team_models"))


def test_check_improvement_fails_the_execution_below_the_threshold(steps):
    check = steps["CheckImprovement"]["Arguments"]
    improvement = {
        "Std:JsonGet": {"PropertyFile": {"Get": "Steps.Evaluate.PropertyFiles.PricePerformance"}, "Path": "improvement"}
    }
    assert check["Conditions"] == [
        {"Type": "GreaterThan", "LeftValue": param("ImprovementThreshold"), "RightValue": -1},  # -1: never fail
        {"Type": "LessThan", "LeftValue": improvement, "RightValue": param("ImprovementThreshold")},
    ]
    (fail,) = check["IfSteps"]
    assert fail["Type"] == "Fail" and check["ElseSteps"] == []
    message = fail["Arguments"]["ErrorMessage"]["Std:Join"]["Values"]
    assert build_graph().step("CheckImprovement").message in message[0]
    assert improvement in message and param("ImprovementThreshold") in message


def test_parameters_the_deployment_cannot_honour_fail_before_any_job(steps):
    check = steps["CheckParameters"]["Arguments"]
    assert check["Conditions"][0] == {"Type": "Equals", "LeftValue": param("DataSource"), "RightValue": "S3"}
    assert check["Conditions"][1]["Type"] == "Or"
    assert names(check["IfSteps"]) == ["Shard"]
    (fail,) = check["ElseSteps"]
    assert fail["Type"] == "Fail" and "redeploy with FSx" in json.dumps(fail)
    assert len(check["Conditions"]) == 2  # PyTorch trains on any number of dnn hosts


def test_the_tensorflow_pipeline_refuses_several_dnn_hosts_before_any_job(built):
    check = all_steps(built["tensorflow"])["CheckParameters"]["Arguments"]
    assert check["Conditions"][2] == {"Type": "LessThanOrEqualTo", "LeftValue": param("DnnInstanceCount"), "RightValue": 1}
    (fail,) = check["ElseSteps"]
    message = fail["Arguments"]["ErrorMessage"]["Std:Join"]["Values"]
    assert param("DnnInstanceCount") in message and any("tensorflow path trains on at most 1 dnn host" in str(v) for v in message)


# -- FSx ---------------------------------------------------------------------------------------


def test_fsx_variant_mounts_lustre_in_the_vpc(built):
    definition = built["fsx"]
    fsx_steps = all_steps(definition)
    declared = {p["Name"]: p["DefaultValue"] for p in definition["Parameters"]}
    assert declared["DataSource"] == "FSx" and declared["InputData"] == f"s3://{BUCKET}/team/hetero/raw/"
    assert fsx_steps["CheckParameters"]["Arguments"]["Conditions"][0]["RightValue"] == "FSx"
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        a = fsx_steps[name]["Arguments"]
        assert a["VpcConfig"] == {"Subnets": list(FSX.subnets), "SecurityGroupIds": list(FSX.security_group_ids)}
        train = channels(fsx_steps[name])["train"]
        source = train["DataSource"]["FileSystemDataSource"]
        assert source["FileSystemId"] == FSX.file_system_id and source["FileSystemType"] == "FSxLustre"
        assert source["FileSystemAccessMode"] == "ro" and train["InputMode"] == "File"
        assert source["DirectoryPath"]["Std:Join"]["Values"] == [
            FSX.directory_path,
            "/",
            {"Get": "Execution.PipelineExecutionId"},
            "/Shard/train",
        ]
        assert "S3DataSource" in channels(fsx_steps[name])["validation"]["DataSource"]
        # a file-system channel mounts on every group, and channels are assigned to groups all or none
        assert not any(c["DataSource"].get("S3DataSource", {}).get("InstanceGroupNames") for c in a["InputDataConfig"])
    assert "VpcConfig" not in fsx_steps["Shard"]["Arguments"]


ISOLATED = replace(SETTINGS, code_uri=f"s3://{BUCKET}/{'0' * 64}.gz", network_isolation=True)  # a CDK asset's URL


@pytest.mark.slow
def test_encryption_and_isolation_are_training_job_options_off_by_default(steps):
    locked = all_steps(build_definition(replace(ISOLATED, inter_container_encryption=True)))
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        assert locked[name]["Arguments"]["EnableInterContainerTrafficEncryption"] is True
        assert locked[name]["Arguments"]["EnableNetworkIsolation"] is True
        assert not steps[name]["Arguments"].get("EnableInterContainerTrafficEncryption")
        assert not steps[name]["Arguments"].get("EnableNetworkIsolation")
        assert "VpcConfig" not in locked[name]["Arguments"]
    for name in ("Shard", "Evaluate"):  # they call S3 themselves
        assert "NetworkConfig" not in locked[name]["Arguments"]


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_isolated_training_jobs_get_the_code_as_a_channel_on_every_group_and_fetch_nothing(steps, framework):
    isolated = all_steps(build_definition(replace(ISOLATED, framework=framework)))
    unisolated = all_steps(build_definition(replace(ISOLATED, framework=framework, network_isolation=False)))
    for name, groups in (("TrainHeterogeneous", [DATA_GROUP, DNN_GROUP]), ("TrainBaseline", [DNN_GROUP])):
        a = isolated[name]["Arguments"]
        code = channels(isolated[name])["code"]
        assert code["InputMode"] == "File" and code["DataSource"]["S3DataSource"] == {
            "S3DataType": "S3Prefix",
            "S3Uri": ISOLATED.code_uri,
            "S3DataDistributionType": REPLICATED,
            "InstanceGroupNames": groups,
        }
        # the toolkit's download_and_extract unpacks a local tar.gz path: no S3 call in the container
        assert a["HyperParameters"]["sagemaker_submit_directory"] == f"/opt/ml/input/data/code/{'0' * 64}.gz"
        assert not [k for k, v in a["HyperParameters"].items() if "s3://" in json.dumps(v)], name
        assert all(c["DataSource"]["S3DataSource"].get("InstanceGroupNames") for c in a["InputDataConfig"])  # all or none
        # nothing else changes: the other channels and hyperparameters are the unisolated job's
        plain = unisolated[name]["Arguments"]
        assert [c for c in a["InputDataConfig"] if c["ChannelName"] != "code"] == plain["InputDataConfig"]
        assert {**a["HyperParameters"], "sagemaker_submit_directory": ISOLATED.code_uri} == plain["HyperParameters"]
    assert isolated["Shard"]["Arguments"]["ProcessingInputs"][0]["S3Input"]["S3Uri"] == ISOLATED.code_uri  # as before


def test_an_isolated_fsx_job_mounts_its_code_channel_on_every_group_unassigned():
    fsx = all_steps(build_definition(replace(FSX_SETTINGS, code_uri="s3://b/code/code.tar.gz", network_isolation=True)))
    a = fsx["TrainHeterogeneous"]["Arguments"]
    assert "InstanceGroupNames" not in channels(fsx["TrainHeterogeneous"])["code"]["DataSource"]["S3DataSource"]
    assert not any(c["DataSource"].get("S3DataSource", {}).get("InstanceGroupNames") for c in a["InputDataConfig"])
    assert a["HyperParameters"]["sagemaker_submit_directory"] == "/opt/ml/input/data/code/code.tar.gz"


def test_isolation_needs_a_code_uri_whose_object_name_is_known_when_compiling():
    with pytest.raises(UserError, match=r"code_uri '\$\{Token\[TOKEN.103\]\}'.*s3_object_key") as caught:
        build_definition(replace(SETTINGS, network_isolation=True))  # CODE is one opaque token
    assert caught.value.headline == "bad deploy settings"


@pytest.mark.slow
def test_spot_is_a_training_job_option_with_its_wait_and_the_service_accepts_both_shapes(steps):
    spot = all_steps(build_definition(replace(SETTINGS, spot=True)))
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        a = spot[name]["Arguments"]
        assert a["EnableManagedSpotTraining"] is True
        assert a["StoppingCondition"] == {"MaxRuntimeInSeconds": 21600, "MaxWaitTimeInSeconds": 43200}
        assert a["CheckpointConfig"] == steps[name]["Arguments"]["CheckpointConfig"]
    for name in ("Shard", "Evaluate"):
        assert spot[name]["Arguments"] == steps[name]["Arguments"]


# -- framework ---------------------------------------------------------------------------------


def image_of(step: dict) -> str:
    arguments = step["Arguments"]
    return (
        arguments["AlgorithmSpecification"]["TrainingImage"]
        if "AlgorithmSpecification" in arguments
        else arguments["AppSpecification"]["ImageUri"]
    )


def test_pytorch_is_the_default_framework_with_webdataset_shards(steps):
    assert SETTINGS.framework == "pytorch"
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        assert steps[name]["Arguments"]["HyperParameters"]["framework"] == "pytorch"
        assert image_of(steps[name]) == default_training_image("eu-west-1", "pytorch")
    assert args_of(steps["Shard"])["--format"] == "webdataset"
    for name in PROCESSING_STEPS:
        assert image_of(steps[name]) == default_processing_image("eu-west-1", "pytorch")


def test_tensorflow_trains_in_the_tensorflow_gpu_container(built):
    tf_steps = all_steps(built["tensorflow"])
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        image = image_of(tf_steps[name])
        assert re.fullmatch(
            r"\d{12}\.dkr\.ecr\.eu-west-1\.amazonaws\.com/tensorflow-training:([\d.]+)-gpu-py3\d+(-[a-z0-9]+)*", image
        ), image
        version = tuple(int(x) for x in image.split(":")[1].split("-")[0].split("."))
        assert version >= (2, 6), image  # heterogeneous clusters need TensorFlow >= 2.6
        assert tf_steps[name]["Arguments"]["HyperParameters"]["framework"] == "tensorflow"


def test_tensorflow_shards_tfrecords_in_the_tensorflow_cpu_container(built):
    tf_steps = all_steps(built["tensorflow"])
    assert args_of(tf_steps["Shard"])["--format"] == "tfrecord"
    training = image_of(tf_steps["TrainHeterogeneous"])
    for name in PROCESSING_STEPS:  # the Shard step writes TFRecords with tf.io: it needs TensorFlow
        image = image_of(tf_steps[name])
        assert image == default_processing_image("eu-west-1", "tensorflow"), (name, image)
        # the training image's repository, CPU variant (its tag names no CUDA: not the GPU tag with -cpu- for -gpu-)
        assert image.split(":")[0] == training.split(":")[0] and "-cpu-" in image.split(":")[1], (name, image)
    assert "placeholder" not in json.dumps(built["tensorflow"])


def test_explicit_images_win_over_the_frameworks_defaults():
    definition = build_definition(replace(TF_SETTINGS, training_image="img:gpu", processing_image="img:cpu"))
    tf_steps = all_steps(definition)
    assert image_of(tf_steps["TrainHeterogeneous"]) == "img:gpu" and image_of(tf_steps["Shard"]) == "img:cpu"
    assert tf_steps["TrainHeterogeneous"]["Arguments"]["HyperParameters"]["framework"] == "tensorflow"


@pytest.mark.parametrize("framework", ["jax", "TensorFlow", ""])
def test_an_unknown_framework_is_a_user_error_naming_it(framework):
    with pytest.raises(UserError, match=f"framework {framework!r}.*pytorch, tensorflow, ray"):
        build_definition(replace(SETTINGS, framework=framework))


RAY_IMAGE = "111122223333.dkr.ecr.eu-west-1.amazonaws.com/hetero-ray:2.60.0"


def test_the_ray_pipeline_needs_a_training_image_with_ray_and_says_how_to_build_it():
    with pytest.raises(UserError, match=r"framework ray has no AWS training image.*images/ray/Dockerfile.*hetero:trainingImage"):
        build_definition(replace(SETTINGS, framework="ray"))


@pytest.mark.slow
def test_the_ray_pipeline_replicates_the_shards_to_every_host_and_runs_the_ray_image():
    ray_steps = all_steps(build_definition(replace(SETTINGS, framework="ray", training_image=RAY_IMAGE)))
    hetero = channels(ray_steps["TrainHeterogeneous"])
    assert set(hetero) == {"train", "validation", "manifest", "secret"}  # Ray Data reads the shards itself: no train_local
    train = hetero["train"]["DataSource"]["S3DataSource"]
    assert (train["S3DataDistributionType"], train["InstanceGroupNames"]) == (REPLICATED, [DATA_GROUP, DNN_GROUP])
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        assert image_of(ray_steps[name]) == RAY_IMAGE
        assert ray_steps[name]["Arguments"]["HyperParameters"]["framework"] == "ray"
    assert args_of(ray_steps["Shard"])["--format"] == "webdataset"
    for name in PROCESSING_STEPS:  # shard and evaluate need no Ray: the PyTorch CPU image
        assert image_of(ray_steps[name]) == default_processing_image("eu-west-1", "pytorch")


# -- command line ------------------------------------------------------------------------------


def test_hetero_definition_prints_the_json(capsys):
    assert main(["definition", "--bucket", "my-bucket", "--region", "eu-central-1"]) == 0
    definition = json.loads(capsys.readouterr().out)
    shard = all_steps(definition)["Shard"]["Arguments"]
    assert {i["InputName"]: i["S3Input"]["S3Uri"] for i in shard["ProcessingInputs"]}[
        "code"
    ] == "s3://my-bucket/hetero/code/code.tar.gz"
    assert ".eu-central-1." in shard["AppSpecification"]["ImageUri"]


@pytest.mark.slow
def test_hetero_definition_network_isolation_flag_ships_the_code_as_a_channel(capsys):
    assert main(["definition", "--bucket", "my-bucket", "--network-isolation"]) == 0
    hetero = all_steps(json.loads(capsys.readouterr().out))["TrainHeterogeneous"]["Arguments"]
    assert hetero["EnableNetworkIsolation"] is True
    assert (
        channels({"Arguments": hetero})["code"]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://my-bucket/hetero/code/code.tar.gz"
    )
    assert hetero["HyperParameters"]["sagemaker_submit_directory"] == "/opt/ml/input/data/code/code.tar.gz"


def test_a_token_region_needs_explicit_images_and_passes_through():
    region = "${Token[AWS.Region.9]}"
    with pytest.raises(UserError, match="training_image"):
        build_definition(DeploySettings(pipeline_name="p", region=region, role_arn=ROLE, bucket=BUCKET, code_uri=CODE))
    images = {"training_image": "img:gpu", "processing_image": "img:cpu"}
    with pytest.raises(UserError, match=re.escape(f"region '{region}' is not a region name") + ".*pass serving_image too"):
        build_definition(DeploySettings(pipeline_name="p", region=region, role_arn=ROLE, bucket=BUCKET, code_uri=CODE, **images))
    definition = build_definition(
        DeploySettings(
            pipeline_name="p",
            region=region,
            role_arn=ROLE,
            bucket=BUCKET,
            code_uri=CODE,
            training_image="img:gpu",
            processing_image="img:cpu",
            serving_image="img:serve",
        )
    )
    register = all_steps(definition)["RegisterModel"]["Arguments"]
    assert [c["Image"] for c in register["InferenceSpecification"]["Containers"]] == ["img:serve"]
    train = all_steps(definition)["TrainHeterogeneous"]["Arguments"]
    assert train["HyperParameters"]["sagemaker_region"] == region
    assert train["AlgorithmSpecification"]["TrainingImage"] == "img:gpu"
    assert "placeholder" not in json.dumps(definition)


def test_hetero_definition_framework_flag_picks_the_tensorflow_containers(capsys):
    assert main(["definition", "--framework", "tensorflow", "--region", "eu-central-1"]) == 0
    tf_steps = all_steps(json.loads(capsys.readouterr().out))
    assert image_of(tf_steps["TrainHeterogeneous"]) == default_training_image("eu-central-1", "tensorflow")
    assert image_of(tf_steps["Shard"]) == default_processing_image("eu-central-1", "tensorflow")
    assert args_of(tf_steps["Shard"])["--format"] == "tfrecord"
    with pytest.raises(SystemExit):
        main(["definition", "--framework", "jax"])
