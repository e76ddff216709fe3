"""The SageMaker SDK v3, offline: no client that calls out, no credentials, no uploads."""

from __future__ import annotations

import functools
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
    * the SDK re-validates the session config against its JSON schema on every lookup and every session it builds
      (dozens of times a definition; jsonschema checks the schema itself each time, ~0.3 s): our config is a
      constant, validated once per process (`_validated`), then skipped wherever the SDK calls the check from.
    """
    wanted = {"AWS_DEFAULT_REGION": region, "SAGEMAKER_VALIDATE_ROLE": "false", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    patched: list[tuple[object, str, object]] = []
    try:
        import sagemaker.core.config.config as config_module
        import sagemaker.core.helper.session_helper as session_module
        import sagemaker.core.local.local_session as local_module
        from sagemaker.core.config.config_manager import SageMakerConfig

        _validated()
        validate = config_module.validate_sagemaker_config

        def validate_once(sagemaker_config=None):
            if sagemaker_config is not _SDK_CONFIG:
                validate(sagemaker_config)

        # the method, and the module function under each name the SDK imported it by
        name = "validate_sagemaker_config"
        for owner, check in (
            (SageMakerConfig, staticmethod(validate_once)),
            *((module, validate_once) for module in (config_module, session_module, local_module)),
        ):
            patched.append((owner, name, vars(owner)[name]))
            setattr(owner, name, check)
        with warnings.catch_warnings(), _quiet_sdk_logs():
            # "Running within a PipelineSession...", job names popped: expected while compiling
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@functools.cache
def _validated() -> None:
    """`_SDK_CONFIG` checked against the SDK's schema, once per process."""
    from sagemaker.core.config.config import validate_sagemaker_config

    validate_sagemaker_config(_SDK_CONFIG)


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
