"""Finding and checking the trainer's metrics.json: every form the pipeline hands over, every field named."""

import copy
import os
import tarfile

import pytest

from steps.common.errors import UserError
from steps.evaluate.metrics import load_metrics
from tests.support.metrics import DATA_HOST, P3, make_model_tar, metrics, write_json


def test_load_from_file_nested_dir_tar_and_dir_with_tar(tmp_path):
    doc = metrics()
    file = write_json(tmp_path / "a" / "metrics.json", doc)
    write_json(tmp_path / "nested" / "x" / "y" / "metrics.json", doc)
    tar = make_model_tar(tmp_path / "t" / "model.tar.gz", doc, member="./metrics.json")
    (tmp_path / "d").mkdir()
    make_model_tar(tmp_path / "d" / "model.tar.gz", doc, member="out/metrics.json")
    for path in (file, tmp_path / "nested", tar, tmp_path / "d" / "model.tar.gz"):
        assert load_metrics(path) == doc, path
    # A directory holding only a model.tar.gz, as a Processing input of ModelArtifacts.
    os.remove(tmp_path / "d" / "src" / "metrics.json")
    assert load_metrics(tmp_path / "d") == doc


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda d: None, "no metrics.json under"),
        (lambda d: [write_json(d / s / "metrics.json", metrics(steps=n)) for n, s in enumerate("ab")], "holds 2 metrics.json"),
        (lambda d: (d / "metrics.json").write_text("{oops"), "not valid UTF-8 JSON"),
        (lambda d: (d / "model.tar.gz").write_bytes(b"not a tar"), "not a readable tar"),
    ],
)
def test_bad_metrics_locations(tmp_path, setup, expected):
    (tmp_path / "in").mkdir()
    setup(tmp_path / "in")
    with pytest.raises(UserError, match=expected) as err:
        load_metrics(tmp_path / "in")
    assert str(tmp_path / "in") in err.value.message


def test_identical_copies_are_one_run(tmp_path):
    # The trainer writes metrics.json to both model/ and output/data/.
    for sub in ("model", "output/data"):
        write_json(tmp_path / sub / "metrics.json", metrics())
    assert load_metrics(tmp_path) == metrics()
    # ...which SageMaker uploads as model.tar.gz and output.tar.gz.
    for name in ("model", "output"):
        make_model_tar(tmp_path / "s3" / name / f"{name}.tar.gz", metrics())
        os.remove(tmp_path / "s3" / name / "src" / "metrics.json")
    assert load_metrics(tmp_path / "s3") == metrics()


def test_missing_metrics_names_the_path(tmp_path):
    with pytest.raises(UserError, match=f"{tmp_path / 'nope'} does not exist"):
        load_metrics(tmp_path / "nope")


def test_tar_without_metrics(tmp_path):
    (tmp_path / "other.txt").write_text("x")
    with tarfile.open(tmp_path / "model.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "other.txt", arcname="other.txt")
    with pytest.raises(UserError, match="contains no metrics.json"):
        load_metrics(tmp_path / "model.tar.gz")


def _without(doc, dotted):
    doc = copy.deepcopy(doc)
    *parents, last = dotted.split(".")
    target = doc
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    del target[last]
    return doc


@pytest.mark.parametrize(
    ("dotted", "label"),
    [
        ("schema_version", "schema_version"),
        ("mode", "mode"),
        ("instance_groups", "instance_groups"),
        ("instance_groups.0.count", "instance_groups[0].count"),
        ("instance_groups.1.instance_type", "instance_groups[1].instance_type"),
        ("step_time_s", "step_time_s"),
        ("step_time_s.mean", "step_time_s.mean"),
        ("samples_per_second", "samples_per_second"),
        ("data_wait_share", "data_wait_share"),
        ("accuracy", "accuracy"),
        ("data_hosts", "data_hosts"),
        ("bytes_received_per_sample", "bytes_received_per_sample"),
        ("data_hosts.0.cpus", "data_hosts[0].cpus"),
        ("data_hosts.0.decode_cpu_s_per_sample", "data_hosts[0].decode_cpu_s_per_sample"),
    ],
)
def test_missing_field_names_field_and_file(tmp_path, dotted, label):
    path = write_json(tmp_path / "metrics.json", _without(metrics(), dotted))
    with pytest.raises(UserError, match=f"{path}: required field '{label}' is missing".replace("[", r"\[")):
        load_metrics(path)


@pytest.mark.parametrize(
    ("overrides", "label"),
    [
        ({"schema_version": 4}, "schema_version"),
        ({"schema_version": "1"}, "schema_version"),
        ({"mode": "mixed"}, "mode"),
        ({"instance_groups": []}, "instance_groups"),
        ({"instance_groups": ["ml.p3.2xlarge"]}, "instance_groups[0]"),
        ({"instance_groups": [{"name": "g", "instance_type": P3, "count": "1", "role": "trainer"}]}, "instance_groups[0].count"),
        ({"instance_groups": [{"name": "g", "instance_type": P3, "count": True, "role": "trainer"}]}, "instance_groups[0].count"),
        ({"instance_groups": [{"name": "g", "instance_type": P3, "count": 0, "role": "trainer"}]}, "instance_groups[0].count"),
        ({"step_time_s": {"mean": 0}}, "step_time_s.mean"),
        ({"step_time_s": 0.1}, "step_time_s"),
        ({"samples_per_second": "fast"}, "samples_per_second"),
        ({"data_wait_share": 1.5}, "data_wait_share"),
        ({"accuracy": "93%"}, "accuracy"),
        ({"config": [1]}, "config"),
        ({"data_hosts": {"algo-2": {}}}, "data_hosts"),
        ({"data_hosts": ["algo-2"]}, "data_hosts[0]"),
        ({"data_hosts": [{**DATA_HOST, "cpus": 0}]}, "data_hosts[0].cpus"),
        ({"data_hosts": [{**DATA_HOST, "busy_share": -0.1}]}, "data_hosts[0].busy_share"),
        ({"bytes_received_per_sample": "12 KB"}, "bytes_received_per_sample"),
    ],
)
def test_ill_typed_field_names_field_and_file(tmp_path, overrides, label):
    path = write_json(tmp_path / "metrics.json", metrics(**overrides))
    with pytest.raises(UserError) as err:
        load_metrics(path)
    assert str(path) in err.value.message and f"field {label!r}" in err.value.message


def test_null_accuracy_is_allowed(tmp_path):
    path = write_json(tmp_path / "metrics.json", metrics(accuracy=None))
    assert load_metrics(path)["accuracy"] is None


def test_a_version_1_document_is_still_read(tmp_path):
    """Runs trained by the previous release carry no data-host measurements; Evaluate still reads them."""
    doc = metrics(schema_version=1)
    del doc["data_hosts"], doc["bytes_received_per_sample"]
    assert load_metrics(write_json(tmp_path / "metrics.json", doc)) == doc


def test_an_unknown_version_names_the_versions_read_and_the_fix(tmp_path):
    path = write_json(tmp_path / "metrics.json", metrics(schema_version=4))
    with pytest.raises(UserError, match="reads versions 1, 2 and 3: evaluate with the release that trained it, or retrain"):
        load_metrics(path)
