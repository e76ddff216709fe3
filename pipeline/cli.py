"""``hetero``: run the pipeline locally, and start and inspect it in AWS once deployed (``npx cdk deploy``, see docs/deploy.md).

    hetero run                                  # sample data, 1 data host + 1 trainer, baseline too
    hetero run --input ./my_images --data-hosts 2 --dnn-hosts 2
    hetero run --workload my_pkg.my_workload --code-dir . --workload-options '{"size": 128}'
    hetero params                               # every pipeline parameter with default and help
    hetero params --markdown                    # the same as docs/parameters.md
    hetero start --param Epochs=3               # an execution of the deployed pipeline (pipeline/sagemaker/executions.py)
    hetero executions --results s3://bucket/results   # recent executions, status and price-performance
    hetero models                               # registered models with their metrics; `hetero models approve 3`
    hetero definition --bucket my-bucket         # the SageMaker pipeline definition JSON (pipeline/sagemaker/)
    hetero iam runs/<execution> --template cdk.out/HeteroTraining.template.json   # a run's AWS calls vs the IAM policies

Parameter precedence: command line > environment (HETERO_PARAM_<Name>) > --config file (JSON) > default.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import sys
import textwrap
import traceback
from pathlib import Path

from pipeline.code import CODE_DIRS_KEY, REQUIREMENTS, STEPS_DIR, shipped_files
from pipeline.emulator.failures import PROGRESS_TIMEOUT_S
from pipeline.emulator.links import LinkFault
from pipeline.emulator.links import unavailable as links_unavailable
from pipeline.errors import StepFailed
from pipeline.graph import resolve_parameters
from pipeline.iam import command as iam_command
from pipeline.local.runner import LocalRunner
from pipeline.local.settings import LocalOptions
from pipeline.models import DEPLOYED_EXAMPLE, REGISTRY_ENV, STATUS, change_status, default_registry, package_lines
from pipeline.parameters_page import REGENERATE
from pipeline.parameters_page import markdown as parameters_markdown
from pipeline.plan_view import execution_report, plan_for, render_plan, stored_plan_parameters
from pipeline.price_refresh import refresh as refresh_prices
from pipeline.sagemaker.executions import (
    DEFAULT_PIPELINE_NAME,
    FINISHED,
    execution_id,
    list_executions,
    price_performance_of,
    start_execution,
)
from pipeline.stop import STOP
from pipeline.summary import EMULATED, render
from steps.common.errors import HeteroError, UserError, storage_error
from steps.contract import FRAMEWORKS, MANIFEST_FILE, METRICS_FILE, PLAN_FILE, PRICE_PERFORMANCE_FILE, SHARD_REPORT_FILE, TUNABLES
from steps.evaluate.planner import Inputs
from steps.evaluate.prices import load_prices
from steps.evaluate.registry import open_registry
from steps.evaluate.report import REPORT_FILE

ENV_PREFIX = "HETERO_PARAM_"
FLAGS = {p.flag.replace("-", "_"): p.name for p in TUNABLES if p.flag}  # argparse dest -> pipeline parameter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hetero", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the whole pipeline on an emulated local cluster")
    for param in (p for p in TUNABLES if p.flag):
        run.add_argument(
            f"--{param.flag}",
            dest=param.flag.replace("-", "_"),
            metavar=param.name,
            help=f"{param.help} [{param.name}, default {param.default!r}]",
        )
    run.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        default=FRAMEWORKS[0],
        help="training framework: PyTorch over the project's data plane, or TensorFlow over tf.data.service (default %(default)s)",
    )
    run.add_argument(
        "--code-dir",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="ship this folder's contents with the step code, at its root (repeatable; deployed: "
        f"{CODE_DIRS_KEY}): your --workload package, and a {REQUIREMENTS} every training host pip-installs",
    )
    run.add_argument("--no-baseline", action="store_true", help="skip the homogeneous baseline [RunBaseline=false]")
    run.add_argument(
        "--param", action="append", default=[], metavar="Name=Value", help="any pipeline parameter (see `hetero params`)"
    )
    run.add_argument("--config", type=Path, help="JSON file of pipeline parameters")
    run.add_argument(
        "--work-dir", type=Path, default=Path("runs"), help="where runs and the local results store live (default runs/)"
    )
    run.add_argument("--sample-images", type=int, default=3000, help="size of the generated dataset when no --input is given")
    run.add_argument("--no-pin", action="store_true", help="do not pin hosts to CPU sets")
    run.add_argument(
        "--spot",
        action="store_true",
        help="compile as deployed with hetero:spot (managed spot training; emulated runs have no spot market)",
    )
    run.add_argument(
        "--network-isolation",
        action="store_true",
        help="compile as deployed with hetero:networkIsolation: the training jobs get the code as an input "
        "channel, and the emulator refuses any s3:// location a container would fetch itself",
    )
    run.add_argument(
        "--interrupt-after-steps",
        type=int,
        metavar="N",
        help="interrupt each training job once at step N as a spot interruption does (SIGTERM to every host), "
        "then restart it from its checkpoints",
    )
    run.add_argument(
        "--link-fault",
        type=LinkFault.parse,
        metavar="SPEC",
        help="degrade the link of each training job's first data host from its start: loss=P%%, delay=Dms (each way) "
        "or both, comma-separated, or cut (every packet dropped, its processes alive); needs root, nft and "
        "iptables (docs/testing.md)",
    )
    run.add_argument(
        "--progress-timeout",
        type=float,
        default=PROGRESS_TIMEOUT_S,
        metavar="SECONDS",
        help="fail a training step none of whose hosts reports progress (a status or metric line) for this long, "
        "naming the hosts that went silent (0: never; default %(default)g)",
    )
    run.add_argument(
        "--volume-scale",
        type=float,
        default=1.0,
        metavar="F",
        help="each GB of a host's volume (VolumeSizeGB, or an instance type's NVMe store) is F GiB on this "
        "machine: a small F shows a full volume without writing gigabytes (default %(default)g)",
    )
    run.add_argument(
        "--prices",
        type=Path,
        metavar="FILE",
        help="JSON price file replacing or extending the bundled prices, "
        'e.g. {"prices": {"ml.g6.xlarge": 1.0}} or what `hetero prices refresh` writes [PriceOverrides]',
    )
    params = sub.add_parser("params", help="list pipeline parameters")
    params.add_argument("--markdown", action="store_true", help=f"print docs/parameters.md instead ({REGENERATE})")
    _remote_parsers(sub)
    _definition_parser(sub)
    _models_parser(sub)
    iam_command.add_parser(sub)
    return parser


def _models_parser(sub) -> None:
    models = sub.add_parser("models", help="registered model packages with their metrics and status; approve or reject one")
    models.add_argument("action", nargs="?", choices=("list", *STATUS), default="list", help="(default %(default)s)")
    models.add_argument("package", nargs="?", metavar="VERSION_OR_ARN", help="the package to approve or reject")
    models.add_argument(
        "--registry",
        default=os.environ.get(REGISTRY_ENV) or default_registry(),
        help=f"a local registry folder, or sagemaker://<model package group> for the deployed one (e.g. {DEPLOYED_EXAMPLE}) "
        f"(default: env {REGISTRY_ENV}, else the local runs' group under runs/registry/)",
    )


def _definition_parser(sub) -> None:
    d = sub.add_parser("definition", help="print the SageMaker pipeline definition JSON (offline; placeholder defaults)")
    d.add_argument("--pipeline-name", default=DEFAULT_PIPELINE_NAME, help="(default %(default)s)")
    d.add_argument(
        "--region",
        default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        help="picks the default images (default: env AWS_REGION, AWS_DEFAULT_REGION or us-east-1)",
    )
    d.add_argument(
        "--role-arn",
        default="arn:aws:iam::123456789012:role/hetero-pipeline",
        help="the jobs' role, every step's RoleArn (default: a placeholder)",
    )
    d.add_argument("--bucket", default="hetero-artifacts-example", help="artifact bucket (default: a placeholder)")
    d.add_argument("--code-uri", help="s3:// URI of the code tar.gz (default s3://<bucket>/<prefix>/code/code.tar.gz)")
    d.add_argument("--prefix", default="hetero", help="key prefix of everything the pipeline writes (default %(default)s)")
    d.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        default=FRAMEWORKS[0],
        help="training framework: picks the shard format and the default images (default %(default)s)",
    )
    d.add_argument(
        "--training-image", help="training image URI (default: the AWS GPU training image of the framework in the region)"
    )
    d.add_argument("--processing-image", help="processing image URI (default: the CPU variant of that image)")
    d.add_argument("--fsx-file-system-id", help="read training shards from this FSx for Lustre file system (jobs run in its VPC)")
    d.add_argument(
        "--fsx-directory-path", default="/fsx/dataset", help="FSx path linked to s3://<bucket>/<prefix>/ (default %(default)s)"
    )
    d.add_argument("--subnet", action="append", help="VPC subnet of FSx jobs (repeatable; default a placeholder)")
    d.add_argument("--security-group", action="append", help="security group of FSx jobs (repeatable; default a placeholder)")
    d.add_argument(
        "--network-isolation",
        action="store_true",
        help="training jobs with EnableNetworkIsolation: the code arrives as the `code` input channel",
    )


def _remote_parsers(sub) -> None:
    pipeline_name = dict(
        default=os.environ.get("HETERO_PIPELINE_NAME", DEFAULT_PIPELINE_NAME),
        help="deployed pipeline (default: env HETERO_PIPELINE_NAME or %(default)s)",
    )
    start = sub.add_parser("start", help="start an execution of the deployed pipeline (parameters: as for run)")
    start.add_argument("--pipeline-name", **pipeline_name)
    start.add_argument(
        "--param", action="append", default=[], metavar="Name=Value", help="override a pipeline parameter (see `hetero params`)"
    )
    start.add_argument("--config", type=Path, help="JSON file of pipeline parameters")
    start.add_argument("--display-name", help="execution display name shown in SageMaker Studio")
    start.add_argument(
        "--prices",
        metavar="FILE_OR_S3_URI",
        help="JSON price file (uploaded beside the pipeline's artifacts) or the s3:// URI of one [PriceOverrides]",
    )
    start.set_defaults(no_baseline=False, **dict.fromkeys(FLAGS))  # so `parameter_layers` reads --param, env and --config alike
    start.add_argument(
        "--apply-plan",
        metavar="EXECUTION_ID",
        help="run with the data group the plan of that execution recommends (its plan.json in --results)",
    )
    start.add_argument(
        "--fallback",
        type=int,
        default=0,
        metavar="N",
        help="with --apply-plan: the plan's candidate N instead of its recommendation (0); when an execution failed "
        "for want of capacity (a step's FailureReason says CapacityError), start again with 1, then 2",
    )
    start.add_argument(
        "--results",
        default=os.environ.get("HETERO_RESULTS_URI"),
        help="results store, s3://bucket/prefix (default: env HETERO_RESULTS_URI)",
    )
    plan = sub.add_parser(
        "plan", help="the cluster runs' measurements recommend: trainer type and count, data group, rate, $/h, cost per epoch"
    )
    plan.add_argument(
        "execution_ids",
        nargs="*",
        metavar="EXECUTION_ID",
        help="a local run's or a deployed execution's id; several: runs of one workload on other GPU types",
    )
    plan.add_argument(
        "--results",
        default=os.environ.get("HETERO_RESULTS_URI") or "runs/results",
        help="results store: s3://bucket/prefix or a local folder (default: env HETERO_RESULTS_URI, else runs/results)",
    )
    plan.add_argument(
        "--metrics",
        metavar="PATH",
        action="append",
        default=[],
        help="plan from this metrics.json (or folder, or model.tar.gz) instead; repeat for runs on other GPU types",
    )
    plan.add_argument(
        "--baseline",
        metavar="PATH",
        help="with --metrics: the homogeneous run's metrics.json, whose measured rate stands for its cluster (else the model's)",
    )
    plan.add_argument("--prices", type=Path, help="JSON price overrides (schema: steps/evaluate/prices.py)")
    plan.add_argument(
        "--streams", type=int, default=1, help="data plane connections per data host and trainer (default %(default)s)"
    )
    plan.add_argument("--max-trainers", type=int, default=4, help="trainer hosts to consider, 1..N (default %(default)s)")
    plan.add_argument("--json", action="store_true", help="print plan.json instead of the table")
    prices = sub.add_parser("prices", help="price tables: `hetero prices refresh` fetches current SageMaker training prices")
    prices_sub = prices.add_subparsers(dest="prices_command", required=True)
    refresh = prices_sub.add_parser("refresh", help="write an override file from the AWS Price List API (pricing:GetProducts)")
    refresh.add_argument("--region", default="us-east-1", help="the region whose prices to fetch (default %(default)s)")
    refresh.add_argument("--output", type=Path, default=Path("prices-override.json"), help="(default %(default)s)")
    report = sub.add_parser("report", help="one HTML page with charts: an execution's results, its plan, and the history")
    report.add_argument("execution_id", nargs="?", metavar="EXECUTION_ID", help="(default: the newest execution in the store)")
    report.add_argument(
        "--results",
        default=os.environ.get("HETERO_RESULTS_URI") or "runs/results",
        help="results store: s3://bucket/prefix or a local folder (default: env HETERO_RESULTS_URI, else runs/results)",
    )
    report.add_argument("--output", type=Path, help="where to write it (default: hetero-report-<execution id>.html)")
    report.add_argument(
        "--registry",
        default=os.environ.get(REGISTRY_ENV),
        help="model registry whose packages the page links, a folder or sagemaker://<group> (default: env "
        f"{REGISTRY_ENV}, else a local results store's own, <work dir>/registry/<group>)",
    )
    executions = sub.add_parser("executions", help="recent executions of the deployed pipeline with their price-performance")
    executions.add_argument("--pipeline-name", **pipeline_name)
    executions.add_argument(
        "--results",
        default=os.environ.get("HETERO_RESULTS_URI"),
        help="results store the Evaluate step writes to, s3://bucket/prefix (default: env HETERO_RESULTS_URI)",
    )
    executions.add_argument("--limit", type=int, default=10, help="newest N executions (default %(default)s, at most 100)")
    executions.add_argument("--details", metavar="EXECUTION_ID", help="print the full price-performance table of one execution")


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


def validate_run(params: dict, code_dirs: tuple[Path, ...] = ()) -> None:
    """What `hetero run` can tell before anything runs: the price file, the instance types' prices, the workload."""
    file = params["PriceOverrides"]
    if file.startswith("s3://"):
        raise UserError(
            f"PriceOverrides {file!r}: hetero run reads a local price file; download it and pass the file",
            headline="bad price file",
        )
    prices = load_prices(file or None)
    for key in ("DataInstanceType", "DnnInstanceType"):
        prices.hourly(params[key])  # an unknown type fails now, not after training
    check_workload(params["Workload"], code_dirs=code_dirs)


def check_workload(module: str, *, code_dirs: tuple[Path, ...] = (), deployed: bool = False) -> None:
    """A workload module that no host could import, or that defines no WORKLOAD, is refused before Shard runs (the hosts
    would find out in training). Hosts import what ships (`pipeline.code`: steps/ and the code folders, plus what a
    requirements.txt installs, which is not known before it runs: a module missing from the files passes then). Found
    by path and read, not imported: the CLI runs none of the user's code."""
    files = shipped_files(code_dirs=code_dirs)
    parts = module.split(".")
    found = None
    if all(part.isidentifier() for part in parts):
        found = files.get(f"{'/'.join(parts)}.py") or files.get(f"{'/'.join(parts)}/__init__.py")
    if found is None and REQUIREMENTS in files:
        return
    if found is None:
        folders = ", ".join(map(str, code_dirs)) or "none"
        ship = (
            f"deploy it with -c {CODE_DIRS_KEY}='[\"DIR\"]' and run hetero start from that folder, whose cdk.json it reads"
            if deployed
            else "ship it with --code-dir DIR"
        )
        near = _importable_from(parts)
        raise UserError(
            f"workload module {module!r} is not in the code the hosts get: no {'/'.join(parts)}.py in "
            f"{STEPS_DIR.name}/ or the code folders ({folders}); {ship}, DIR being the folder that holds "
            f"{parts[0]}/ ({'here: ' + str(near) if near else 'e.g. --workload steps.train.workloads.shapes'})",
            headline="bad workload",
        )
    try:
        tree = ast.parse(found.read_bytes(), filename=str(found))
    except (SyntaxError, ValueError) as exc:
        raise UserError(f"workload module {module!r} ({found}) does not parse: {exc}", headline="bad workload") from None
    if not _binds(tree, "WORKLOAD"):
        raise UserError(
            f"workload module {module!r} ({found}) defines no WORKLOAD: add WORKLOAD = <a subclass of "
            "steps.train.workload.Workload>, or pass another module, e.g. --workload steps.train.workloads.shapes",
            headline="bad workload",
        )


def _importable_from(parts: list[str]) -> Path | None:
    """The folder (the current one, or one on this process's path) from which ``parts`` would import here."""
    if not all(part.isidentifier() for part in parts):
        return None
    for root in (Path.cwd(), *(Path(p) for p in sys.path if p)):
        if Path(root, *parts).with_suffix(".py").is_file() or Path(root, *parts, "__init__.py").is_file():
            return root
    return None


def deployed_code_dirs() -> tuple[Path, ...]:
    """The code folders `cdk deploy` from this folder ships: cdk.json's CODE_DIRS_KEY, relative to it."""
    try:
        context = json.loads(Path("cdk.json").read_text()).get("context", {})
    except (OSError, json.JSONDecodeError):
        return ()
    return tuple(Path(d) for d in context.get(CODE_DIRS_KEY) or ())


def _binds(tree: ast.AST, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[-1]) in (name, "*"):
            return True
    return False


# framework -> (the module its local run needs, the extra of pyproject.toml that installs it)
FRAMEWORK_PACKAGES = {"tensorflow": ("tensorflow", "tensorflow"), "ray": ("ray", "ray")}


def _require_framework(framework: str) -> None:
    """A framework this environment lacks is named with the one command that adds it (`make run` installs PyTorch only)."""
    module, extra = FRAMEWORK_PACKAGES.get(framework, (None, None))
    if module and importlib.util.find_spec(module) is None:
        raise UserError(
            f"--framework {framework}: {module} is not installed in this environment ({sys.prefix}); "
            f'`make run ARGS="--framework {framework}"` installs it (or: {sys.executable} -m pip install '
            f"-c {STEPS_DIR.parent / 'constraints.txt'} -e '{STEPS_DIR.parent}[{extra}]')",
            headline="framework not installed",
        )


def cmd_run(args: argparse.Namespace) -> int:
    STOP.install()  # SIGINT, SIGTERM or SIGHUP end the run at any instant, in one line (`pipeline.stop`)
    STOP.check()  # one came while the CLI loaded, and its raise was lost
    _require_framework(args.framework)
    params = resolve_parameters(*parameter_layers(args))
    validate_run(params, tuple(args.code_dir))
    if args.sample_images < 10:
        raise UserError(f"--sample-images {args.sample_images}: use at least 10", headline="bad option")
    if args.progress_timeout < 0:
        raise UserError(f"--progress-timeout {args.progress_timeout:g}: use seconds > 0, or 0 for never", headline="bad option")
    if args.interrupt_after_steps is not None and args.interrupt_after_steps < 1:
        raise UserError(f"--interrupt-after-steps {args.interrupt_after_steps}: use a step number >= 1", headline="bad option")
    if not 0 < args.volume_scale <= 1:
        raise UserError(f"--volume-scale {args.volume_scale:g}: use a factor above 0 and at most 1", headline="bad option")
    if args.link_fault and (reason := links_unavailable()):
        raise UserError(f"--link-fault: network faults cannot be emulated here: {reason}", headline="bad option")
    options = LocalOptions(
        work_dir=args.work_dir,
        framework=args.framework,
        sample_images=args.sample_images,
        pin_cpus=not args.no_pin,
        spot=args.spot,
        network_isolation=args.network_isolation,
        interrupt_after_steps=args.interrupt_after_steps,
        link_fault=args.link_fault,
        progress_timeout_s=args.progress_timeout or None,
        code_dirs=tuple(args.code_dir),
        volume_scale=args.volume_scale,
    )
    result = LocalRunner(params, options).run()
    STOP.check()  # one came as the run ended, and its raise was lost
    print()
    print(render(result.price_performance))
    print(textwrap.fill(EMULATED, width=110))
    if args.spot:
        print(
            "spot: compiled with managed spot; an emulated job has no spot market, so it is billed its whole training "
            "time (in SageMaker, Evaluate prices each run from its BillableTimeInSeconds)"
        )
    plan_file = result.evaluation_dir / PLAN_FILE
    if plan_file.is_file():
        print(f"plan for the next run: {json.loads(plan_file.read_text())['reason']}")
        print(f"           (from this machine's step times; `hetero plan {result.execution_id}` for the frontier)")
    shard = result.outputs["Shard"]
    manifest = json.loads((shard / MANIFEST_FILE).read_text())
    quarantined = manifest.get("quarantined", 0) + manifest.get("skipped", 0)
    if quarantined:
        print(
            f"\ninput:     {manifest['quarantined']} corrupt file(s) quarantined, {manifest['skipped']} skipped: "
            f"{shard / SHARD_REPORT_FILE}"
        )
    print(f"\nmetrics:   {result.run_dir}/jobs/*/model/{METRICS_FILE}")
    print(f"results:   {result.evaluation_dir / PRICE_PERFORMANCE_FILE}")
    if (result.evaluation_dir / REPORT_FILE).is_file():
        print(f"report:    {result.evaluation_dir / REPORT_FILE}")
    print(f"store:     {result.store_uri}/{result.execution_id}/")
    if result.model_package:
        package = result.model_package
        print(
            f"model:     package {package['ModelPackageVersion']} of {package['ModelPackageGroupName']}, "
            f"{package['ModelApprovalStatus']} (`hetero models --registry {args.work_dir}/registry/"
            f"{package['ModelPackageGroupName']}`)"
        )
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    if args.markdown:
        sys.stdout.write(parameters_markdown(TUNABLES, env_prefix=ENV_PREFIX))
        return 0
    for p in TUNABLES:
        extra = f" (one of {', '.join(map(str, p.choices))})" if p.choices else ""
        print(f"{p.name:<22} {p.default!r:<32} {p.help}{extra}")
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    overrides = {}
    for layer in parameter_layers(args):
        overrides.update(layer)
    if "Workload" in overrides:
        check_workload(str(overrides["Workload"]), code_dirs=deployed_code_dirs(), deployed=True)
    if args.fallback and not args.apply_plan:
        raise UserError(
            f"--fallback {args.fallback} picks a candidate of a plan: add --apply-plan EXECUTION_ID", headline="bad option"
        )
    if args.apply_plan:
        if not args.results:
            raise UserError("--apply-plan needs --results s3://bucket/prefix (or env HETERO_RESULTS_URI)", headline="bad option")
        planned = stored_plan_parameters(args.results, args.apply_plan, args.fallback)
        clash = {k for k in planned if k in overrides and str(overrides[k]) != planned[k]}
        if clash:
            raise UserError(f"--apply-plan sets {', '.join(sorted(clash))}, which you also set: drop one", headline="bad option")
        overrides.update(planned)
    arn, parameters = start_execution(pipeline_name=args.pipeline_name, overrides=overrides, display_name=args.display_name)
    print(f"started execution {execution_id(arn)} of {args.pipeline_name}")
    print(f"  arn:        {arn}")
    sent = ", ".join(f"{p['Name']}={p['Value']}" for p in parameters)
    print(f"  parameters: {sent or 'the deployed defaults'}")
    print(f"  watch:      hetero executions --pipeline-name {args.pipeline_name}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    if args.max_trainers < 1:
        raise UserError(f"--max-trainers {args.max_trainers}: give 1 or more", headline="bad option")
    plan = plan_for(
        execution_ids=args.execution_ids,
        results=args.results,
        metrics_paths=args.metrics,
        baseline_path=args.baseline,
        prices_file=args.prices,
        inputs=Inputs(streams=args.streams),
        max_trainers=args.max_trainers,
    )
    print(json.dumps(plan, indent=2) if args.json else render_plan(plan))
    return 0 if plan.get("recommendation") is not None else 2


def cmd_models(args: argparse.Namespace) -> int:
    registry = open_registry(args.registry)
    if args.action == "list":
        if args.package:
            raise UserError(
                f"`hetero models {args.package}`: write `hetero models approve|reject {args.package}`", headline="bad arguments"
            )
        print("\n".join(package_lines(registry)))
        return 0
    if not args.package:
        raise UserError(
            f"`hetero models {args.action}` needs the package: its version or ARN (`hetero models` lists them)",
            headline="bad arguments",
        )
    print(change_status(registry, args.package, args.action))
    return 0


def cmd_prices(args: argparse.Namespace) -> int:
    doc = refresh_prices(region=args.region, output=args.output)
    print(f"{len(doc['prices'])} training instance types priced for {doc['region']} as of {doc['as_of']}: {args.output}")
    print(f"use it with --prices {args.output} (hetero run, hetero start, hetero plan)")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    execution, page = execution_report(results=args.results, execution_id=args.execution_id, registry=args.registry)
    output = args.output or Path(f"hetero-report-{execution}.html")
    output.write_text(page, encoding="utf-8")
    print(f"report: {output.resolve()}")
    return 0


def cmd_executions(args: argparse.Namespace) -> int:
    if args.details:
        if not args.results:
            raise UserError("--details needs --results s3://bucket/prefix (or env HETERO_RESULTS_URI)", headline="bad option")
        print(f"execution {args.details}")
        print(render(price_performance_of(args.results, args.details)))
        return 0
    executions = list_executions(pipeline_name=args.pipeline_name, results_uri=args.results, limit=args.limit)
    if not executions:
        print(f"no executions of {args.pipeline_name} yet: start one with `hetero start --pipeline-name {args.pipeline_name}`")
    for e in executions:
        print(
            f"{e['id']:<14} {e['status']:<10} {e['start_time']:%Y-%m-%d %H:%M:%SZ}  {_execution_summary(e, args.results)}".rstrip()
        )
    if not args.results:
        print("(no --results or HETERO_RESULTS_URI: price-performance not shown)", file=sys.stderr)
    return 0


def _execution_summary(e: dict, results: str | None) -> str:
    doc = e["price_performance"]
    if doc is None:
        if e["failure_reason"]:
            return e["failure_reason"]
        return "no price_performance.json" if results and e["status"] in FINISHED else ""
    cost = f"${doc['runs']['heterogeneous']['cost_per_100_steps']:.4f}/100 steps"
    if doc.get("speedup") is None:
        return f"no baseline, {cost}"
    return f"speedup {doc['speedup']:.2f}x, improvement {doc['improvement']:.1%}, {cost}"


def cmd_definition(args: argparse.Namespace) -> int:
    from pipeline.sagemaker.definition import DeploySettings, FsxSettings, definition_json  # the SDK is imported only here

    fsx = None
    if args.fsx_file_system_id:
        fsx = FsxSettings(
            file_system_id=args.fsx_file_system_id,
            directory_path=args.fsx_directory_path,
            subnets=tuple(args.subnet or ["subnet-00000000000000000"]),
            security_group_ids=tuple(args.security_group or ["sg-00000000000000000"]),
        )
    settings = DeploySettings(
        pipeline_name=args.pipeline_name,
        region=args.region,
        role_arn=args.role_arn,
        bucket=args.bucket,
        code_uri=args.code_uri or f"s3://{args.bucket}/{args.prefix}/code/code.tar.gz",
        prefix=args.prefix,
        framework=args.framework,
        training_image=args.training_image,
        processing_image=args.processing_image,
        fsx=fsx,
        network_isolation=args.network_isolation,
    )
    sys.stdout.write(definition_json(settings))
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # Ctrl-C or a stop signal (`pipeline.stop`), also one while an error is reported
        print(STOP.line(exc), file=sys.stderr)
        return STOP.exit_code(exc)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {
            "run": cmd_run,
            "params": cmd_params,
            "start": cmd_start,
            "executions": cmd_executions,
            "definition": cmd_definition,
            "plan": cmd_plan,
            "report": cmd_report,
            "prices": cmd_prices,
            "models": cmd_models,
            "iam": iam_command.run,
        }[args.command](args)
    except StepFailed as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2 if exc.user_error else 1
    except HeteroError as exc:
        if isinstance(exc, UserError):
            print(f"error: {exc.one_line()}", file=sys.stderr)
            return 2
        traceback.print_exc()
        return 1
    except OSError as exc:
        storage = storage_error(exc)
        if storage is None:
            raise
        print(f"error: {storage.one_line()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
