"""`validate_dependencies`: a step that reads where another step's job writes must wait for that step, through a
property reference or DependsOn, since SageMaker starts every step whose dependencies are met."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("sagemaker.core", reason="the cloud extra (SageMaker SDK v3) is not installed")

from pipeline.sagemaker.definition import all_steps  # noqa: E402
from pipeline.sagemaker.dependencies import validate_dependencies  # noqa: E402
from steps.common.errors import InternalError  # noqa: E402
from tests.support.deploy import CONCRETE_SETTINGS  # noqa: E402

RAY_IMAGE = "111122223333.dkr.ecr.eu-west-1.amazonaws.com/hetero-ray:2.60.0"
FRAMEWORKS = {
    "pytorch": CONCRETE_SETTINGS,
    "tensorflow": replace(CONCRETE_SETTINGS, framework="tensorflow"),
    "ray": replace(CONCRETE_SETTINGS, framework="ray", training_image=RAY_IMAGE),
}


def _execution_path(*parts: str) -> dict:
    """A path under the execution's prefix, built as the compiler builds the outputs' locations."""
    return {"Std:Join": {"On": "/", "Values": ["s3://my-bucket/hetero", {"Get": "Execution.PipelineExecutionId"}, *parts]}}


def _evaluate_reading_the_heterogeneous_model_by_path(definition: dict) -> dict:
    """Evaluate reads TrainHeterogeneous's model from the path the job writes it to, and no property of that job."""
    evaluate = all_steps(definition)["Evaluate"]
    (model,) = [i for i in evaluate["Arguments"]["ProcessingInputs"] if i["InputName"] == "heterogeneous"]
    model["S3Input"]["S3Uri"] = _execution_path("TrainHeterogeneous", "model.tar.gz")
    args = evaluate["Arguments"]["AppSpecification"]["ContainerArguments"]
    args[args.index("--billing-heterogeneous") + 1] = "1/1"
    return evaluate


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_every_compiled_definition_orders_each_read(framework, compile_once):
    validate_dependencies(compile_once(FRAMEWORKS[framework]))


def test_a_step_reading_a_path_another_step_writes_without_depending_on_it_is_refused(compile_once):
    definition = compile_once(CONCRETE_SETTINGS)
    _evaluate_reading_the_heterogeneous_model_by_path(definition)

    with pytest.raises(InternalError) as refused:
        validate_dependencies(definition)
    message = refused.value.message
    assert refused.value.headline == "unordered read"
    assert "step Evaluate reads Arguments.ProcessingInputs[1].S3Input.S3Uri" in message
    assert "where step TrainHeterogeneous writes, without depending on TrainHeterogeneous" in message
    assert "Add 'TrainHeterogeneous' to Evaluate's DependsOn" in message
    assert "TrainBaseline" not in message  # read by its properties: upstream


def test_depends_on_makes_the_read_ordered(compile_once):
    definition = compile_once(CONCRETE_SETTINGS)
    _evaluate_reading_the_heterogeneous_model_by_path(definition)["DependsOn"] = ["TrainHeterogeneous"]

    validate_dependencies(definition)


def test_a_dependency_through_the_steps_between_orders_the_read(compile_once):
    """RegisterModel waits for Evaluate, which waits for TrainHeterogeneous: it may read the job's output by path."""
    definition = compile_once(CONCRETE_SETTINGS)
    register = all_steps(definition)["RegisterModel"]
    (container,) = register["Arguments"]["InferenceSpecification"]["Containers"]
    container["ModelDataUrl"] = _execution_path("TrainHeterogeneous", "model.tar.gz")

    validate_dependencies(definition)


def test_a_step_of_the_other_branch_is_never_upstream(compile_once):
    """EvaluateWithoutBaseline runs where TrainBaseline does not: reading the baseline's path there is refused."""
    definition = compile_once(CONCRETE_SETTINGS)
    evaluate = all_steps(definition)["EvaluateWithoutBaseline"]
    evaluate["Arguments"]["AppSpecification"]["ContainerArguments"] += ["--baseline-path", _execution_path("TrainBaseline")]

    with pytest.raises(InternalError, match="step EvaluateWithoutBaseline reads .* where step TrainBaseline writes"):
        validate_dependencies(definition)


def test_a_file_system_path_into_a_step_s_output_is_a_read_of_it(compile_once):
    """An FSx channel's directory path (the file system linked to the bucket) reads the same keys as the S3 output."""
    definition = compile_once(CONCRETE_SETTINGS)
    fsx_path = {
        "Std:Join": {"On": "", "Values": ["/fsx", "/", {"Get": "Execution.PipelineExecutionId"}, "/EvaluateWithoutBaseline"]}
    }
    baseline = all_steps(definition)["TrainBaseline"]
    baseline["Arguments"]["InputDataConfig"].append(
        {
            "ChannelName": "extra",
            "DataSource": {"FileSystemDataSource": {"DirectoryPath": fsx_path, "FileSystemId": "fs-0123456789abcdef0"}},
        }
    )

    with pytest.raises(InternalError, match="step TrainBaseline reads .* where step EvaluateWithoutBaseline writes"):
        validate_dependencies(definition)


def test_a_path_of_a_step_named_alike_is_not_its_output(compile_once):
    """``<execution>/EvaluateWithoutBaseline`` is not under ``<execution>/Evaluate``."""
    definition = compile_once(CONCRETE_SETTINGS)
    shard = all_steps(definition)["Shard"]
    shard["Arguments"]["AppSpecification"]["ContainerArguments"] += ["--unused", _execution_path("EvaluateWithout")]

    validate_dependencies(definition)
