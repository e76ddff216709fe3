"""What a network-isolated job may not do: fetch anything from S3 inside its container.

Under ``EnableNetworkIsolation`` a container reaches nothing but its cluster peers: no S3, no
package index. SageMaker itself still provisions input channels and processing inputs (and syncs
checkpoints) from outside the container, so everything a job reads must arrive that way: the
code as the ``code`` channel, shards and the job secret as channels. The training emulator
(`pipeline.emulator.job`) and the processing emulator (`pipeline.emulator.processing`) refuse an isolated
request that names an ``s3://`` location the step code would fetch itself at run time, as the
job would fail (or hang) in SageMaker.
"""

from __future__ import annotations

from steps.common.errors import UserError
from steps.contract import CODE_CHANNEL

S3 = "s3://"


def s3_fetches(fields: dict[str, object]) -> list[str]:
    """``<field> = <value>`` for every string among ``fields`` (in lists too) that names an s3:// location; a JSON
    value that holds one counts as well."""
    found = []
    for name, value in fields.items():
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, str) and S3 in item:
                found.append(f"{name}{f'[{i}]' if isinstance(value, list) else ''} = {item!r}")
    return found


def refuse_s3_fetches(*, step: str, job: str, fields: dict[str, object], fix: str) -> None:
    """Raise a UserError naming every field of an isolated ``job`` that its container would have to fetch from S3."""
    found = s3_fetches(fields)
    if found:
        raise UserError(
            f"step {step}: the {job} has EnableNetworkIsolation, so its container reaches nothing but its cluster "
            f"peers (no S3, no package index), yet it would fetch at run time: {'; '.join(found)}. {fix}",
            headline="isolated job needs the network",
        )


def refuse_training_fetches(request: dict, *, step: str) -> None:
    """`refuse_s3_fetches` for an isolated CreateTrainingJob request: its hyperparameters, environment and entry point."""
    from pipeline.emulator.hosts import CONTAINER_ROOT

    spec = request.get("AlgorithmSpecification", {})
    refuse_s3_fetches(
        step=step,
        job="training job",
        fields={
            **{f"HyperParameters.{k}": v for k, v in request.get("HyperParameters", {}).items()},
            **{f"Environment.{k}": v for k, v in request.get("Environment", {}).items()},
            **{f"AlgorithmSpecification.{k}": spec[k] for k in ("ContainerEntrypoint", "ContainerArguments") if k in spec},
        },
        fix=f"Give the container what it reads as input channels: the code as a {CODE_CHANNEL!r} channel on every instance "
        f"group with sagemaker_submit_directory={CONTAINER_ROOT}input/data/{CODE_CHANNEL}/<file>.tar.gz (what "
        "`hetero run --network-isolation` and hetero:networkIsolation compile), anything else as a channel of its own",
    )
