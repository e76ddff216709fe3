import json

from aws_cdk.assertions import Match

from tests.infra.conftest import resources


def _statements(synth) -> list[dict]:
    (policy,) = [p for p in resources(synth, "AWS::IAM::Policy") if p["Properties"]["PolicyName"].startswith("ExecutionPolicy")]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def _by_sid(synth) -> dict:
    return {s["Sid"]: s for s in _statements(synth)}


def test_role_is_assumed_by_sagemaker_with_no_managed_policies(synth_default):
    synth_default.template.has_resource_properties("AWS::IAM::Role", {
        "AssumeRolePolicyDocument": {"Statement": [Match.object_like({
            "Action": "sts:AssumeRole", "Principal": {"Service": "sagemaker.amazonaws.com"}})]},
        "ManagedPolicyArns": Match.absent(),
    })


def test_no_wildcard_actions_anywhere(synth_any):
    for policy in resources(synth_any, "AWS::IAM::Policy"):
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert not [a for a in actions if "*" in a], statement


def test_star_resources_only_where_the_api_forces_them(synth_any):
    star = {a for s in _statements(synth_any) if s["Resource"] == "*" for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert star <= {"ecr:GetAuthorizationToken", "cloudwatch:PutMetricData", "ec2:DescribeNetworkInterfaces", "ec2:DescribeVpcs",
                    "ec2:DescribeDhcpOptions", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "fsx:DescribeFileSystems"}
    assert _by_sid(synth_any)["JobMetrics"]["Condition"] == {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}


def test_jobs_are_scoped_to_pipeline_job_names(synth_default):
    resource = json.dumps(_by_sid(synth_default)["PipelineJobs"]["Resource"])
    assert ":training-job/pipelines-*" in resource and ":processing-job/pipelines-*" in resource


def test_pass_role_only_itself_only_to_sagemaker(synth_default):
    statement = _by_sid(synth_default)["PassSelfToSageMaker"]
    assert statement["Action"] == "iam:PassRole"
    assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    (role_id,) = [k for k, r in synth_default.template_json["Resources"].items()
                  if r["Type"] == "AWS::IAM::Role" and "sagemaker.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    assert statement["Resource"] == {"Fn::GetAtt": [role_id, "Arn"]}


def test_bucket_access_is_limited_to_the_pipeline_prefix(synth_default):
    statement = _by_sid(synth_default)["ReadWriteArtifacts"]
    assert statement["Action"] == ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    assert statement["Resource"]["Fn::Join"][1][-1] == "/hetero/*"  # <bucket arn>/hetero/* (the raw input prefix is inside)


def test_code_is_readable_as_one_object(synth_default):
    read = json.dumps(_by_sid(synth_default)["ReadTrainingCode"]["Resource"])
    # CDK names the object <sha256 of the archive><last extension>: the exact key, no wildcard
    assert read.endswith('.gz"]]}') and "cdk-" in read and "*" not in read
    assert "s3:prefix" in json.dumps(_by_sid(synth_default)["ListTrainingCode"]["Condition"])


def test_images_are_pulled_from_the_deep_learning_containers_only(synth_default):
    statement = _by_sid(synth_default)["PullDeepLearningContainers"]
    assert statement["Action"] == ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    assert json.dumps(statement["Resource"]).endswith(':763104351884:repository/pytorch-training"]]}')


def test_tensorflow_images_are_pulled_from_the_tensorflow_repository_only(synth_tensorflow):
    resource = json.dumps(_by_sid(synth_tensorflow)["PullDeepLearningContainers"]["Resource"])
    assert resource.endswith(':763104351884:repository/tensorflow-training"]]}')  # training (GPU) and processing (CPU) images
    assert "pytorch-training" not in resource


def test_logs_are_scoped_to_sagemaker_log_groups(synth_default):
    assert json.dumps(_by_sid(synth_default)["JobLogs"]["Resource"]).endswith(':log-group:/aws/sagemaker/*"]]}')


def test_vpc_permissions_only_with_fsx(synth_default, synth_fsx):
    assert "JobNetworkInterfaces" not in _by_sid(synth_default)
    enis = json.dumps(_by_sid(synth_fsx)["JobNetworkInterfaces"]["Resource"])
    assert ":network-interface/*" in enis and ":subnet/" in enis and enis.count(":security-group/") == 2


def test_custom_images_add_their_repositories(tmp_path):
    from tests.infra.conftest import synthesise

    image = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/my-team/pytorch:2.5-gpu"
    synth = synthesise(tmp_path, **{"hetero:trainingImage": image})
    assert ":ecr:eu-west-1:123456789012:repository/my-team/pytorch" in json.dumps(_by_sid(synth)["PullDeepLearningContainers"]["Resource"])
    assert synth.validation_error is None
