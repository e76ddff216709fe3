"""`hetero prices refresh` over HTTP: boto3's pricing client against a local endpoint that answers
GetProducts in the Price List API's wire format (JSON 1.1, PriceList of JSON strings, NextToken pages)."""

from __future__ import annotations

import json

import pytest

from pipeline.cli import main
from steps.evaluate.prices import load_prices
from tests.support.aws_endpoint import JsonHandler, aws_endpoint
from tests.support.prices import price_list_row

PAGES = [
    [
        price_list_row("ml.c7i.xlarge", "0.2142000000"),
        price_list_row("ml.c5.xlarge", "0.2040000000"),
        price_list_row("ml.c5.xlarge", "0.2300000000", component="Hosting"),
    ],  # another component: not a training price
    [
        price_list_row("ml.g6.xlarge-Training", "1.1670000000"),
        price_list_row("ml.m5.large", "0.0000000000"),  # $0: free-tier row
        price_list_row("ml.p5.48xlarge", "55.0400000000", unit="Quantity"),
    ],  # not an hourly dimension
]


@pytest.fixture
def price_list(aws_env, monkeypatch):
    requests = []

    class Handler(JsonHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append((self.headers["X-Amz-Target"], body))
            page = int(body.get("NextToken", "0"))
            reply = {"FormatVersion": "aws_v1", "PriceList": PAGES[page]}
            if page + 1 < len(PAGES):
                reply["NextToken"] = str(page + 1)
            self.answer(200, reply)

    with aws_endpoint(Handler, monkeypatch, "AWS_ENDPOINT_URL_PRICING"):
        yield requests


def test_refresh_writes_the_training_prices_of_the_region_as_an_override_file(price_list, tmp_path, capsys):
    output = tmp_path / "prices.json"
    assert main(["prices", "refresh", "--region", "us-east-1", "--output", str(output)]) == 0
    doc = json.loads(output.read_text())
    assert doc["prices"] == {"ml.c5.xlarge": 0.204, "ml.c7i.xlarge": 0.2142, "ml.g6.xlarge": 1.167}
    assert doc["region"] == "us-east-1" and "AWS Price List API" in doc["source"] and doc["as_of"]
    target, body = price_list[0]
    assert target == "AWSPriceListService.GetProducts" and body["ServiceCode"] == "AmazonSageMaker"
    assert {"Type": "TERM_MATCH", "Field": "platoinstancetype", "Value": "Training"} in body["Filters"]
    assert [b.get("NextToken") for _, b in price_list] == [None, "1"]  # every page read
    assert "3 training instance types priced for us-east-1" in capsys.readouterr().out
    # the file is a price override the rest of the tool takes as is
    assert load_prices(output).hourly("ml.c7i.xlarge") == 0.2142


def test_a_region_without_prices_is_a_clear_error(price_list, tmp_path, capsys):
    assert main(["prices", "refresh", "--region", "eu-west-9", "--output", str(tmp_path / "p.json")]) == 2
    assert "no SageMaker training prices for region 'eu-west-9'" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()
