"""A local run's call ledger: the runner tells it what each step did, and it writes ``aws_calls.json`` at the end.

The run's binding: this machine's account and region (`pipeline.local.settings`), the bucket ``local`` and the work folder
as the artifact prefix (`pipeline.storage`). Each anchor names one deployable location as the run binds it; the
judge puts the template's own in its place (`pipeline.iam.judge`). Step code notes its own calls into one file per
step (``$HETERO_AWS_CALLS``, `steps.common.aws_calls`), read back when the step ends.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline import storage
from pipeline.graph import PIPELINE_NAME, default_model_package_group
from pipeline.iam.arns import arn, s3_arn
from pipeline.iam.ledger import Binding, Ledger, Recorder
from steps.common.aws_calls import AWS_CALLS_ENV
from steps.contract import PLAN_FILE, RESULTS_FOLDER
from steps.evaluate.registry import APPROVED, PENDING

PARTITION, REGION, ACCOUNT = "aws", "us-east-1", "000000000000"  # pipeline.local.runner's LOCAL_REGION and LOCAL_ACCOUNT

NOTES_FOLDER = "aws-calls"  # <run>/aws-calls/<step>.jsonl: what step code noted
# the names this machine gives what only a deployment has (the notification topic, its key, the rules, the function)
LOCAL_NAMES = {
    "topic": ("sns-topic", {"topic": f"{PIPELINE_NAME}-notifications"}),
    "key": ("kms-key", {"key": "notifications"}),
    "execution_ended_rule": ("events-rule", {"rule": f"{PIPELINE_NAME}-execution-ended"}),
    "model_registered_rule": ("events-rule", {"rule": f"{PIPELINE_NAME}-model-registered"}),
    "plan_adoption_function": ("lambda-function", {"function": f"{PIPELINE_NAME}-adopt-plan"}),
    "plan_adoption_log_group": ("log-group", {"group": f"/aws/lambda/{PIPELINE_NAME}-adopt-plan"}),
}


def local_binding(run_dir: Path, definition: dict, params: dict) -> Binding:
    where = {"partition": PARTITION, "region": REGION, "account": ACCOUNT}
    work_dir = Path(run_dir).parent
    group = default_model_package_group(PIPELINE_NAME)
    declared = {p["Name"]: p.get("DefaultValue") for p in definition["Parameters"]}

    def s3(uri: str) -> str:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        return s3_arn(bucket, key)

    anchors = {
        "bucket": s3_arn(storage.LOCAL_BUCKET),
        "artifacts": s3(storage.uri(work_dir)),
        "results": s3(storage.uri(work_dir / RESULTS_FOLDER)),
        "inputs": s3(params["InputData"]),
        "code": s3(storage.uri(work_dir / "code" / "code.tar.gz")),
        "prices": s3(declared["PriceOverrides"]),
        "job_role": _job_role(definition),
        "pipeline": arn("pipeline", **where, pipeline=PIPELINE_NAME),
        "model_package_group": arn("model-package-group", **where, group=group),
        "model_packages": arn("model-package", **where, group=group, version=""),
        **{name: arn(kind, **where, **names) for name, (kind, names) in LOCAL_NAMES.items()},
    }
    return Binding(PARTITION, REGION, ACCOUNT, anchors)


def _job_role(definition: dict) -> str:
    for step in _steps(definition["Steps"]):
        role = step.get("Arguments", {}).get("RoleArn")
        if isinstance(role, str):
            return role
    raise AssertionError("no step of the definition names its RoleArn")


def _steps(steps: list) -> list:
    found = []
    for step in steps:
        found.append(step)
        if step["Type"] == "Condition":
            found += _steps(step["Arguments"].get("IfSteps", []) + step["Arguments"].get("ElseSteps", []))
    return found


def _objects(uri: str) -> list[str]:
    """The s3:// URIs of what lies under a local prefix (the object itself for a file), [] where nothing does."""
    root = storage.path(uri)
    if root.is_file():
        return [uri]
    if not root.is_dir():
        return []
    return [storage.uri(p) for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")]


class LocalCalls:
    def __init__(self, execution: str, run_dir: Path, definition: dict, params: dict) -> None:
        self.run_dir = Path(run_dir)
        self.ledger = Ledger(execution, local_binding(self.run_dir, definition, params))
        self.recorder = Recorder(self.ledger, pipeline=PIPELINE_NAME, group=default_model_package_group(PIPELINE_NAME))
        self.registered = False

    def environment(self, step: str) -> dict:
        """What a step's hosts are given so that step code notes its calls (`steps.common.aws_calls`)."""
        notes = self.run_dir / NOTES_FOLDER / f"{step}.jsonl"
        notes.parent.mkdir(parents=True, exist_ok=True)
        return {AWS_CALLS_ENV: str(notes)}

    def _step_code(self, step: str) -> None:
        notes = self.run_dir / NOTES_FOLDER / f"{step}.jsonl"
        if notes.is_file():
            lines = [json.loads(line) for line in notes.read_text().splitlines() if line.strip()]
            self.recorder.step_code(lines, step, storage.uri)

    def training_job(self, request: dict, job: str, step: str) -> None:
        self.recorder.training_job(request, job, step, _objects)
        self._step_code(step)

    def processing_job(self, request: dict, job: str, step: str) -> None:
        self.recorder.processing_job(request, job, step, _objects)
        self._step_code(step)

    def property_file(self, uri: str, step: str) -> None:
        self.recorder.get(uri, step, "Std:JsonGet reads the property file", principal="pipeline_role")

    def register(self, version: int, request: dict, step: str) -> None:
        self.recorder.register(version, request, step)
        self.registered = request.get("ModelApprovalStatus", PENDING) in (APPROVED, PENDING)

    def finish(self, *, failed: bool) -> Path:
        """The triggers that start such an execution, the notifications it causes, and the ledger written."""
        plan = self.run_dir.parent / RESULTS_FOLDER / self.ledger.execution / PLAN_FILE
        self.recorder.triggers(self.ledger.execution, storage.uri(plan) if plan.is_file() else None)
        if self.registered:
            self.recorder.notify("model_registered_rule", "RegisterModel", "EventBridge tells the topic of a registered model")
        if failed:
            self.recorder.notify("execution_ended_rule", "(execution)", "EventBridge tells the topic of a failed execution")
        self.ledger.outcome = "failed" if failed else "succeeded"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        return self.ledger.write(self.run_dir)
