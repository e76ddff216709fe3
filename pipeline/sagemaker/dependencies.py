"""Every read of another step's output is a dependency: a step that reads where another step's job writes must wait
for it (`validate_dependencies`), since SageMaker starts every step whose dependencies are met, side by side.

The walk over a definition's steps and members it needs is shared with the request checks (`pipeline.sagemaker.validation`).
"""

from __future__ import annotations

from collections.abc import Iterator

from steps.common.errors import InternalError

EXECUTION_ID = "{Execution.PipelineExecutionId}"  # the execution id in a location written out (`_written_out`)


def validate_dependencies(definition: dict) -> None:
    """Raise `InternalError` where a step of ``definition`` reads the location another step's job writes (its
    ProcessingOutputConfig, OutputDataConfig or CheckpointConfig) without that step upstream of it. SageMaker starts
    every step whose dependencies are met, side by side: only a property reference (``Get: Steps.X...``, a JsonGet
    of X's property file) or DependsOn, directly or through the steps between, makes a step wait for X. A path built
    from the execution id and X's prefix (a Std:Join, an FSx directory path) makes it wait for nothing."""
    steps = steps_in_order(definition.get("Steps", []))
    parents = {child["Name"]: s["Name"] for s in steps if s.get("Type") == "Condition" for child in _branches(s)}
    direct = {s["Name"]: _direct_dependencies(s, parents) for s in steps}
    writes = {s["Name"]: [_location_key(w) for w in _written(s)] for s in steps}
    problems = []
    for step in steps:
        name, upstream = step["Name"], _closure(step["Name"], direct)
        for where, text in _strings(_own_arguments(step), ("Arguments",)):
            for writer, keys in writes.items():
                if writer != name and writer not in upstream and any(_under(text, key) for key in keys):
                    problems.append(
                        f"step {name} reads {member_name(where)} ({text}), where step {writer} writes, without depending on "
                        f"{writer}: SageMaker may start {name} before {writer} has written it. Add {writer!r} to {name}'s "
                        f"DependsOn (depends_on in pipeline/graph.py), or read it as {writer}'s output (an Output of the graph)"
                    )
    if problems:
        raise InternalError("; ".join(problems), headline="unordered read")


def _branches(condition: dict) -> list:
    args = condition.get("Arguments", {})
    return args.get("IfSteps", []) + args.get("ElseSteps", [])


def _own_arguments(step: dict) -> dict:
    """A step's arguments, a condition's branches left out (each branch step is a step of its own)."""
    args = step.get("Arguments", {})
    return {k: v for k, v in args.items() if k not in ("IfSteps", "ElseSteps")} if step.get("Type") == "Condition" else args


def _direct_dependencies(step: dict, parents: dict) -> set[str]:
    """What the service waits for before it starts ``step``: the steps its properties come from, DependsOn, and the
    condition step whose branch holds it."""
    from pipeline import expressions

    found = expressions.reads(_own_arguments(step)) | set(step.get("DependsOn", []))
    return found | ({parents[step["Name"]]} if step["Name"] in parents else set())


def _closure(name: str, direct: dict) -> set[str]:
    found: set[str] = set()
    todo = list(direct.get(name, ()))
    while todo:
        step = todo.pop()
        if step not in found:
            found.add(step)
            todo += direct.get(step, ())
    return found


def _written(step: dict) -> list:
    """The locations ``step``'s job writes, as expressions of the definition."""
    args = step.get("Arguments", {})
    found = [o["S3Output"]["S3Uri"] for o in args.get("ProcessingOutputConfig", {}).get("Outputs", []) if "S3Output" in o]
    found += [args["OutputDataConfig"]["S3OutputPath"]] if "OutputDataConfig" in args else []
    found += [args["CheckpointConfig"]["S3Uri"]] if "CheckpointConfig" in args else []
    return [text for text in map(_written_out, found) if text]


def _location_key(location: str) -> str:
    """What any path into ``location`` holds: from the execution id on (a file system linked to the bucket sees the
    same keys under another root), or all of it where the location is the same for every execution."""
    return location[location.index(EXECUTION_ID) :] if EXECUTION_ID in location else location


def _under(text: str, key: str) -> bool:
    """Whether ``text`` holds the path ``key``, whole or as a folder of it."""
    start = text.find(key)
    while start >= 0:
        end = start + len(key)
        if end == len(text) or text[end] == "/" or key.endswith("/"):
            return True
        start = text.find(key, start + 1)
    return False


def _written_out(node) -> str | None:
    """A string expression as text, each value read from elsewhere as ``{Get's path}``; None for anything else."""
    if isinstance(node, str):
        return node
    if isinstance(node, bool | int | float):
        return as_text(node)
    if not isinstance(node, dict) or len(node) != 1:
        return None
    ((kind, body),) = node.items()
    if kind == "Get" and isinstance(body, str):
        return "{" + body + "}"
    if kind == "Std:Join":
        parts = [_written_out(v) for v in body.get("Values", [])]
        return None if None in parts else body.get("On", "").join(parts)
    if kind == "Std:JsonGet":
        return "{Std:JsonGet}"
    return None


def _strings(node, where: tuple) -> Iterator[tuple[tuple, str]]:
    """Every string of ``node`` (an expression counts as one), with its path."""
    text = _written_out(node)
    if text is not None:
        yield where, text
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, (*where, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, (*where, i))


def steps_in_order(steps: list) -> list:
    """Every step, condition branches included, in definition order."""
    found = []
    for step in steps:
        found.append(step)
        if step.get("Type") == "Condition":
            args = step.get("Arguments", {})
            found += steps_in_order(args.get("IfSteps", []) + args.get("ElseSteps", []))
    return found


def member_name(where: tuple) -> str:
    text = ""
    for key in where:
        text += (
            f"[{key}]" if isinstance(key, int) else (f".{key}" if text and key.isidentifier() else f"[{key!r}]" if text else key)
        )
    return text


def as_text(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
