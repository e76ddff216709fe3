"""The processing steps' command line: bad arguments are user errors that still leave the failure file."""

from __future__ import annotations

import pytest

from steps.common.cli import StepArgumentParser, output_dir, run_step_cli
from steps.common.errors import EXIT_USER_ERROR, UserError


def parser(default_output="/opt/ml/processing/output") -> StepArgumentParser:
    p = StepArgumentParser(description="test step")
    p.add_argument("--output", default=default_output)
    p.add_argument("--size", type=float, default=1.0)
    return p


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], "default"),
        (["--output", "a"], "a"),
        (["--output=b"], "b"),
        (["--output", "a", "--size", "x", "--output=c"], "c"),  # the last one wins, as in argparse
        (["--size", "1", "--output"], "default"),  # no value: the failure still needs a folder
    ],
)
def test_output_dir_is_found_in_raw_arguments(argv, expected):
    assert output_dir(argv, "default") == expected


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--size", "abc"], "argument --size: invalid float value: 'abc'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--out", "x"], "unrecognized arguments: --out x"),  # no abbreviations
    ],
)
def test_a_bad_argument_is_a_user_error_that_names_it_and_the_fix(argv, needle):
    with pytest.raises(UserError) as err:
        parser().parse_args(argv)
    assert err.value.headline == "bad arguments"
    assert needle in err.value.message and "run with --help" in err.value.message


def test_run_step_cli_writes_the_failure_file_when_parsing_fails(tmp_path, capsys):
    ran = []
    code = run_step_cli(parser(), ran.append, ["--size", "abc", "--output", str(tmp_path / "out")])
    assert code == EXIT_USER_ERROR and ran == []
    failure = (tmp_path / "out" / "failure").read_text()
    assert failure.startswith("bad arguments: argument --size: invalid float value: 'abc'")
    assert capsys.readouterr().err.strip() == f"ERROR {failure.strip()}"


def test_run_step_cli_uses_the_parser_default_output(tmp_path):
    assert run_step_cli(parser(str(tmp_path / "default")), lambda args: None, ["--bogus"]) == EXIT_USER_ERROR
    assert (tmp_path / "default" / "failure").exists()


def test_run_step_cli_runs_the_step_with_parsed_arguments(tmp_path):
    ran = []
    assert run_step_cli(parser(), ran.append, ["--size", "2.5", "--output", str(tmp_path)]) == 0
    assert ran[0].size == 2.5 and not (tmp_path / "failure").exists()


def test_help_prints_usage_and_is_not_a_failure(tmp_path, capsys):
    assert run_step_cli(parser(), lambda args: None, ["--help", "--output", str(tmp_path / "out")]) == 0
    assert "--size" in capsys.readouterr().out and not (tmp_path / "out").exists()
