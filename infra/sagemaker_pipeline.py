"""The SageMaker pipeline: the definition compiled by `pipeline.sagemaker.definition`, deployed as a `CfnPipeline`.

There is no L2 Pipeline construct. The definition is built at synth time from CDK
tokens (role ARN, bucket name, code URL, FSx ids) and embedded with
`Stack.to_json_string`, which turns the tokens into an `Fn::Join`.

Two roles: every step's RoleArn is the job role (`infra.job_role`), the pipeline's own RoleArn the
pipeline role (`infra.pipeline_role`). The description says what the jobs may read
(`pipeline.sagemaker.job_access`), which `hetero start` reads back with DescribePipeline.
"""

from __future__ import annotations

import jsii
from aws_cdk import Resource, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk.interfaces import aws_sagemaker as sagemaker_refs
from constructs import Construct

from pipeline.sagemaker.definition import DeploySettings, FsxSettings, all_steps, build_definition
from pipeline.sagemaker.job_access import JobAccess

SUMMARY = "Shard -> baseline / heterogeneous training -> priced evaluation -> model registration -> improvement check."


class SageMakerPipeline(Construct):
    """`pipeline`: the `CfnPipeline`; `ref`: the same pipeline as an `IPipeline` (for schedule targets);
    `property_file_keys`: the object keys (`*` for the execution id) of the property files its conditions read."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline_name: str,
        pipeline_role: iam.IRole,
        job_role: iam.IRole,
        bucket: s3.IBucket,
        code_url: str,
        prefix: str,
        input_prefix: str,
        price_overrides_url: str | None = None,
        framework: str = "pytorch",
        training_image: str | None = None,
        processing_image: str | None = None,
        serving_image: str | None = None,
        fsx: FsxSettings | None = None,
        inter_container_encryption: bool = False,
        network_isolation: bool = False,
        spot: bool = False,
        model_package_group: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        definition = build_definition(
            DeploySettings(
                pipeline_name=pipeline_name,
                region=stack.region,
                role_arn=job_role.role_arn,
                bucket=bucket.bucket_name,
                code_uri=code_url,
                prefix=prefix,
                price_overrides_uri=price_overrides_url,
                framework=framework,
                training_image=training_image or None,
                processing_image=processing_image or None,
                serving_image=serving_image or None,
                fsx=fsx,
                inter_container_encryption=inter_container_encryption,
                network_isolation=network_isolation,
                spot=spot,
                model_package_group=model_package_group,
            )
        )
        access = JobAccess(inputs=f"s3://{bucket.bucket_name}/{input_prefix}", artifacts=f"s3://{bucket.bucket_name}/{prefix}/")
        self.pipeline = sagemaker.CfnPipeline(
            self,
            "Pipeline",
            pipeline_name=pipeline_name,
            role_arn=pipeline_role.role_arn,
            pipeline_description=f"{SUMMARY} {access.describe()}",
            pipeline_definition={"PipelineDefinitionBody": stack.to_json_string(definition)},
        )
        self.property_file_keys = _property_file_keys(definition)
        # the pipeline's ARN as IAM sees it (SageMaker lowercases pipeline names in ARNs)
        self.pipeline_arn = stack.format_arn(service="sagemaker", resource="pipeline", resource_name=pipeline_name.lower())
        self.ref = _PipelineRef(self, "Ref", name=pipeline_name, arn=self.pipeline_arn)


def _property_file_keys(definition: dict) -> list[str]:
    """<prefix>/*/<step>/<file> for each property file: the output's S3Uri, its execution id (a `Get`) as `*`."""
    keys = []
    for step in all_steps(definition).values():
        outputs = (
            {
                o["OutputName"]: o["S3Output"]["S3Uri"]
                for o in step["Arguments"].get("ProcessingOutputConfig", {}).get("Outputs", [])
            }
            if "PropertyFiles" in step
            else {}
        )
        for prop in step.get("PropertyFiles", []):
            uri = outputs[prop["OutputName"]]
            if isinstance(uri, dict):
                join = uri["Std:Join"]
                uri = join["On"].join(v if isinstance(v, str) else "*" for v in join["Values"])
            keys.append(f"{uri.split('/', 3)[3].rstrip('/')}/{prop['FilePath']}")
    return sorted(set(keys))


@jsii.implements(sagemaker.IPipeline)
class _PipelineRef(Resource):
    """The deployed pipeline as an `IPipeline` (what schedule targets take; `CfnPipeline` is not one)."""

    def __init__(self, scope: Construct, construct_id: str, *, name: str, arn: str) -> None:
        super().__init__(scope, construct_id)
        self._name, self._arn = name, arn

    @property
    def pipeline_name(self) -> str:
        return self._name

    @property
    def pipeline_arn(self) -> str:
        return self._arn

    @property
    def pipeline_ref(self) -> sagemaker_refs.PipelineReference:
        return sagemaker_refs.PipelineReference(pipeline_name=self._name)

    def grant_start_pipeline_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["sagemaker:StartPipelineExecution"], resource_arns=[self._arn]
        )
