"""The CfnPipeline and the definition embedded in it, parsed back out of its Fn::Join."""

import json
import re

from aws_cdk.assertions import Match

from infra import job_role, pipeline_role
from pipeline.sagemaker.definition import all_steps
from pipeline.sagemaker.images import default_processing_image, default_training_image
from pipeline.sagemaker.job_access import JobAccess
from steps.contract import TUNABLES
from tests.support.stacks import embedded_definition, resources, role_arn_of


def _token_of(tokens: list, cfn_value) -> str:
    return f"@@TOKEN{tokens.index(cfn_value)}@@"


def _ids(synth, kind: str) -> list[str]:
    return [k for k, r in synth.template_json["Resources"].items() if r["Type"] == kind]


def test_the_pipeline_runs_as_its_role_and_every_job_as_the_job_role(synth_any):
    pipeline, jobs = role_arn_of(synth_any, pipeline_role.POLICY_NAME), role_arn_of(synth_any, job_role.POLICY_NAME)
    synth_any.template.has_resource_properties(
        "AWS::SageMaker::Pipeline",
        {
            "PipelineName": "HeteroTraining",
            "RoleArn": pipeline,
            "PipelineDefinition": {"PipelineDefinitionBody": {"Fn::Join": ["", Match.array_with([jobs])]}},
        },
    )
    (resource,) = resources(synth_any, "AWS::SageMaker::Pipeline")
    assert pipeline not in resource["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]["Fn::Join"][1]


def test_pipeline_waits_for_both_role_policies(synth_any):
    (pipeline,) = resources(synth_any, "AWS::SageMaker::Pipeline")
    policies = [
        k
        for k, r in synth_any.template_json["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and r["Properties"]["PolicyName"] in (pipeline_role.POLICY_NAME, job_role.POLICY_NAME)
    ]
    assert len(policies) == 2 and set(policies) <= set(pipeline["DependsOn"])


def test_the_description_says_what_the_jobs_may_read(synth_any):
    """`hetero start` reads it back (DescribePipeline) to refuse an S3 URI the job role cannot read."""
    (resource,) = resources(synth_any, "AWS::SageMaker::Pipeline")
    (artifacts,) = [
        k
        for k, r in synth_any.template_json["Resources"].items()
        if r["Type"] == "AWS::S3::Bucket" and "LoggingConfiguration" in r["Properties"]
    ]
    _, parts = resource["Properties"]["PipelineDescription"]["Fn::Join"]
    assert [p for p in parts if not isinstance(p, str)] == [{"Ref": artifacts}] * 2
    text = "".join(p if isinstance(p, str) else "my-bucket" for p in parts)
    assert JobAccess.from_description(text) == JobAccess(inputs="s3://my-bucket/hetero/raw/", artifacts="s3://my-bucket/hetero/")


def test_definition_declares_every_graph_parameter(synth_default):
    definition, _ = embedded_definition(synth_default)
    assert [p["Name"] for p in definition["Parameters"]] == [p.name for p in TUNABLES]


def test_tokens_reach_the_definition(synth_default):
    definition, tokens = embedded_definition(synth_default)
    (bucket,) = [
        k
        for k, r in synth_default.template_json["Resources"].items()
        if r["Type"] == "AWS::S3::Bucket" and "LoggingConfiguration" in r["Properties"]
    ]
    role_token, bucket_token = (
        _token_of(tokens, role_arn_of(synth_default, job_role.POLICY_NAME)),
        _token_of(tokens, {"Ref": bucket}),
    )
    steps = all_steps(definition)
    hetero = steps["TrainHeterogeneous"]["Arguments"]
    assert hetero["RoleArn"] == role_token
    assert hetero["OutputDataConfig"]["S3OutputPath"]["Std:Join"]["Values"][0] == f"s3://{bucket_token}/hetero"
    code = hetero["HyperParameters"]["sagemaker_submit_directory"]
    assert steps["Shard"]["Arguments"]["ProcessingInputs"][0]["S3Input"]["S3Uri"] == code  # processing gets it as an input
    # the asset in the bootstrap bucket, its object key in plain text (an isolated job's code channel names the file)
    bucket = re.fullmatch(r"s3://@@TOKEN(\d+)@@/[0-9a-f]{64}\.gz", code).group(1)
    assert tokens[int(bucket)] == {"Fn::Sub": "cdk-hnb659fds-assets-${AWS::AccountId}-us-east-1"}


def test_instance_counts_are_parameters(synth_default):
    definition, _ = embedded_definition(synth_default)
    groups = {
        g["InstanceGroupName"]: g["InstanceCount"]
        for g in all_steps(definition)["TrainHeterogeneous"]["Arguments"]["ResourceConfig"]["InstanceGroups"]
    }
    assert groups == {"data_group": {"Get": "Parameters.DataInstanceCount"}, "dnn_group": {"Get": "Parameters.DnnInstanceCount"}}


def test_s3_variant_has_no_vpc_and_reads_shards_from_s3(synth_default):
    definition, _ = embedded_definition(synth_default)
    hetero = all_steps(definition)["TrainHeterogeneous"]["Arguments"]
    assert "VpcConfig" not in hetero
    train = next(c for c in hetero["InputDataConfig"] if c["ChannelName"] == "train")
    assert train["DataSource"]["S3DataSource"]["InstanceGroupNames"] == ["data_group"]


def test_fsx_variant_mounts_the_file_system_in_its_vpc(synth_fsx):
    definition, tokens = embedded_definition(synth_fsx)
    (fs,) = _ids(synth_fsx, "AWS::FSx::FileSystem")
    (subnet,) = _ids(synth_fsx, "AWS::EC2::Subnet")
    groups = _ids(synth_fsx, "AWS::EC2::SecurityGroup")
    hetero = all_steps(definition)["TrainHeterogeneous"]["Arguments"]
    assert hetero["VpcConfig"]["Subnets"] == [_token_of(tokens, {"Ref": subnet})]
    assert sorted(hetero["VpcConfig"]["SecurityGroupIds"]) == sorted(
        _token_of(tokens, {"Fn::GetAtt": [g, "GroupId"]}) for g in groups
    )
    train = next(c for c in hetero["InputDataConfig"] if c["ChannelName"] == "train")
    source = train["DataSource"]["FileSystemDataSource"]
    assert source["FileSystemId"] == _token_of(tokens, {"Ref": fs}) and source["FileSystemType"] == "FSxLustre"
    # /<mount name>/dataset/<execution id>/Shard/train: the association maps /dataset to s3://<bucket>/hetero/
    path = json.dumps(source["DirectoryPath"])
    mount = _token_of(tokens, {"Fn::GetAtt": [fs, "LustreMountName"]})
    assert f"/{mount}/dataset" in path and "Execution.PipelineExecutionId" in path and "/Shard/train" in path
    assert next(p for p in definition["Parameters"] if p["Name"] == "DataSource")["DefaultValue"] == "FSx"


def test_processing_steps_unpack_the_code_asset(synth_default):
    # CDK names a file asset <sha256><last extension> (....gz, not .tar.gz): the unpack glob must still match it
    definition, tokens = embedded_definition(synth_default)
    shard = all_steps(definition)["Shard"]["Arguments"]
    code = shard["ProcessingInputs"][0]["S3Input"]["S3Uri"]
    code_key = code.rsplit("/", 1)[1]
    unpack = shard["AppSpecification"]["ContainerEntrypoint"][2]
    glob = re.search(r"for f in \S+/(\S+); do tar", unpack).group(1)
    assert re.fullmatch(glob.replace(".", r"\.").replace("*", ".*"), code_key), (glob, code_key)


def test_tensorflow_context_deploys_the_tensorflow_containers(synth_default, synth_tensorflow):
    synth_tensorflow.template.has_resource_properties("AWS::SageMaker::Pipeline", {"PipelineName": "HeteroTraining"})
    definition, _ = embedded_definition(synth_tensorflow)
    steps = all_steps(definition)
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        a = steps[name]["Arguments"]
        assert a["AlgorithmSpecification"]["TrainingImage"] == default_training_image("us-east-1", "tensorflow")
        assert a["HyperParameters"]["framework"] == "tensorflow"
    for name in ("Shard", "Evaluate", "EvaluateWithoutBaseline"):
        assert steps[name]["Arguments"]["AppSpecification"]["ImageUri"] == default_processing_image("us-east-1", "tensorflow")
    assert "tfrecord" in steps["Shard"]["Arguments"]["AppSpecification"]["ContainerArguments"]
    default, _ = embedded_definition(synth_default)
    train = all_steps(default)["TrainHeterogeneous"]["Arguments"]
    assert train["AlgorithmSpecification"]["TrainingImage"] == default_training_image("us-east-1", "pytorch")
    assert train["HyperParameters"]["framework"] == "pytorch"


def test_network_isolation_gives_every_training_job_the_code_asset_as_its_code_channel():
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_s3 as s3
    from aws_cdk.assertions import Template

    from infra.sagemaker_pipeline import SageMakerPipeline
    from infra.training_code import TrainingCode

    stack = Stack(App(), "Isolated", env={"region": "us-east-1", "account": "123456789012"})
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    code = TrainingCode(stack, "TrainingCode")
    SageMakerPipeline(
        stack,
        "Pipeline",
        pipeline_name="HeteroTraining",
        pipeline_role=role,
        job_role=role,
        bucket=s3.Bucket(stack, "Bucket"),
        code_url=code.s3_url,
        prefix="hetero",
        input_prefix="hetero/raw/",
        network_isolation=True,
    )
    body = Template.from_stack(stack).to_json()["Resources"]
    (pipeline,) = [r for r in body.values() if r["Type"] == "AWS::SageMaker::Pipeline"]
    parts = pipeline["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]["Fn::Join"][1]
    definition = json.loads("".join(p if isinstance(p, str) else "@@TOKEN@@" for p in parts))
    key = code.asset.s3_object_key
    for name in ("TrainHeterogeneous", "TrainBaseline"):
        a = all_steps(definition)[name]["Arguments"]
        assert a["EnableNetworkIsolation"] is True and "Environment" not in a
        assert a["HyperParameters"]["sagemaker_submit_directory"] == f"/opt/ml/input/data/code/{key}"
        (channel,) = [c for c in a["InputDataConfig"] if c["ChannelName"] == "code"]
        assert channel["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://cdk-hnb659fds-assets-123456789012-us-east-1/{key}"


def test_spot_context_puts_every_training_job_on_managed_spot_with_its_checkpoints():
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_s3 as s3
    from aws_cdk.assertions import Template

    from infra.sagemaker_pipeline import SageMakerPipeline

    stack = Stack(App(), "Spot", env={"region": "us-east-1", "account": "123456789012"})
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    SageMakerPipeline(
        stack,
        "Pipeline",
        pipeline_name="HeteroTraining",
        pipeline_role=role,
        job_role=role,
        bucket=s3.Bucket(stack, "Bucket"),
        code_url="s3://b/code.tar.gz",
        prefix="hetero",
        input_prefix="hetero/raw/",
        spot=True,
    )
    body = Template.from_stack(stack).to_json()["Resources"]
    (pipeline,) = [r for r in body.values() if r["Type"] == "AWS::SageMaker::Pipeline"]
    text = json.dumps(pipeline["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"])
    assert text.count('\\"EnableManagedSpotTraining\\":true') == 2  # TrainHeterogeneous and TrainBaseline
    assert text.count('\\"MaxWaitTimeInSeconds\\":43200') == 2 and text.count('\\"LocalPath\\":\\"/opt/ml/checkpoints\\"') == 2


def test_the_price_overrides_default_is_an_asset_object_holding_nothing_to_override(synth_default):
    """A processing input cannot have an empty S3Uri: when no price file is passed, Evaluate reads this one ({})."""
    definition, tokens = embedded_definition(synth_default)
    default = {p["Name"]: p for p in definition["Parameters"]}["PriceOverrides"]["DefaultValue"]
    bucket, key = re.fullmatch(r"s3://@@TOKEN(\d+)@@/([0-9a-f]{64}\.json)", default).groups()
    assert tokens[int(bucket)] == {"Fn::Sub": "cdk-hnb659fds-assets-${AWS::AccountId}-us-east-1"}
    (asset,) = synth_default.outdir.glob(f"asset.{key[: -len('.json')]}.json")
    assert json.loads(asset.read_text()) == {}
    for name in ("Evaluate", "EvaluateWithoutBaseline"):
        inputs = {i["InputName"]: i["S3Input"]["S3Uri"] for i in all_steps(definition)[name]["Arguments"]["ProcessingInputs"]}
        assert inputs["prices"] == {"Get": "Parameters.PriceOverrides"}
