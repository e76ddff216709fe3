"""How AWS forms the ARN of each resource a pipeline execution touches: one table, each row with its public source.

IAM compares a policy's Resource with the request's ARN character by character (case-sensitive), so a grant written
with a name in another case than AWS's ARN is a denial. Names are not treated alike: SageMaker lowercases some
(pipelines, jobs) and keeps the case of others (model packages keep their group's case).

    arn("model-package", partition="aws", region="us-east-1", account="111122223333", group="Hetero-models", version=3)
    -> 'arn:aws:sagemaker:us-east-1:111122223333:model-package/Hetero-models/3'
"""

from __future__ import annotations

from dataclasses import dataclass

SAR = "Service Authorization Reference, "  # docs.aws.amazon.com/service-authorization/latest/reference/


@dataclass(frozen=True)
class ArnForm:
    kind: str
    template: str  # str.format fields: partition, region, account and the resource's own names
    lowercased: tuple[str, ...]  # the fields AWS writes in lower case, whatever case the name was given in
    source: str


FORMS = (
    ArnForm(
        "pipeline",
        "arn:{partition}:sagemaker:{region}:{account}:pipeline/{pipeline}",
        ("pipeline",),
        SAR + "Amazon SageMaker AI, resource type pipeline; DescribePipeline returns "
        "arn:...:pipeline/heterotraining for a pipeline named HeteroTraining",
    ),
    ArnForm(
        "pipeline-execution",
        "arn:{partition}:sagemaker:{region}:{account}:pipeline/{pipeline}/execution/{execution}",
        ("pipeline",),
        SAR + "Amazon SageMaker AI, resource type pipeline-execution (the pipeline's lowercased ARN + /execution/<id>)",
    ),
    ArnForm(
        "training-job",
        "arn:{partition}:sagemaker:{region}:{account}:training-job/{job}",
        ("job",),
        SAR + "resource type training-job; job ARNs are lowercase (aws/sagemaker-experiments pull 172, "
        "boto/boto3 issue 4606 for tuning jobs)",
    ),
    ArnForm(
        "processing-job",
        "arn:{partition}:sagemaker:{region}:{account}:processing-job/{job}",
        ("job",),
        SAR + "resource type processing-job; lowercase as training jobs are",
    ),
    ArnForm(
        "model-package-group",
        "arn:{partition}:sagemaker:{region}:{account}:model-package-group/{group}",
        (),
        SAR + "resource type model-package-group; the group's name as created",
    ),
    ArnForm(
        "model-package",
        "arn:{partition}:sagemaker:{region}:{account}:model-package/{group}/{version}",
        (),
        SAR + "resource type model-package; the group's case is kept: a real denial names "
        "model-package/modelPackageGroupTurbine/1 (aws-samples/ml-edge-getting-started issue 18, fixed by removing .lower())",
    ),
    ArnForm("s3-bucket", "arn:{partition}:s3:::{bucket}", (), SAR + "Amazon S3, resource type bucket"),
    ArnForm("s3-object", "arn:{partition}:s3:::{bucket}/{key}", (), SAR + "Amazon S3, resource type object (the key as written)"),
    ArnForm(
        "ecr-repository",
        "arn:{partition}:ecr:{region}:{account}:repository/{repository}",
        (),
        SAR + "Amazon ECR, resource type repository, in the image's registry account and region",
    ),
    ArnForm(
        "log-group",
        "arn:{partition}:logs:{region}:{account}:log-group:{group}",
        (),
        SAR + "Amazon CloudWatch Logs, resource type log-group",
    ),
    ArnForm(
        "log-stream",
        "arn:{partition}:logs:{region}:{account}:log-group:{group}:log-stream:{stream}",
        (),
        SAR + "Amazon CloudWatch Logs, resource type log-stream; SageMaker writes /aws/sagemaker/TrainingJobs "
        "<job>/algo-<n>-<epoch> and /aws/sagemaker/ProcessingJobs <job>/algo-1-<epoch> (SageMaker guide, "
        "Log Amazon SageMaker AI events with Amazon CloudWatch)",
    ),
    ArnForm("iam-role", "arn:{partition}:iam::{account}:role/{role}", (), SAR + "AWS IAM, resource type role"),
    ArnForm(
        "lambda-function",
        "arn:{partition}:lambda:{region}:{account}:function:{function}",
        (),
        SAR + "AWS Lambda, resource type function",
    ),
    ArnForm("sns-topic", "arn:{partition}:sns:{region}:{account}:{topic}", (), SAR + "Amazon SNS, resource type topic"),
    ArnForm("kms-key", "arn:{partition}:kms:{region}:{account}:key/{key}", (), SAR + "AWS KMS, resource type key"),
    ArnForm(
        "events-rule", "arn:{partition}:events:{region}:{account}:rule/{rule}", (), SAR + "Amazon EventBridge, resource type rule"
    ),
    ArnForm(
        "schedule",
        "arn:{partition}:scheduler:{region}:{account}:schedule/{group}/{schedule}",
        (),
        SAR + "Amazon EventBridge Scheduler, resource type schedule",
    ),
)
FORMS_BY_KIND = {f.kind: f for f in FORMS}


def arn(kind: str, **names: object) -> str:
    """The ARN of a resource of ``kind`` as AWS forms it from its names (see `FORMS`)."""
    form = FORMS_BY_KIND[kind]
    values = {k: str(v).lower() if k in form.lowercased else str(v) for k, v in names.items()}
    return form.template.format(**values)


def s3_arn(bucket: str, key: str = "", *, partition: str = "aws") -> str:
    """A bucket's ARN, or an object's when ``key`` is given."""
    if not key:
        return arn("s3-bucket", partition=partition, bucket=bucket)
    return arn("s3-object", partition=partition, bucket=bucket, key=key)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key)."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key
