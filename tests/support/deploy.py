"""Deploy settings with concrete values (no CDK tokens), as a deployed stack resolves them: what request checks need;
and the definitions compiled from settings, once per test session."""

from __future__ import annotations

import pytest

from pipeline.sagemaker.definition import DeploySettings, build_definition
from tests.support.shared import key_of, shared_json

CONCRETE_SETTINGS = DeploySettings(
    pipeline_name="hetero-test",
    region="eu-west-1",
    role_arn="arn:aws:iam::123456789012:role/hetero",
    bucket="my-bucket",
    code_uri="s3://my-bucket/hetero/code/code.tar.gz",
)


def compiled_once(tmp_path_factory: pytest.TempPathFactory, settings: DeploySettings) -> dict:
    """build_definition(settings), compiled once per test session (a compile takes seconds): a fresh copy each call."""
    return shared_json(tmp_path_factory, "definition", key_of(settings), lambda: build_definition(settings))
