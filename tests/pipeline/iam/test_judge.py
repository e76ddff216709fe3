"""The judge: a ledger's calls against a synthesized template's policies, with the maintained evaluator (npm).

The ledgers here are made by the recorder from requests, as a local run makes them (a run's own ledger is judged in
tests/e2e/test_run_command.py); the template is the stack as cdk.json deploys it, and the same with a grant broken."""

from __future__ import annotations

import copy
import json

import pytest

from pipeline.cli import main
from pipeline.iam.judge import Rebinding, judge
from pipeline.iam.ledger import Binding, Ledger, Recorder
from pipeline.iam.template import Deployed
from pipeline.sagemaker.images import default_processing_image
from tests.support.stacks import synthesised_once

ACCOUNT, REGION = "000000000000", "us-east-1"
LOCAL = "arn:aws:s3:::local/work/runs"
JOB_ROLE = "arn:aws:iam::000000000000:role/hetero-local"
GROUP = "HeteroTraining-models"


def _binding() -> Binding:
    return Binding(
        "aws",
        REGION,
        ACCOUNT,
        {
            "bucket": "arn:aws:s3:::local",
            "artifacts": LOCAL,
            "results": f"{LOCAL}/results",
            "inputs": f"{LOCAL}/sample-data/",
            "code": f"{LOCAL}/code/code.tar.gz",
            "prices": f"{LOCAL}/price-overrides/none.json",
            "job_role": JOB_ROLE,
            "pipeline": "arn:aws:sagemaker:us-east-1:000000000000:pipeline/heterotraining",
            "model_package_group": f"arn:aws:sagemaker:us-east-1:000000000000:model-package-group/{GROUP}",
            "model_packages": f"arn:aws:sagemaker:us-east-1:000000000000:model-package/{GROUP}/",
            "topic": "arn:aws:sns:us-east-1:000000000000:t",
            "key": "arn:aws:kms:us-east-1:000000000000:key/k",
            "execution_ended_rule": "arn:aws:events:us-east-1:000000000000:rule/ended",
            "model_registered_rule": "arn:aws:events:us-east-1:000000000000:rule/registered",
            "plan_adoption_function": "arn:aws:lambda:us-east-1:000000000000:function:adopt",
            "plan_adoption_log_group": "arn:aws:logs:us-east-1:000000000000:log-group:/aws/lambda/adopt",
        },
    )


def _ledger() -> dict:
    """An execution's calls as the recorder makes them: Shard's processing job, the registry read, the register step,
    the notification of the registered model and the triggers."""
    ledger = Ledger("local-1", _binding())
    record = Recorder(ledger, pipeline="HeteroTraining", group=GROUP)
    s3 = "s3://local/work/runs"
    shard = {
        "RoleArn": JOB_ROLE,
        "AppSpecification": {"ImageUri": default_processing_image(REGION)},
        "ProcessingInputs": [
            {"InputName": "input", "S3Input": {"S3Uri": f"{s3}/sample-data/"}},
            {"InputName": "code", "S3Input": {"S3Uri": f"{s3}/code/code.tar.gz"}},
        ],
        "ProcessingOutputConfig": {"Outputs": [{"OutputName": "train", "S3Output": {"S3Uri": f"{s3}/local-1/Shard/train"}}]},
    }
    objects = {
        f"{s3}/sample-data/": [f"{s3}/sample-data/red/1.jpg"],
        f"{s3}/code/code.tar.gz": [f"{s3}/code/code.tar.gz"],
        f"{s3}/local-1/Shard/train": [f"{s3}/local-1/Shard/train/train-00000.tar"],
    }
    record.processing_job(shard, "pipelines-1-Shard-a", "Shard", lambda uri: objects[uri])
    for operation in ("sagemaker:DescribeModelPackageGroup", "sagemaker:ListModelPackages"):
        record.registry_read(operation, "Evaluate")
    record.registry_read("sagemaker:DescribeModelPackage", "Evaluate", "1")
    record.register(2, {}, "RegisterModel")
    record.notify("model_registered_rule", "RegisterModel", "a registered model")
    record.triggers("local-1", f"{s3}/results/local-1/plan.json")
    return ledger.document()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> dict:
    return synthesised_once(tmp_path_factory).template_json


def _deployed(template: dict) -> Deployed:
    deployed = Deployed(template, ACCOUNT, REGION)
    metadata = template["Metadata"]["hetero:iam"]
    deployed.anchors = deployed.resolve(metadata["anchors"])
    deployed.principals = deployed._principals()
    return deployed


def test_every_call_of_an_execution_is_allowed_by_the_stack_as_deployed(template):
    verdict = judge(_ledger(), _deployed(template))
    assert not verdict.denials, "\n".join(verdict.lines())
    assert verdict.lines()[-1] == f"{verdict.calls} calls, 0 denied"
    # cdk.json's stack schedules retraining without plan adoption: those calls are counted, not judged
    assert set(verdict.not_deployed) == {"plan_adoption", "schedule_plan_adoption"}
    principals = {c["principal"] for c in verdict.judged}
    assert principals == {"pipeline_role", "job_role", "schedule", "new_data_rule", "events"}


def test_a_grant_in_the_wrong_case_is_a_denial_naming_principal_action_resource_and_the_closest_statement(template):
    """The grant as it was: model packages under the group's lowercased name (AWS keeps the group's case)."""
    broken = copy.deepcopy(template)
    text = json.dumps(broken).replace(f":model-package/{GROUP}/*", f":model-package/{GROUP.lower()}/*")
    verdict = judge(_ledger(), _deployed(json.loads(text)))
    lines = verdict.lines()
    denied = [line for line in lines if line.startswith("DENIED")]
    assert len(denied) == 2, lines
    register = next(line for line in denied if "CreateModelPackage" in line)
    assert register.startswith("DENIED pipeline_role: sagemaker:CreateModelPackage on ")
    assert f":model-package/{GROUP}/2 [RegisterModel]" in register
    assert "statement 'RegisterModels'" in register and f"model-package/{GROUP.lower()}/*" in register
    assert any("job_role: sagemaker:DescribeModelPackage" in line for line in denied)
    assert lines[-1].endswith(", 2 denied")


def test_a_removed_grant_fails_the_command_with_exit_1(template, tmp_path, capsys):
    ledger = tmp_path / "local-1" / "aws_calls.json"
    ledger.parent.mkdir()
    ledger.write_text(json.dumps(_ledger()))
    broken = copy.deepcopy(template)
    for resource in broken["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy":
            statements = resource["Properties"]["PolicyDocument"]["Statement"]
            statements[:] = [s for s in statements if s.get("Sid") != "PassJobRole"]
    path = tmp_path / "broken.template.json"
    path.write_text(json.dumps(broken))
    assert main(["iam", str(ledger.parent), "--template", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("DENIED pipeline_role: iam:PassRole on arn:aws:iam::000000000000:role/JobRole")
    assert out[-1].endswith(", 1 denied")
    good = tmp_path / "good.template.json"
    good.write_text(json.dumps(template))
    assert main(["iam", str(ledger.parent), "--template", str(good)]) == 0


def test_a_listing_is_rebound_with_its_prefix_to_the_bucket_that_holds_it():
    rebind = Rebinding(
        {"bucket": "arn:aws:s3:::local", "code": "arn:aws:s3:::local/w/code/code.tar.gz", "artifacts": "arn:aws:s3:::local/w"},
        {"bucket": "arn:aws:s3:::store", "code": "arn:aws:s3:::assets/abc.gz", "artifacts": "arn:aws:s3:::store/hetero"},
    )
    call = {"action": "s3:ListBucket", "resource": "arn:aws:s3:::local", "conditions": {"s3:prefix": "w/code/code.tar.gz"}}
    assert rebind.call(call) == {**call, "resource": "arn:aws:s3:::assets", "conditions": {"s3:prefix": "abc.gz"}}
    call = {"action": "s3:ListBucket", "resource": "arn:aws:s3:::local", "conditions": {"s3:prefix": "w/x1/Shard/train"}}
    assert rebind.call(call)["conditions"] == {"s3:prefix": "hetero/x1/Shard/train"}
    # a sibling of an anchor is not under it
    call = {"action": "s3:GetObject", "resource": "arn:aws:s3:::local/wx/a", "conditions": {}}
    assert rebind.call(call)["resource"] == "arn:aws:s3:::store/wx/a"


def test_the_template_resolves_for_the_ledgers_account_and_finds_each_principal(template):
    deployed = _deployed(template)
    assert deployed.anchors["artifacts"].startswith("arn:aws:s3:::storeartifacts") and deployed.anchors["artifacts"].endswith(
        "/hetero"
    )
    assert deployed.anchors["model_packages"] == f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:model-package/{GROUP}/"
    assert deployed.principals["events"].arn == "events.amazonaws.com"
    assert deployed.principals["job_role"].arn == deployed.anchors["job_role"]
    names = {p["name"] for p in deployed.identity_policies("pipeline_role")}
    assert len(names) == 1 and names.pop().startswith("PipelineRolePolicy")


def test_the_condition_keys_a_job_request_sets_are_judged(template):
    """An organisation's guard rail (no job without network isolation) denies Shard's job: the request's
    sagemaker:NetworkIsolation reaches the evaluator."""
    guarded = copy.deepcopy(template)
    for resource in guarded["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy" and resource["Properties"]["PolicyName"] == "PipelineAccess":
            resource["Properties"]["PolicyDocument"]["Statement"].append(
                {
                    "Sid": "OnlyIsolatedJobs",
                    "Effect": "Deny",
                    "Action": "sagemaker:CreateProcessingJob",
                    "Resource": "*",
                    "Condition": {"Bool": {"sagemaker:NetworkIsolation": "false"}},
                }
            )
    verdict = judge(_ledger(), _deployed(guarded))
    (denied,) = verdict.denials
    assert denied.call["action"] == "sagemaker:CreateProcessingJob" and denied.result == "ExplicitlyDenied"
    assert "statement 'OnlyIsolatedJobs' (explicit deny)" in denied.line()


def test_an_image_of_your_own_account_is_pulled_only_with_the_job_roles_grant(template):
    """AWS's DLC registries let every account pull; a repository of the deploying account has no such policy."""
    ledger = Ledger("local-1", _binding())
    own = "000000000000.dkr.ecr.us-east-1.amazonaws.com/hetero-ray:2.55.0"
    Recorder(ledger, pipeline="HeteroTraining", group=GROUP).image(own, "TrainHeterogeneous")
    Recorder(ledger, pipeline="HeteroTraining", group=GROUP).image(default_processing_image(REGION), "Shard")
    verdict = judge(ledger.document(), _deployed(template))
    denied = {(d.call["action"], d.call["resource"].rsplit("/", 1)[-1]) for d in verdict.denials}
    assert denied == {
        (a, "hetero-ray") for a in ("ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage")
    }
