"""The role the pipeline's training and processing jobs run as, with least privilege.

Workload code runs inside these jobs with this role's credentials, so it holds only what a
container needs: read the raw inputs, read and write the pipeline's own artifacts, read the code
and the default price file, write logs and metrics, pull its images. It cannot start, stop or
describe a job, pass a role, or change the raw inputs (an explicit deny, since the default input
prefix lies inside the artifact prefix). Starting jobs is the pipeline role's (`infra.pipeline_role`). Its one
SageMaker permission, read-only, is on the model package group (`infra.model_registry`): Evaluate reads the latest
approved package there to decide automatic approval.

No wildcard actions. Resources are scoped wherever the API allows; where the API forces `*` (no
resource-level permissions) the statement says so.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from infra.nag import acknowledge_wildcards
from pipeline.sagemaker.images import ecr_partition, ecr_repository

POLICY_NAME = "JobAccess"  # inline, on this role only
OBJECT_WRITES = ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")


class JobRole(Construct):
    """`role`: assumed by SageMaker for the pipeline's jobs; the pipeline role passes it to each of them."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline_name: str,
        bucket: s3.IBucket,
        prefix: str,
        input_prefix: str,
        code: s3_assets.Asset,
        images: tuple[str, ...],
        price_overrides: s3_assets.Asset | None = None,
    ) -> None:
        """`prefix`: the pipeline's artifacts (read and write); `input_prefix`: its raw inputs (read only), both key
        prefixes in `bucket`. `images`: the ECR image URIs the jobs run (training and processing); pulling is allowed
        from exactly their repositories, each in its own registry account and region. `price_overrides`: the
        PriceOverrides parameter's default object, which the Evaluate step reads as an input."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"Runs the training and processing jobs of the {pipeline_name} SageMaker pipeline",
        )
        artifacts = bucket.arn_for_objects(f"{prefix.strip('/')}/*")
        inputs = bucket.arn_for_objects(f"{input_prefix}*")
        log_groups = stack.format_arn(service="logs", resource="log-group:/aws/sagemaker/*")
        statements = [
            *_storage_statements(
                bucket,
                prefix=prefix,
                input_prefix=input_prefix,
                artifacts=artifacts,
                inputs=inputs,
                code=code,
                price_overrides=price_overrides,
                partition=stack.partition,
            ),
            iam.PolicyStatement(
                sid="JobLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[log_groups],
            ),
            # AWS Deep Learning Containers live in a registry account of their region (763104351884 in most,
            # 626614931356 in af-south-1, ...): the ARN comes from each image URI, never from a fixed account
            iam.PolicyStatement(
                sid="PullJobImages",
                actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
                resources=sorted({_repository_arn(image) for image in images}),
            ),
            # API forces "*": ecr:GetAuthorizationToken has no resource-level permissions
            iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
            # API forces "*": cloudwatch:PutMetricData has no resource-level permissions; limited to SageMaker namespaces
            iam.PolicyStatement(
                sid="JobMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}},
            ),
        ]
        self.policy = iam.Policy(self, "Policy", policy_name=POLICY_NAME, statements=statements)
        self.policy.attach_to_role(self.role)
        keys = "Object keys under this prefix are written per execution (shards, models, checkpoints, evaluation) or uploaded by "
        acknowledge_wildcards(
            self.policy,
            {
                "*": "Only where the API has no resource-level permissions: ecr:GetAuthorizationToken, "
                "cloudwatch:PutMetricData (limited to /aws/sagemaker/* namespaces), EC2/FSx Describe* calls, "
                "sagemaker:ListModelPackages (names no package).",
                artifacts: keys + "users (price files): the prefix is all that is known.",
                inputs: "Raw inputs are uploaded by users under this prefix, which the jobs may read and never change: the prefix "
                "is all that is known.",
                log_groups: "SageMaker names the log groups and streams of its jobs (/aws/sagemaker/TrainingJobs, "
                "/aws/sagemaker/ProcessingJobs).",
            },
        )

    def allow_vpc_jobs(self, *, subnet_arns: list[str], security_group_arns: list[str]) -> None:
        """What SageMaker needs to run jobs in the VPC (elastic network interfaces) with an FSx channel: the job's own
        role creates them (SageMaker guide, "Give SageMaker access to resources in your Amazon VPC")."""
        stack = Stack.of(self)
        eni = stack.format_arn(service="ec2", resource="network-interface/*")
        self.policy.add_statements(
            iam.PolicyStatement(
                sid="JobNetworkInterfaces",
                actions=[
                    "ec2:CreateNetworkInterface",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                ],
                resources=[eni, *subnet_arns, *security_group_arns],
            ),
            # API forces "*": EC2 Describe* and fsx:DescribeFileSystems have no resource-level permissions
            # (acknowledged with the other "*" resources above)
            iam.PolicyStatement(
                sid="DescribeNetwork",
                actions=[
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeVpcs",
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeSecurityGroups",
                    "fsx:DescribeFileSystems",
                ],
                resources=["*"],
            ),
        )
        acknowledge_wildcards(
            self.policy,
            {
                eni: "SageMaker creates the network interfaces of each job: their ids are not "
                "known in advance (creation is limited to this stack's subnet and security groups)."
            },
        )


def _storage_statements(
    bucket: s3.IBucket,
    *,
    prefix: str,
    input_prefix: str,
    artifacts: str,
    inputs: str,
    code: s3_assets.Asset,
    price_overrides: s3_assets.Asset | None,
    partition: str,
) -> list[iam.PolicyStatement]:
    """S3: list and read-write the artifacts, read and never change the inputs, read the code and the default price file."""
    return [
        # listing (S3Prefix channels and inputs list their prefix first) only under the two prefixes: key names
        # elsewhere in the bucket are not the jobs' to read
        iam.PolicyStatement(
            sid="ListArtifacts",
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{prefix.strip('/')}/*", f"{prefix.strip('/')}", f"{input_prefix}*"]}},
        ),
        iam.PolicyStatement(sid="LocateBucket", actions=["s3:GetBucketLocation"], resources=[bucket.bucket_arn]),
        iam.PolicyStatement(sid="ReadWriteArtifacts", actions=["s3:GetObject", *OBJECT_WRITES], resources=[artifacts]),
        iam.PolicyStatement(sid="ReadInputs", actions=["s3:GetObject"], resources=[inputs]),
        # workload code must not change or delete what it trains on, though the artifact prefix may hold it
        iam.PolicyStatement(
            sid="KeepInputs", effect=iam.Effect.DENY, actions=[*OBJECT_WRITES, "s3:DeleteObjectVersion"], resources=[inputs]
        ),
        iam.PolicyStatement(
            sid="ReadTrainingCode",
            actions=["s3:GetObject"],
            resources=[f"arn:{partition}:s3:::{code.s3_bucket_name}/{code.s3_object_key}"],
        ),
        # processing jobs download the code as an S3Prefix input, which lists the key first
        iam.PolicyStatement(
            sid="ListTrainingCode",
            actions=["s3:ListBucket"],
            resources=[f"arn:{partition}:s3:::{code.s3_bucket_name}"],
            conditions={"StringEquals": {"s3:prefix": code.s3_object_key}},
        ),
        *(_read_one_object("DefaultPriceOverrides", price_overrides, partition) if price_overrides else []),
    ]


def _read_one_object(name: str, asset: s3_assets.Asset, partition: str) -> list[iam.PolicyStatement]:
    """Read one asset object, as a processing input does: it lists the key (an S3Prefix input) and gets it."""
    return [
        iam.PolicyStatement(
            sid=f"Read{name}",
            actions=["s3:GetObject"],
            resources=[f"arn:{partition}:s3:::{asset.s3_bucket_name}/{asset.s3_object_key}"],
        ),
        iam.PolicyStatement(
            sid=f"List{name}",
            actions=["s3:ListBucket"],
            resources=[f"arn:{partition}:s3:::{asset.s3_bucket_name}"],
            conditions={"StringEquals": {"s3:prefix": asset.s3_object_key}},
        ),
    ]


def _repository_arn(image: str) -> str:
    """<account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:tag|@digest] -> the repository's ARN, in the
    image's own account, region and partition."""
    account, region, repository = ecr_repository(image)
    return f"arn:{ecr_partition(region)}:ecr:{region}:{account}:repository/{repository}"
