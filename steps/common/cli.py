"""The processing steps' command lines: a bad argument ends the step like any other user error.

argparse's own ``error()`` prints usage and exits 2, which skips the failure
file SageMaker reads (``<output>/failure``) and a Processing job's
ExitMessage. `StepArgumentParser` raises a `UserError` instead, and
`run_step_cli` writes it to the ``--output`` folder that `output_dir` finds in
the raw arguments, so even an argument list that does not parse leaves its
failure file. The shard and evaluate steps build their parsers from this.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from steps.common.errors import UserError, processing_exit_message, run_step


class StepArgumentParser(argparse.ArgumentParser):
    """argparse for a step: no abbreviations, and a bad argument is a `UserError` naming it."""

    def __init__(self, **kwargs: Any) -> None:
        # output_dir() finds --output by its full name only, so the parser must not accept a prefix of it
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (run with --help for usage)", headline="bad arguments")


def output_dir(argv: list[str], default: str) -> str:
    """Where the failure file goes, found in the raw arguments even when they do not parse."""
    output = default
    for index, arg in enumerate(argv):  # the last one wins, as in argparse
        if arg == "--output" and index + 1 < len(argv):
            output = argv[index + 1]
        elif arg.startswith("--output="):
            output = arg.split("=", 1)[1]
    return output


def run_step_cli(
    parser: argparse.ArgumentParser, step: Callable[[argparse.Namespace], object], argv: list[str] | None = None
) -> int:
    """Parse ``argv`` (default: the process's) and run ``step(args)`` as a processing step; return the exit code.

    ``--help`` prints usage and succeeds; anything else that fails, parsing
    included, writes ``<output>/failure`` (``--output``, or the parser's
    default for it) and, in a Processing container, the ExitMessage.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        return 0
    return run_step(
        lambda: step(parser.parse_args(argv)),
        output_dir=output_dir(argv, parser.get_default("output")),
        exit_message=processing_exit_message(),
    )
