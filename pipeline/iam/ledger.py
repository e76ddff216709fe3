"""The call ledger: every AWS call the deployed pipeline would make for one execution, and who would make it.

A local run writes ``runs/<execution>/aws_calls.json``: one entry per distinct call, each with the principal that
makes it, the IAM action, the resource's ARN as AWS forms it (`pipeline.iam.arns`), the condition keys that apply, the
step and why it is made. `hetero iam` judges it against a synthesized template's policies (`pipeline.iam.judge`).

Who calls (SageMaker Developer Guide, "How to use SageMaker AI execution roles"; "IAM Access Management" for
pipelines; EventBridge and Scheduler user guides):

* ``pipeline_role``: SageMaker Pipelines, acting with the pipeline's RoleArn: Create/Describe*Job, iam:PassRole of
  the job role, CreateModelPackage for a RegisterModel step, s3:GetObject of the property files Std:JsonGet reads.
* ``job_role``: the training and processing service on a job's behalf (ECR pull, CloudWatch Logs, channel downloads,
  output and checkpoint uploads, metric publishing) and the step code inside the job (S3, the model registry).
* ``schedule``, ``schedule_plan_adoption``, ``plan_adoption``, ``new_data_rule``: the triggers that start an
  execution (EventBridge Scheduler's role, the plan-adoption function's role, the new-data rule's role).
* ``events``: EventBridge itself (events.amazonaws.com), publishing to the notification topic under the topic's and
  the key's resource policies.

The ARNs are this machine's binding (account 000000000000, bucket ``local``, the work folder as the artifact prefix);
``deployment.anchors`` names each bound location so that the judge can put the template's in its place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.iam.arns import arn, s3_arn

LEDGER_FILE = "aws_calls.json"
VERSION = 1
PRINCIPALS = ("pipeline_role", "job_role", "schedule", "schedule_plan_adoption", "plan_adoption", "new_data_rule", "events")
SERVICE_PRINCIPALS = {"events": "events.amazonaws.com"}  # principals that are a service, not a role of the stack
SECURE = {"aws:SecureTransport": "true"}  # every SDK call goes over TLS (the bucket and topic deny anything else)


@dataclass(frozen=True)
class Call:
    principal: str
    action: str
    resource: str
    step: str
    why: str
    conditions: dict = field(default_factory=dict)

    def key(self) -> tuple:
        return (self.principal, self.action, self.resource, json.dumps(self.conditions, sort_keys=True))


@dataclass(frozen=True)
class Binding:
    """Where this run's pipeline lives: the partition, region and account its ARNs name, and each anchor (a named
    ARN prefix: the artifact prefix, the input prefix, the code object, the job role ...) as this run binds it."""

    partition: str
    region: str
    account: str
    anchors: dict  # name -> ARN (or ARN prefix) in this run


@dataclass
class Ledger:
    execution: str
    binding: Binding
    calls: list[Call] = field(default_factory=list)
    counts: dict = field(default_factory=dict)  # Call.key() -> how many times it is made
    outcome: str = "running"

    def add(self, call: Call) -> None:
        assert call.principal in PRINCIPALS, call.principal
        key = call.key()
        if key not in self.counts:
            self.calls.append(call)
        self.counts[key] = self.counts.get(key, 0) + 1

    def document(self) -> dict:
        return {
            "version": VERSION,
            "execution": self.execution,
            "outcome": self.outcome,
            "deployment": asdict(self.binding),
            "calls": [{**asdict(c), "count": self.counts[c.key()]} for c in self.calls],
        }

    def write(self, folder: Path) -> Path:
        path = Path(folder) / LEDGER_FILE
        path.write_text(json.dumps(self.document(), indent=1) + "\n")
        return path


def read(path: Path) -> dict:
    """A ledger document, checked for its version."""
    from steps.common.errors import UserError

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(
            f"call ledger {str(path)!r} cannot be read ({exc}): pass a local run's folder", headline="no ledger"
        ) from None
    if doc.get("version") != VERSION:
        raise UserError(
            f"call ledger {str(path)!r} has version {doc.get('version')!r}, this tool reads {VERSION}: run the pipeline again",
            headline="bad ledger",
        )
    return doc


class Recorder:
    """Turns what a local run does into the calls the deployed pipeline makes (one method per kind of event)."""

    def __init__(self, ledger: Ledger, *, pipeline: str, group: str) -> None:
        self.ledger = ledger
        self.pipeline = pipeline
        self.group = group
        b = ledger.binding
        self._where = {"partition": b.partition, "region": b.region, "account": b.account}

    def arn(self, kind: str, **names: object) -> str:
        return arn(kind, **self._where, **names)

    def _add(self, principal: str, action: str, resource: str, step: str, why: str, **conditions) -> None:
        self.ledger.add(Call(principal, action, resource, step, why, {**SECURE, **conditions}))

    # -- starting the execution ------------------------------------------------------------------------------------
    def triggers(self, execution: str, plan_uri: str | None) -> None:
        """What each deployed trigger calls to start an execution like this one (the judge skips triggers the template
        does not deploy). ``plan_uri``: the object the plan-adoption function reads (this run's plan.json)."""
        pipeline = self.arn("pipeline", pipeline=self.pipeline)
        start = "sagemaker:StartPipelineExecution"
        self._add("schedule", start, pipeline, "(schedule)", "EventBridge Scheduler starts a retraining execution")
        self._add("new_data_rule", start, pipeline, "(new data)", "the new-data rule starts an execution")
        function = self.ledger.binding.anchors.get("plan_adoption_function", "")
        self._add(
            "schedule_plan_adoption",
            "lambda:InvokeFunction",
            function,
            "(schedule)",
            "the schedule invokes the plan-adoption function",
        )
        adopt = "(plan adoption)"
        bucket = self.ledger.binding.anchors["bucket"]
        results = self.ledger.binding.anchors["results"]
        results_prefix = results.split(":::", 1)[1].split("/", 1)[1]
        self._add(
            "plan_adoption", "s3:ListBucket", bucket, adopt, "finds the newest plan.json", **{"s3:prefix": results_prefix + "/"}
        )
        if plan_uri:
            self.get(plan_uri, adopt, "reads the newest plan.json", principal="plan_adoption")
        self._add("plan_adoption", "sagemaker:ListPipelineExecutions", pipeline, adopt, "the previous execution's outcome")
        execution_arn = self.arn("pipeline-execution", pipeline=self.pipeline, execution=execution)
        for action in ("sagemaker:ListPipelineExecutionSteps", "sagemaker:ListPipelineParametersForExecution"):
            self._add("plan_adoption", action, execution_arn, adopt, "why the previous execution failed, and its parameters")
        self._add("plan_adoption", start, pipeline, adopt, "starts the execution with the adopted data group")
        log_stream = f"{self.ledger.binding.anchors.get('plan_adoption_log_group', '')}:log-stream:{execution}"
        for action in ("logs:CreateLogStream", "logs:PutLogEvents"):
            self._add("plan_adoption", action, log_stream, adopt, "the function's log (Lambda writes it as the function's role)")

    # -- jobs ------------------------------------------------------------------------------------------------------
    def create_job(self, kind: str, request: dict, job: str, step: str) -> str:
        """The pipeline role creates and polls a training or processing job and passes it the job role."""
        noun = "TrainingJob" if kind == "training-job" else "ProcessingJob"
        job_arn = self.arn(kind, job=job)
        self._add("pipeline_role", f"sagemaker:Create{noun}", job_arn, step, "the step's job", **job_conditions(request))
        if request.get("Tags"):
            self._add("pipeline_role", "sagemaker:AddTags", job_arn, step, "tags given with the create request")
        self._add("pipeline_role", f"sagemaker:Describe{noun}", job_arn, step, "the pipeline polls the job until it ends")
        self._add(
            "pipeline_role",
            "iam:PassRole",
            request["RoleArn"],
            step,
            "the job runs as the job role",
            **{"iam:PassedToService": "sagemaker.amazonaws.com"},
        )
        return job_arn

    def image(self, image_uri: str, step: str) -> None:
        from pipeline.sagemaker.images import ecr_repository

        account, region, repository = ecr_repository(image_uri)
        repo = arn("ecr-repository", partition=self._where["partition"], region=region, account=account, repository=repository)
        self._add("job_role", "ecr:GetAuthorizationToken", "*", step, "the image pull logs in to ECR")
        for action in ("ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"):
            self._add("job_role", action, repo, step, f"pulls {image_uri.rsplit('/', 1)[-1]}")

    def logs(self, group: str, job: str, hosts: list[str], step: str) -> None:
        self._add("job_role", "logs:CreateLogGroup", self.arn("log-group", group=group), step, "the job's log group")
        for host in hosts:
            stream = self.arn("log-stream", group=group, stream=f"{job}/{host}")
            self._add("job_role", "logs:CreateLogStream", stream, step, f"{host}'s log stream")
            self._add("job_role", "logs:PutLogEvents", stream, step, f"{host}'s output")

    def metrics(self, namespace: str, step: str) -> None:
        self._add(
            "job_role",
            "cloudwatch:PutMetricData",
            "*",
            step,
            "the job's metric definitions",
            **{"cloudwatch:namespace": namespace},
        )

    def download(self, s3_uri: str, objects: list[str], step: str, why: str) -> None:
        """An S3Prefix input: the service lists the prefix, then gets each object (``objects``: their s3:// URIs)."""
        bucket, _, key = s3_uri.removeprefix("s3://").partition("/")
        self._add(
            "job_role", "s3:ListBucket", s3_arn(bucket, partition=self._where["partition"]), step, why, **{"s3:prefix": key}
        )
        for uri in objects:
            self.get(uri, step, why)

    def get(self, s3_uri: str, step: str, why: str, principal: str = "job_role") -> None:
        bucket, _, key = s3_uri.removeprefix("s3://").partition("/")
        self._add(principal, "s3:GetObject", s3_arn(bucket, key, partition=self._where["partition"]), step, why)

    def put(self, s3_uri: str, step: str, why: str) -> None:
        bucket, _, key = s3_uri.removeprefix("s3://").partition("/")
        self._add("job_role", "s3:PutObject", s3_arn(bucket, key, partition=self._where["partition"]), step, why)

    def list(self, s3_uri: str, step: str, why: str) -> None:
        bucket, _, key = s3_uri.removeprefix("s3://").partition("/")
        self._add(
            "job_role", "s3:ListBucket", s3_arn(bucket, partition=self._where["partition"]), step, why, **{"s3:prefix": key}
        )

    # -- the registry and the notifications ------------------------------------------------------------------------
    def register(self, version: int, request: dict, step: str) -> None:
        package = self.arn("model-package", group=self.group, version=version)
        conditions = {
            f"sagemaker:CustomerMetadataProperties/{k}": str(v) for k, v in request.get("CustomerMetadataProperties", {}).items()
        }
        if "ModelApprovalStatus" in request:
            conditions["sagemaker:ModelApprovalStatus"] = request["ModelApprovalStatus"]
        self._add("pipeline_role", "sagemaker:CreateModelPackage", package, step, "registers the model", **conditions)
        if request.get("Tags"):
            self._add("pipeline_role", "sagemaker:AddTags", package, step, "tags given with the create request")

    def registry_read(self, operation: str, step: str, version: str | None = None) -> None:
        if operation == "sagemaker:DescribeModelPackageGroup":
            resource = self.arn("model-package-group", group=self.group)
        elif operation == "sagemaker:ListModelPackages":  # names no package: its resource type is optional in the SAR
            resource = "*"
        else:
            resource = self.arn("model-package", group=self.group, version=version)
        self._add("job_role", operation, resource, step, "Evaluate reads the latest approved model")

    def notify(self, rule: str, step: str, why: str) -> None:
        """EventBridge publishes a rule's event to the encrypted topic: sns:Publish under the topic policy, scoped to
        the rule (aws:SourceArn) and the account, and the KMS data key under the key policy, whose requests carry no
        source keys for EventBridge-to-encrypted-topic delivery (SNS Developer Guide, key management)."""
        anchors = self.ledger.binding.anchors
        source = {"aws:SourceArn": anchors[rule], "aws:SourceAccount": self._where["account"]}
        self._add("events", "sns:Publish", anchors["topic"], step, why, **source)
        for action in ("kms:GenerateDataKey", "kms:Decrypt"):
            self._add("events", action, anchors["key"], step, why + " (the topic's key)")

    # -- what the service does for a job ---------------------------------------------------------------------------
    def training_job(self, request: dict, job: str, step: str, objects) -> None:  # noqa: ANN001 - storage.objects-like
        """CreateTrainingJob and what the training service then does as the job role: pull the image, write logs and
        metrics, download each S3 channel and the code, upload the model, output and checkpoints.
        ``objects(uri)``: the s3:// URIs of the objects under a prefix (or the object itself), [] where there are none."""
        self.create_job("training-job", request, job, step)
        algorithm = request["AlgorithmSpecification"]
        self.image(algorithm["TrainingImage"], step)
        resources = request["ResourceConfig"]
        groups = resources.get("InstanceGroups") or [{"InstanceCount": resources.get("InstanceCount", 1)}]
        hosts = [f"algo-{n + 1}" for n in range(sum(int(g["InstanceCount"]) for g in groups))]
        self.logs("/aws/sagemaker/TrainingJobs", job, hosts, step)
        if algorithm.get("MetricDefinitions"):
            self.metrics("/aws/sagemaker/TrainingJobs", step)
        for channel in request.get("InputDataConfig", []):
            s3 = channel["DataSource"].get("S3DataSource")
            if s3:  # FileSystemDataSource channels are mounted, not downloaded
                self.download(s3["S3Uri"], objects(s3["S3Uri"]), step, f"channel {channel['ChannelName']}")
        # the SDK may JSON-quote hyperparameter values
        submit = str(request.get("HyperParameters", {}).get("sagemaker_submit_directory", "")).strip('"')
        if submit.startswith("s3://"):  # the toolkit downloads the code in the container, as the job role
            self.get(submit, step, "the training toolkit downloads the code")
        output = f"{request['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{job}/"
        for uri in objects(output):
            self.put(uri, step, "the job's model and output")
        checkpoints = request.get("CheckpointConfig", {}).get("S3Uri")
        if checkpoints:
            self.list(checkpoints.rstrip("/") + "/", step, "checkpoints restored when the job (re)starts")
            for uri in objects(checkpoints):
                self.put(uri, step, "checkpoints synced while the job runs")
                self.get(uri, step, "checkpoints restored after an interruption")

    def processing_job(self, request: dict, job: str, step: str, objects) -> None:  # noqa: ANN001
        """CreateProcessingJob and what the processing service does as the job role: image, logs, each input
        downloaded, each output uploaded."""
        self.create_job("processing-job", request, job, step)
        self.image(request["AppSpecification"]["ImageUri"], step)
        self.logs("/aws/sagemaker/ProcessingJobs", job, ["algo-1"], step)
        for item in request.get("ProcessingInputs", []):
            s3 = item.get("S3Input")
            if s3:
                self.download(s3["S3Uri"], objects(s3["S3Uri"]), step, f"input {item['InputName']}")
        for output in request.get("ProcessingOutputConfig", {}).get("Outputs", []):
            for uri in objects(output["S3Output"]["S3Uri"]):
                self.put(uri, step, f"output {output['OutputName']}")

    def step_code(self, notes: Iterable[dict], step: str, to_uri) -> None:  # noqa: ANN001 - a local path -> its s3:// URI
        """The calls step code noted (`steps.common.aws_calls`), made as the job role."""
        for note in notes:
            operation = note["operation"]
            if operation.startswith("sagemaker:"):
                self.registry_read(operation, step, note.get("version"))
            elif operation == "s3:ListObjectsV2":  # authorised as s3:ListBucket with the prefix
                self.list(to_uri(note["path"]) + "/", step, "step code lists the results store")
            elif operation == "s3:GetObject":
                self.get(to_uri(note["path"]), step, "step code reads the results store")
            elif operation == "s3:PutObject":
                self.put(to_uri(note["path"]), step, "step code writes the results store")
            else:
                raise AssertionError(f"a step noted {operation!r}, which the ledger does not know")


def job_conditions(request: dict) -> dict:
    """The SageMaker condition keys a CreateTrainingJob / CreateProcessingJob request sets (Service Authorization
    Reference, Amazon SageMaker AI: the actions' condition keys), as IAM sees them: lists, "true"/"false", numbers."""
    resources = request.get("ResourceConfig") or request.get("ProcessingResources", {}).get("ClusterConfig", {})
    groups = resources.get("InstanceGroups") or [resources]
    conditions: dict[str, str | list[str]] = {
        "sagemaker:InstanceTypes": sorted({g["InstanceType"] for g in groups if "InstanceType" in g})
    }
    isolated = request.get("EnableNetworkIsolation", request.get("NetworkConfig", {}).get("EnableNetworkIsolation", False))
    conditions["sagemaker:NetworkIsolation"] = str(bool(isolated)).lower()
    encrypted = request.get(
        "EnableInterContainerTrafficEncryption",
        request.get("NetworkConfig", {}).get("EnableInterContainerTrafficEncryption", False),
    )
    conditions["sagemaker:InterContainerTrafficEncryption"] = str(bool(encrypted)).lower()
    runtime = request.get("StoppingCondition", {}).get("MaxRuntimeInSeconds")
    if runtime is not None:
        conditions["sagemaker:MaxRuntimeInSeconds"] = str(runtime)
    vpc = request.get("VpcConfig") or request.get("NetworkConfig", {}).get("VpcConfig")
    if vpc:
        conditions["sagemaker:VpcSubnets"] = list(vpc.get("Subnets", []))
        conditions["sagemaker:VpcSecurityGroupIds"] = list(vpc.get("SecurityGroupIds", []))
    for channel in request.get("InputDataConfig", []):
        fs = channel["DataSource"].get("FileSystemDataSource")
        if fs:
            conditions.update(
                {
                    "sagemaker:FileSystemId": fs["FileSystemId"],
                    "sagemaker:FileSystemType": fs["FileSystemType"],
                    "sagemaker:FileSystemAccessMode": fs["FileSystemAccessMode"],
                    "sagemaker:FileSystemDirectoryPath": fs["DirectoryPath"],
                }
            )
    return conditions
