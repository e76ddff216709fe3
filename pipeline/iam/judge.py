"""`hetero iam RUN --template FILE`: every call of a local run's ledger judged against a synthesized template's policies.

Each call (`pipeline.iam.ledger`) is first rebound from the local run's locations to the template's (each anchor the
ledger names, the artifact prefix, the code object, the job role ..., replaced by the template's own), then evaluated
with a maintained IAM policy evaluator, the npm package ``@cloud-copilot/iam-simulate`` (pinned in package.json
beside the CDK CLI): identity policies of the calling role, the resource policy of what it calls (bucket, topic,
key), every condition operator, and each ARN checked against the action's resource types from the Service
Authorization Reference. A call whose principal the template does not deploy (no schedule, no notifications) is
counted as not deployed, not judged.

    hetero iam runs/local-20261127-101500-1a2b3c4d --template cdk.out/HeteroTraining.template.json
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.iam.ledger import LEDGER_FILE, read
from pipeline.iam.template import Deployed
from pipeline.sagemaker.dlc_regions import DLC_REGISTRIES
from steps.common.errors import UserError

SIMULATOR = Path(__file__).with_name("simulate.mjs")
ROOT = Path(__file__).resolve().parents[2]
NODE_PACKAGE = ROOT / "node_modules" / "@cloud-copilot" / "iam-simulate"
ECR_PULL = ("ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage")


@dataclass
class Denial:
    call: dict  # the call as judged (rebound to the template)
    result: str  # ImplicitlyDenied, ExplicitlyDenied, Error
    closest: dict | None  # the statement that came closest: policy, sid, why

    def line(self) -> str:
        c = self.call
        where = f" [{c['step']}]"
        if self.result == "Error":
            return f"DENIED {c['principal']}: {c['action']} on {c['resource']}{where}: not a valid request ({self.closest})"
        near = self.closest
        hint = (
            f"; closest: {near['policy']} statement {near['sid']!r} ({near['why']})"
            if near
            else "; no statement grants the action"
        )
        return f"DENIED {c['principal']}: {c['action']} on {c['resource']}{where} ({self.result}){hint}"


@dataclass
class Verdict:
    calls: int
    denials: list[Denial] = field(default_factory=list)
    not_deployed: dict = field(default_factory=dict)  # principal -> calls not judged
    judged: list[dict] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [d.line() for d in self.denials]
        if self.not_deployed:
            skipped = ", ".join(f"{p} ({n})" for p, n in sorted(self.not_deployed.items()))
            out.append(f"not deployed by this template, not judged: {skipped}")
        out.append(f"{self.calls} calls, {len(self.denials)} denied")
        return out


def ledger_path(run: str, work_dir: Path = Path("runs")) -> Path:
    """RUN: a run folder, its aws_calls.json, or an execution id under ``work_dir``."""
    path = Path(run)
    for candidate in (path, path / LEDGER_FILE, Path(work_dir) / run / LEDGER_FILE):
        if candidate.is_file():
            return candidate
    raise UserError(
        f"no call ledger for {run!r}: pass a local run's folder (runs/<execution id>) or its execution id; "
        f"a local run writes {LEDGER_FILE} there (`hetero run`)",
        headline="no ledger",
    )


def deployed_for(ledger_file: Path, template_file: Path) -> Deployed:
    """The template resolved for the ledger's account and region."""
    binding = read(ledger_file)["deployment"]
    return Deployed.read(template_file, account=binding["account"], region=binding["region"])


def judge_files(ledger_file: Path, template_file: Path) -> Verdict:
    return judge(read(ledger_file), deployed_for(ledger_file, template_file))


def judge(ledger: dict, deployed: Deployed) -> Verdict:
    rebind = Rebinding(ledger["deployment"]["anchors"], deployed.anchors)
    verdict = Verdict(calls=0)
    simulations, judged = [], []
    policies = deployed.resource_policies()
    account = ledger["deployment"]["account"]
    for call in ledger["calls"]:
        bound = rebind.call(call)
        principal = deployed.principals.get(call["principal"])
        if principal is None or bound is None:
            verdict.not_deployed[call["principal"]] = verdict.not_deployed.get(call["principal"], 0) + 1
            continue
        verdict.calls += 1
        judged.append(bound)
        simulations.append(_simulation(bound, principal.arn, deployed.identity_policies(call["principal"]), policies, account))
    results = simulate(simulations)
    for bound, result in zip(judged, results, strict=True):
        bound["result"] = result["result"]
        service = bound["resource"].split(":")[2] if bound["resource"].startswith("arn:") else "*"
        bound["allowed_by"] = [
            {**a, "policy": f"resource:{service}"} if a.get("where") == "resource" else a for a in result.get("allowedBy") or []
        ]
        if result["result"] != "Allowed":
            verdict.denials.append(Denial(bound, result["result"], result.get("closest") or result.get("errors")))
    verdict.judged = judged
    return verdict


class Rebinding:
    """The local run's anchors -> the template's, by ARN prefix (longest first). A listing is rebound with its prefix
    (bucket + s3:prefix as one path): the code's listing moves to the asset bucket, the artifacts' stay in theirs."""

    def __init__(self, local: dict, deployed: dict) -> None:
        self.missing = {local[name] for name in local if name not in deployed}
        self.arns = sorted(((local[n], deployed[n]) for n in local if n in deployed), key=lambda p: -len(p[0]))

    def call(self, call: dict) -> dict | None:
        """The call in the template's terms; None where it names something this template does not deploy."""
        resource, conditions = call["resource"], dict(call["conditions"])
        listing = call["action"] == "s3:ListBucket" and "s3:prefix" in conditions
        if listing:
            resource = f"{resource}/{conditions['s3:prefix']}"
        if any(_under(resource, m) for m in self.missing):
            return None
        resource = _replace(resource, self.arns)
        if listing:
            head, _, path = resource.partition(":::")
            bucket, _, key = path.partition("/")
            resource, conditions["s3:prefix"] = f"{head}:::{bucket}", key
        source = conditions.get("aws:SourceArn")
        if source is not None:
            if any(_under(source, m) for m in self.missing):
                return None
            conditions["aws:SourceArn"] = _replace(source, self.arns)
        return {**call, "resource": resource, "conditions": conditions}


def _under(value: str, anchor: str) -> bool:
    return value == anchor or (value.startswith(anchor) and (anchor.endswith("/") or value[len(anchor)] in "/:"))


def _replace(value: str, pairs: list[tuple[str, str]]) -> str:
    for local, deployed in pairs:
        if _under(value, local):
            return deployed + value[len(local) :]
    return value


def _simulation(call: dict, principal: str, identity: list[dict], resource_policies: dict, account: str) -> dict:
    resource = call["resource"]
    request = {
        "principal": principal,
        "action": call["action"],
        "resource": {"resource": resource, "accountId": _account(resource, account)},
        "contextVariables": call["conditions"],
    }
    simulation = {"identityPolicies": identity, "request": request}
    policy = _resource_policy(resource, call["action"], resource_policies)
    if policy is not None:
        simulation["resourcePolicy"] = policy
    return simulation


def _account(resource: str, default: str) -> str:
    parts = resource.split(":")
    return parts[4] if len(parts) > 4 and parts[4] else default


def _resource_policy(resource: str, action: str, policies: dict) -> dict | None:
    if resource in policies:
        return policies[resource]
    for arn, policy in policies.items():
        if ":s3:::" in arn and resource.startswith(arn + "/"):
            return policy
    region, account = (resource.split(":") + ["", "", "", "", ""])[3:5]
    if action in ECR_PULL and ":ecr:" in resource and DLC_REGISTRIES.get(region) == account:
        # AWS Deep Learning Container repositories let any AWS account pull (AWS DLC guide, "Available Deep Learning
        # Containers images": every account pulls them with its own credentials); an image of your own account
        # (images/ray/Dockerfile's) has no such policy: the job role's own grant decides
        return {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": "*", "Action": list(ECR_PULL), "Resource": resource}],
        }
    return None


def simulate(simulations: list[dict]) -> list[dict]:
    """Runs the evaluator (Node.js) once over every simulation."""
    if not simulations:
        return []
    node = shutil.which("node")
    if node is None or not NODE_PACKAGE.is_dir():
        raise UserError(
            "the IAM evaluator needs Node.js 18+ and the pinned npm packages: run `npm ci` in the repository root "
            "(make test does), then `hetero iam` again",
            headline="no IAM evaluator",
        )
    done = subprocess.run(
        [node, str(SIMULATOR)], input=json.dumps(simulations), capture_output=True, text=True, check=False, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"the IAM evaluator failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)
