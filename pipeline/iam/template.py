"""A synthesized CloudFormation template read as IAM sees it once deployed: who the principals are, what each
principal's identity policies say, which resource policies guard what, and where the pipeline's locations are.

The template's intrinsic functions are resolved for one account and region, each resource named by its logical id
(a bucket's name in lower case), so the policies become plain JSON an evaluator can read:

    deployed = Deployed.read(Path("cdk.out/HeteroTraining.template.json"), account="000000000000", region="us-east-1")
    deployed.principals["pipeline_role"].arn, deployed.identity_policies("pipeline_role"), deployed.anchors["artifacts"]

The stack declares its anchors (the artifact prefix, the code object, the job role ...) in the template's
``Metadata`` under ``hetero:iam`` (infra/stack.py); the principals are found by what each resource is: the
SageMaker pipeline's RoleArn, the schedule's target role, the new-data rule's target role, the plan-adoption
function's role, the job role (an anchor) and EventBridge, a service.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from steps.common.errors import UserError

METADATA_KEY = "hetero:iam"
PARTITION = "aws"
URL_SUFFIX = "amazonaws.com"


@dataclass(frozen=True)
class Principal:
    name: str  # pipeline_role, job_role, ... (pipeline.iam.ledger.PRINCIPALS)
    arn: str  # a role's ARN, or a service principal (events.amazonaws.com)
    logical_id: str | None  # the role's logical id (None for a service)


@dataclass
class Deployed:
    template: dict
    account: str
    region: str
    anchors: dict = field(default_factory=dict)
    principals: dict = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path, *, account: str, region: str) -> Deployed:
        try:
            template = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise UserError(
                f"template {str(path)!r} cannot be read ({exc}): pass a synthesized template, e.g. "
                "cdk.out/HeteroTraining.template.json after `npx cdk synth`",
                headline="no template",
            ) from None
        deployed = cls(template, account, region)
        metadata = template.get("Metadata", {}).get(METADATA_KEY)
        if not metadata:
            raise UserError(
                f"template {str(path)!r} has no Metadata.{METADATA_KEY}: it is not this project's stack, or was synthesized "
                "before the stack declared its IAM anchors; synthesize it again (`npx cdk synth`)",
                headline="not this project's template",
            )
        deployed.anchors = {k: v for k, v in deployed.resolve(metadata["anchors"]).items() if v}
        deployed.principals = deployed._principals()
        return deployed

    # -- intrinsic functions -------------------------------------------------------------------------------------
    def resolve(self, value):  # noqa: ANN001, ANN201 - any JSON value of a template
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((fn, arg),) = value.items()
            if fn == "Ref":
                return self._ref(arg)
            if fn == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self._get_att(logical, attribute)
            if fn == "Fn::Join":
                separator, parts = arg
                return separator.join(str(self.resolve(p)) for p in parts)
            if fn == "Fn::Sub":
                text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(self._sub(m.group(1), variables)), text)
            if fn == "Fn::Select":
                index, items = arg
                return self.resolve(items)[int(self.resolve(index))]
            if fn == "Fn::Split":
                separator, text = arg
                return str(self.resolve(text)).split(separator)
        return {k: self.resolve(v) for k, v in value.items()}

    def _sub(self, name: str, variables: dict) -> str:
        if name in variables:
            return variables[name]
        if "." in name:
            logical, attribute = name.split(".", 1)
            return self._get_att(logical, attribute)
        return self._ref(name)

    def _resource(self, logical: str) -> dict:
        try:
            return self.template["Resources"][logical]
        except KeyError:
            raise UserError(f"the template refers to {logical!r}, which it does not define", headline="bad template") from None

    def _ref(self, name: str) -> str:
        pseudo = {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::Partition": PARTITION,
            "AWS::URLSuffix": URL_SUFFIX,
            "AWS::StackName": "stack",
            "AWS::NoValue": "",
        }
        if name in pseudo:
            return pseudo[name]
        kind = self._resource(name)["Type"]
        if kind == "AWS::S3::Bucket":
            return name.lower()
        if kind == "AWS::SNS::Topic":
            return f"arn:{PARTITION}:sns:{self.region}:{self.account}:{name}"
        return name

    def _get_att(self, logical: str, attribute: str) -> str:
        kind = self._resource(logical)["Type"]
        where = f"{PARTITION}:{{service}}:{self.region}:{self.account}"
        arns = {
            "AWS::S3::Bucket": f"arn:{PARTITION}:s3:::{logical.lower()}",
            "AWS::IAM::Role": f"arn:{PARTITION}:iam::{self.account}:role/{logical}",
            "AWS::KMS::Key": f"arn:{where.format(service='kms')}:key/{logical}",
            "AWS::Lambda::Function": f"arn:{where.format(service='lambda')}:function:{logical}",
            "AWS::Events::Rule": f"arn:{where.format(service='events')}:rule/{logical}",
            "AWS::Logs::LogGroup": f"arn:{where.format(service='logs')}:log-group:{logical}:*",
            "AWS::SNS::Topic": f"arn:{where.format(service='sns')}:{logical}",
            "AWS::Scheduler::Schedule": f"arn:{where.format(service='scheduler')}:schedule/default/{logical}",
        }
        if attribute in ("Arn", "TopicArn") and kind in arns:
            return arns[kind]
        return f"{logical}.{attribute}"

    # -- principals and their policies ---------------------------------------------------------------------------
    def _resources(self, kind: str) -> dict:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == kind}

    def _role_logical_id(self, arn: str) -> str | None:
        name = arn.rsplit("/", 1)[-1]
        return name if name in self.template["Resources"] else None

    def _principals(self) -> dict:
        found: dict[str, Principal] = {}

        def role(name: str, arn_value) -> None:  # noqa: ANN001
            arn_text = self.resolve(arn_value)
            found[name] = Principal(name, arn_text, self._role_logical_id(arn_text))

        for props in (r.get("Properties", {}) for r in self._resources("AWS::SageMaker::Pipeline").values()):
            role("pipeline_role", props["RoleArn"])
        if "job_role" in self.anchors:
            role("job_role", self.anchors["job_role"])
        function = self.anchors.get("plan_adoption_function")
        for logical, resource in self._resources("AWS::Lambda::Function").items():
            if function and self._get_att(logical, "Arn") == function:
                role("plan_adoption", resource["Properties"]["Role"])
        for resource in self._resources("AWS::Scheduler::Schedule").values():
            target = resource["Properties"]["Target"]
            invokes_function = function and self.resolve(target["Arn"]) == function
            role("schedule_plan_adoption" if invokes_function else "schedule", target["RoleArn"])
        pipeline = self.anchors.get("pipeline")
        for resource in self._resources("AWS::Events::Rule").values():
            for target in resource.get("Properties", {}).get("Targets", []):
                if "RoleArn" in target and self.resolve(target["Arn"]) == pipeline:
                    role("new_data_rule", target["RoleArn"])
        if "topic" in self.anchors:
            found["events"] = Principal("events", "events.amazonaws.com", None)
        return found

    def identity_policies(self, principal: str) -> list[dict]:
        """Every policy attached to the principal's role: inline ones, AWS::IAM::Policy and customer managed ones."""
        logical = self.principals[principal].logical_id
        if logical is None:
            return []
        ref = {"Ref": logical}
        policies = []
        role = self._resource(logical).get("Properties", {})
        for inline in role.get("Policies", []):
            policies.append({"name": inline["PolicyName"], "policy": self.resolve(inline["PolicyDocument"])})
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for name, resource in self._resources(kind).items():
                props = resource.get("Properties", {})
                if ref in props.get("Roles", []):
                    policies.append({"name": name, "policy": self.resolve(props["PolicyDocument"])})
        return policies

    def managed_policy_arns(self, principal: str) -> list[str]:
        logical = self.principals[principal].logical_id
        if logical is None:
            return []
        return [str(self.resolve(a)) for a in self._resource(logical).get("Properties", {}).get("ManagedPolicyArns", [])]

    def resource_policies(self) -> dict[str, dict]:
        """ARN (a bucket's, a topic's, a key's) -> the resource policy that guards it and what lies in it."""
        found = {}
        for resource in self._resources("AWS::S3::BucketPolicy").values():
            props = resource["Properties"]
            found[f"arn:{PARTITION}:s3:::{self.resolve(props['Bucket'])}"] = self.resolve(props["PolicyDocument"])
        for resource in self._resources("AWS::SNS::TopicPolicy").values():
            props = resource["Properties"]
            for topic in props["Topics"]:
                found[self.resolve(topic)] = self.resolve(props["PolicyDocument"])
        for logical, resource in self._resources("AWS::KMS::Key").items():
            found[self._get_att(logical, "Arn")] = self.resolve(resource["Properties"]["KeyPolicy"])
        return found
