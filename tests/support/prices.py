"""AWS Price List rows and the price file `hetero prices refresh` writes from them."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.code import STEPS_DIR
from pipeline.commands.prices import refresh


def price_list_row(
    instance_type: str, usd: str, *, component: str = "Training", region: str = "us-east-1", unit: str = "Hrs"
) -> str:
    """One PriceList entry as the API returns it (abridged to the fields a SageMaker ML Instance row carries)."""
    sku = f"SKU{abs(hash((instance_type, component, region))) % 10**8:08d}"
    return json.dumps(
        {
            "product": {
                "productFamily": "ML Instance",
                "sku": sku,
                "attributes": {
                    "servicecode": "AmazonSageMaker",
                    "location": "US East (N. Virginia)",
                    "locationType": "AWS Region",
                    "regionCode": region,
                    "instanceType": instance_type,
                    "vCpu": "4",
                    "memory": "8 GiB",
                    "physicalGpu": "N/A",
                    "gpuMemory": "N/A",
                    "platoinstancetype": component,
                    "usagetype": f"USE1-{component[:5]}:{instance_type}",
                    "operation": "RunInstance",
                    "servicename": "Amazon SageMaker",
                },
            },
            "serviceCode": "AmazonSageMaker",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "offerTermCode": "JRTCKXETXF",
                        "sku": sku,
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "termAttributes": {},
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                                "unit": unit,
                                "beginRange": "0",
                                "endRange": "Inf",
                                "description": f"${usd} per {component} {instance_type} instance hour",
                                "appliesTo": [],
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                    }
                }
            },
            "version": "20261101000000",
            "publicationDate": "2026-11-01T00:00:00Z",
        }
    )


def refreshed_price_file(path: Path, count: int = 100, prices: dict | None = None) -> Path:
    """The file `hetero prices refresh` writes, for ``count`` training instance types (a real region lists about 100:
    several KB), written by the command's own code from Price List rows; ``prices`` sets some of them."""
    catalogue = json.loads((Path(STEPS_DIR) / "evaluate" / "catalogue.json").read_text())["instance_types"]
    types = (list(catalogue) + [f"ml.x{i}.{size}" for i in range(count) for size in ("xlarge", "2xlarge")])[:count]
    usd = {t: round(0.1 + 0.37 * i, 4) for i, t in enumerate(types)} | (prices or {})
    rows = [price_list_row(t, f"{v:.10f}") for t, v in usd.items()]

    class Client:  # GetProducts, one page
        def get_paginator(self, name):
            return self

        def paginate(self, **kwargs):
            return [{"PriceList": rows}]

    refresh(region="us-east-1", output=path, client=Client())
    return path
