"""The SageMaker SDK v3, offline: no client that calls out, no credentials, no uploads."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sagemaker.core.workflow.pipeline_context import PipelineSession

_SDK_CONFIG = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}


@contextmanager
def offline_sdk(region: str) -> Iterator[None]:
    """What the SDK needs to build without the network, undone afterwards.

    * a region before `sagemaker.mlops` is imported (a module there creates a client at import);
    * no IAM role lookups (``SAGEMAKER_VALIDATE_ROLE=false``; the role is a placeholder ARN anyway);
    * no instance-metadata probe: ProcessingStep builds a LocalSession on the default boto3
      session, whose credential chain would try 169.254.169.254;
    * the SDK re-validates the session config against its JSON schema on every lookup (dozens
      of times, ~0.3 s each): our config is a constant, validated once here, then skipped.
    """
    wanted = {"AWS_DEFAULT_REGION": region, "SAGEMAKER_VALIDATE_ROLE": "false", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    patched = None
    try:
        from sagemaker.core.config.config_manager import SageMakerConfig

        validate = SageMakerConfig.__dict__["validate_sagemaker_config"]
        validate.__func__(_SDK_CONFIG)

        def validate_once(sagemaker_config=None):
            if sagemaker_config is not _SDK_CONFIG:
                validate.__func__(sagemaker_config)

        SageMakerConfig.validate_sagemaker_config = staticmethod(validate_once)
        patched = (SageMakerConfig, validate)
        with warnings.catch_warnings(), _quiet_sdk_logs():
            # "Running within a PipelineSession...", job names popped: expected while compiling
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        if patched:
            patched[0].validate_sagemaker_config = patched[1]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def _quiet_sdk_logs():
    """The SDK logs each default it applies at INFO/WARNING; only errors matter while compiling."""
    loggers = [logging.getLogger(name) for name in sorted(logging.root.manager.loggerDict) if name.split(".")[0] == "sagemaker"]
    loggers = [logging.getLogger("sagemaker"), *loggers]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def session(region: str, default_bucket: str) -> PipelineSession:
    import boto3
    from sagemaker.core.workflow.pipeline_context import PipelineSession

    # Dummy credentials: nothing is signed or sent; they keep boto3 from searching for real ones.
    boto_session = boto3.Session(region_name=region, aws_access_key_id="offline", aws_secret_access_key="offline")
    return PipelineSession(boto_session=boto_session, sagemaker_config=_SDK_CONFIG, default_bucket=default_bucket)
