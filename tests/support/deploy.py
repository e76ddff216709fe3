"""Deploy settings with concrete values (no CDK tokens), as a deployed stack resolves them: what request checks need."""

from __future__ import annotations

from pipeline.sagemaker import DeploySettings

CONCRETE_SETTINGS = DeploySettings(
    pipeline_name="hetero-test",
    region="eu-west-1",
    role_arn="arn:aws:iam::123456789012:role/hetero",
    bucket="my-bucket",
    code_uri="s3://my-bucket/hetero/code/code.tar.gz",
)
