"""The model package group the pipeline's register step files each heterogeneous run's model in.

The pipeline role registers into it (CreateModelPackage, the RegisterModel step runs as the pipeline); the job role
reads it (Evaluate compares a new model with the latest approved package when AutoApproveMargin >= 0). Each is
granted its actions on this group and its packages only.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from infra.nag import acknowledge_wildcards
from pipeline.iam.arns import arn

REGISTER_ACTIONS = ("sagemaker:CreateModelPackage", "sagemaker:DescribeModelPackage", "sagemaker:AddTags")
READ_ACTIONS = ("sagemaker:DescribeModelPackageGroup", "sagemaker:DescribeModelPackage")
# ListModelPackages names no package: its one resource type (model-package) is optional in the Service Authorization
# Reference, so a request that names none is authorised against "*"
LIST_ACTION = "sagemaker:ListModelPackages"
VERSIONS_REASON = (
    "SageMaker numbers a group's model packages as they are registered (model-package/<group>/<version>): "
    "the group's prefix is all that is known."
)


class ModelRegistry(Construct):
    """`group`: the `CfnModelPackageGroup`; `arns`: the group's ARN and its packages' (`<group>/*`)."""

    def __init__(self, scope: Construct, construct_id: str, *, group_name: str, pipeline_name: str) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.group_name = group_name
        self.group = sagemaker.CfnModelPackageGroup(
            self,
            "Group",
            model_package_group_name=group_name,
            model_package_group_description=f"Models trained on heterogeneous clusters by the {pipeline_name} pipeline",
        )
        where = {"partition": stack.partition, "region": stack.region, "account": stack.account}
        group_arn = arn("model-package-group", **where, group=group_name)
        # a package's ARN keeps its group's case (pipeline/iam/arns.py has the source)
        self.packages_arn = arn("model-package", **where, group=group_name, version="*")
        self.arns = [group_arn, self.packages_arn]

    def grant_register(self, policy: iam.Policy) -> None:
        self._grant(policy, "RegisterModels", REGISTER_ACTIONS)

    def grant_read(self, policy: iam.Policy) -> None:
        self._grant(policy, "ReadModelRegistry", READ_ACTIONS)
        policy.add_statements(iam.PolicyStatement(sid="ListModelPackages", actions=[LIST_ACTION], resources=["*"]))
        # its "*" is acknowledged with the job role's other API-forced "*" resources (infra/job_role.py)

    def _grant(self, policy: iam.Policy, sid: str, actions: tuple[str, ...]) -> None:
        policy.add_statements(iam.PolicyStatement(sid=sid, actions=list(actions), resources=self.arns))
        acknowledge_wildcards(policy, {self.packages_arn: VERSIONS_REASON})
