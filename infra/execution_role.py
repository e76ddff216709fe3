"""The one role the pipeline and its jobs run as, with least privilege.

No wildcard actions. Resources are scoped wherever the API allows; where the API
forces `*` (no resource-level permissions) the statement says so. Jobs started by
SageMaker Pipelines are named `pipelines-<execution id>-<step>-<suffix>`, so job
permissions are scoped to that name prefix in this account and region.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from pipeline.images import ecr_partition, ecr_repository

JOB_PREFIX = "pipelines-"
JOB_ACTIONS = ("sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob", "sagemaker:StopTrainingJob",
               "sagemaker:CreateProcessingJob", "sagemaker:DescribeProcessingJob", "sagemaker:StopProcessingJob",
               "sagemaker:AddTags")


class ExecutionRole(Construct):
    """`role`: assumed by SageMaker (the pipeline and its training/processing jobs)."""

    def __init__(self, scope: Construct, construct_id: str, *, pipeline_name: str, bucket: s3.IBucket,
                 bucket_prefixes: tuple[str, ...], code: s3_assets.Asset, images: tuple[str, ...],
                 price_overrides: s3_assets.Asset | None = None) -> None:
        """`images`: the ECR image URIs the pipeline's jobs run (training and processing); pulling is allowed
        from exactly their repositories, each in its own registry account and region. `price_overrides`: the
        PriceOverrides parameter's default object, which the Evaluate step reads as an input."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
                             description=f"Runs the {pipeline_name} SageMaker pipeline and its jobs")
        arn = lambda service, resource: stack.format_arn(service=service, resource=resource)  # noqa: E731
        training_jobs, processing_jobs = (arn("sagemaker", f"{kind}/{JOB_PREFIX}*") for kind in ("training-job", "processing-job"))
        objects = [bucket.arn_for_objects(f"{p}*") for p in _outermost(bucket_prefixes)]
        log_groups = arn("logs", "log-group:/aws/sagemaker/*")
        statements = [
            iam.PolicyStatement(sid="PipelineJobs", actions=list(JOB_ACTIONS), resources=[training_jobs, processing_jobs]),
            # the pipeline hands this role to its jobs, and only to SageMaker
            iam.PolicyStatement(sid="PassSelfToSageMaker", actions=["iam:PassRole"], resources=[self.role.role_arn],
                                conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}),
            iam.PolicyStatement(sid="ListArtifacts", actions=["s3:ListBucket", "s3:GetBucketLocation"], resources=[bucket.bucket_arn]),
            iam.PolicyStatement(sid="ReadWriteArtifacts",
                                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                                resources=objects),
            iam.PolicyStatement(sid="ReadTrainingCode", actions=["s3:GetObject"],
                                resources=[f"arn:{stack.partition}:s3:::{code.s3_bucket_name}/{code.s3_object_key}"]),
            # processing jobs download the code as an S3Prefix input, which lists the key first
            iam.PolicyStatement(sid="ListTrainingCode", actions=["s3:ListBucket"],
                                resources=[f"arn:{stack.partition}:s3:::{code.s3_bucket_name}"],
                                conditions={"StringEquals": {"s3:prefix": code.s3_object_key}}),
            *(_read_one_object("DefaultPriceOverrides", price_overrides, stack.partition) if price_overrides else []),
            iam.PolicyStatement(sid="JobLogs", actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents",
                                                        "logs:DescribeLogStreams"],
                                resources=[log_groups]),
            # AWS Deep Learning Containers live in a registry account of their region (763104351884 in most,
            # 626614931356 in af-south-1, ...): the ARN comes from each image URI, never from a fixed account
            iam.PolicyStatement(sid="PullJobImages",
                                actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
                                resources=sorted({_repository_arn(image) for image in images})),
            # API forces "*": ecr:GetAuthorizationToken has no resource-level permissions
            iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
            # API forces "*": cloudwatch:PutMetricData has no resource-level permissions; limited to SageMaker namespaces
            iam.PolicyStatement(sid="JobMetrics", actions=["cloudwatch:PutMetricData"], resources=["*"],
                                conditions={"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}),
        ]
        self.policy = iam.Policy(self, "Policy", statements=statements)
        self.policy.attach_to_role(self.role)
        self._acknowledge_wildcards({
            "*": "Only where the API has no resource-level permissions: ecr:GetAuthorizationToken, "
                 "cloudwatch:PutMetricData (limited to /aws/sagemaker/* namespaces), EC2/FSx Describe* calls.",
            training_jobs: "Training job names are generated per execution by SageMaker Pipelines "
                                        "(pipelines-<execution id>-<step>-<suffix>): the prefix is all that is known.",
            processing_jobs: "Processing job names are generated per execution by SageMaker Pipelines "
                                        "(pipelines-<execution id>-<step>-<suffix>): the prefix is all that is known.",
            **{r: "Object keys under this prefix are written per execution (shards, models, checkpoints, evaluation) "
                  "or uploaded by users: the prefix is all that is known."
               for r in objects},
            log_groups: "SageMaker names the log groups and streams of its jobs "
                                                       "(/aws/sagemaker/TrainingJobs, /aws/sagemaker/ProcessingJobs).",
        })

    def _acknowledge_wildcards(self, reasons: dict[str, str]) -> None:
        """One cdk-nag acknowledgment per wildcard resource, named as cdk-nag names the finding."""
        for resource, reason in reasons.items():
            Validations.of(self.policy).acknowledge(
                Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{nag_form(Stack.of(self), resource)}]", reason=reason))

    def allow_vpc_jobs(self, *, subnet_arns: list[str], security_group_arns: list[str]) -> None:
        """What SageMaker needs to run jobs in the VPC (elastic network interfaces) with an FSx channel."""
        stack = Stack.of(self)
        eni = stack.format_arn(service="ec2", resource="network-interface/*")
        self.policy.add_statements(
            iam.PolicyStatement(sid="JobNetworkInterfaces",
                                actions=["ec2:CreateNetworkInterface", "ec2:CreateNetworkInterfacePermission",
                                         "ec2:DeleteNetworkInterface", "ec2:DeleteNetworkInterfacePermission"],
                                resources=[eni, *subnet_arns, *security_group_arns]),
            # API forces "*": EC2 Describe* and fsx:DescribeFileSystems have no resource-level permissions
            # (acknowledged with the other "*" resources above)
            iam.PolicyStatement(sid="DescribeNetwork",
                                actions=["ec2:DescribeNetworkInterfaces", "ec2:DescribeVpcs", "ec2:DescribeDhcpOptions",
                                         "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "fsx:DescribeFileSystems"],
                                resources=["*"]),
        )
        self._acknowledge_wildcards({eni: "SageMaker creates the network interfaces of each job: their ids are not known "
                                          "in advance (creation is limited to this stack's subnet and security groups)."})


def _read_one_object(name: str, asset: s3_assets.Asset, partition: str) -> list[iam.PolicyStatement]:
    """Read one asset object, as a processing input does: it lists the key (an S3Prefix input) and gets it."""
    return [iam.PolicyStatement(sid=f"Read{name}", actions=["s3:GetObject"],
                                resources=[f"arn:{partition}:s3:::{asset.s3_bucket_name}/{asset.s3_object_key}"]),
            iam.PolicyStatement(sid=f"List{name}", actions=["s3:ListBucket"], resources=[f"arn:{partition}:s3:::{asset.s3_bucket_name}"],
                                conditions={"StringEquals": {"s3:prefix": asset.s3_object_key}})]


def nag_form(stack: Stack, value: str) -> str:
    """`value` as cdk-nag prints it in finding ids: Ref -> <Name>, Fn::GetAtt -> <Name.Attr>, joins concatenated."""
    def render(v) -> str:
        if isinstance(v, str):
            return v
        if "Ref" in v:
            return f"<{v['Ref']}>"
        if "Fn::GetAtt" in v:
            return f"<{'.'.join(v['Fn::GetAtt'])}>"
        if "Fn::Join" in v:
            sep, parts = v["Fn::Join"]
            return sep.join(render(p) for p in parts)
        raise ValueError(f"no cdk-nag form for {v!r}")
    return render(stack.resolve(value))


def _outermost(prefixes: tuple[str, ...]) -> list[str]:
    """Key prefixes ('a/b/' form), dropping those inside another: ('hetero', 'hetero/raw/') -> ['hetero/']."""
    norm = sorted({p.strip("/") + "/" for p in prefixes})
    return [p for p in norm if not any(p != q and p.startswith(q) for q in norm)]


def _repository_arn(image: str) -> str:
    """<account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:tag|@digest] -> the repository's ARN, in the
    image's own account, region and partition."""
    account, region, repository = ecr_repository(image)
    return f"arn:{ecr_partition(region)}:ecr:{region}:{account}:repository/{repository}"
