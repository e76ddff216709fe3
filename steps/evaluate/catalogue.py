"""The instance catalogue: hardware of the SageMaker training instance types the planner may choose.

``catalogue.json`` beside this file holds vCPUs, memory, GPUs (count, model, memory) and network
bandwidth, with its source and date; prices come from the price table (`steps.evaluate.prices`:
bundled, overridden, or refreshed from the AWS Price List API), so a type the table has no price
for is known but never recommended, and the plan lists it as unpriced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from steps.common.errors import UserError
from steps.evaluate.planner import InstanceType
from steps.evaluate.prices import UNDATED, PriceTable

BUNDLED_CATALOGUE = Path(__file__).with_name("catalogue.json")


@dataclass(frozen=True)
class Spec:
    name: str
    vcpus: int
    memory_gib: float
    gpus: int
    gpu_model: str | None
    gpu_memory_gib: float
    network_gbps: float
    network_burst: bool
    instance_storage_gb: int = 0  # NVMe instance store; 0: EBS only (the job's VolumeSizeInGB)


@dataclass(frozen=True)
class Catalogue:
    specs: dict
    source: str
    as_of: str

    def spec(self, name: str) -> Spec:
        try:
            return self.specs[name]
        except KeyError:
            raise UserError(
                f"instance type {name!r} is not in the instance catalogue ({BUNDLED_CATALOGUE.name}); "
                f"known: {', '.join(sorted(self.specs)[:8])}, ...",
                headline="unknown instance type",
            ) from None

    def priced(self, name: str, prices: PriceTable) -> InstanceType | None:
        """The planner's view of ``name`` at its price; None when the price table has none."""
        spec = self.spec(name)
        price = prices.usd_per_hour.get(name)
        if price is None:
            return None
        origin = prices.origin(name)
        assert origin is not None  # a priced type has its price's source
        as_of = origin.as_of
        return InstanceType(
            name,
            spec.vcpus,
            float(price),
            spec.network_gbps,
            spec.gpus,
            spec.network_burst,
            spec.gpu_model,
            price_as_of=None if as_of == UNDATED else as_of,
        )

    def cpu_types(self) -> list[Spec]:
        return [s for s in self.specs.values() if s.gpus == 0]

    def describe(self) -> dict:
        return {"source": self.source, "as_of": self.as_of}


def load_catalogue(path: Path = BUNDLED_CATALOGUE) -> Catalogue:
    doc = json.loads(path.read_text(encoding="utf-8"))
    specs = {name: Spec(name=name, **fields) for name, fields in doc["instance_types"].items()}
    return Catalogue(specs, doc["source"], doc["as_of"])
