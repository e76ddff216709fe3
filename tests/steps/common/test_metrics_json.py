"""metrics.json's declaration: the goldens of real runs hold exactly its fields, both layouts of resumes read, and a
document a writer builds holds up against the check every reader makes."""

import json
from dataclasses import fields

import pytest

from steps.common.errors import UserError
from steps.common.metrics_json import Metrics, Precision, check, precision_label, resumes
from tests.support.metrics import GOLDENS, metrics

ONLY_SOME = {"checkpoints": "pytorch", "epoch_accounting": "tensorflow"}  # written by one framework each


@pytest.mark.parametrize("golden", sorted(GOLDENS.glob("metrics.*.json")), ids=lambda p: p.stem)
def test_each_golden_holds_the_declared_fields_and_no_other(golden):
    framework = golden.stem.split(".")[1]
    declared = {f.name for f in fields(Metrics)} - {k for k, fw in ONLY_SOME.items() if fw != framework}
    assert set(json.loads(golden.read_text())) == declared


def test_resumes_read_from_the_ledger_and_from_a_version_2_tensorflow_document():
    assert resumes({"sample_ledger": {"epochs": [], "resumes": 2, "partial_epoch": None}}) == 2
    assert resumes({"schema_version": 2, "resumes": 1}) == 1
    assert resumes({"schema_version": 2}) == 0


def test_a_version_3_document_must_hold_its_sample_ledger_and_its_types():
    doc = metrics(schema_version=3, sample_ledger={"epochs": [], "resumes": 0, "partial_epoch": None})
    assert check(doc, "m.json") is doc
    with pytest.raises(UserError, match="'sample_ledger' is missing"):
        check({k: v for k, v in doc.items() if k != "sample_ledger"}, "m.json")
    with pytest.raises(UserError, match="'sample_ledger.resumes' must be an integer"):
        check({**doc, "sample_ledger": {"epochs": [], "resumes": "1", "partial_epoch": None}}, "m.json")


def test_a_section_writes_in_declared_order_and_the_label_says_what_was_asked():
    assert Precision(requested="auto", used="bf16").as_dict() == {"requested": "auto", "used": "bf16"}
    assert precision_label({"requested": "auto", "used": "bf16"}) == "bf16 (auto)"
    assert precision_label(None) == "-"
