"""``hetero``: run the pipeline locally (and, later, deploy and start it in AWS).

    hetero run                                  # sample data, 1 data host + 1 trainer, baseline too
    hetero run --input ./my_images --data-hosts 2 --dnn-hosts 2
    hetero run --workload my_pkg.my_workload --workload-options '{"size": 128}'
    hetero params                               # every pipeline parameter with default and help

Parameter precedence: command line > environment (HETERO_PARAM_<Name>) > --config file (JSON) > default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from pipeline.emulator import StepFailed
from pipeline.graph import PARAMETERS, build_graph, resolve_parameters
from pipeline.local import LocalOptions, LocalRunner, check_input_folder
from pipeline.summary import render
from steps.common.errors import HeteroError, UserError
from steps.evaluate.prices import load_prices

ENV_PREFIX = "HETERO_PARAM_"
FLAGS = {  # CLI flag -> pipeline parameter
    "input": "InputData", "workload": "Workload", "workload_options": "WorkloadOptions",
    "data_hosts": "DataInstanceCount", "dnn_hosts": "DnnInstanceCount",
    "data_instance_type": "DataInstanceType", "dnn_instance_type": "DnnInstanceType",
    "epochs": "Epochs", "max_steps": "MaxSteps", "batch_size": "BatchSize", "shard_size_mb": "ShardSizeMB",
    "threshold": "ImprovementThreshold",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hetero", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the whole pipeline on an emulated local cluster")
    for flag, name in FLAGS.items():
        param = next(p for p in PARAMETERS if p.name == name)
        run.add_argument(f"--{flag.replace('_', '-')}", dest=flag, metavar=name, help=f"{param.help} [{name}, default {param.default!r}]")
    run.add_argument("--no-baseline", action="store_true", help="skip the homogeneous baseline [RunBaseline=false]")
    run.add_argument("--param", action="append", default=[], metavar="Name=Value", help="any pipeline parameter (see `hetero params`)")
    run.add_argument("--config", type=Path, help="JSON file of pipeline parameters")
    run.add_argument("--work-dir", type=Path, default=Path("runs"), help="where runs and the local results store live (default runs/)")
    run.add_argument("--sample-images", type=int, default=3000, help="size of the generated dataset when no --input is given")
    run.add_argument("--no-pin", action="store_true", help="do not pin hosts to CPU sets")
    run.add_argument("--prices", type=Path, help='JSON price overrides, e.g. {"prices": {"ml.g6.xlarge": 1.0}}')
    sub.add_parser("params", help="list pipeline parameters")
    return parser


def _layers(args) -> list[dict]:
    file_layer = {}
    if args.config:
        try:
            file_layer = json.loads(args.config.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"--config {args.config}: {exc}", headline="bad config file") from None
    env_layer = {k[len(ENV_PREFIX):]: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    cli_layer = {name: getattr(args, flag) for flag, name in FLAGS.items() if getattr(args, flag) is not None}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--param {item!r}: write Name=Value", headline="bad parameter")
        cli_layer[name] = value
    if args.no_baseline:
        cli_layer["RunBaseline"] = "false"
    return [file_layer, env_layer, cli_layer]


def _validate(params: dict, prices_file: Path | None) -> None:
    check_input_folder(params["InputData"])
    prices = load_prices(prices_file)
    for key in ("DataInstanceType", "DnnInstanceType"):
        prices.hourly(params[key])  # an unknown type fails now, not after training
    try:
        options = json.loads(params["WorkloadOptions"])
    except json.JSONDecodeError as exc:
        raise UserError(f"WorkloadOptions {params['WorkloadOptions']!r} is not JSON: {exc}", headline="bad parameter") from None
    if not isinstance(options, dict):
        raise UserError("WorkloadOptions must be a JSON object, e.g. '{\"blur_passes\": 4}'", headline="bad parameter")


def cmd_run(args) -> int:
    params = resolve_parameters(*_layers(args))
    _validate(params, args.prices)
    if args.sample_images < 10:
        raise UserError(f"--sample-images {args.sample_images}: use at least 10", headline="bad option")
    options = LocalOptions(work_dir=args.work_dir, sample_images=args.sample_images, pin_cpus=not args.no_pin,
                           prices_file=args.prices)
    result = LocalRunner(build_graph(), params, options).run()
    print()
    print(render(result.price_performance))
    manifest = json.loads(result.outputs[("Shard", "manifest")].read_text())
    quarantined = manifest.get("quarantined", 0) + manifest.get("skipped", 0)
    if quarantined:
        print(f"\ninput:     {manifest['quarantined']} corrupt file(s) quarantined, {manifest['skipped']} skipped: "
              f"{result.outputs[('Shard', 'manifest')].parent / 'report.json'}")
    print(f"\nmetrics:   {result.run_dir}/*/model/metrics.json")
    print(f"results:   {result.outputs[('Evaluate', 'evaluation')]}/price_performance.json")
    print(f"store:     {result.store_uri}/{result.execution_id}/")
    return 0


def cmd_params(args) -> int:
    for p in PARAMETERS:
        extra = f" (one of {', '.join(map(str, p.choices))})" if p.choices else ""
        print(f"{p.name:<22} {p.default!r:<32} {p.help}{extra}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"run": cmd_run, "params": cmd_params}[args.command](args)
    except StepFailed as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 1
    except HeteroError as exc:
        if isinstance(exc, UserError):
            print(f"error: {exc.one_line()}", file=sys.stderr)
            return 2
        traceback.print_exc()
        return 1
    except KeyboardInterrupt:
        print("interrupted; all hosts stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
