"""Synthesised stacks shared by the infra tests: FSx off (cdk.json defaults), FSx on, TensorFlow, af-south-1
(a region whose Deep Learning Containers live in another registry account), and an input prefix outside the
artifact prefix.

Each is synthesised once per session exactly as `app.py` does it (same context,
cdk-nag AwsSolutions through `Validations`); a validation failure is recorded
for `test_stack.py` to report instead of breaking every other test.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")  # the banner names Node 20, nothing else changes


@dataclass(frozen=True)
class Synthesised:
    template: object  # aws_cdk.assertions.Template
    template_json: dict
    outdir: Path
    validation_error: str | None
    settings: object  # infra.settings.StackSettings


def cdk_json_context() -> dict:
    return json.loads((ROOT / "cdk.json").read_text())["context"]


def synthesise(outdir: Path, **overrides) -> Synthesised:
    from aws_cdk import App, Environment, Validations
    from aws_cdk.assertions import Template
    from cdk_nag import AwsSolutionsChecks

    from infra.settings import StackSettings
    from infra.stack import HeteroStack

    context = {**cdk_json_context(), **overrides}
    error = None
    for with_nag in (True, False):
        app = App(context=context, outdir=str(outdir))
        settings = StackSettings.from_context(app.node.get_all_context())
        stack = HeteroStack(app, settings.stack_name, settings=settings, env=Environment(region=settings.region))
        if with_nag:
            Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        try:
            app.synth()
            break
        except Exception as exc:  # a failed validation: keep the report, synthesise again without cdk-nag
            if not with_nag:
                raise
            error = f"{exc}\n{(outdir / 'validation-report.json').read_text() if (outdir / 'validation-report.json').exists() else ''}"
    template = Template.from_stack(stack)
    return Synthesised(template, template.to_json(), outdir, error, settings)


@pytest.fixture(scope="session")
def synth_default(tmp_path_factory) -> Synthesised:
    return synthesise(tmp_path_factory.mktemp("cdk-default"))


@pytest.fixture(scope="session")
def synth_fsx(tmp_path_factory) -> Synthesised:
    return synthesise(tmp_path_factory.mktemp("cdk-fsx"), **{"hetero:fsx": True})


@pytest.fixture(scope="session")
def synth_tensorflow(tmp_path_factory) -> Synthesised:
    return synthesise(tmp_path_factory.mktemp("cdk-tensorflow"), **{"hetero:framework": "tensorflow"})


@pytest.fixture(scope="session")
def synth_af_south(tmp_path_factory) -> Synthesised:
    return synthesise(tmp_path_factory.mktemp("cdk-af-south-1"), **{"hetero:region": "af-south-1"})


@pytest.fixture(scope="session")
def synth_inputs_apart(tmp_path_factory) -> Synthesised:
    return synthesise(tmp_path_factory.mktemp("cdk-inputs-apart"), **{"hetero:inputPrefix": "incoming/images/"})


@pytest.fixture(scope="session", params=["default", "fsx", "tensorflow"])
def synth_any(request) -> Synthesised:
    """Every variant: for what must hold with FSx on and off, whatever the framework."""
    return request.getfixturevalue(f"synth_{request.param}")


def resources(synth: Synthesised, kind: str) -> list[dict]:
    return [r for r in synth.template_json["Resources"].values() if r["Type"] == kind]


def statements(synth: Synthesised, policy_name: str) -> list[dict]:
    """The statements of the inline policy named ``policy_name`` (infra.job_role / infra.pipeline_role POLICY_NAME)."""
    (policy,) = [p for p in resources(synth, "AWS::IAM::Policy") if p["Properties"]["PolicyName"] == policy_name]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def role_arn_of(synth: Synthesised, policy_name: str) -> dict:
    """{"Fn::GetAtt": [<role>, "Arn"]} of the role the named policy is attached to (found, never spelled out)."""
    (policy,) = [p for p in resources(synth, "AWS::IAM::Policy") if p["Properties"]["PolicyName"] == policy_name]
    (role,) = policy["Properties"]["Roles"]
    return {"Fn::GetAtt": [role["Ref"], "Arn"]}


def embedded_definition(synth: Synthesised) -> tuple[dict, list]:
    """The pipeline definition parsed back out of its Fn::Join: token parts become unique placeholder
    strings; returns (definition, tokens) where tokens[i] is the CloudFormation value of placeholder i."""
    (pipeline,) = resources(synth, "AWS::SageMaker::Pipeline")
    body = pipeline["Properties"]["PipelineDefinition"]["PipelineDefinitionBody"]
    if isinstance(body, str):
        return json.loads(body), []
    separator, parts = body["Fn::Join"]
    assert separator == ""
    tokens, text = [], []
    for part in parts:
        if isinstance(part, str):
            text.append(part)
        else:  # one placeholder per distinct CloudFormation value
            if part not in tokens:
                tokens.append(part)
            text.append(f"@@TOKEN{tokens.index(part)}@@")
    return json.loads("".join(text)), tokens
