"""Loading the user's workload module by name."""

from __future__ import annotations

import sys
import types

import pytest

from steps.common.errors import UserError
from steps.train.workload import load_workload


def test_workload_errors_name_the_module_and_the_fix(monkeypatch):
    with pytest.raises(UserError, match="cannot import workload module 'no_such.module'"):
        load_workload("no_such.module", {})
    monkeypatch.setitem(sys.modules, "empty_workload", types.ModuleType("empty_workload"))
    with pytest.raises(UserError, match="must define WORKLOAD"):
        load_workload("empty_workload", {})
    with pytest.raises(UserError, match="no option 'colour'.*blur_passes"):
        load_workload("steps.train.workloads.shapes", {"colour": 1})
