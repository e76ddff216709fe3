"""The local runner's order: one step at a time, the first ready step in definition order or, told so, the last. Both are
orders the service may take (it starts every ready step at once), so an order the code relies on is in the graph."""

from __future__ import annotations

import pytest

pytest.importorskip("sagemaker.core", reason="the cloud extra (SageMaker SDK v3) is not installed")

from pipeline.local.runner import _flatten, _ready, _upstream, next_ready  # noqa: E402
from pipeline.local.settings import LocalOptions  # noqa: E402
from pipeline.sagemaker.definition import all_steps  # noqa: E402
from steps.common.errors import UserError  # noqa: E402
from tests.support.deploy import CONCRETE_SETTINGS  # noqa: E402


def _planned(definition: dict, order: str) -> list[str]:
    """The order the runner takes the steps in, every step run (both branches of each condition taken)."""
    steps, parents = _flatten(definition["Steps"])
    done: set[str] = set()
    taken = []
    while steps:
        step = next_ready(steps, lambda s: _ready(s, parents, done, []), order)
        assert step is not None, [s["Name"] for s in steps]
        steps.remove(step)
        done.add(step["Name"])
        taken.append(step["Name"])
    return taken


def _before(order: list[str], first: str, then: str) -> bool:
    return order.index(first) < order.index(then)


def test_the_check_waits_for_the_registration_in_the_definition(compile_once):
    """A failing CheckImprovement ends the execution: the definition makes it wait for RegisterModel."""
    steps = all_steps(compile_once(CONCRETE_SETTINGS))
    assert steps["CheckImprovement"]["DependsOn"] == ["RegisterModel"]


@pytest.mark.parametrize("order", ["definition", "reversed"])
def test_each_order_runs_every_step_after_its_dependencies(order, compile_once):
    definition = compile_once(CONCRETE_SETTINGS)
    steps, parents = _flatten(definition["Steps"])
    taken = _planned(definition, order)
    assert sorted(taken) == sorted(s["Name"] for s in steps)
    for step in steps:
        assert all(_before(taken, d, step["Name"]) for d in _upstream(step, parents)), (step["Name"], taken)
    assert _before(taken, "RegisterModel", "CheckImprovement")


def test_the_reversed_order_differs_from_the_definition_order(compile_once):
    definition = compile_once(CONCRETE_SETTINGS)
    first, last = _planned(definition, "definition"), _planned(definition, "reversed")
    assert first != last
    assert _before(first, "TrainHeterogeneous", "TrainBaseline") and _before(last, "TrainBaseline", "TrainHeterogeneous")
    assert _before(first, "CheckParameters", "RunBaselineGate") and _before(last, "RunBaselineGate", "CheckParameters")


def test_without_its_depends_on_the_check_could_end_the_execution_before_the_registration(compile_once):
    """What the DependsOn is for: the reversed order, a legal one, would take the check first."""
    definition = compile_once(CONCRETE_SETTINGS)
    del all_steps(definition)["CheckImprovement"]["DependsOn"]
    assert _before(_planned(definition, "reversed"), "CheckImprovement", "RegisterModel")


def test_an_unknown_order_is_refused():
    with pytest.raises(UserError, match="order 'random': one of definition, reversed"):
        LocalOptions(order="random")
