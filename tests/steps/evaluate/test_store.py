import json
import os
from pathlib import Path

import boto3
import pytest

from steps.common.errors import UserError
from steps.evaluate import store as store_module
from steps.evaluate.store import LocalStore, S3Store, open_store, validate_execution_id

BAD_IDS = ["", "../up", "a/b", ".hidden", "has space", "x" * 129, "arn:aws:sagemaker:x", None, 7]


# --- URIs and ids ---


def test_open_store_picks_the_backend(tmp_path):
    assert isinstance(open_store(tmp_path), LocalStore)
    assert open_store(f"file://{tmp_path}").root == tmp_path
    assert open_store("relative/dir").root == Path(os.getcwd(), "relative/dir")
    s3 = open_store("s3://bucket/some/prefix/")
    assert isinstance(s3, S3Store) and (s3.bucket, s3.prefix) == ("bucket", "some/prefix")
    assert s3._client is None  # no client until first use


@pytest.mark.parametrize("uri", ["s3://", "s3:///prefix", "gs://bucket/x", "file://otherhost/x"])
def test_open_store_rejects_bad_uris(uri):
    with pytest.raises(UserError, match="store URI"):
        open_store(uri)


@pytest.mark.parametrize("bad", BAD_IDS)
def test_unsafe_execution_ids_are_rejected(bad):
    with pytest.raises(UserError, match="execution id"):
        validate_execution_id(bad)


@pytest.mark.parametrize("good", ["abc123xyz", "local-1", "run_2026.11.22", "A"])
def test_safe_execution_ids_pass(good):
    assert validate_execution_id(good) == good


# --- LocalStore ---


def test_local_roundtrip_and_listing(tmp_path):
    store = open_store(tmp_path / "store")
    assert store.list_executions() == []
    uri = store.put_json("exec-b", "price_performance.json", {"speedup": 2.2})
    store.put_json("exec-a", "config.json", {"lr": 0.1})
    assert uri == (tmp_path / "store" / "exec-b" / "price_performance.json").as_uri()
    assert store.get_json("exec-b", "price_performance.json") == {"speedup": 2.2}
    assert store.list_executions() == ["exec-a", "exec-b"]
    assert sorted(p.name for p in (tmp_path / "store" / "exec-b").iterdir()) == ["price_performance.json"]


def test_local_put_overwrites(tmp_path):
    store = LocalStore(tmp_path)
    store.put_json("e1", "x.json", {"v": 1})
    store.put_json("e1", "x.json", {"v": 2})
    assert store.get_json("e1", "x.json") == {"v": 2}


def test_local_write_is_atomic_on_failure(tmp_path, monkeypatch):
    store = LocalStore(tmp_path)
    store.put_json("e1", "x.json", {"v": 1})

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(store_module.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        store.put_json("e1", "x.json", {"v": 2})
    monkeypatch.undo()
    assert store.get_json("e1", "x.json") == {"v": 1}  # old document intact
    assert [p.name for p in (tmp_path / "e1").iterdir()] == ["x.json"]  # temp file cleaned up


def test_local_get_missing_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        LocalStore(tmp_path).get_json("e1", "nope.json")


@pytest.mark.parametrize("name", ["../x.json", "a/b.json", ".hidden"])
def test_unsafe_document_names_are_rejected(tmp_path, name):
    with pytest.raises(UserError, match="document name"):
        LocalStore(tmp_path).put_json("e1", name, {})
    assert not any(tmp_path.iterdir())


def test_opening_a_local_store_creates_nothing(tmp_path):
    store = open_store(tmp_path / "later")
    assert store.list_executions() == []
    assert not (tmp_path / "later").exists()


# --- S3Store, over HTTP against the moto server ---


@pytest.fixture
def bucket(aws_env):
    boto3.client("s3").create_bucket(Bucket="results")
    return "results"


def test_s3_roundtrip_key_layout_and_content_type(bucket):
    store = open_store(f"s3://{bucket}/hetero/evals")
    uri = store.put_json("exec-1", "price_performance.json", {"speedup": 2.2})
    assert uri == f"s3://{bucket}/hetero/evals/exec-1/price_performance.json"
    head = boto3.client("s3").head_object(Bucket=bucket, Key="hetero/evals/exec-1/price_performance.json")
    assert head["ContentType"] == "application/json"
    assert store.get_json("exec-1", "price_performance.json") == {"speedup": 2.2}


def test_s3_list_executions(bucket):
    store = open_store(f"s3://{bucket}/p")
    assert store.list_executions() == []
    for execution in ("exec-b", "exec-a"):
        store.put_json(execution, "a.json", {})
        store.put_json(execution, "b.json", {})
    open_store(f"s3://{bucket}/other").put_json("exec-z", "a.json", {})
    assert store.list_executions() == ["exec-a", "exec-b"]


def test_s3_without_prefix(bucket):
    store = open_store(f"s3://{bucket}")
    assert store.put_json("e1", "a.json", [1]) == f"s3://{bucket}/e1/a.json"
    assert store.get_json("e1", "a.json") == [1]
    assert store.list_executions() == ["e1"]


def test_s3_missing_bucket_and_key_are_user_errors(bucket):
    with pytest.raises(UserError, match="NoSuchBucket"):
        open_store("s3://no-such-bucket/p").put_json("e1", "a.json", {})
    with pytest.raises(UserError, match=f"s3://{bucket}/p/e1/a.json.*NoSuchKey"):
        open_store(f"s3://{bucket}/p").get_json("e1", "a.json")


def test_s3_rejects_unsafe_ids_before_any_request(bucket):
    with pytest.raises(UserError, match="execution id"):
        open_store(f"s3://{bucket}/p").put_json("../e1", "a.json", {})
    assert "Contents" not in boto3.client("s3").list_objects_v2(Bucket=bucket)


def test_s3_store_json_is_readable_by_any_client(bucket):
    open_store(f"s3://{bucket}/p").put_json("e1", "a.json", {"b": 1, "a": [1.5]})
    body = boto3.client("s3").get_object(Bucket=bucket, Key="p/e1/a.json")["Body"].read()
    assert json.loads(body) == {"a": [1.5], "b": 1}
