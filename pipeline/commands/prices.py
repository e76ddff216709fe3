"""`hetero prices refresh`: SageMaker training on-demand prices from the AWS Price List API, into an override file.

GetProducts (service code AmazonSageMaker) lists one product per instance type, region and
SageMaker component; training rows carry ``platoinstancetype = Training`` and an on-demand term
priced in ``Hrs``. The file written has the schema of `steps.evaluate.prices` overrides, so
``hetero run --prices``, ``hetero start --prices`` (which uploads it: the PriceOverrides pipeline
parameter is its S3 URI), ``hetero plan --prices`` and ``evaluate.py --prices`` take it as is. The
Price List API answers in us-east-1 (and a few other regions) whatever region it is asked about.
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from steps.common.errors import UserError

if TYPE_CHECKING:
    from botocore.client import BaseClient

PRICE_LIST_REGION = "us-east-1"


def fetch_training_prices(client: BaseClient, region: str) -> dict[str, float]:
    """USD per instance-hour of every SageMaker training instance type ``region`` lists."""
    prices: dict[str, float] = {}
    pages = client.get_paginator("get_products").paginate(
        ServiceCode="AmazonSageMaker",
        FormatVersion="aws_v1",
        Filters=[
            {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
            {"Type": "TERM_MATCH", "Field": "platoinstancetype", "Value": "Training"},
        ],
    )
    for page in pages:
        for raw in page.get("PriceList", []):
            product = json.loads(raw)
            attributes = product.get("product", {}).get("attributes", {})
            if attributes.get("platoinstancetype") != "Training" or attributes.get("regionCode") != region:
                continue
            instance_type = attributes.get("instanceType", "").split("-")[0]  # some rows say "ml.x.y-Training"
            if not instance_type.startswith("ml."):
                continue
            for term in product.get("terms", {}).get("OnDemand", {}).values():
                for dimension in term.get("priceDimensions", {}).values():
                    usd = float(dimension.get("pricePerUnit", {}).get("USD", 0) or 0)
                    if dimension.get("unit") == "Hrs" and usd > 0:  # $0 rows are free-tier placeholders
                        prices[instance_type] = usd
    return prices


def refresh(*, region: str, output: Path, client: BaseClient | None = None) -> dict:
    """Write the override file for ``region`` to ``output``; returns it."""
    if client is None:
        import boto3

        client = boto3.client("pricing", region_name=PRICE_LIST_REGION)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        prices = fetch_training_prices(client, region)
    except (BotoCoreError, ClientError) as exc:
        raise UserError(
            f"the AWS Price List API refused or failed: {exc}; it needs credentials allowed pricing:GetProducts",
            headline="price refresh failed",
        ) from None
    if not prices:
        raise UserError(
            f"the Price List API lists no SageMaker training prices for region {region!r}: check the region name",
            headline="price refresh failed",
        )
    doc = {
        "source": f"AWS Price List API (pricing:GetProducts, AmazonSageMaker, platoinstancetype=Training, regionCode={region})",
        "as_of": date.today().isoformat(),
        "region": region,
        "currency": "USD",
        "unit": "instance-hour",
        "prices": dict(sorted(prices.items())),
    }
    output.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return doc


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    prices = sub.add_parser("prices", help="price tables: `hetero prices refresh` fetches current SageMaker training prices")
    prices_sub = prices.add_subparsers(dest="prices_command", required=True)
    refresh = prices_sub.add_parser("refresh", help="write an override file from the AWS Price List API (pricing:GetProducts)")
    refresh.add_argument("--region", default="us-east-1", help="the region whose prices to fetch (default %(default)s)")
    refresh.add_argument("--output", type=Path, default=Path("prices-override.json"), help="(default %(default)s)")


def run(args: argparse.Namespace) -> int:
    doc = refresh(region=args.region, output=args.output)
    print(f"{len(doc['prices'])} training instance types priced for {doc['region']} as of {doc['as_of']}: {args.output}")
    print(f"use it with --prices {args.output} (hetero run, hetero start, hetero plan)")
    return 0
