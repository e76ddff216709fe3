"""The auto rule and how a run's precision is reported, framework-free."""

import pytest

from steps.common.metrics_json import precision_label
from steps.train.core.precision import choose, precision_document, precision_line


@pytest.mark.parametrize(
    "gpu,gpu_bf16,expected",
    [(False, False, "fp32"), (True, True, "bf16"), (True, False, "fp16")],
)
def test_auto_takes_bf16_where_the_gpu_has_it_fp16_on_an_older_gpu_and_fp32_on_a_cpu(gpu, gpu_bf16, expected):
    assert choose("auto", gpu=gpu, gpu_bf16=gpu_bf16) == expected


@pytest.mark.parametrize("requested", ["fp32", "bf16", "fp16"])
def test_an_explicit_precision_is_used_on_any_device(requested):
    assert {choose(requested, gpu=g, gpu_bf16=b) for g, b in ((False, False), (True, True), (True, False))} == {requested}


def test_a_run_reports_what_it_used_and_what_was_asked_where_they_differ():
    assert precision_document("auto", "fp32") == {"requested": "auto", "used": "fp32"}
    assert precision_label(precision_document("auto", "fp32")) == "fp32 (auto)"
    assert precision_label(precision_document("bf16", "bf16")) == "bf16"
    assert precision_label(None) == "-"  # a run from before the record
    assert precision_line("algo-1", "auto", "fp32", "cpu") == "[trainer] algo-1: precision fp32 (auto on cpu)"
    assert precision_line("algo-1", "bf16", "bf16", "cpu") == "[trainer] algo-1: precision bf16"
