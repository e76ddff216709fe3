"""`hetero run` through the command's main on bad data: the Shard step's user errors in one line naming the user's input
and the fix, no traceback."""

from __future__ import annotations

import shutil

import pytest

from pipeline.cli import main

pytestmark = pytest.mark.e2e


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_empty_dataset_fails_in_the_shard_step_with_the_path(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--input", str(empty))
    assert code == 2  # a user error, wherever it happens
    assert "Traceback" not in err
    assert "step Shard" in err and str(empty) in err


def test_more_data_hosts_than_samples_fails_in_the_shard_step(tmp_path, capsys, tiny_images):
    few = tmp_path / "few"
    for cls in sorted(p for p in tiny_images.iterdir() if p.is_dir())[:2]:
        (few / cls.name).mkdir(parents=True)
        for image in sorted(cls.iterdir())[:2]:
            shutil.copy(image, few / cls.name / image.name)
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--input", str(few), "--data-hosts", "9")
    assert code == 2 and "Traceback" not in err
    assert "9 data hosts" in err


def test_a_data_set_error_in_the_shard_step_names_the_users_input_folder(tmp_path, capsys, no_leftovers):
    """The step reads its container copy (<job>/opt/ml/processing/input/input); the message names the folder the user
    passed, handed to the step as data (--input-source, the InputData parameter), never the copy."""
    from pipeline.local.sample_data import generate

    one_class = tmp_path / "my_images"
    generated = generate(tmp_path / "all", samples=16, image_size=32)
    first = sorted(p for p in generated.iterdir() if p.is_dir())[0]
    shutil.copytree(first, one_class / first.name)
    code, err = run_cli(capsys, "run", "--work-dir", str(tmp_path / "w"), "--input", str(one_class))
    assert code == 2 and "Traceback" not in err
    assert "step Shard" in err and f"{one_class} holds readable images of 1 class" in err, err
    assert "opt/ml" not in err
