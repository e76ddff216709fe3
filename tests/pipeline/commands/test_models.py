"""`hetero models`: the local registry the local runner files into, and the deployed group over HTTP (a moto
server for SageMaker; a recording endpoint for what moto cannot answer, AccessDenied)."""

from __future__ import annotations

import json
import re

import boto3
import pytest

from pipeline.cli import main
from pipeline.sagemaker.validation import validate_request
from steps.evaluate.registry import APPROVED, PENDING, REJECTED, LocalRegistry, open_registry
from tests.support.aws_endpoint import JsonHandler, aws_endpoint

GROUP = "HeteroTraining-models"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023-sagemaker"


def request(execution: str, accuracy: str, status: str = PENDING) -> dict:
    """A CreateModelPackage request as the register step sends it (its JSON values filled in)."""
    return {
        "ModelPackageGroupName": GROUP,
        "InferenceSpecification": {"Containers": [{"Image": IMAGE, "ModelDataUrl": f"s3://b/{execution}/model.tar.gz"}]},
        "ModelApprovalStatus": status,
        "ModelMetrics": {
            "ModelQuality": {"Statistics": {"ContentType": "application/json", "S3Uri": f"s3://b/{execution}/model_metrics.json"}}
        },
        "CustomerMetadataProperties": {
            "accuracy": accuracy,
            "samples_per_second": "812.5",
            "samples_per_dollar": "1.2e+06",
            "improvement": "0.31",
            "bottleneck": "input-bound",
            "recommendation": "DataInstanceType=ml.c5.4xlarge DataInstanceCount=2",
            "execution_id": execution,
            "approval": "automatic approval is off",
        },
        "SkipModelValidation": "None",
    }


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_requests_pass_botocores_model():
    validate_request("CreateModelPackage", request("local-1", "0.93"), step="RegisterModel")


# --- the local registry ---


@pytest.fixture
def local(tmp_path):
    registry = LocalRegistry(tmp_path / "registry" / GROUP)
    for execution, accuracy in (("local-1", "0.91"), ("local-2", "0.93")):
        registry.create(request(execution, accuracy), arn_prefix="arn:aws:sagemaker:us-east-1:000000000000")
    return registry


def test_local_packages_are_describe_documents(local):
    newest, oldest = local.packages()
    assert (newest["ModelPackageVersion"], oldest["ModelPackageVersion"]) == (2, 1)
    assert (
        newest["ModelPackageArn"] == "arn:aws:sagemaker:us-east-1:000000000000:model-package/HeteroTraining-models/2"
    )  # the group's case kept
    assert newest["ModelApprovalStatus"] == PENDING and newest["ModelPackageGroupName"] == GROUP
    assert newest["CustomerMetadataProperties"]["execution_id"] == "local-2" and "CreationTime" in newest
    assert json.loads((local.folder / "1.json").read_text()) == oldest


def test_list_approve_and_reject_locally(local, capsys):
    code, out, err = run_cli(capsys, "models", "--registry", str(local.folder))
    assert code == 0, err
    header, second, first = out.splitlines()
    assert "accuracy" in header and "samples_per_dollar" in header
    assert re.match(r"\s+2\s+PendingManualApproval\s+0.93\s+812.5\s+1.2e\+06\s+0.31\s+input-bound\s+local-2\s+arn:", second)
    assert first.split()[:3] == ["1", "PendingManualApproval", "0.91"]
    code, out, err = run_cli(capsys, "models", "approve", "2", "--registry", str(local.folder))
    assert code == 0 and out.strip() == f"model package 2 of {GROUP}: Approved", err
    arn = local.describe(1)["ModelPackageArn"]
    code, out, err = run_cli(capsys, "models", "reject", arn, "--registry", str(local.folder))
    assert code == 0, err
    assert [p["ModelApprovalStatus"] for p in local.packages()] == [APPROVED, REJECTED]
    assert local.latest_approved()["ModelPackageVersion"] == 2


@pytest.mark.parametrize("ref", ["7", "arn:aws:sagemaker:us-east-1:000000000000:model-package/other/1", "latest"])
def test_an_unknown_local_package_is_one_line(local, capsys, ref):
    code, out, err = run_cli(capsys, "models", "approve", ref, "--registry", str(local.folder))
    assert code == 2 and not out
    assert err.startswith(f"error: unknown model package: no model package '{ref}' in model package group '{GROUP}'")
    assert "`hetero models` lists" in err and len(err.strip().splitlines()) == 1


def test_a_missing_local_registry_names_the_fix(tmp_path, capsys):
    code, _, err = run_cli(capsys, "models", "--registry", str(tmp_path / "nothing"))
    assert code == 2 and err.startswith("error: no registry: no model registry at ") and "hetero run" in err


def test_approve_needs_a_package(local, capsys):
    code, _, err = run_cli(capsys, "models", "approve", "--registry", str(local.folder))
    assert code == 2 and "needs the package" in err


# --- the deployed group (moto) ---


@pytest.fixture
def deployed(aws_env):
    client = boto3.client("sagemaker")
    client.create_model_package_group(ModelPackageGroupName=GROUP)
    for execution, accuracy in (("exec1", "0.91"), ("exec2", "0.93")):
        client.create_model_package(**request(execution, accuracy))
    return client


def test_list_and_approve_in_sagemaker(deployed, capsys):
    registry = f"sagemaker://{GROUP}"
    code, out, err = run_cli(capsys, "models", "--registry", registry)
    assert code == 0, err
    _, second, first = out.splitlines()
    assert second.split()[:3] == ["2", "PendingManualApproval", "0.93"] and "exec2" in second
    assert first.split()[:3] == ["1", "PendingManualApproval", "0.91"]
    code, out, err = run_cli(capsys, "models", "approve", "2", "--registry", registry)
    assert code == 0 and out.strip() == f"model package 2 of {GROUP}: Approved", err
    (approved,) = deployed.list_model_packages(ModelPackageGroupName=GROUP, ModelApprovalStatus=APPROVED)[
        "ModelPackageSummaryList"
    ]
    assert approved["ModelPackageVersion"] == 2
    code, _, err = run_cli(capsys, "models", "reject", approved["ModelPackageArn"], "--registry", registry)
    assert code == 0, err
    assert deployed.describe_model_package(ModelPackageName=approved["ModelPackageArn"])["ModelApprovalStatus"] == REJECTED


def test_an_unknown_package_in_sagemaker_is_one_line(deployed, capsys):
    code, _, err = run_cli(capsys, "models", "approve", "9", "--registry", f"sagemaker://{GROUP}")
    assert code == 2 and err.startswith("error: unknown model package: no model package '9'"), err


def test_a_group_that_does_not_exist(aws_env, capsys):
    code, _, err = run_cli(capsys, "models", "--registry", "sagemaker://NoSuchGroup")
    assert code == 2 and err.startswith("error: no registry: no model package group 'NoSuchGroup'"), err
    assert "deploy the stack" in err and "hetero:modelPackageGroup" in err and len(err.strip().splitlines()) == 1


# --- what moto cannot answer: AWS's own refusal ---


class Refuser(JsonHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.targets.append(self.headers.get("X-Amz-Target"))
        self.answer(400, {"__type": "AccessDeniedException", "Message": "User: arn:aws:iam::1:user/u is not authorized"})


@pytest.fixture
def refusing(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with aws_endpoint(Refuser, monkeypatch) as server:
        server.targets = []
        yield server


def test_access_denied_names_the_permission(refusing, capsys):
    code, _, err = run_cli(capsys, "models", "approve", "1", "--registry", f"sagemaker://{GROUP}")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: access denied: DescribeModelPackageGroup on model package group '{GROUP}' was denied")
    assert f"needs sagemaker:DescribeModelPackageGroup on arn:aws:sagemaker:<region>:<account>:model-package-group/{GROUP}" in err
    assert refusing.targets == ["SageMaker.DescribeModelPackageGroup"]


def test_evaluate_reads_the_latest_approved_package_in_sagemaker(deployed):
    registry = open_registry(f"sagemaker://{GROUP}")
    assert registry.latest_approved() is None
    deployed.create_model_package(**request("exec3", "0.95", status=APPROVED))
    deployed.create_model_package(**request("exec4", "0.97"))  # newer, but pending
    latest = registry.latest_approved()
    assert latest["ModelPackageVersion"] == 3 and latest["CustomerMetadataProperties"]["accuracy"] == "0.95"
