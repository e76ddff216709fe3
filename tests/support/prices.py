"""The price file `hetero prices refresh` writes, as the tests build it."""

from __future__ import annotations

from pathlib import Path

from pipeline.code import STEPS_DIR


def refreshed_price_file(path: Path, count: int = 100, prices: dict | None = None) -> Path:
    """The file `hetero prices refresh` writes, for ``count`` training instance types (a real region lists about 100:
    several KB), written by the command's own code from Price List rows; ``prices`` sets some of them."""
    import json

    from pipeline.price_refresh import refresh
    from tests.pipeline.test_price_refresh import _product

    catalogue = json.loads((Path(STEPS_DIR) / "evaluate" / "catalogue.json").read_text())["instance_types"]
    types = (list(catalogue) + [f"ml.x{i}.{size}" for i in range(count) for size in ("xlarge", "2xlarge")])[:count]
    usd = {t: round(0.1 + 0.37 * i, 4) for i, t in enumerate(types)} | (prices or {})
    rows = [_product(t, f"{v:.10f}") for t, v in usd.items()]

    class Client:  # GetProducts, one page
        def get_paginator(self, name):
            return self

        def paginate(self, **kwargs):
            return [{"PriceList": rows}]

    refresh(region="us-east-1", output=path, client=Client())
    return path
