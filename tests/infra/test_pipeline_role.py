"""The pipeline's role: starts the jobs and passes them the job role; reads only the property files its conditions test."""

import json

from aws_cdk.assertions import Match

from infra import job_role, pipeline_role
from infra.model_registry import REGISTER_ACTIONS
from pipeline.sagemaker.definition import all_steps
from tests.support.stacks import embedded_definition, resources, role_arn_of, statements


def _by_sid(synth) -> dict:
    return {s["Sid"]: s for s in statements(synth, pipeline_role.POLICY_NAME)}


def test_the_pipeline_runs_as_the_pipeline_role(synth_any):
    synth_any.template.has_resource_properties(
        "AWS::SageMaker::Pipeline",
        {"PipelineName": "HeteroTraining", "RoleArn": role_arn_of(synth_any, pipeline_role.POLICY_NAME)},
    )
    assert role_arn_of(synth_any, pipeline_role.POLICY_NAME) != role_arn_of(synth_any, job_role.POLICY_NAME)


def test_role_is_assumed_by_sagemaker_with_no_managed_policies(synth_default):
    synth_default.template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    Match.object_like({"Action": "sts:AssumeRole", "Principal": {"Service": "sagemaker.amazonaws.com"}})
                ]
            },
            "Description": Match.string_like_regexp("^Runs the HeteroTraining SageMaker pipeline"),
            "ManagedPolicyArns": Match.absent(),
        },
    )


def test_jobs_are_scoped_to_pipeline_job_names(synth_default):
    statement = _by_sid(synth_default)["PipelineJobs"]
    resource = json.dumps(statement["Resource"])
    assert ":training-job/pipelines-*" in resource and ":processing-job/pipelines-*" in resource
    assert sorted(statement["Action"]) == sorted(pipeline_role.JOB_ACTIONS)


def test_it_passes_the_job_role_only_and_only_to_sagemaker(synth_any):
    synth_any.template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyName": pipeline_role.POLICY_NAME,
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Sid": "PassJobRole",
                                "Effect": "Allow",
                                "Action": "iam:PassRole",
                                "Resource": role_arn_of(synth_any, job_role.POLICY_NAME),
                                "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_no_other_role_of_the_stack_passes_a_role(synth_any):
    """The trigger, the schedule and the plan-adoption function start executions; the pipeline's role runs them."""
    passing = [
        p["Properties"]["PolicyName"]
        for p in resources(synth_any, "AWS::IAM::Policy")
        if "iam:PassRole" in json.dumps(p["Properties"]["PolicyDocument"])
    ]
    assert passing == [pipeline_role.POLICY_NAME]


def test_it_reads_exactly_the_property_files_of_the_definition(synth_any):
    definition, _ = embedded_definition(synth_any)
    files = sorted(
        f"/hetero/*/{name}/{f['FilePath']}" for name, step in all_steps(definition).items() for f in step.get("PropertyFiles", [])
    )
    assert files == [
        "/hetero/*/Evaluate/model_metrics.json",
        "/hetero/*/Evaluate/price_performance.json",
        "/hetero/*/EvaluateWithoutBaseline/model_metrics.json",
    ]
    read = _by_sid(synth_any)["ReadPropertyFiles"]
    assert read["Action"] == "s3:GetObject" and [r["Fn::Join"][1][1] for r in read["Resource"]] == files


def test_it_reads_no_data_and_pulls_no_image(synth_any):
    actions = {
        a
        for s in statements(synth_any, pipeline_role.POLICY_NAME)
        for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    }
    assert actions == {*pipeline_role.JOB_ACTIONS, *REGISTER_ACTIONS, "iam:PassRole", "s3:GetObject"}
