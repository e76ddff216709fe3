"""The ARN table: which names AWS lowercases in an ARN and which keep their case."""

from __future__ import annotations

from pipeline.iam.arns import FORMS, arn

WHERE = {"partition": "aws", "region": "eu-west-1", "account": "111122223333"}


def test_a_model_package_keeps_its_groups_case_and_a_pipeline_is_lowercased():
    assert arn("model-package", **WHERE, group="HeteroTraining-models", version=3) == (
        "arn:aws:sagemaker:eu-west-1:111122223333:model-package/HeteroTraining-models/3"
    )
    assert arn("model-package-group", **WHERE, group="HeteroTraining-models").endswith(
        ":model-package-group/HeteroTraining-models"
    )
    assert arn("pipeline", **WHERE, pipeline="HeteroTraining").endswith(":pipeline/heterotraining")
    assert arn("pipeline-execution", **WHERE, pipeline="HeteroTraining", execution="Ab1").endswith(
        ":pipeline/heterotraining/execution/Ab1"
    )
    assert arn("training-job", **WHERE, job="pipelines-1-TrainHeterogeneous-a").endswith(
        ":training-job/pipelines-1-trainheterogeneous-a"
    )


def test_every_form_names_its_public_source_and_lowercases_only_its_own_fields():
    for form in FORMS:
        assert form.source.strip(), form.kind
        for name in form.lowercased:
            assert "{" + name + "}" in form.template, form.kind
