"""Requests are checked like CreateTrainingJob / CreateProcessingJob check them: the compiled
definitions pass, and each rule rejects a request that breaks it, naming the step and the rule."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace

import pytest

pytest.importorskip("sagemaker.core", reason="the cloud extra (SageMaker SDK v3) is not installed")

from pipeline import expressions  # noqa: E402
from pipeline.errors import RequestRejected  # noqa: E402
from pipeline.sagemaker.definition import FsxSettings, all_steps  # noqa: E402
from pipeline.sagemaker.validation import validate_request  # noqa: E402
from tests.support.deploy import CONCRETE_SETTINGS as SETTINGS  # noqa: E402

FSX = FsxSettings(
    file_system_id="fs-0123456789abcdef0",
    directory_path="/fsx/dataset",
    subnets=("subnet-0123456789abcdef0",),
    security_group_ids=("sg-0123456789abcdef0",),
)
VARIANTS = {
    "pytorch": SETTINGS,
    "tensorflow": replace(SETTINGS, framework="tensorflow"),
    "fsx": replace(SETTINGS, fsx=FSX),
    "locked-down": replace(SETTINGS, fsx=FSX, inter_container_encryption=True, network_isolation=True),
    "spot": replace(SETTINGS, spot=True),
}
OPERATIONS = {"Training": "CreateTrainingJob", "Processing": "CreateProcessingJob"}


def requests_of(definition: dict, overrides: dict | None = None) -> dict:
    """Every job step's request with the parameters' defaults (or ``overrides``) and stand-in properties
    of the steps it reads, as the service would hand it to CreateTrainingJob / CreateProcessingJob."""
    params = {p["Name"]: p.get("DefaultValue") for p in definition["Parameters"]} | (overrides or {})
    scope = expressions.Scope(
        params,
        {
            "PipelineExecutionId": "abcdef123456",
            "PipelineName": "hetero-test",
            "PipelineExecutionArn": "arn:aws:sagemaker:eu-west-1:123456789012:pipeline/hetero-test/execution/abcdef123456",
        },
    )
    found = {}
    for step in all_steps(definition).values():
        if step["Type"] not in OPERATIONS:
            continue
        request = expressions.evaluate(step["Arguments"], scope)
        found[step["Name"]] = (OPERATIONS[step["Type"]], request)
        scope.steps[step["Name"]] = {
            **request,
            "ModelArtifacts": {"S3ModelArtifacts": "s3://my-bucket/job/output/model.tar.gz"},
            "BillableTimeInSeconds": 1200,
            "TrainingTimeInSeconds": 3600,
        }
    return found


@pytest.fixture(scope="module")
def compiled(compile_once) -> dict:
    return {name: compile_once(settings) for name, settings in VARIANTS.items()}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_compiled_request_passes_the_service_checks(compiled, variant):
    requests = requests_of(compiled[variant])
    assert {"Shard", "TrainHeterogeneous", "TrainBaseline", "Evaluate", "EvaluateWithoutBaseline"} <= set(requests)
    for step, (operation, request) in requests.items():
        validate_request(operation, request, step=step)


@pytest.mark.parametrize(
    "overrides",
    [
        {"DataInstanceCount": 3, "DnnInstanceCount": 2, "DataDistribution": "FullyReplicated"},
        {"InputMode": "FastFile", "RunBaseline": False},
    ],
)
def test_compiled_requests_pass_with_other_parameter_values(compiled, overrides):
    for step, (operation, request) in requests_of(compiled["pytorch"], overrides).items():
        validate_request(operation, request, step=step)


@pytest.fixture
def training(compiled) -> dict:
    return copy.deepcopy(requests_of(compiled["pytorch"])["TrainHeterogeneous"][1])


@pytest.fixture
def processing(compiled) -> dict:
    return copy.deepcopy(requests_of(compiled["pytorch"])["Shard"][1])


def rejected(operation: str, request: dict, match: str) -> str:
    with pytest.raises(RequestRejected, match=match) as caught:
        validate_request(operation, request, step="TrainX")
    message = caught.value.one_line()
    assert message.startswith("ValidationException: step TrainX:") and f"calling the {operation} operation" in message
    return message


def channel(request: dict, name: str) -> dict:
    return next(c for c in request["InputDataConfig"] if c["ChannelName"] == name)


# -- the service model ----------------------------------------------------------------------------


def test_a_missing_required_member_is_rejected(training):
    del training["RoleArn"]
    rejected("CreateTrainingJob", training, "Missing required parameter.*RoleArn")


def test_a_wrong_type_is_rejected(training):
    training["ResourceConfig"]["InstanceGroups"][0]["InstanceCount"] = "2"
    rejected("CreateTrainingJob", training, "InstanceCount")


def test_an_enum_value_the_service_does_not_know_is_rejected(training):
    channel(training, "train")["InputMode"] = "Stream"
    rejected("CreateTrainingJob", training, "Invalid value 'Stream'.*InputMode.*Pipe, File, FastFile")


def test_a_pattern_is_matched_whole(training):
    channel(training, "train")["DataSource"] = {
        "FileSystemDataSource": {
            "FileSystemId": "fs-xyzxyzxyz",
            "FileSystemType": "FSxLustre",
            "FileSystemAccessMode": "ro",
            "DirectoryPath": "/fsx",
        }
    }
    rejected("CreateTrainingJob", training, "FileSystemId failed to satisfy constraint.*pattern")


def test_more_than_five_instance_groups_are_rejected(training):
    group = training["ResourceConfig"]["InstanceGroups"][0]
    training["ResourceConfig"]["InstanceGroups"] = [{**group, "InstanceGroupName": f"g{i}"} for i in range(6)]
    rejected("CreateTrainingJob", training, "InstanceGroups.*less than or equal to 5")


def test_an_over_long_hyperparameter_value_is_rejected(training):
    training["HyperParameters"]["workload_options"] = "x" * 2501
    rejected("CreateTrainingJob", training, "2500")


def test_an_over_long_hyperparameter_key_is_rejected(training):
    training["HyperParameters"]["k" * 257] = "1"
    rejected("CreateTrainingJob", training, "256")


# -- cross-field rules ------------------------------------------------------------------------------


def test_channels_are_assigned_to_instance_groups_all_or_nothing(training):
    del channel(training, "manifest")["DataSource"]["S3DataSource"]["InstanceGroupNames"]
    message = rejected("CreateTrainingJob", training, "Some channels have assigned instance groups")
    assert "['train', 'train_local', 'validation', 'secret'] while others not: ['manifest']" in message


def test_a_file_system_channel_forbids_assigning_any_channel(training):
    channel(training, "train")["DataSource"] = {
        "FileSystemDataSource": {
            "FileSystemId": "fs-0123456789abcdef0",
            "FileSystemType": "FSxLustre",
            "FileSystemAccessMode": "ro",
            "DirectoryPath": "/fsx/x",
        }
    }
    training["VpcConfig"] = {"Subnets": ["subnet-0123456789abcdef0"], "SecurityGroupIds": ["sg-0123456789abcdef0"]}
    rejected(
        "CreateTrainingJob",
        training,
        r"FileSystemDataSource.*cannot be assigned to groups.*\['train_local', 'validation', 'manifest', 'secret'\]",
    )


def test_a_file_system_channel_needs_a_vpc(training):
    for c in training["InputDataConfig"]:
        c["DataSource"].get("S3DataSource", {}).pop("InstanceGroupNames", None)
    channel(training, "train")["DataSource"] = {
        "FileSystemDataSource": {
            "FileSystemId": "fs-0123456789abcdef0",
            "FileSystemType": "FSxLustre",
            "FileSystemAccessMode": "ro",
            "DirectoryPath": "/fsx/x",
        }
    }
    rejected("CreateTrainingJob", training, "needs a VpcConfig")


def test_instance_group_names_are_unique(training):
    groups = training["ResourceConfig"]["InstanceGroups"]
    groups[1]["InstanceGroupName"] = groups[0]["InstanceGroupName"]
    rejected("CreateTrainingJob", training, "instance group names must be unique: data_group")


def test_channel_names_are_unique(training):
    channel(training, "manifest")["ChannelName"] = "validation"
    rejected("CreateTrainingJob", training, "channel names must be unique: validation")


def test_a_channel_names_only_groups_the_job_has(training):
    channel(training, "validation")["DataSource"]["S3DataSource"]["InstanceGroupNames"] = ["gpu_group"]
    rejected("CreateTrainingJob", training, r"channel validation names instance group\(s\) \['gpu_group'\]")


def test_instance_groups_exclude_a_top_level_instance_type(training):
    training["ResourceConfig"]["InstanceType"] = "ml.m5.xlarge"
    rejected("CreateTrainingJob", training, "InstanceGroups or InstanceType/InstanceCount, not both")


def test_a_spot_wait_without_spot_is_rejected_as_the_service_does(training):
    training["StoppingCondition"]["MaxWaitTimeInSeconds"] = 43200
    rejected(
        "CreateTrainingJob",
        training,
        "Invalid MaxWaitTimeInSeconds. It is only supported when EnableManagedSpotTraining is set to true",
    )
    training["EnableManagedSpotTraining"] = True
    validate_request("CreateTrainingJob", training, step="TrainHeterogeneous")
    training["StoppingCondition"]["MaxWaitTimeInSeconds"] = 60
    rejected("CreateTrainingJob", training, r"MaxWaitTimeInSeconds \(60\) must be greater than or equal to MaxRuntimeInSeconds")


def test_processing_paths_live_under_opt_ml_processing(processing):
    processing["ProcessingInputs"][1]["S3Input"]["LocalPath"] = "/data/input"
    rejected("CreateProcessingJob", processing, "LocalPath '/data/input' must be under /opt/ml/processing/")


def test_processing_input_names_are_unique(processing):
    processing["ProcessingInputs"][1]["InputName"] = "code"
    rejected("CreateProcessingJob", processing, "processing input names must be unique: code")


# -- every request of an execution, with its parameters, when it starts -----------------------------

from pipeline.graph import resolve_parameters  # noqa: E402
from pipeline.sagemaker.validation import validate_execution  # noqa: E402
from steps.common.errors import UserError  # noqa: E402
from steps.contract import TUNABLES  # noqa: E402

EXECUTION = {
    "PipelineExecutionId": "abcdef123456",
    "PipelineName": "hetero-test",
    "PipelineExecutionArn": "arn:aws:sagemaker:eu-west-1:123456789012:pipeline/hetero-test/execution/abcdef123456",
}


def rejected_at_start(definition: dict, **overrides) -> str:
    params = {p["Name"]: p.get("DefaultValue") for p in definition["Parameters"]} | overrides
    with pytest.raises(RequestRejected) as caught:
        validate_execution(definition, params, EXECUTION)
    return caught.value.one_line()


def with_arguments(definition: dict, step: str, **members) -> dict:
    """A copy of ``definition`` whose ``step`` has these request members added (each may read parameters)."""
    changed = copy.deepcopy(definition)
    for name, value in members.items():
        all_steps(changed)[step]["Arguments"][name] = value
    return changed


def get(name: str) -> dict:
    return {"Get": f"Parameters.{name}"}


@pytest.mark.parametrize("name", [p.name for p in TUNABLES if p.type is str and not p.choices])
def test_every_parameter_value_is_at_most_1024_characters(name):
    value = '{"k": "' + "x" * 1018 + '"}'  # 1027: valid JSON for WorkloadOptions, too long for any parameter
    with pytest.raises(UserError) as caught:
        resolve_parameters({name: value})
    message = caught.value.one_line()
    assert f"parameter {name} is 1027 characters long; a SageMaker pipeline parameter value may have at most 1024: " in message
    assert resolve_parameters({name: value[:1024]}) if name != "WorkloadOptions" else True  # 1024 is allowed


def test_the_compiled_requests_with_default_parameters_pass_at_start(compiled):
    for definition in compiled.values():
        validate_execution(definition, {p["Name"]: p.get("DefaultValue") for p in definition["Parameters"]}, EXECUTION)


def test_a_container_argument_over_256_characters_is_refused_at_start_naming_the_parameter(compiled):
    long = "s3://my-bucket/" + "raw-images/" * 24  # 279 characters: a valid parameter, too long for an argument
    message = rejected_at_start(compiled["pytorch"], InputData=long)
    assert message.startswith("ValidationException: step Shard: ") and "CreateProcessingJob" in message
    assert re.search(
        r"AppSpecification\.ContainerArguments\[\d+\] would be 279 characters long, from parameter InputData "
        r"\(279 characters\); CreateProcessingJob allows at most 256: use a shorter S3 prefix",
        message,
    ), message
    validate_execution(
        compiled["pytorch"],
        {p["Name"]: p.get("DefaultValue") for p in compiled["pytorch"]["Parameters"]} | {"InputData": long[:250]},
        EXECUTION,
    )


def test_a_container_entrypoint_item_over_256_characters_is_rejected(processing):
    processing["AppSpecification"]["ContainerEntrypoint"].append("x" * 257)
    rejected("CreateProcessingJob", processing, r"ContainerEntrypoint\[\d\].*less than or equal to 256 \(has 257 characters\)")


def test_environment_values_are_at_most_512_characters_in_training_and_256_in_processing(compiled):
    options = json.dumps({"note": "x" * 290})  # 302 characters
    env = {"Environment": {"WORKLOAD_OPTIONS": get("WorkloadOptions")}}
    training = with_arguments(compiled["pytorch"], "TrainHeterogeneous", **env)
    validate_execution(
        training, {p["Name"]: p.get("DefaultValue") for p in training["Parameters"]} | {"WorkloadOptions": options}, EXECUTION
    )  # 302 <= 512
    message = rejected_at_start(training, WorkloadOptions=json.dumps({"note": "x" * 600}))
    assert re.search(
        r"step TrainHeterogeneous: .*Environment\.WORKLOAD_OPTIONS would be 612 characters long, from parameter "
        r"WorkloadOptions \(612 characters\); CreateTrainingJob allows at most 512: keep long",
        message,
    ), message
    message = rejected_at_start(with_arguments(compiled["pytorch"], "Shard", **env), WorkloadOptions=options)
    assert re.search(
        r"step Shard: .*Environment\.WORKLOAD_OPTIONS would be 302 characters long, from parameter WorkloadOptions "
        r"\(302 characters\); CreateProcessingJob allows at most 256",
        message,
    ), message


def test_at_most_100_hyperparameters_of_at_most_2500_characters(compiled):
    step = all_steps(compiled["pytorch"])["TrainHeterogeneous"]["Arguments"]
    many = {**step["HyperParameters"], **{f"extra_{i}": "1" for i in range(100)}}
    message = rejected_at_start(with_arguments(compiled["pytorch"], "TrainHeterogeneous", HyperParameters=many))
    assert re.search(
        r"step TrainHeterogeneous: .*HyperParameters failed to satisfy constraint: Member must have length less "
        r"than or equal to 100 \(has \d+ entries\)",
        message,
    ), message
    thrice = {**step["HyperParameters"], "options_thrice": {"Std:Join": {"On": "", "Values": [get("WorkloadOptions")] * 3}}}
    options = json.dumps({"note": "x" * 990})  # 1002 characters: a valid parameter, 3006 joined
    message = rejected_at_start(
        with_arguments(compiled["pytorch"], "TrainHeterogeneous", HyperParameters=thrice), WorkloadOptions=options
    )
    assert re.search(
        r"HyperParameters\.options_thrice would be 3006 characters long, from parameter WorkloadOptions \(1002 "
        r"characters\); CreateTrainingJob allows at most 2500",
        message,
    ), message


# -- storage volumes ---------------------------------------------------------------------------------


def test_the_volume_parameter_takes_what_both_job_kinds_accept():
    import botocore.session

    from steps.contract import MAX_VOLUME_GB, MIN_VOLUME_GB

    model = botocore.session.get_session().get_service_model("sagemaker")
    processing = model.shape_for("ProcessingClusterConfig").members["VolumeSizeInGB"].metadata
    training = model.shape_for("ResourceConfig").members["VolumeSizeInGB"].metadata
    assert (MIN_VOLUME_GB, MAX_VOLUME_GB) == (processing["min"], processing["max"])
    assert training["min"] <= MIN_VOLUME_GB and training.get("max", MAX_VOLUME_GB) >= MAX_VOLUME_GB
    with pytest.raises(UserError, match=r"VolumeSizeGB=16385 must be between 1 and 16384"):
        resolve_parameters({"VolumeSizeGB": "16385"})
    assert resolve_parameters({"VolumeSizeGB": "500"})["VolumeSizeGB"] == 500


def test_every_job_of_an_execution_gets_the_volume_parameter(compiled):
    requests = requests_of(compiled["pytorch"], {"VolumeSizeGB": 750})
    sizes = {
        step: (r["ResourceConfig"] if op == "CreateTrainingJob" else r["ProcessingResources"]["ClusterConfig"])["VolumeSizeInGB"]
        for step, (op, r) in requests.items()
    }
    assert sizes == {step: 750 for step in requests}


def test_a_volume_over_the_service_limit_is_refused_at_start_naming_the_parameter(compiled):
    message = rejected_at_start(compiled["pytorch"], VolumeSizeGB=20000)  # past the parameter's own check: a console start
    assert re.search(
        r"step Shard: .*ProcessingResources\.ClusterConfig\.VolumeSizeInGB would be 20000, from parameter "
        r"VolumeSizeGB=20000; CreateProcessingJob allows at most 16384: lower VolumeSizeGB",
        message,
    ), message


def test_a_processing_volume_may_not_exceed_the_instance_store_of_an_nvme_type(processing):
    processing["ProcessingResources"]["ClusterConfig"].update(InstanceType="ml.g5.xlarge", VolumeSizeInGB=300)
    rejected(
        "CreateProcessingJob", processing, r"VolumeSizeInGB 300 is more than the 250 GB of local instance storage of ml.g5.xlarge"
    )
    processing["ProcessingResources"]["ClusterConfig"]["VolumeSizeInGB"] = 250
    validate_request("CreateProcessingJob", processing, step="Shard")


def test_a_training_volume_is_not_limited_by_an_nvme_instance_store(training):
    training["ResourceConfig"]["VolumeSizeInGB"] = 2000  # g5.xlarge has 250 GB: SageMaker ignores VolumeSizeInGB there
    validate_request("CreateTrainingJob", training, step="TrainHeterogeneous")
