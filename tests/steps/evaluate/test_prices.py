import json
from datetime import date

import pytest

from steps.common.errors import UserError
from steps.evaluate.prices import (
    BUNDLED_PRICES,
    NO_OVERRIDES,
    SCHEMA,
    PriceSource,
    PriceTable,
    load_prices,
    price_lines,
    stale_warning,
)

# Quoted or implied by the AWS heterogeneous-clusters blog (see docs/domain.md).
BLOG_PRICES = {
    "ml.p4d.24xlarge": 37.688,
    "ml.c5.18xlarge": 3.672,
    "ml.c5.9xlarge": 1.836,
    "ml.p3.2xlarge": 3.825,
    "ml.g5.xlarge": 1.408,
    "ml.c5.4xlarge": 0.816,
}


def write(path, doc):
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc, encoding="utf-8")
    return path


@pytest.mark.parametrize(("itype", "usd"), sorted(BLOG_PRICES.items()))
def test_bundled_table_reproduces_blog_prices(itype, usd):
    assert load_prices().hourly(itype) == usd


def test_bundled_table_says_where_prices_come_from():
    table = load_prices()
    assert table.region == "us-east-1"
    assert "pricing" in table.source and "heterogeneous" in table.source
    assert table.as_of[:4].isdigit()
    sources = [{"source": table.source, "as_of": table.as_of, "types": sorted(table.usd_per_hour)}]
    assert table.describe() == {"source": table.source, "as_of": table.as_of, "region": "us-east-1", "sources": sources}
    raw = json.loads(BUNDLED_PRICES.read_text())
    assert raw["currency"] == "USD"
    assert all(k.startswith("ml.") and v > 0 for k, v in raw["prices"].items())


def test_bundled_table_names_its_primary_source_by_address_and_date():
    table = load_prices()
    assert "https://aws.amazon.com/sagemaker/pricing/" in table.source  # AWS's own page, not a third-party table
    assert date.fromisoformat(table.as_of) <= date.today()


def test_override_replaces_and_extends(tmp_path):
    path = write(
        tmp_path / "p.json",
        {"source": "negotiated", "as_of": "2026-11-01", "prices": {"ml.c5.18xlarge": 3.0, "ml.c6i.32xlarge": 6.528}},
    )
    table = load_prices(path)
    assert table.hourly("ml.c5.18xlarge") == 3.0
    assert table.hourly("ml.c6i.32xlarge") == 6.528
    assert table.hourly("ml.p4d.24xlarge") == 37.688  # untouched bundled entry
    assert "negotiated" in table.source and str(path) in table.source


def test_override_for_another_region_replaces_the_whole_table(tmp_path):
    path = write(tmp_path / "p.json", {"region": "eu-west-1", "prices": {"ml.c5.18xlarge": 4.1}})
    table = load_prices(path)
    assert table.region == "eu-west-1"
    assert table.hourly("ml.c5.18xlarge") == 4.1
    with pytest.raises(UserError, match="ml.p4d.24xlarge"):
        table.hourly("ml.p4d.24xlarge")


def test_unknown_type_names_it_suggests_close_matches_and_the_fix():
    with pytest.raises(UserError) as err:
        load_prices().hourly("ml.c5.19xlarge")
    message = err.value.message
    assert "'ml.c5.19xlarge'" in message
    assert "ml.c5.18xlarge" in message  # difflib close match
    assert "--prices" in message and '"prices"' in message
    assert "hetero prices refresh" in message
    assert "\n" not in message


def test_missing_ml_prefix_is_suggested():
    with pytest.raises(UserError, match="close matches: ml.c5.18xlarge"):
        load_prices().hourly("c5.18xlarge")


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("{not json", "not valid JSON"),
        ([1, 2], "JSON object"),
        ({"prices": {}}, "'prices'"),
        ({"source": "x"}, "'prices'"),
        ({"prices": {"ml.c5.xlarge": -1}}, "'ml.c5.xlarge'.*positive"),
        ({"prices": {"ml.c5.xlarge": 0}}, "'ml.c5.xlarge'.*positive"),
        ({"prices": {"ml.c5.xlarge": "0.2"}}, "'ml.c5.xlarge'"),
        ({"prices": {"ml.c5.xlarge": True}}, "'ml.c5.xlarge'"),
        ({"prices": {"c5.xlarge": 0.2}}, "'c5.xlarge'.*ml.c5.18xlarge"),
        ({"region": 7, "prices": {"ml.c5.xlarge": 0.2}}, "'region'"),
        ({"currency": "EUR", "prices": {"ml.c5.xlarge": 0.2}}, "'currency'"),
    ],
)
def test_bad_override_file_names_file_and_key(tmp_path, doc, expected):
    path = write(tmp_path / "bad.json", doc)
    with pytest.raises(UserError, match=expected) as err:
        load_prices(path)
    assert str(path) in err.value.message
    assert SCHEMA in err.value.message  # what a good file looks like, so it can be fixed from the message alone


def test_an_empty_object_overrides_nothing(tmp_path):
    assert load_prices(write(tmp_path / "none.json", NO_OVERRIDES)) == load_prices()


def test_a_folder_holding_one_file_stands_for_it_as_a_processing_input_does(tmp_path):
    folder = tmp_path / "prices"
    folder.mkdir()
    write(folder / "3f2a9c.json", {"prices": {"ml.p9.mega": 99.0}})
    assert load_prices(folder).hourly("ml.p9.mega") == 99.0
    write(folder / "other.json", {"prices": {"ml.p9.mega": 1.0}})
    with pytest.raises(UserError, match="holds 2 files.*must hold exactly one"):
        load_prices(folder)


def test_missing_override_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_prices(tmp_path / "nope.json")


def test_table_is_read_only():
    table = PriceTable({"ml.c5.xlarge": 0.204})
    with pytest.raises(TypeError):
        table.usd_per_hour["ml.c5.xlarge"] = 0


def test_each_price_keeps_its_own_source_and_date_through_an_override(tmp_path):
    path = write(tmp_path / "p.json", {"source": "negotiated", "as_of": "2026-11-01", "prices": {"ml.p4d.24xlarge": 25.25}})
    table = load_prices(path)
    bundled = load_prices()
    assert table.origin("ml.p4d.24xlarge") == PriceSource("negotiated", "2026-11-01")
    assert table.origin("ml.g5.xlarge") == PriceSource(bundled.source, "2022-10-27")
    assert table.origin("ml.nope.xlarge") is None
    by_date = {s["as_of"]: s["types"] for s in table.describe()["sources"]}
    assert by_date["2026-11-01"] == ["ml.p4d.24xlarge"] and "ml.p4d.24xlarge" not in by_date["2022-10-27"]


def test_a_price_older_than_a_year_prints_one_warning_line_with_the_command_that_refreshes_it(tmp_path):
    described = load_prices().describe()  # as of 2022-10-27
    today = date(2026, 11, 27)
    warning = stale_warning(described, {"ml.g5.xlarge", "ml.c5.4xlarge"}, today=today)
    assert warning == (
        "warning: prices as of 2022-10-27 (ml.c5.4xlarge, ml.g5.xlarge) are 4.1 years old: `hetero prices refresh` "
        "fetches current ones into a file to pass with --prices"
    )
    assert stale_warning(described, today=date(2023, 10, 27)) is None  # 365 days: not yet
    lines = price_lines(described, {"ml.g5.xlarge"}, today=today)
    assert lines[0].startswith("prices: us-east-1 on-demand as of 2022-10-27 (ml.g5.xlarge): AWS SageMaker pricing page")
    assert lines[1].startswith("warning: prices as of 2022-10-27 (ml.g5.xlarge)") and len(lines) == 2
    # refreshed prices for the types in use: no warning, each source on its line
    fresh = write(tmp_path / "p.json", {"source": "refresh", "as_of": "2026-11-20", "prices": {"ml.g5.xlarge": 1.006}})
    lines = price_lines(load_prices(fresh).describe(), {"ml.g5.xlarge"}, today=today)
    assert lines == ["prices: us-east-1 on-demand as of 2026-11-20 (ml.g5.xlarge): refresh"]
    # a document from before per-price sources: the table's date alone
    old = {"source": "s", "as_of": "2022-10-27", "region": "us-east-1"}
    assert stale_warning(old, {"ml.g5.xlarge"}, today=today).startswith("warning: prices as of 2022-10-27 are 4.1 years")
    assert stale_warning({**old, "as_of": "unspecified"}, today=today) is None  # no date: nothing to judge
