"""The jobs' role: what workload code runs with. It reads inputs, reads and writes the artifacts, pulls its images;
it starts no job, passes no role and never changes the raw inputs."""

import fnmatch
import json

import pytest
from aws_cdk.assertions import Match

from infra.job_role import POLICY_NAME
from infra.model_registry import LIST_ACTION, READ_ACTIONS
from infra.settings import StackSettings
from pipeline.sagemaker.definition import all_steps
from pipeline.sagemaker.images import default_processing_image, default_training_image, ecr_repository
from steps.common.errors import UserError
from tests.support.stacks import cdk_json_context, embedded_definition, resources, role_arn_of, statements


def _by_sid(synth) -> dict:
    return {s["Sid"]: s for s in statements(synth, POLICY_NAME)}


def _actions(statement) -> list[str]:
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]


def _decide(synth, action: str, key: str) -> str:
    """IAM's answer for ``action`` on the artifact bucket's object ``key`` under the job policy: an explicit Deny wins,
    then an Allow; otherwise the implicit deny."""
    bucket = _by_sid(synth)["ListArtifacts"]["Resource"]  # {"Fn::GetAtt": [<artifact bucket>, "Arn"]}

    def render(resource) -> str:
        if isinstance(resource, str):
            return resource
        parts = resource.get("Fn::Join", ["", [resource]])[1]
        return "".join("arn:aws:s3:::artifacts" if p == bucket else p if isinstance(p, str) else "<other>" for p in parts)

    matching = [
        s
        for s in statements(synth, POLICY_NAME)
        if action in _actions(s)
        and any(
            fnmatch.fnmatchcase(f"arn:aws:s3:::artifacts/{key}", render(r))
            for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
        )
    ]
    effects = {s["Effect"] for s in matching}
    return "Deny" if "Deny" in effects else "Allow" if effects else "implicit deny"


WRITES = ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")


@pytest.mark.parametrize("variant", ["default", "inputs_apart"])  # raw inputs inside the artifact prefix, and beside it
def test_raw_inputs_are_readable_and_never_changed(request, variant):
    synth = request.getfixturevalue(f"synth_{variant}")
    raw, artifacts = synth.settings.input_prefix + "cats/0001.jpg", f"{synth.settings.prefix}/0123456789ab/Shard/train/0.tar"
    assert _decide(synth, "s3:GetObject", raw) == "Allow"
    assert [_decide(synth, a, raw) for a in WRITES] == ["Deny"] * 3
    assert [_decide(synth, a, artifacts) for a in ("s3:GetObject", *WRITES)] == ["Allow"] * 4
    assert _decide(synth, "s3:GetObject", "elsewhere/secret.csv") == "implicit deny"


def test_the_inputs_are_protected_by_an_explicit_deny(synth_default):
    synth_default.template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyName": POLICY_NAME,
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Sid": "KeepInputs",
                                "Effect": "Deny",
                                "Action": [
                                    "s3:AbortMultipartUpload",
                                    "s3:DeleteObject",
                                    "s3:DeleteObjectVersion",
                                    "s3:PutObject",
                                ],
                                "Resource": {"Fn::Join": ["", [Match.any_value(), "/hetero/raw/*"]]},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_workload_code_cannot_start_jobs_or_pass_a_role(synth_any):
    """Its one SageMaker permission: reading the model registry (Evaluate's automatic approval)."""
    registry = ("ReadModelRegistry", "ListModelPackages")
    actions = [a for s in statements(synth_any, POLICY_NAME) if s.get("Sid") not in registry for a in _actions(s)]
    assert not [a for a in actions if a.startswith(("sagemaker:", "iam:", "sts:"))], actions
    (read,) = [s for s in statements(synth_any, POLICY_NAME) if s.get("Sid") == "ReadModelRegistry"]
    assert sorted(_actions(read)) == sorted(READ_ACTIONS)
    (listing,) = [s for s in statements(synth_any, POLICY_NAME) if s.get("Sid") == "ListModelPackages"]
    assert _actions(listing) == [LIST_ACTION]


def test_role_is_assumed_by_sagemaker_with_no_managed_policies(synth_default):
    synth_default.template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    Match.object_like({"Action": "sts:AssumeRole", "Principal": {"Service": "sagemaker.amazonaws.com"}})
                ]
            },
            "Description": "Runs the training and processing jobs of the HeteroTraining SageMaker pipeline",
            "ManagedPolicyArns": Match.absent(),
        },
    )


def test_no_wildcard_actions_anywhere(synth_any):
    for policy in resources(synth_any, "AWS::IAM::Policy"):
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert not [a for a in _actions(statement) if "*" in a], statement


def test_star_resources_only_where_the_api_forces_them(synth_any):
    star = {a for s in statements(synth_any, POLICY_NAME) if s["Resource"] == "*" for a in _actions(s)}
    assert star <= {
        "ecr:GetAuthorizationToken",
        "cloudwatch:PutMetricData",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeVpcs",
        "ec2:DescribeDhcpOptions",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
        "fsx:DescribeFileSystems",
        "sagemaker:ListModelPackages",  # names no package (infra/model_registry.py)
    }
    assert _by_sid(synth_any)["JobMetrics"]["Condition"] == {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}


def test_every_step_runs_as_the_job_role(synth_any):
    definition, tokens = embedded_definition(synth_any)
    job_role = f"@@TOKEN{tokens.index(role_arn_of(synth_any, POLICY_NAME))}@@"
    runs = {
        name: s["Arguments"]["RoleArn"] for name, s in all_steps(definition).items() if s["Type"] in ("Training", "Processing")
    }
    assert runs and set(runs.values()) == {job_role}, runs


def test_code_is_readable_as_one_object(synth_default):
    read = json.dumps(_by_sid(synth_default)["ReadTrainingCode"]["Resource"])
    # CDK names the object <sha256 of the archive><last extension>: the exact key, no wildcard
    assert read.endswith('.gz"]]}') and "cdk-" in read and "*" not in read
    assert "s3:prefix" in json.dumps(_by_sid(synth_default)["ListTrainingCode"]["Condition"])


PULL = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]


def _allows_pull(synth, resource) -> None:
    synth.template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyName": POLICY_NAME,
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Sid": "PullJobImages", "Effect": "Allow", "Action": PULL, "Resource": resource})]
                )
            },
        },
    )


def _images_run(synth) -> set[str]:
    """Every image URI the embedded pipeline definition runs (TrainingImage of training jobs, ImageUri of processing)."""
    definition, _ = embedded_definition(synth)
    found = set()

    def walk(node):
        if isinstance(node, dict):
            found.update(v for k, v in node.items() if k in ("TrainingImage", "ImageUri"))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(definition)
    return found


def _pulled(synth) -> list[str]:
    resource = _by_sid(synth)["PullJobImages"]["Resource"]
    return resource if isinstance(resource, list) else [resource]


def test_default_pytorch_images_are_pulled_from_the_regions_dlc_repository_only(synth_default):
    # training (GPU) and processing (CPU) variants share one repository
    _allows_pull(synth_default, "arn:aws:ecr:us-east-1:763104351884:repository/pytorch")


def test_tensorflow_images_are_pulled_from_the_tensorflow_repository_only(synth_tensorflow):
    _allows_pull(synth_tensorflow, "arn:aws:ecr:us-east-1:763104351884:repository/tensorflow-training")


def test_af_south_1_pulls_from_its_own_dlc_registry_account(synth_af_south):
    _allows_pull(synth_af_south, "arn:aws:ecr:af-south-1:626614931356:repository/pytorch")
    assert "763104351884" not in json.dumps(synth_af_south.template_json)  # the us-east-1 DLC account, nowhere
    assert _images_run(synth_af_south) == {default_training_image("af-south-1"), default_processing_image("af-south-1")}
    assert synth_af_south.validation_error is None


def test_the_role_pulls_exactly_the_repositories_of_the_images_the_pipeline_runs(synth_any):
    repositories = {ecr_repository(image) for image in _images_run(synth_any)}
    assert len(repositories) == 1  # one DLC repository: GPU and CPU variants of the same framework image
    assert sorted(_pulled(synth_any)) == sorted(f"arn:aws:ecr:{r}:{a}:repository/{name}" for a, r, name in repositories)


def test_custom_images_are_pulled_from_their_own_repositories_only(tmp_path):
    from tests.support.stacks import synthesise

    training = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/my-team/pytorch:2.5-gpu"
    processing = "210987654321.dkr.ecr.cn-north-1.amazonaws.com.cn/my-team/prep@sha256:" + "0" * 64
    serving = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/my-team/serve:1"  # named by the model packages, pulled by none
    images = {"hetero:trainingImage": training, "hetero:processingImage": processing, "hetero:servingImage": serving}
    synth = synthesise(tmp_path, **images)
    _allows_pull(
        synth,
        [
            "arn:aws-cn:ecr:cn-north-1:210987654321:repository/my-team/prep",
            "arn:aws:ecr:eu-west-1:123456789012:repository/my-team/pytorch",
        ],
    )
    assert _images_run(synth) == {training, processing}
    assert "763104351884" not in json.dumps(synth.template_json)
    assert synth.validation_error is None


@pytest.mark.slow  # synthesises a stack of its own (about 1 s)
def test_one_custom_image_keeps_the_default_for_the_other(tmp_path):
    from tests.support.stacks import synthesise

    training = "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-team/pytorch:2.13-gpu"
    synth = synthesise(tmp_path, **{"hetero:trainingImage": training})
    _allows_pull(
        synth,
        [
            "arn:aws:ecr:us-east-1:123456789012:repository/my-team/pytorch",
            "arn:aws:ecr:us-east-1:763104351884:repository/pytorch",
        ],
    )
    assert _images_run(synth) == {training, default_processing_image("us-east-1")}


@pytest.mark.slow
def test_an_environment_agnostic_stack_needs_its_images_named():
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.settings import StackSettings
    from infra.stack import HeteroStack
    from tests.support.stacks import cdk_json_context

    with pytest.raises(UserError, match=r"is not a region name \(a CloudFormation token\?\)"):
        HeteroStack(App(), "Agnostic", settings=StackSettings.from_context(cdk_json_context()))  # no env: a token region
    image = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/pytorch:1"
    images = {"hetero:trainingImage": image, "hetero:processingImage": image}
    with pytest.raises(UserError, match=r"so the default serving image cannot be looked up: pass serving_image too"):
        HeteroStack(App(), "Agnostic", settings=StackSettings.from_context({**cdk_json_context(), **images}))
    serving = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/pytorch-serve:1"  # a package that can serve, or none
    settings = StackSettings.from_context({**cdk_json_context(), **images, "hetero:servingImage": serving})
    template = Template.from_stack(HeteroStack(App(), "Agnostic", settings=settings))
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Sid": "PullJobImages", "Resource": "arn:aws:ecr:eu-west-1:123456789012:repository/team/pytorch"}
                        )
                    ]
                )
            }
        },
    )


def test_logs_are_scoped_to_sagemaker_log_groups(synth_default):
    assert json.dumps(_by_sid(synth_default)["JobLogs"]["Resource"]).endswith(':log-group:/aws/sagemaker/*"]]}')


def test_vpc_permissions_only_with_fsx(synth_default, synth_fsx):
    assert "JobNetworkInterfaces" not in _by_sid(synth_default)
    enis = json.dumps(_by_sid(synth_fsx)["JobNetworkInterfaces"]["Resource"])
    assert ":network-interface/*" in enis and ":subnet/" in enis and enis.count(":security-group/") == 2


def test_the_default_price_overrides_object_is_readable_as_one_object(synth_default):
    """Evaluate downloads the PriceOverrides default as an S3Prefix input: it lists the key and gets it, nothing else."""
    read = json.dumps(_by_sid(synth_default)["ReadDefaultPriceOverrides"]["Resource"])
    assert read.endswith('.json"]]}') and "cdk-" in read and "*" not in read
    listed = _by_sid(synth_default)["ListDefaultPriceOverrides"]
    assert listed["Action"] == "s3:ListBucket" and "s3:prefix" in json.dumps(listed["Condition"])


def test_the_jobs_list_only_under_the_artifact_and_input_prefixes(synth_default):
    """S3Prefix channels list their prefix first; a listing anywhere else in the bucket (other teams' key names) is not
    the jobs' to make."""
    listed = _by_sid(synth_default)["ListArtifacts"]
    assert _actions(listed) == ["s3:ListBucket"]
    prefixes = listed["Condition"]["StringLike"]["s3:prefix"]
    settings = StackSettings.from_context(cdk_json_context())
    assert sorted(prefixes) == sorted([f"{settings.prefix}/*", settings.prefix, f"{settings.input_prefix}*"])
    assert _actions(_by_sid(synth_default)["LocateBucket"]) == ["s3:GetBucketLocation"]
