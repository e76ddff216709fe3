"""Placeholders the SDK accepts, swapped for the real settings in the parsed definition, and the
one field the SDK cannot take as a parameter (``InstanceGroups[].InstanceCount``)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from pipeline.graph import Graph, Param, TrainingStep
from pipeline.sagemaker.images import REGION
from pipeline.sagemaker.settings import CODE_CHANNEL_DIR, DeploySettings, FsxSettings, code_file

# Placeholders the SDK accepts; replaced by the real settings in the parsed definition.
_ROLE = "arn:aws:iam::000000000000:role/hetero-placeholder-role"
_BUCKET = "hetero-placeholder-bucket"
_CODE_FILE = "hetero-placeholder-code.tar.gz"  # the code's file in an isolated job's code channel
_CODE = f"s3://hetero-placeholder-bucket/hetero-placeholder-code/{_CODE_FILE}"
_PLACEHOLDER_REGION = "xx-heteroplaceholder-1"  # when the region is a token (an environment-agnostic CDK stack)


def placeholder_settings(settings: DeploySettings) -> DeploySettings:
    return replace(
        settings,
        role_arn=_ROLE,
        bucket=_BUCKET,
        code_uri=_CODE,
        fsx=_placeholder_fsx(settings.fsx),
        region=settings.region if REGION.fullmatch(settings.region) else _PLACEHOLDER_REGION,
    )


def _placeholder_fsx(fsx: FsxSettings | None) -> FsxSettings | None:
    if fsx is None:
        return None
    return FsxSettings(
        "fs-00000000placeholder",
        "/placeholder-fsx-path",
        tuple(f"subnet-placeholder{i}" for i in range(len(fsx.subnets))),
        tuple(f"sg-placeholder{i}" for i in range(len(fsx.security_group_ids))),
    )


def substitutions(real: DeploySettings, fake: DeploySettings) -> list[tuple[str, str]]:
    pairs = [(fake.role_arn, real.role_arn), (fake.code_uri, real.code_uri), (fake.bucket, real.bucket)]
    if fake.region != real.region:
        pairs.append((fake.region, real.region))
    if real.network_isolation:  # the code's file name in sagemaker_submit_directory (the whole URI is replaced first)
        pairs.append((f"{CODE_CHANNEL_DIR}/{_CODE_FILE}", f"{CODE_CHANNEL_DIR}/{code_file(real.code_uri)}"))
    if real.fsx and fake.fsx:  # the stand-in settings carry stand-in FSx settings where the real ones have FSx
        pairs += [(fake.fsx.file_system_id, real.fsx.file_system_id), (fake.fsx.directory_path, real.fsx.directory_path)]
        pairs += list(zip(fake.fsx.subnets, real.fsx.subnets)) + list(
            zip(fake.fsx.security_group_ids, real.fsx.security_group_ids)
        )
    return sorted(pairs, key=lambda p: -len(p[0]))  # longest first: the code URI contains the bucket


def substitute(node: Any, pairs: list[tuple[str, str]]) -> Any:
    """Placeholders -> real values in every string of the parsed definition (keys untouched).

    One pass per string, longest placeholder first, so a real value (a CDK token, say) is
    never itself searched for placeholders."""
    lookup = dict(pairs)
    pattern = re.compile("|".join(re.escape(fake) for fake, _ in pairs))

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            return pattern.sub(lambda m: lookup[m.group(0)], value)
        return value

    return walk(node)


def parameterise_instance_counts(definition: dict, graph: Graph) -> None:
    """Replace each placeholder InstanceGroups[].InstanceCount by its graph parameter."""
    steps = {s["Name"]: s for s in _all_steps(definition["Steps"])}
    for spec in graph.steps:
        if not isinstance(spec, TrainingStep):
            continue
        groups = steps[spec.name]["Arguments"]["ResourceConfig"]["InstanceGroups"]
        by_name = {g["InstanceGroupName"]: g for g in groups}
        assert set(by_name) == {g.name for g in spec.groups}, (spec.name, by_name)
        for g in spec.groups:
            by_name[g.name]["InstanceCount"] = {"Get": f"Parameters.{g.count.name}"} if isinstance(g.count, Param) else g.count


def parameterise_volumes(definition: dict, graph: Graph) -> None:
    """Replace each placeholder ResourceConfig.VolumeSizeInGB of a training step by its graph parameter."""
    steps = all_steps(definition)
    for spec in graph.steps:
        if isinstance(spec, TrainingStep) and isinstance(spec.volume_gb, Param):
            steps[spec.name]["Arguments"]["ResourceConfig"]["VolumeSizeInGB"] = {"Get": f"Parameters.{spec.volume_gb.name}"}


def _all_steps(steps: list) -> list:
    """Every step of a definition, those inside condition branches included."""
    found = []
    for step in steps:
        found.append(step)
        if step.get("Type") == "Condition":
            found += _all_steps(step["Arguments"].get("IfSteps", []) + step["Arguments"].get("ElseSteps", []))
    return found


def all_steps(definition: dict) -> dict:
    """Name -> step of a parsed definition, nested branches included."""
    return {s["Name"]: s for s in _all_steps(definition["Steps"])}
