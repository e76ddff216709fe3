"""Synthesising the stack as `app.py` does, and reading what the template holds."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path

from tests.support.shared import key_of, made_once

ROOT = Path(__file__).resolve().parents[2]

# what a schedule or rule that starts the pipeline targets in us-east-1 (the cdk.json default region)
PIPELINE_ARN = {
    "Fn::Join": [
        "",
        ["arn:", {"Ref": "AWS::Partition"}, ":sagemaker:us-east-1:", {"Ref": "AWS::AccountId"}, ":pipeline/heterotraining"],
    ]
}


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


def synthesised_once(tmp_path_factory, **overrides) -> Synthesised:
    """synthesise(**overrides), once per test session whichever xdist worker asks first (a synth takes seconds): the
    others read its template and cdk.out folder. Each worker keeps its own Template (a handle on its own jsii kernel)."""
    key = key_of(json.dumps(overrides, sort_keys=True))
    if key not in _synthesised:
        folder = made_once(tmp_path_factory, "stack", key, lambda into: _save(synthesise(into / "cdk.out", **overrides), into))
        _synthesised[key] = _load(folder)
    return _synthesised[key]


_synthesised: dict[str, Synthesised] = {}  # this worker's stacks, by key_of their overrides


def _save(synth: Synthesised, folder: Path) -> None:
    (folder / "synth.json").write_text(json.dumps({"template": synth.template_json, "validation_error": synth.validation_error}))
    (folder / "settings.pickle").write_bytes(pickle.dumps(synth.settings))


def _load(folder: Path) -> Synthesised:
    from aws_cdk.assertions import Template

    saved = json.loads((folder / "synth.json").read_text())
    settings = pickle.loads((folder / "settings.pickle").read_bytes())
    return Synthesised(
        Template.from_json(saved["template"]), saved["template"], folder / "cdk.out", saved["validation_error"], settings
    )


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
