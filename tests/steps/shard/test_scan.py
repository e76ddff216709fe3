"""The shard step's scan stage: what counts as a class, an image or a skipped file, and what fails to decode."""

from __future__ import annotations

import pytest

from steps.common.errors import UserError
from steps.shard.scan import decode_error, quarantine_corrupt, scan_input
from tests.support.raw_images import make_raw


def test_classes_and_candidates_are_sorted_and_hidden_files_ignored(tmp_path):
    raw = make_raw(tmp_path / "raw", {"b": 2, "a": 1})
    (raw / "a" / "sub").mkdir()
    (raw / "a" / "sub" / "deep.PNG").write_bytes(b"x")
    (raw / "a" / ".hidden.jpg").write_bytes(b"x")
    (raw / ".cache").mkdir()
    (raw / "b" / "notes.txt").write_text("x")
    (raw / "loose.jpg").write_bytes(b"x")
    classes, candidates, skipped = scan_input(raw)
    assert classes == ["a", "b"]
    assert [(c.rel, c.label) for c in candidates] == [
        ("a/a_000.jpg", 0),
        ("a/sub/deep.PNG", 0),
        ("b/b_000.jpg", 1),
        ("b/b_001.jpg", 1),
    ]
    assert [s["path"] for s in skipped] == ["loose.jpg", "b/notes.txt"]


def test_an_input_without_class_folders_names_the_layout(tmp_path):
    with pytest.raises(UserError, match="one folder per class"):
        scan_input(tmp_path)


def test_undecodable_images_are_copied_to_quarantine_with_a_reason(tmp_path):
    raw = make_raw(tmp_path / "raw", {"a": 1})
    (raw / "a" / "bad.jpg").write_bytes(b"not a jpeg")
    _, candidates, _ = scan_input(raw)
    quarantined = quarantine_corrupt(candidates, tmp_path / "out")
    assert [q["path"] for q in quarantined] == ["a/bad.jpg"] and quarantined[0]["reason"]
    assert (tmp_path / "out" / "quarantine" / "a" / "bad.jpg").read_bytes() == b"not a jpeg"
    assert decode_error(raw / "a" / "a_000.jpg") is None
