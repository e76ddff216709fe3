"""The PriceOverrides parameter's default: an S3 object holding ``{}`` (no overrides), deployed as an asset.

The Evaluate step receives its price file as a processing input, and an input's S3Uri cannot be empty: so
the parameter always names an object, and when nobody passes one, this one, which changes nothing. Price files
`hetero start --prices FILE` uploads go beside the pipeline's artifacts (s3://<bucket>/<prefix>/price-overrides/).
"""

from __future__ import annotations

import json
from pathlib import Path

from aws_cdk import Stage
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from steps.evaluate.prices import NO_OVERRIDES

FILE_NAME = "no-price-overrides.json"


class DefaultPriceOverrides(Construct):
    """`s3_url`: the object's s3:// URL (the PriceOverrides default); `asset`: what the role is allowed to read."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        path = Path(Stage.of(self).outdir) / "hetero-build" / FILE_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(NO_OVERRIDES) + "\n", encoding="utf-8")
        self.asset = s3_assets.Asset(self, "Object", path=str(path))
        self.s3_url = f"s3://{self.asset.s3_bucket_name}/{self.asset.s3_object_key}"  # the key in plain text, as for the code
