"""Model registry: the model packages of one model package group, each a DescribeModelPackage document.

Two backends behind one interface, chosen by URI (as the results store is):

* ``sagemaker://<model package group>`` -> the SageMaker Model Registry (ListModelPackages,
  DescribeModelPackage, UpdateModelPackage; the client is built on first use, in the region given
  (Evaluate's ``--region``, the pipeline's: a processing container's environment names none), else from
  the standard AWS environment, ``AWS_ENDPOINT_URL`` included).
* ``file:///abs/dir`` or a plain path -> ``<dir>/<version>.json``, one document per package, the
  folder's name the group's (the local runner registers into ``<work_dir>/registry/<group>/``).

A package is named by its version number (``3``) or its ARN. Evaluate reads the latest approved
package to decide automatic approval (`approval`); ``hetero models`` lists and approves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from steps.common import aws_calls
from steps.common.errors import UserError
from steps.common.files import write_json_atomic

if TYPE_CHECKING:
    from botocore.client import BaseClient

SCHEME = "sagemaker"
APPROVED, REJECTED, PENDING = "Approved", "Rejected", "PendingManualApproval"  # ModelApprovalStatus (botocore's enum)
EXECUTION_KEY = "execution_id"  # the CustomerMetadataProperties key naming the pipeline execution that registered it
LIST_LIMIT = 100  # ListModelPackages' MaxResults ceiling


def open_registry(uri: str | os.PathLike, *, region: str | None = None) -> Registry:
    """``region``: the SageMaker registry's (None: the AWS environment's); a local registry has none."""
    text = os.fspath(uri)
    parsed = urlparse(text)
    if parsed.scheme == SCHEME:
        if not parsed.netloc or parsed.path.strip("/"):
            raise UserError(f"model registry {text!r}: write sagemaker://<model package group name>", headline="bad registry")
        return SageMakerRegistry(parsed.netloc, region=region)
    if parsed.scheme == "file":
        return LocalRegistry(Path(unquote(parsed.path)))
    if parsed.scheme:
        raise UserError(
            f"model registry {text!r}: use sagemaker://<group>, file:///dir or a folder path", headline="bad registry"
        )
    return LocalRegistry(Path(text))


def _version(ref: str | int) -> int | None:
    text = str(ref).rsplit("/", 1)[-1]
    return int(text) if text.isdigit() else None


class Registry:
    group: str

    def packages(self) -> list[dict]:
        """Every package of the group, newest first."""
        raise NotImplementedError

    def describe(self, ref: str | int) -> dict:
        raise NotImplementedError

    def set_status(self, ref: str | int, status: str) -> dict:
        raise NotImplementedError

    def latest_approved(self) -> dict | None:
        return next((p for p in self.packages() if p.get("ModelApprovalStatus") == APPROVED), None)

    def _unknown(self, ref: str | int) -> UserError:
        return UserError(
            f"no model package {ref!r} in model package group {self.group!r}: name one by the version or ARN that "
            "`hetero models` lists",
            headline="unknown model package",
        )


class LocalRegistry(Registry):
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.group = self.folder.name

    def _documents(self) -> list[Path]:
        if not self.folder.is_dir():
            raise UserError(
                f"no model registry at {self.folder}: a local run registers its model there (`hetero run`); "
                "pass --registry <work dir>/registry/<group>, or sagemaker://<group> for the deployed one",
                headline="no registry",
            )
        return sorted((p for p in self.folder.glob("*.json") if p.stem.isdigit()), key=lambda p: int(p.stem))

    def packages(self) -> list[dict]:
        # as SageMakerRegistry.packages asks the service: the group, its list, each package
        aws_calls.note("sagemaker:DescribeModelPackageGroup", group=self.group)
        aws_calls.note("sagemaker:ListModelPackages", group=self.group)
        documents = [json.loads(p.read_text()) for p in reversed(self._documents())]
        for doc in documents:
            aws_calls.note("sagemaker:DescribeModelPackage", group=self.group, version=doc["ModelPackageVersion"])
        return documents

    def latest_approved(self) -> dict | None:
        # the first local run creates the folder: before it, nothing is approved
        return super().latest_approved() if self.folder.is_dir() else None

    def describe(self, ref: str | int) -> dict:
        version = _version(ref)
        path = self.folder / f"{version}.json"
        if version is None or path not in self._documents():
            raise self._unknown(ref)
        doc = json.loads(path.read_text())
        if not str(ref).isdigit() and doc["ModelPackageArn"] != str(ref):
            raise self._unknown(ref)
        return doc

    def set_status(self, ref: str | int, status: str) -> dict:
        doc = self.describe(ref)
        doc = {**doc, "ModelApprovalStatus": status, "LastModifiedTime": _now()}
        write_json_atomic(self.folder / f"{doc['ModelPackageVersion']}.json", doc)
        return doc

    def create(self, request: dict, *, arn_prefix: str) -> dict:
        """Register ``request`` (a CreateModelPackage request for this group) as the next version;
        ``arn_prefix``: ``arn:<partition>:sagemaker:<region>:<account>``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        version = max((int(p.stem) for p in self.folder.glob("*.json") if p.stem.isdigit()), default=0) + 1
        now = _now()
        doc = {
            **request,
            "ModelPackageGroupName": self.group,
            "ModelPackageVersion": version,
            # a package's ARN keeps its group's case (pipeline/iam/arns.py)
            "ModelPackageArn": f"{arn_prefix}:model-package/{self.group}/{version}",
            "ModelApprovalStatus": request.get("ModelApprovalStatus", PENDING),
            "ModelPackageStatus": "Completed",
            "CreationTime": now,
            "LastModifiedTime": now,
        }
        write_json_atomic(self.folder / f"{version}.json", doc)
        return doc


class SageMakerRegistry(Registry):
    def __init__(self, group: str, client: BaseClient | None = None, *, region: str | None = None) -> None:
        self.group = group
        self.region = region  # None: the AWS environment's
        self._client = client

    @property
    def client(self) -> BaseClient:
        if self._client is None:
            import boto3  # on first use: nothing is built at import

            self._client = boto3.client("sagemaker", region_name=self.region)
        return self._client

    def packages(self) -> list[dict]:
        with self._errors("DescribeModelPackageGroup"):
            self.client.describe_model_package_group(ModelPackageGroupName=self.group)
        summaries, token = [], None
        with self._errors("ListModelPackages"):
            while True:
                page = self.client.list_model_packages(
                    ModelPackageGroupName=self.group,
                    SortBy="CreationTime",
                    SortOrder="Descending",
                    MaxResults=LIST_LIMIT,
                    **({"NextToken": token} if token else {}),
                )
                summaries += page.get("ModelPackageSummaryList", [])
                token = page.get("NextToken")
                if not token:
                    break
        return [self._describe_arn(s["ModelPackageArn"]) for s in summaries]

    def latest_approved(self) -> dict | None:
        with self._errors("ListModelPackages"):
            page = self.client.list_model_packages(
                ModelPackageGroupName=self.group,
                ModelApprovalStatus=APPROVED,
                SortBy="CreationTime",
                SortOrder="Descending",
                MaxResults=1,
            )
        summaries = page.get("ModelPackageSummaryList", [])
        return self._describe_arn(summaries[0]["ModelPackageArn"]) if summaries else None

    def _describe_arn(self, arn: str) -> dict:
        with self._errors("DescribeModelPackage"):
            return _plain(self.client.describe_model_package(ModelPackageName=arn))

    def describe(self, ref: str | int) -> dict:
        version = _version(ref)
        found = next(
            (
                p
                for p in self.packages()
                if str(ref) == p["ModelPackageArn"] or (str(ref).isdigit() and p.get("ModelPackageVersion") == version)
            ),
            None,
        )
        if found is None:
            raise self._unknown(ref)
        return found

    def set_status(self, ref: str | int, status: str) -> dict:
        arn = self.describe(ref)["ModelPackageArn"]
        with self._errors("UpdateModelPackage"):
            self.client.update_model_package(ModelPackageArn=arn, ModelApprovalStatus=status)
        return self._describe_arn(arn)

    def _errors(self, operation: str):  # noqa: ANN202 - a context manager
        return sagemaker_registry_errors(self.group, operation)


@contextmanager
def sagemaker_registry_errors(group: str, operation: str) -> Iterator[None]:
    """AWS failures the user can fix -> a one-line UserError that names the fix; anything else propagates."""
    from botocore.exceptions import ClientError, NoCredentialsError, NoRegionError

    try:
        yield
    except NoRegionError:
        raise UserError("no AWS region: set AWS_REGION to the region you deployed to", headline="no region") from None
    except NoCredentialsError:
        raise UserError(
            "no AWS credentials found: run `aws configure`, set AWS_PROFILE, or export AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY",
            headline="no credentials",
        ) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        if code in ("AccessDeniedException", "AccessDenied"):
            raise UserError(
                f"{operation} on model package group {group!r} was denied ({message}): the identity needs "
                f"sagemaker:{operation} on arn:aws:sagemaker:<region>:<account>:model-package-group/{group} and "
                f"model-package/{group}/*",
                headline="access denied",
            ) from None
        if code == "ResourceNotFound" or (code == "ValidationException" and "does not exist" in message):
            raise UserError(
                f"no model package group {group!r} in this region ({message}): deploy the stack, which creates it "
                "(cdk.json hetero:modelPackageGroup), or check --registry and AWS_REGION",
                headline="no registry",
            ) from None
        raise


def _plain(response: dict) -> dict:
    """A Describe response as a JSON document: datetimes as ISO text, no ResponseMetadata."""
    return json.loads(json.dumps({k: v for k, v in response.items() if k != "ResponseMetadata"}, default=_iso))


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="seconds")
    raise TypeError(type(value).__name__)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def metric(package: dict, name: str) -> str | None:
    """One CustomerMetadataProperties value of a package (None where it has none)."""
    return (package.get("CustomerMetadataProperties") or {}).get(name)
