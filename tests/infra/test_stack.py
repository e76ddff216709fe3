"""The whole stack: cdk-nag (AwsSolutions, through Validations), cfn-lint, outputs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk.assertions import Match


def test_cdk_nag_reports_no_unacknowledged_finding(synth_any):
    assert synth_any.validation_error is None, synth_any.validation_error
    report = json.loads((synth_any.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []


def test_every_acknowledgment_has_a_reason(synth_any):
    metadata = json.loads((synth_any.outdir / f"{synth_any.settings.stack_name}.metadata.json").read_text())
    acknowledged = {
        (path, rule): reason
        for path, entries in metadata.items()
        for e in entries
        if e["type"] == "aws:cdk:acknowledged-rules"
        for rule, reason in e["data"].items()
        if "AwsSolutions-" in rule
    }
    assert all(len(reason) > 40 for reason in acknowledged.values()), acknowledged
    # only the access-log bucket's own logging and wildcard resources of the two SageMaker roles, nothing else
    assert {(path.split("/", 2)[2], rule.split("[")[0]) for path, rule in acknowledged} == {
        ("Store/AccessLogs", "Annotation::AwsSolutions-S1"),
        ("JobRole/Policy", "Annotation::AwsSolutions-IAM5"),
        ("PipelineRole/Policy", "Annotation::AwsSolutions-IAM5"),
    }
    wildcards = {
        role: sorted(rule.split("[", 1)[1] for path, rule in acknowledged if f"/{role}/" in path)
        for role in ("JobRole", "PipelineRole")
    }
    # jobs: *, artifact prefix, input prefix, log groups, model packages (+ network interfaces); pipeline: 2 job name
    # prefixes, 3 property files, model packages
    assert [len(wildcards["JobRole"]), len(wildcards["PipelineRole"])] == [6 if synth_any.settings.fsx else 5, 6], wildcards
    assert all(w.startswith("Resource::") for w in wildcards["JobRole"] + wildcards["PipelineRole"]), wildcards


@pytest.mark.slow
def test_cfn_lint_is_clean(synth_any):
    template = synth_any.outdir / f"{synth_any.settings.stack_name}.template.json"
    result = subprocess.run([str(Path(sys.executable).with_name("cfn-lint")), str(template)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_outputs_name_the_pipeline_and_the_bucket(synth_any):
    synth_any.template.has_output("PipelineName", {"Value": "HeteroTraining"})
    synth_any.template.has_output("ArtifactBucket", {"Value": {"Ref": Match.any_value()}})
