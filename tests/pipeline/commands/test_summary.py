"""The table `hetero run` ends with."""

from pipeline.commands.summary import render
from steps.evaluate import pricing
from steps.evaluate.prices import load_prices
from steps.train.core.precision import precision_document
from tests.support.metrics import input_bound_run, metrics


def test_the_table_says_each_runs_precision_and_dashes_a_run_that_did_not_record_it():
    doc = pricing.price_performance(input_bound_run(precision=precision_document("auto", "fp32")), metrics(), load_prices())
    (row,) = [line for line in render(doc).splitlines() if line.startswith("precision")]
    assert row.split() == ["precision", "-", "fp32", "(auto)"]  # baseline, heterogeneous


def test_the_table_says_whether_each_run_compiled_its_step():
    doc = pricing.price_performance(input_bound_run(compile="on"), metrics(compile="off"), load_prices())
    (row,) = [line for line in render(doc).splitlines() if line.startswith("compile")]
    assert row.split() == ["compile", "off", "on"]  # baseline, heterogeneous
    (row,) = [
        line
        for line in render(pricing.price_performance(input_bound_run(), None, load_prices())).splitlines()
        if line.startswith("compile")
    ]
    assert row.split() == ["compile", "-"]  # a metrics.json from before Compile


def test_the_summary_names_each_price_source_with_its_date_and_warns_once_when_one_is_over_a_year_old():
    doc = pricing.price_performance(input_bound_run(), metrics(case="pt_homogeneous"), load_prices())
    lines = render(doc).splitlines()
    priced = [line for line in lines if line.startswith("prices: ")]
    assert priced == [
        f"prices: us-east-1 on-demand as of 2022-10-27 (ml.c5.xlarge, ml.g5.xlarge, ml.p3.2xlarge): {load_prices().source}"
    ]
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert len(warnings) == 1 and "`hetero prices refresh`" in warnings[0]  # the bundled table is from 2022
