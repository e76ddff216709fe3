"""The pipeline parameters of `hetero run` and `hetero start`, in one precedence order: command line > environment
(``HETERO_PARAM_<Name>``) > --config file (JSON) > default; and the --pipeline-name option of the verbs that reach the
deployed pipeline."""

from __future__ import annotations

import argparse
import json
import os

from pipeline.sagemaker.executions import (
    DEFAULT_PIPELINE_NAME,
)
from steps.common.errors import UserError
from steps.contract import TUNABLES

ENV_PREFIX = "HETERO_PARAM_"
FLAGS = {p.flag.replace("-", "_"): p.name for p in TUNABLES if p.flag}  # argparse dest -> pipeline parameter


def pipeline_name_option() -> dict:
    """The --pipeline-name option of the verbs that reach the deployed pipeline (start, executions)."""
    return dict(
        default=os.environ.get("HETERO_PIPELINE_NAME", DEFAULT_PIPELINE_NAME),
        help="deployed pipeline (default: env HETERO_PIPELINE_NAME or %(default)s)",
    )


def parameter_layers(args: argparse.Namespace) -> list[dict]:
    file_layer = {}
    if args.config:
        try:
            file_layer = json.loads(args.config.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"--config {args.config}: {exc}", headline="bad config file") from None
    env_layer = {k[len(ENV_PREFIX) :]: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    cli_layer = {name: getattr(args, flag) for flag, name in FLAGS.items() if getattr(args, flag) is not None}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--param {item!r}: write Name=Value", headline="bad parameter")
        cli_layer[name] = value
    if args.no_baseline:
        cli_layer["RunBaseline"] = "false"
    if getattr(args, "prices", None):
        cli_layer["PriceOverrides"] = str(args.prices)  # the file itself travels as a file, never as a parameter value
    return [file_layer, env_layer, cli_layer]
