"""The table of a container's environment: every image the pipeline runs has its rows, every row its source."""

from __future__ import annotations

import pytest

from pipeline.emulator import container_env as ce
from pipeline.emulator.image_guard import manifests
from steps.common.errors import UserError

PYTORCH_GPU = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker"


def test_every_image_with_a_manifest_has_its_env_and_every_row_a_source():
    assert {m.name for m in manifests()} == set(ce.IMAGES)
    for variable in (*ce.RUNTIME, *ce.IMAGE):
        assert variable.source and set(variable.where) <= set(ce.IMAGES), variable
    for variable in ce.SERVICE:
        assert variable.source and set(variable.where) <= {ce.TRAINING, ce.PROCESSING}, variable
    assert all(a.reason for a in ce.TWIN) and all(ce.NOT_SET.values())
    for image in ce.IMAGES:  # one value per variable and image
        names = [v.name for v in ce.IMAGE if image in v.where]
        assert len(names) == len(set(names)), image


def test_an_images_env_expands_as_docker_does_and_an_unknown_image_has_dockers_only():
    env = ce.image_env(PYTORCH_GPU)
    assert env["PATH"] == f"/opt/venv/bin:/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/usr/local/cuda/bin:{ce.DOCKER_PATH}"
    assert env["LD_LIBRARY_PATH"].endswith(":/usr/local/cuda/lib64:/usr/local/lib:")  # amazonlinux sets none below it
    assert ce.image_env("000000000000.dkr.ecr.us-east-1.amazonaws.com/hetero-ray:2.60.0") == env  # FROM it, no ENV
    assert ce.image_env("123456789012.dkr.ecr.eu-west-1.amazonaws.com/mine:1") == {"PATH": ce.DOCKER_PATH, "HOME": "/root"}


def test_the_service_forms_a_training_jobs_arn_from_its_role_and_region():
    env = ce.training_service_env(job_name="Pipelines-X", region="cn-north-1", role_arn="arn:aws-cn:iam::111122223333:role/r")
    assert env == {
        "TRAINING_JOB_NAME": "Pipelines-X",
        "TRAINING_JOB_ARN": "arn:aws-cn:sagemaker:cn-north-1:111122223333:training-job/Pipelines-X",
        "AWS_REGION": "cn-north-1",
    }
    with pytest.raises(UserError, match="RoleArn 'role' is not an IAM role ARN"):
        ce.training_service_env(job_name="j", region="us-east-1", role_arn="role")
