"""Results store: JSON documents keyed by pipeline execution id.

Two backends behind one interface, chosen by URI:

* ``s3://bucket/prefix`` -> objects ``<prefix>/<execution_id>/<name>`` (SageMaker).
* ``file:///abs/dir`` or a plain path -> files ``<dir>/<execution_id>/<name>``
  (the embedded default: needs no AWS account).

Writes are atomic: a reader sees the old document or the new one, never half
of one (local: temp file + ``os.replace``; S3: one ``put_object``).

    >>> store = open_store("runs/store")
    >>> store.put_json("exec-1", "price_performance.json", {"speedup": 2.2})
    'file:///.../runs/store/exec-1/price_performance.json'

The S3 client is built on first use, in the region given (Evaluate's ``--region``, the pipeline's: a
processing container's environment names none), and from the standard AWS environment (credentials,
``AWS_DEFAULT_REGION`` where no region is given, ``AWS_ENDPOINT_URL`` for a local server).
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from steps.common import aws_calls
from steps.common.errors import UserError
from steps.common.files import write_json_atomic, write_text_atomic
from steps.evaluate.errors import DocumentNotFound

if TYPE_CHECKING:
    from botocore.client import BaseClient

# SageMaker pipeline execution ids are alphanumeric; we also allow '.', '_' and
# '-' for local runs. No '/' and no leading '.', so an id can never climb out
# of the store or hide a file.
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def validate_execution_id(execution_id: str) -> str:
    return _check_name(execution_id, "execution id")


def _check_name(value, what: str) -> str:
    if not isinstance(value, str) or not _SAFE_NAME.fullmatch(value):
        raise UserError(
            f"{what} {value!r} is not allowed: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return value


def open_store(uri: str | os.PathLike, *, region: str | None = None) -> Store:
    """S3Store for ``s3://bucket[/prefix]`` (its client in ``region``; None: the AWS environment's), LocalStore for
    ``file://`` URIs and plain paths."""
    text = os.fspath(uri)
    parsed = urlparse(text)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise UserError(f"store URI {text!r} has no bucket: use s3://bucket/prefix")
        return S3Store(parsed.netloc, parsed.path.strip("/"), region=region)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise UserError(f"store URI {text!r}: file URIs need an absolute path, e.g. file:///data/store")
        return LocalStore(unquote(parsed.path))
    if "://" in text:
        raise UserError(f"store URI {text!r}: unsupported scheme {parsed.scheme!r}; use s3://, file:// or a path")
    return LocalStore(text)


class LocalStore:
    """A directory tree; nothing is created until the first write."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).absolute()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, execution_id: str, name: str) -> Path:
        return self.root / validate_execution_id(execution_id) / _check_name(name, "document name")

    def put_json(self, execution_id: str, name: str, obj: Any) -> str:
        path = self._path(execution_id, name)
        write_json_atomic(path, obj)
        aws_calls.note("s3:PutObject", path=path)
        return path.as_uri()

    def put_text(self, execution_id: str, name: str, text: str, content_type: str) -> str:
        path = self._path(execution_id, name)
        write_text_atomic(path, text)
        aws_calls.note("s3:PutObject", path=path)
        return path.as_uri()

    def get_json(self, execution_id: str, name: str) -> Any:
        path = self._path(execution_id, name)
        aws_calls.note("s3:GetObject", path=path)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DocumentNotFound(f"{path.as_uri()} does not exist: no {name} stored for execution {execution_id!r}") from None

    def list_executions(self) -> list[str]:
        aws_calls.note("s3:ListObjectsV2", path=f"{self.root}/")
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and _SAFE_NAME.fullmatch(p.name))


class S3Store:
    """Objects under ``s3://bucket/prefix``; the boto3 client is created on first use."""

    def __init__(self, bucket: str, prefix: str = "", *, client: BaseClient | None = None, region: str | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.region = region  # None: the AWS environment's
        self._client = client

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r})"

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def client(self) -> BaseClient:
        if self._client is None:
            import boto3  # only S3 users pay for the import, and never at module import

            self._client = boto3.client("s3", region_name=self.region)
        return self._client

    def _key(self, execution_id: str, name: str) -> str:
        parts = [self.prefix, validate_execution_id(execution_id), _check_name(name, "document name")]
        return "/".join(p for p in parts if p)

    def put_json(self, execution_id: str, name: str, obj: Any) -> str:
        return self.put_text(
            execution_id, name, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n", "application/json"
        )

    def put_text(self, execution_id: str, name: str, text: str, content_type: str) -> str:
        key = self._key(execution_id, name)
        # One PUT is atomic in S3: readers get the old object or the new one.
        with _s3_errors(f"s3://{self.bucket}/{key}"):
            self.client.put_object(Bucket=self.bucket, Key=key, Body=text.encode("utf-8"), ContentType=content_type)
        return f"s3://{self.bucket}/{key}"

    def get_json(self, execution_id: str, name: str) -> Any:
        key = self._key(execution_id, name)
        with _s3_errors(f"s3://{self.bucket}/{key}"):
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return json.loads(body)

    def list_executions(self) -> list[str]:
        prefix = f"{self.prefix}/" if self.prefix else ""
        found = []
        with _s3_errors(self.uri):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/")
            for page in pages:
                for common in page.get("CommonPrefixes", []):
                    found.append(common["Prefix"][len(prefix) :].rstrip("/"))
        return sorted(name for name in found if _SAFE_NAME.fullmatch(name))


Store = LocalStore | S3Store  # what open_store returns: one interface, two backends


# S3 failures a user can fix (bucket, key, access, credentials) become UserError.
_S3_USER_CODES = {"NoSuchBucket", "NoSuchKey", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}


@contextmanager
def _s3_errors(uri: str):
    from botocore.exceptions import ClientError, NoCredentialsError

    try:
        yield
    except NoCredentialsError:
        raise UserError(f"{uri}: no AWS credentials found; configure them or use a local store path") from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") not in _S3_USER_CODES:
            raise
        kind = DocumentNotFound if error["Code"] == "NoSuchKey" else UserError
        raise kind(f"{uri}: S3 says {error['Code']}: {error.get('Message', '')}") from None
