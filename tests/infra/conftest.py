"""Synthesised stacks shared by the infra tests: FSx off (cdk.json defaults), FSx on, TensorFlow, af-south-1
(a region whose Deep Learning Containers live in another registry account), and an input prefix outside the
artifact prefix.

Each is synthesised once per session, by whichever xdist worker asks first (tests/support/stacks.py), exactly as
`app.py` does it (same context, cdk-nag AwsSolutions through `Validations`); a validation failure is recorded for
`test_stack.py` to report instead of breaking every other test.
"""

from __future__ import annotations

import os

import pytest

from tests.support.stacks import Synthesised, synthesised_once

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")  # the banner names Node 20, nothing else changes


@pytest.fixture(scope="session")
def synth_default(tmp_path_factory) -> Synthesised:
    return synthesised_once(tmp_path_factory)


@pytest.fixture(scope="session")
def synth_fsx(tmp_path_factory) -> Synthesised:
    return synthesised_once(tmp_path_factory, **{"hetero:fsx": True})


@pytest.fixture(scope="session")
def synth_tensorflow(tmp_path_factory) -> Synthesised:
    return synthesised_once(tmp_path_factory, **{"hetero:framework": "tensorflow"})


@pytest.fixture(scope="session")
def synth_af_south(tmp_path_factory) -> Synthesised:
    return synthesised_once(tmp_path_factory, **{"hetero:region": "af-south-1"})


@pytest.fixture(scope="session")
def synth_inputs_apart(tmp_path_factory) -> Synthesised:
    return synthesised_once(tmp_path_factory, **{"hetero:inputPrefix": "incoming/images/"})


@pytest.fixture(scope="session", params=["default", "fsx", "tensorflow"])
def synth_any(request) -> Synthesised:
    """Every variant: for what must hold with FSx on and off, whatever the framework."""
    return request.getfixturevalue(f"synth_{request.param}")
