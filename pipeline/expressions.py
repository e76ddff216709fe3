"""Pipeline-definition expressions, evaluated the way the service evaluates them.

``{"Get": "Parameters.X"}``, ``{"Get": "Execution.PipelineExecutionId"}``, ``{"Get": "Steps.S.<property
path>"}``, ``{"Std:Join": ...}``, ``{"Std:JsonGet": ...}`` and condition objects, over a definition as
deployed (JSON), so the local runner executes exactly what SageMaker would.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from steps.common.errors import InternalError, UserError

_TOKEN = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\['([^']*)'\]")


@dataclass
class Scope:
    parameters: dict
    execution: dict  # PipelineExecutionId, PipelineExecutionArn, PipelineName
    steps: dict = field(default_factory=dict)  # step name -> its Describe* response (properties)
    property_files: dict = field(default_factory=dict)  # step name -> {file name: {"OutputName", "FilePath"}}
    read_json: Callable[[str], Any] | None = None  # S3 URI -> parsed JSON (who evaluates Std:JsonGet sets it)


def evaluate(node: Any, scope: Scope) -> Any:  # JSON in, JSON out
    """A request (or any part of a definition) with every expression replaced by its value."""
    if isinstance(node, list):
        return [evaluate(v, scope) for v in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Get"}:
        return get(node["Get"], scope)
    if set(node) == {"Std:Join"}:
        join = node["Std:Join"]
        return join["On"].join(text(evaluate(v, scope)) for v in join["Values"])
    if set(node) == {"Std:JsonGet"}:
        return _json_get(node["Std:JsonGet"], scope)
    return {k: evaluate(v, scope) for k, v in node.items()}


def text(value: object) -> str:
    """How the service writes a value into a string: booleans lower-case, numbers as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def get(path: str, scope: Scope) -> Any:
    head, _, rest = path.partition(".")
    if head == "Parameters":
        if rest not in scope.parameters:
            raise InternalError(f"the definition reads parameter {rest!r}, which it does not declare")
        return scope.parameters[rest]
    if head == "Execution":
        return scope.execution[rest]
    if head == "Steps":
        step, _, prop = rest.partition(".")
        if step not in scope.steps:
            raise InternalError(f"{path}: step {step} has not run")
        return lookup(scope.steps[step], prop, what=path)
    raise InternalError(f"unsupported expression {{'Get': {path!r}}}")


def lookup(document: Any, prop: str, *, what: str) -> Any:
    """A property path (``A.B['name'].C[0]``) in a Describe* response; a list is indexed by an
    element's ``...Name`` field, as the SDK's property lists are."""
    value = document
    for name, index, key in _TOKEN.findall(prop):
        if name:
            value = value.get(name) if isinstance(value, dict) else None
        elif index:
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else None
        else:
            value = _named(value, key)
        if value is None:
            raise InternalError(f"{what}: no such property")
    return value


def _named(items, key: str):
    if isinstance(items, dict):
        return items.get(key)
    for item in items or []:
        if any(k.endswith("Name") and v == key for k, v in item.items()):
            return item
    return None


def _json_get(spec: dict, scope: Scope):
    ref = spec["PropertyFile"]["Get"]  # Steps.<step>.PropertyFiles.<name>
    _, step, _, name = ref.split(".", 3)
    prop = scope.property_files[step][name]
    output = lookup(scope.steps[step], f"ProcessingOutputConfig.Outputs['{prop['OutputName']}'].S3Output.S3Uri", what=ref)
    assert scope.read_json is not None, f"{ref}: a scope that reads property files needs read_json"
    document = scope.read_json(f"{output.rstrip('/')}/{prop['FilePath']}")
    try:
        return lookup(document, spec["Path"], what=f"{ref} {spec['Path']}")
    except InternalError:
        raise UserError(f"{prop['FilePath']} of step {step} has no {spec['Path']!r}", headline="property file") from None


_COMPARE = {
    "Equals": lambda a, b: a == b,
    "GreaterThan": lambda a, b: a > b,
    "GreaterThanOrEqualTo": lambda a, b: a >= b,
    "LessThan": lambda a, b: a < b,
    "LessThanOrEqualTo": lambda a, b: a <= b,
}


def holds(condition: dict, scope: Scope) -> bool:
    kind = condition["Type"]
    if kind in _COMPARE:
        left, right = evaluate(condition["LeftValue"], scope), evaluate(condition["RightValue"], scope)
        if left is None or right is None:
            return False
        return _COMPARE[kind](left, right)
    if kind == "Or":
        return any(holds(c, scope) for c in condition["Conditions"])
    if kind == "Not":
        return not holds(condition["Expression"], scope)
    if kind == "In":
        return evaluate(condition["QueryValue"], scope) in evaluate(condition["Values"], scope)
    raise InternalError(f"condition type {kind} is not supported by the local runner")


def reads(node: Any) -> set[str]:
    """Names of the steps whose properties ``node`` reads."""
    found: set[str] = set()
    if isinstance(node, list):
        for v in node:
            found |= reads(v)
    elif isinstance(node, dict):
        target = node.get("Get")
        if isinstance(target, str) and target.startswith("Steps."):
            found.add(target.split(".")[1])
        for v in node.values():
            found |= reads(v)
    return found
