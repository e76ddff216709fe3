"""Where the deployed pipeline's calls land, declared in the template's Metadata for `hetero iam` (pipeline/iam/).

A local run's call ledger names each location by an anchor (the artifact prefix, the code object, the job role, the
notification topic ...); the same anchors, as this stack deploys them, let the judge put the template's in place of
the run's. ARNs the service forms from a name (the pipeline's, the model packages') come from the one ARN table,
`pipeline.iam.arns`, never from a policy's own resource strings: a grant written in the wrong case must not agree
with itself.
"""

from __future__ import annotations

from aws_cdk import Stack

from infra.notifications import Notifications
from pipeline.iam.arns import arn
from pipeline.iam.template import METADATA_KEY as IAM_METADATA_KEY
from steps.contract import RESULTS_FOLDER

__all__ = ["IAM_METADATA_KEY", "iam_anchors"]


def iam_anchors(
    stack: Stack,
    *,
    bucket_arn: str,
    prefix: str,
    input_prefix: str,
    code: tuple[str, str],
    prices: tuple[str, str],
    job_role_arn: str,
    pipeline_name: str,
    model_package_group: str,
    notifications: Notifications,
    plan_adoption: tuple[str, str] | None,
) -> dict:
    """The anchors of pipeline/iam/ledger.py, each as this stack deploys it (tokens resolve in the template)."""
    where = {"partition": stack.partition, "region": stack.region, "account": stack.account}
    prefix = prefix.strip("/")
    anchors = {
        "bucket": bucket_arn,
        "artifacts": f"{bucket_arn}/{prefix}",
        "results": f"{bucket_arn}/{prefix}/{RESULTS_FOLDER}",
        "inputs": f"{bucket_arn}/{input_prefix}",
        "code": f"arn:{stack.partition}:s3:::{code[0]}/{code[1]}",
        "prices": f"arn:{stack.partition}:s3:::{prices[0]}/{prices[1]}",
        "job_role": job_role_arn,
        "pipeline": arn("pipeline", **where, pipeline=pipeline_name),
        "model_package_group": arn("model-package-group", **where, group=model_package_group),
        "model_packages": arn("model-package", **where, group=model_package_group, version=""),
        "topic": notifications.topic.topic_arn,
        "key": notifications.key.key_arn,
        "execution_ended_rule": notifications.execution_rule.rule_arn,
        "model_registered_rule": notifications.model_rule.rule_arn,
    }
    if plan_adoption:  # the function's ARN and its log group's name
        function, log_group = plan_adoption
        anchors["plan_adoption_function"] = function
        anchors["plan_adoption_log_group"] = arn("log-group", **where, group=log_group)
    return anchors
