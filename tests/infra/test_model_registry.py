"""The model package group: created by the stack, registered into by the pipeline role, read by the job role."""

import json

import pytest

from infra import job_role, pipeline_role
from infra.model_registry import READ_ACTIONS, REGISTER_ACTIONS
from infra.settings import StackSettings
from pipeline.sagemaker.definition import all_steps
from steps.common.errors import UserError
from tests.support.stacks import embedded_definition, resources, statements, synthesise


def _by_sid(synth, policy: str) -> dict:
    return {s.get("Sid"): s for s in statements(synth, policy)}


def _resources_text(statement: dict) -> str:
    return json.dumps(statement["Resource"])


def test_the_stack_creates_the_group_the_pipeline_registers_in(synth_any):
    synth_any.template.has_resource_properties(
        "AWS::SageMaker::ModelPackageGroup", {"ModelPackageGroupName": "HeteroTraining-models"}
    )
    definition, _ = embedded_definition(synth_any)
    registering = [s for s in all_steps(definition).values() if s["Type"] == "RegisterModel"]
    assert len(registering) == 2  # with and without the baseline
    assert {s["Arguments"]["ModelPackageGroupName"] for s in registering} == {"HeteroTraining-models"}
    (pipeline,) = resources(synth_any, "AWS::SageMaker::Pipeline")
    (group,) = [k for k, r in synth_any.template_json["Resources"].items() if r["Type"] == "AWS::SageMaker::ModelPackageGroup"]
    assert group in pipeline["DependsOn"]  # the group exists before an execution can register in it
    outputs = synth_any.template_json["Outputs"]
    assert outputs["ModelPackageGroup"]["Value"] == "HeteroTraining-models"


def test_the_pipeline_role_registers_in_that_group_only(synth_default):
    register = _by_sid(synth_default, pipeline_role.POLICY_NAME)["RegisterModels"]
    assert sorted(register["Action"]) == sorted(REGISTER_ACTIONS)
    text = _resources_text(register)
    assert ":model-package-group/HeteroTraining-models" in text and ":model-package/HeteroTraining-models/*" in text
    assert len(register["Resource"]) == 2


def test_the_job_role_reads_that_group_only(synth_default):
    read = _by_sid(synth_default, job_role.POLICY_NAME)["ReadModelRegistry"]
    assert sorted(read["Action"]) == sorted(READ_ACTIONS)
    assert not any(a.startswith("sagemaker:Create") or a.startswith("sagemaker:Update") for a in read["Action"])
    text = _resources_text(read)
    assert ":model-package-group/HeteroTraining-models" in text and ":model-package/HeteroTraining-models/*" in text
    # ListModelPackages names no package: authorised on "*", alone in its statement
    listing = _by_sid(synth_default, job_role.POLICY_NAME)["ListModelPackages"]
    assert (listing["Action"], listing["Resource"]) == ("sagemaker:ListModelPackages", "*")


@pytest.mark.slow
def test_a_named_group(tmp_path):
    synth = synthesise(tmp_path, **{"hetero:modelPackageGroup": "Team-Models"})
    synth.template.has_resource_properties("AWS::SageMaker::ModelPackageGroup", {"ModelPackageGroupName": "Team-Models"})
    register = _by_sid(synth, pipeline_role.POLICY_NAME)["RegisterModels"]
    assert ":model-package/Team-Models/*" in _resources_text(register)  # package ARNs keep the group's case
    definition, _ = embedded_definition(synth)
    evaluate = all_steps(definition)["Evaluate"]["Arguments"]["AppSpecification"]["ContainerArguments"]
    assert evaluate[evaluate.index("--registry") + 1] == "sagemaker://Team-Models"
    assert synth.validation_error is None, synth.validation_error  # cdk-nag clean


@pytest.mark.parametrize("name", ["team_models", "-models", "x" * 64])
def test_a_bad_group_name_is_refused(name):
    with pytest.raises(UserError, match="hetero:modelPackageGroup"):
        StackSettings.from_context({"hetero:modelPackageGroup": name})


def test_the_default_group_fits_the_name_limit():
    settings = StackSettings.from_context({"hetero:pipelineName": "p" * 60 + "-x"})
    assert settings.model_package_group_name == "p" * 56 + "-models"
