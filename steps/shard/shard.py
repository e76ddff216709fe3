"""Shard step: turn a class-per-folder image dataset into balanced shards for training.

Three stages, each in its own module: scan (`steps.shard.scan`: find the
class folders and images, decode each, quarantine the bad), plan
(`steps.shard.plan`: ids, stratified split, shard count per data host) and
write (`steps.shard.write`: shards, ``manifest.json``, ``report.json``). This
module runs them in order (`shard_dataset`) and is the step's command line.

Output, in one of two formats with the same samples and manifest (``--format``):
WebDataset tar shards for PyTorch (`steps.formats.webdataset`, the default) or TFRecord
shards for TensorFlow (`steps.formats.tfrecord`, ``.tfrecord`` instead of ``.tar``);
`steps.shard.write` shows the output layout.

Run locally::

    python steps/shard/shard.py --input runs/data/raw --output runs/data/shards --data-hosts 2
    python steps/shard/shard.py --input runs/data/raw --output runs/data/tfrecords --format tfrecord

Run in SageMaker Processing (the `steps` package uploaded as the code folder; the
defaults are Processing's conventional paths)::

    python3 /opt/ml/processing/input/code/steps/shard/shard.py --data-hosts 2 [--format tfrecord]

``--format tfrecord`` needs TensorFlow in the Processing image; tar shards need only Pillow.
Being the pipeline's first job, the step also draws the execution's job secret into
``<output>/secret/job-secret`` (`steps.shard.job_secret`): the training jobs' ``secret`` channel.
On failure, a bad argument included (`steps.common.cli`), the one-line reason goes
to ``<output>/failure`` (and, in a Processing container, to ``/opt/ml/output/message``)
and the exit code is non-zero.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if not __package__:
    # SageMaker Processing runs this file by path, so only its own folder is on
    # sys.path; add the repository root so the `steps` package imports work.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from steps.common.cli import StepArgumentParser, run_step_cli  # noqa: E402
from steps.common.errors import UserError  # noqa: E402
from steps.contract import MANIFEST_FILE, SECRET_CHANNEL, SHARD_REPORT_FILE, TUNABLES_BY_NAME, Tunable  # noqa: E402
from steps.formats.registry import FORMATS  # noqa: E402
from steps.formats.tfrecord import check_tensorflow  # noqa: E402
from steps.shard.job_secret import write_job_secret  # noqa: E402
from steps.shard.plan import assign_ids, deal, plan_shard_count, shuffled, split  # noqa: E402
from steps.shard.scan import LAYOUT_HINT, quarantine_corrupt, scan_input  # noqa: E402
from steps.shard.write import clear_previous_output, report, write_json, write_split  # noqa: E402

DEFAULT_INPUT = "/opt/ml/processing/input/raw"
DEFAULT_OUTPUT = "/opt/ml/processing/output"
SHARD_SIZE = TUNABLES_BY_NAME["ShardSizeMB"]  # --target-shard-mb is that pipeline parameter: its default and bounds


def _bounds(tunable: Tunable) -> tuple[float, float]:
    assert tunable.minimum is not None and tunable.maximum is not None, f"{tunable.name} is declared with both bounds"
    return tunable.minimum, tunable.maximum


MIN_SHARD_MB, MAX_SHARD_MB = _bounds(SHARD_SIZE)
MB = 1024 * 1024


def shard_dataset(
    input_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    target_shard_mb: float = SHARD_SIZE.default,
    data_hosts: int = 1,
    validation_fraction: float = 0.1,
    seed: int = 0,
    shard_format: str = "webdataset",
    input_source: str | None = None,
) -> dict:
    """Validate, split and shard ``input_dir`` into ``output_dir``; return the manifest.

    ``shard_format`` is ``"webdataset"`` (tar) or ``"tfrecord"``. ``input_source``: the input as the user named it
    (an S3 prefix, a folder), which messages name instead of ``input_dir`` when the step reads a copy of it.
    """
    target_bytes = _check_options(target_shard_mb, data_hosts, validation_fraction, shard_format)
    input_dir, output_dir = Path(input_dir), Path(output_dir)
    source = input_source or str(input_dir)
    if output_dir.resolve().is_relative_to(input_dir.resolve()):
        raise UserError(
            f"output folder {output_dir} is inside input folder {source}; "
            "it would be read as a class on the next run, choose another --output"
        )
    classes, candidates, skipped = scan_input(input_dir, source=source)
    clear_previous_output(output_dir)
    quarantined = quarantine_corrupt(candidates, output_dir)
    bad = {q["path"] for q in quarantined}
    items = assign_ids([c for c in candidates if c.rel not in bad])
    if not items:
        raise UserError(
            f"no readable images in {source} ({len(quarantined)} corrupt, {len(skipped)} skipped); {LAYOUT_HINT}",
            headline="empty dataset",
        )
    present = sorted({classes[item.label] for item in items})
    if len(present) < 2:
        raise UserError(
            f"{source} holds readable images of {len(present)} class ({', '.join(present)}): a classifier needs "
            f"at least two, or it trains to 100% accuracy and learns nothing; add one folder per class "
            f"({len(classes)} class folder(s) found, {len(quarantined)} corrupt image(s) quarantined)",
            headline="too few classes",
        )
    train, validation = split(items, validation_fraction, seed)
    if len(train) < data_hosts:
        raise UserError(
            f"{data_hosts} data hosts but only {len(train)} training samples in {source}; lower --data-hosts or add data"
        )
    train_count = plan_shard_count(train, target_bytes, data_hosts, shard_format=shard_format)
    train_groups = deal(shuffled(train, seed), train_count)
    val_groups = deal(validation, plan_shard_count(validation, target_bytes, 1, shard_format=shard_format))
    splits = {
        "train": write_split(output_dir, "train", train_groups, shard_format),
        "validation": write_split(output_dir, "validation", val_groups, shard_format),
    }
    manifest = {
        "format": shard_format,
        "version": 1,
        "classes": classes,
        "target_shard_bytes": target_bytes,
        "data_hosts": data_hosts,
        "splits": splits,
        "quarantined": len(quarantined),
        "skipped": len(skipped),
    }
    write_json(output_dir / MANIFEST_FILE, manifest)
    write_json(output_dir / SHARD_REPORT_FILE, report(source, classes, candidates, train, validation, quarantined, skipped))
    return manifest


def _check_options(target_shard_mb, data_hosts, validation_fraction, shard_format) -> int:
    if not isinstance(shard_format, str) or shard_format not in FORMATS:
        raise UserError(f"--format {shard_format!r} is not a shard format; choose one of {', '.join(FORMATS)}")
    if shard_format == "tfrecord":
        check_tensorflow()
    if not isinstance(target_shard_mb, (int, float)) or not MIN_SHARD_MB <= target_shard_mb <= MAX_SHARD_MB:
        raise UserError(
            f"--target-shard-mb {target_shard_mb!r} is outside the allowed range "
            f"{MIN_SHARD_MB}..{MAX_SHARD_MB} MB (S3 transfers objects of that size best)"
        )
    if isinstance(data_hosts, bool) or not isinstance(data_hosts, int) or data_hosts < 1:
        raise UserError(f"--data-hosts {data_hosts!r} must be an integer >= 1")
    if not isinstance(validation_fraction, (int, float)) or not 0 <= validation_fraction < 1:
        raise UserError(f"--validation-fraction {validation_fraction!r} must be >= 0 and < 1")
    return int(target_shard_mb * MB)


def summary_line(manifest: dict) -> str:
    train, val = manifest["splits"]["train"], manifest["splits"]["validation"]
    return (
        f"shard: {train['samples']} train samples in {len(train['shards'])} shards, "
        f"{val['samples']} validation samples in {len(val['shards'])} shards, "
        f"{manifest['quarantined']} quarantined, {manifest['skipped']} skipped"
    )


# --- command line --------------------------------------------------------------------------


def build_parser() -> StepArgumentParser:
    parser = StepArgumentParser(description="Validate a class-per-folder image dataset and write tar or TFRecord shards.")
    parser.add_argument("--input", default=DEFAULT_INPUT, help="class-per-folder images (default: %(default)s)")
    parser.add_argument(
        "--input-source",
        default=None,
        help="the input as the user named it (the pipeline's InputData), named in messages (default: --input)",
    )
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="shards, manifest, report (default: %(default)s)")
    parser.add_argument(
        "--target-shard-mb",
        type=float,
        default=SHARD_SIZE.default,
        help=f"shard size aim, {MIN_SHARD_MB}..{MAX_SHARD_MB} MB (default: %(default)s)",
    )
    parser.add_argument(
        "--data-hosts", type=int, default=1, help="train shard count is a multiple of this (default: %(default)s)"
    )
    parser.add_argument("--validation-fraction", type=float, default=0.1, help="per class (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="split and shuffle seed (default: %(default)s)")
    parser.add_argument(
        "--format",
        dest="shard_format",
        choices=list(FORMATS),
        default="webdataset",
        help="webdataset tar shards (PyTorch) or tfrecord (TensorFlow) (default: %(default)s)",
    )
    return parser


def _step(args) -> None:
    manifest = shard_dataset(
        args.input,
        args.output,
        target_shard_mb=args.target_shard_mb,
        data_hosts=args.data_hosts,
        validation_fraction=args.validation_fraction,
        seed=args.seed,
        shard_format=args.shard_format,
        input_source=args.input_source,
    )
    write_job_secret(Path(args.output) / SECRET_CHANNEL)  # fresh each run: this execution's data-plane secret
    print(summary_line(manifest), flush=True)


def main(argv: list[str] | None = None) -> int:
    return run_step_cli(build_parser(), _step, argv)


if __name__ == "__main__":
    sys.exit(main())
