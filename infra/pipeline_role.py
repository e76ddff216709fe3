"""The role SageMaker Pipelines runs the pipeline as, with least privilege.

It starts the jobs, so it holds what the job role (`infra.job_role`) must not: create, describe and
stop training and processing jobs, and pass the job role, that role only and only to SageMaker.
Besides, it reads the property files its condition steps test (Std:JsonGet reads the object from
S3 with the pipeline's role). It reads no data and pulls no image: the jobs do, as the job role.

Jobs started by SageMaker Pipelines are named `pipelines-<execution id>-<step>-<suffix>`, so job
permissions are scoped to that name prefix in this account and region.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.nag import acknowledge_wildcards

POLICY_NAME = "PipelineAccess"  # inline, on this role only
JOB_PREFIX = "pipelines-"
JOB_ACTIONS = (
    "sagemaker:CreateTrainingJob",
    "sagemaker:DescribeTrainingJob",
    "sagemaker:StopTrainingJob",
    "sagemaker:CreateProcessingJob",
    "sagemaker:DescribeProcessingJob",
    "sagemaker:StopProcessingJob",
    "sagemaker:AddTags",
)


class PipelineRole(Construct):
    """`role`: assumed by SageMaker for the pipeline itself (the `CfnPipeline`'s RoleArn)."""

    def __init__(self, scope: Construct, construct_id: str, *, pipeline_name: str, job_role: iam.IRole) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"Runs the {pipeline_name} SageMaker pipeline: starts its jobs as the job role",
        )
        training_jobs, processing_jobs = (
            stack.format_arn(service="sagemaker", resource=f"{kind}/{JOB_PREFIX}*") for kind in ("training-job", "processing-job")
        )
        self.policy = iam.Policy(
            self,
            "Policy",
            policy_name=POLICY_NAME,
            roles=[self.role],
            statements=[
                iam.PolicyStatement(sid="PipelineJobs", actions=list(JOB_ACTIONS), resources=[training_jobs, processing_jobs]),
                # every step's RoleArn is the job role: the pipeline hands it, and only it, to SageMaker jobs
                iam.PolicyStatement(
                    sid="PassJobRole",
                    actions=["iam:PassRole"],
                    resources=[job_role.role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
                ),
            ],
        )
        reason = (
            "{} job names are generated per execution by SageMaker Pipelines (pipelines-<execution id>-<step>-<suffix>): "
            "the prefix is all that is known."
        )
        acknowledge_wildcards(
            self.policy, {training_jobs: reason.format("Training"), processing_jobs: reason.format("Processing")}
        )

    def read_property_files(self, *, bucket: s3.IBucket, keys: list[str]) -> None:
        """Let the pipeline read the property files its conditions test: object keys with `*` for the execution id."""
        if not keys:
            return
        objects = [bucket.arn_for_objects(key) for key in keys]
        self.policy.add_statements(iam.PolicyStatement(sid="ReadPropertyFiles", actions=["s3:GetObject"], resources=objects))
        acknowledge_wildcards(
            self.policy,
            {
                o: "A step writes its property file under the execution's own folder "
                "(<prefix>/<execution id>/<step>/): the id is not known in advance."
                for o in objects
            },
        )
