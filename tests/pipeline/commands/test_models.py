"""`hetero models`: the local registry the local runner files into, and the deployed group over HTTP (a moto
server for SageMaker; a recording endpoint for what moto cannot answer, AccessDenied)."""

from __future__ import annotations

import json
import re

import boto3
import pytest

from pipeline.cli import main
from pipeline.sagemaker.endpoints import Deployment, deploy
from pipeline.sagemaker.serving import GPU_SPECIFICATION
from pipeline.sagemaker.validation import validate_request
from steps.common.errors import UserError
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


# --- deploy: an Approved package behind an endpoint (moto) ---

ROLE = "arn:aws:iam::123456789012:role/hetero-endpoint"


def test_deploy_creates_the_model_from_the_package_its_config_and_the_endpoint_then_updates_it(deployed, capsys):
    registry = f"sagemaker://{GROUP}"
    code, _, err = run_cli(
        capsys, "models", "deploy", "2", "--endpoint", "shapes", "--serverless", "2048", "--role", ROLE, "--registry", registry
    )
    assert code == 2 and err.startswith("error: not approved: model package 2 is PendingManualApproval, not Approved")
    assert "hetero models approve 2" in err and not deployed.list_models()["Models"]
    assert run_cli(capsys, "models", "approve", "2", "--registry", registry)[0] == 0

    code, out, err = run_cli(
        capsys, "models", "deploy", "2", "--endpoint", "shapes", "--serverless", "2048", "--role", ROLE, "--registry", registry
    )
    assert code == 0, err
    assert re.fullmatch(
        r"endpoint shapes: creating \(model and endpoint config shapes-v2-\d{14}, serverless, 2048 MB\); "
        r"aws sagemaker wait endpoint-in-service --endpoint-name shapes\n",
        out,
    ), out
    (model,) = deployed.list_models()["Models"]
    described = deployed.describe_model(ModelName=model["ModelName"])
    arn = deployed.list_model_packages(ModelPackageGroupName=GROUP, ModelApprovalStatus=APPROVED)["ModelPackageSummaryList"][0][
        "ModelPackageArn"
    ]
    assert described["ExecutionRoleArn"] == ROLE and described["PrimaryContainer"]["ModelPackageName"] == arn
    config = deployed.describe_endpoint_config(EndpointConfigName=model["ModelName"])
    (variant,) = config["ProductionVariants"]
    assert variant["ServerlessConfig"] == {"MemorySizeInMB": 2048, "MaxConcurrency": 5} and variant["VariantName"] == "AllTraffic"
    assert deployed.describe_endpoint(EndpointName="shapes")["EndpointConfigName"] == model["ModelName"]


def _approved(version: int) -> dict:
    """DescribeModelPackage's answer for an Approved package of the group (what deploy reads of it)."""
    return {
        "ModelPackageArn": f"arn:aws:sagemaker:us-east-1:123456789012:model-package/{GROUP}/{version}",
        "ModelPackageVersion": version,
        "ModelApprovalStatus": APPROVED,
    }


class Recording(JsonHandler):
    """SageMaker's JSON protocol, each call recorded in ``server.calls`` as (operation, request body)."""

    def call(self) -> tuple[str, dict]:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        target = self.headers.get("X-Amz-Target", "").removeprefix("SageMaker.")
        self.server.calls.append((target, body))
        return target, body


class Existing(Recording):
    """SageMaker where the endpoint exists (moto has no UpdateEndpoint): every call recorded and answered."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        target, _ = self.call()
        self.answer(200, {"EndpointName": "shapes", "EndpointStatus": "InService"} if target == "DescribeEndpoint" else {})


def test_deploying_to_an_endpoint_that_exists_updates_it_to_the_new_config(aws_env, monkeypatch):
    package = _approved(4)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with aws_endpoint(Existing, monkeypatch) as server:
        server.calls = []
        line = deploy(Deployment(package, "shapes", ROLE, instance_type="ml.c5.xlarge"), boto3.client("sagemaker"))
    assert [target for target, _ in server.calls] == ["CreateModel", "CreateEndpointConfig", "DescribeEndpoint", "UpdateEndpoint"]
    update = server.calls[-1][1]
    assert update["EndpointName"] == "shapes" and re.fullmatch(r"shapes-v4-\d{14}", update["EndpointConfigName"])
    assert line.startswith("endpoint shapes: updating to it (") and "1 x ml.c5.xlarge" in line


class Refusing(Recording):
    """SageMaker where no endpoint exists yet and the operations in ``server.refuse`` fail (code, message)."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        target, body = self.call()
        if target == "DescribeEndpoint":
            self.answer(400, {"__type": "ValidationException", "message": f"Could not find endpoint {body['EndpointName']}."})
        elif target in self.server.refuse:
            code, message = self.server.refuse[target]
            self.answer(400, {"__type": code, "message": message})
        else:
            self.answer(200, {})


def _refused_deploy(monkeypatch, refuse: dict) -> tuple[list[str], UserError]:
    package = _approved(5)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with aws_endpoint(Refusing, monkeypatch) as server:
        server.calls, server.refuse = [], refuse
        with pytest.raises(UserError) as raised:
            deploy(Deployment(package, "shapes", ROLE, instance_type="ml.c5.xlarge"), boto3.client("sagemaker"))
    return [target for target, _ in server.calls], raised.value


def test_a_refused_endpoint_leaves_no_model_or_config_of_the_deploy_behind(aws_env, monkeypatch):
    """CreateEndpoint refused (a quota): one line with SageMaker's reason, and the deploy's endpoint config and model are
    deleted again, newest first."""
    calls, error = _refused_deploy(
        monkeypatch, {"CreateEndpoint": ("ResourceLimitExceeded", "account-level service limit for ml.c5.xlarge is 0")}
    )
    assert calls == [
        "CreateModel",
        "CreateEndpointConfig",
        "DescribeEndpoint",
        "CreateEndpoint",
        "DeleteEndpointConfig",
        "DeleteModel",
    ]
    assert re.fullmatch(
        r"deploy refused: SageMaker refused CreateEndpoint \(ResourceLimitExceeded: account-level service limit for "
        r"ml\.c5\.xlarge is 0\); removed endpoint config (shapes-v5-\d{14}) and model \1 again",
        error.one_line(),
    ), error.one_line()


def test_what_a_refused_deploy_cannot_delete_is_named_with_the_command_that_deletes_it(aws_env, monkeypatch):
    calls, error = _refused_deploy(
        monkeypatch,
        {
            "CreateEndpointConfig": ("ValidationException", "Invalid VariantName"),
            "DeleteModel": ("AccessDeniedException", "not authorized to perform: sagemaker:DeleteModel"),
        },
    )
    assert calls == ["CreateModel", "CreateEndpointConfig", "DeleteModel"]
    line = error.one_line()
    assert line.startswith("deploy refused: SageMaker refused CreateEndpointConfig (ValidationException: Invalid VariantName)")
    assert re.search(
        r"left behind: model (shapes-v5-\d{14}) \(.*sagemaker:DeleteModel.*; `aws sagemaker delete-model --model-name \1`\)$",
        line,
    ), line


def test_each_deploy_request_passes_botocores_model_and_bad_choices_are_one_line():
    package = {
        **_approved(3),
        "InferenceSpecification": {"SupportedRealtimeInferenceInstanceTypes": ["ml.c5.xlarge", "ml.m5.large"]},
    }
    for options in ({"serverless_mb": 6144}, {"instance_type": "ml.m5.large"}):
        for operation, body in Deployment(package, "e" * 63, ROLE, **options).requests().items():
            validate_request(operation, body, step="deploy")
    for options, says in (
        ({}, "needs one of --instance-type T or --serverless MEMORY_MB"),
        ({"serverless_mb": 2048, "instance_type": "ml.c5.xlarge"}, "needs one of"),
        ({"serverless_mb": 1500}, "serverless memory is 1024, 2048, 3072, 4096, 5120 or 6144 MB"),
        ({"instance_type": "ml.g5.xlarge"}, "model package 3 is registered for ml.c5.xlarge, ml.m5.large (2 types)"),
    ):
        with pytest.raises(UserError, match=re.escape(says)):
            Deployment(package, "shapes", ROLE, **options).requests()
    with pytest.raises(UserError, match=r"endpoint name 'bad_name': 1-63 letters, digits and hyphens"):
        Deployment(package, "bad_name", ROLE, serverless_mb=1024).requests()


def test_a_gpu_type_deploys_the_packages_gpu_specification_by_name_and_a_cpu_type_or_serverless_the_primary():
    package = {
        **_approved(3),
        "InferenceSpecification": {"SupportedRealtimeInferenceInstanceTypes": ["ml.c5.xlarge"]},
        "AdditionalInferenceSpecifications": [
            {"Name": GPU_SPECIFICATION, "SupportedRealtimeInferenceInstanceTypes": ["ml.g5.xlarge", "ml.g6.xlarge"]}
        ],
    }
    gpu = Deployment(package, "shapes", ROLE, instance_type="ml.g5.xlarge").requests()
    assert gpu["CreateModel"]["PrimaryContainer"] == {
        "ModelPackageName": package["ModelPackageArn"],
        "InferenceSpecificationName": GPU_SPECIFICATION,
    }
    for operation, body in gpu.items():
        validate_request(operation, body, step="deploy")
    for options in ({"instance_type": "ml.c5.xlarge"}, {"serverless_mb": 2048}):
        container = Deployment(package, "shapes", ROLE, **options).requests()["CreateModel"]["PrimaryContainer"]
        assert container == {"ModelPackageName": package["ModelPackageArn"]}
    with pytest.raises(UserError, match=re.escape("registered for ml.c5.xlarge, ml.g5.xlarge, ml.g6.xlarge (3 types)")):
        Deployment(package, "shapes", ROLE, instance_type="ml.p4d.24xlarge").requests()


def test_deploy_from_the_local_registry_or_without_a_role_is_one_line_naming_the_fix(local, capsys, monkeypatch):
    monkeypatch.delenv("HETERO_ENDPOINT_ROLE", raising=False)
    code, _, err = run_cli(
        capsys,
        "models",
        "deploy",
        "1",
        "--endpoint",
        "e",
        "--serverless",
        "1024",
        "--role",
        ROLE,
        "--registry",
        str(local.folder),
    )
    assert (
        code == 2
        and "is a local registry: pass the deployed one (--registry sagemaker://" in err
        and "hetero models serve 1" in err
    )


def test_a_denied_deploy_names_what_the_caller_needs(refusing, capsys):
    package = _approved(1)
    with pytest.raises(
        UserError, match=r"CreateModel was denied \(.*\): deploying needs sagemaker:CreateModel, CreateEndpointConfig"
    ):
        deploy(Deployment(package, "shapes", ROLE, serverless_mb=1024), boto3.client("sagemaker"))
    assert refusing.targets == ["SageMaker.CreateModel"]
