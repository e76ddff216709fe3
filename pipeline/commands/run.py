"""`hetero run`: the whole pipeline on an emulated local cluster (`pipeline.local.runner`), and the table it ends with.

hetero run                                  # sample data, 1 data host + 1 trainer, baseline too
hetero run --input ./my_images --data-hosts 2 --dnn-hosts 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

from pipeline.code import CODE_DIRS_KEY, REQUIREMENTS, STEPS_DIR
from pipeline.commands.parameters import parameter_layers
from pipeline.commands.summary import EMULATED, render
from pipeline.commands.workload import check_workload
from pipeline.emulator.failures import PROGRESS_TIMEOUT_S
from pipeline.emulator.links import LinkFault
from pipeline.emulator.links import unavailable as links_unavailable
from pipeline.graph import resolve_parameters
from pipeline.local.runner import LocalRunner
from pipeline.local.settings import LocalOptions
from pipeline.stop import STOP
from steps.common.errors import UserError
from steps.contract import FRAMEWORKS, MANIFEST_FILE, METRICS_FILE, PLAN_FILE, PRICE_PERFORMANCE_FILE, SHARD_REPORT_FILE, TUNABLES
from steps.evaluate.prices import load_prices
from steps.evaluate.report import REPORT_FILE


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    run = sub.add_parser("run", help="run the whole pipeline on an emulated local cluster")
    for param in TUNABLES:
        if not param.flag:
            continue
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
    _emulation_options(run)


def _emulation_options(run) -> None:  # noqa: ANN001 - the run subparser
    """How the emulated cluster runs: as deployed with spot or isolation, faults, watchdog, volumes, prices."""
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


def run(args: argparse.Namespace) -> int:
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
    assert result.price_performance is not None and result.evaluation_dir is not None  # a finished run ran Evaluate
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
