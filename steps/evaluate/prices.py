"""SageMaker on-demand training prices (USD per instance-hour), bundled and overridable.

The bundled table (``prices.json`` beside this file) holds us-east-1 list
prices that reproduce the AWS heterogeneous-clusters blog tables. Prices
change, and yours may be negotiated, so an override file with the same schema
replaces or extends entries::

    {"source": "our EDP rates", "as_of": "2026-11-01", "region": "us-east-1",
     "prices": {"ml.c5.18xlarge": 3.1, "ml.c6i.32xlarge": 6.528}}

Only ``prices`` is required in an override. An override for another region
replaces the whole table: us-east-1 prices say nothing about eu-west-1. An empty
object, ``{}``, overrides nothing (the PriceOverrides parameter's default object holds it).
A folder holding one JSON file stands for that file (a processing job's input).

Each price keeps its own source and date (`PriceTable.origins`): an override's entries carry the
override's, the rest the bundled table's. Plans and summaries show them, and a price older than
`STALE_AFTER_DAYS` prints one warning line naming `REFRESH`, the command that fetches current ones.

    >>> from steps.evaluate.prices import load_prices
    >>> load_prices().hourly("ml.p4d.24xlarge")
    37.688
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from types import MappingProxyType
from typing import Literal, overload

from steps.common.errors import UserError

BUNDLED_PRICES = Path(__file__).with_name("prices.json")

_OVERRIDE_HINT = (
    "add it with an override file: `hetero prices refresh` writes one with every training type's price, or pass "
    "--prices my-prices.json containing "
    '{{"prices": {{"{itype}": <USD per hour>}}}} (see steps/evaluate/prices.py)'
)

# what every schema error shows, so a bad file can be fixed from the message alone
SCHEMA = (
    'expected a JSON object {"prices": {"ml.<type>": <USD per hour>, ...}} with optional "source", "as_of", '
    '"region" (non-empty strings) and "currency": "USD", as `hetero prices refresh` writes it (steps/evaluate/prices.py)'
)
NO_OVERRIDES: dict = {}  # the override document that changes nothing
# AWS changes list prices, GPU types most (its pricing-page data for Studio notebooks shows ml.p4d.24xlarge cut from
# 37.69 to 25.25 $/h in mid-2025): a price older than this says so
STALE_AFTER_DAYS = 365
REFRESH = "hetero prices refresh"
UNDATED = "unspecified"


@dataclass(frozen=True)
class PriceSource:
    """Where a price comes from, and the date it was true."""

    source: str
    as_of: str = UNDATED

    def age_days(self, today: date | None = None) -> int | None:
        """Days from ``as_of`` to ``today``; None when the date is not an ISO date."""
        try:
            return ((today or date.today()) - date.fromisoformat(self.as_of)).days
        except ValueError:
            return None


@dataclass(frozen=True)
class PriceTable:
    """USD per instance-hour by SageMaker instance type, plus where they came from."""

    usd_per_hour: Mapping[str, float]
    source: str = "unspecified"
    as_of: str = "unspecified"
    region: str = "us-east-1"
    files: tuple[str, ...] = field(default=())
    origins: Mapping[str, PriceSource] = field(default_factory=dict)  # each price's own; default: the table's

    def __post_init__(self) -> None:
        # Read-only so a table shared between runs cannot be edited by one of them.
        object.__setattr__(self, "usd_per_hour", MappingProxyType(dict(self.usd_per_hour)))
        own = PriceSource(self.source, self.as_of)
        origins = {name: self.origins.get(name, own) for name in self.usd_per_hour}
        object.__setattr__(self, "origins", MappingProxyType(origins))

    def origin(self, instance_type: str) -> PriceSource | None:
        """The source and date of ``instance_type``'s price; None when the table has none."""
        return self.origins.get(instance_type)

    def hourly(self, instance_type: str) -> float:
        """On-demand USD per hour for one instance; UserError naming the type if unknown."""
        try:
            return self.usd_per_hour[instance_type]
        except (KeyError, TypeError):
            raise UserError(self._unknown(instance_type)) from None

    def describe(self) -> dict:
        """Provenance written next to every computed cost: the table's, and each source with its date and the types it
        prices (an override's entries, then the rest)."""
        by_source: dict[PriceSource, list[str]] = {}
        for name, origin in sorted(self.origins.items()):
            by_source.setdefault(origin, []).append(name)
        sources = [{"source": o.source, "as_of": o.as_of, "types": names} for o, names in by_source.items()]
        return {"source": self.source, "as_of": self.as_of, "region": self.region, "sources": sources}

    def _unknown(self, instance_type) -> str:
        close = difflib.get_close_matches(str(instance_type), list(self.usd_per_hour), n=3, cutoff=0.6)
        hint = f"close matches: {', '.join(close)}" if close else "no close match"
        return f"no {self.region} price for instance type {instance_type!r} ({hint}); " + _OVERRIDE_HINT.format(
            itype=instance_type
        )


def load_prices(override_path: str | Path | None = None) -> PriceTable:
    """The bundled table, with entries from the override file ``override_path`` (or the one JSON file in that
    folder) replacing or extending it; an override document ``{}`` changes nothing."""
    bundled = _read_table(BUNDLED_PRICES, require_provenance=True)
    if override_path is None:
        return bundled
    override = _read_table(_override_file(Path(override_path)), require_provenance=False)
    if override is None:
        return bundled
    if override.region != bundled.region:
        return override
    return PriceTable(
        usd_per_hour={**bundled.usd_per_hour, **override.usd_per_hour},
        source=f"{bundled.source}; overridden by {override_path} ({override.source})",
        as_of=f"{bundled.as_of}; override {override.as_of}",
        region=bundled.region,
        files=bundled.files + override.files,
        origins={**bundled.origins, **override.origins},
    )


def price_lines(described: Mapping, types: Iterable[str] | None = None, today: date | None = None) -> list[str]:
    """One line per price source of ``described`` (`PriceTable.describe`) that priced any of ``types`` (None: all),
    with its date and those types, then `stale_warning`'s line if any."""
    wanted = set(types) if types is not None else None
    region = described.get("region", "?")
    lines = []
    for entry in described.get("sources") or [{**described, "types": None}]:
        names = entry.get("types")
        named = names if wanted is None or names is None else [n for n in names if n in wanted]
        if named is not None and not named:
            continue
        which = "" if named is None else f" ({', '.join(named)})" if len(named) <= 3 else f" ({len(named)} types)"
        lines.append(f"prices: {region} on-demand as of {entry.get('as_of')}{which}: {entry.get('source')}")
    warning = stale_warning(described, types, today)
    return lines + ([warning] if warning else [])


def stale_warning(described: Mapping, types: Iterable[str] | None = None, today: date | None = None) -> str | None:
    """One line when a price in ``described`` (`PriceTable.describe`, as plan.json and price_performance.json hold it)
    is older than `STALE_AFTER_DAYS`, with the command that refreshes them; ``types``: only those types' prices. None
    when every dated price is recent (or a document from before per-price dates names only the table's date)."""
    wanted = set(types) if types is not None else None
    sources = described.get("sources") or [{**described, "types": None}]
    old = []
    for entry in sources:
        names = entry.get("types")
        named = names if wanted is None or names is None else [n for n in names if n in wanted]
        if named is not None and not named:
            continue
        age = PriceSource(str(entry.get("source")), str(entry.get("as_of"))).age_days(today)
        if age is not None and age > STALE_AFTER_DAYS:
            old.append((age, entry["as_of"], named))
    if not old:
        return None
    age, as_of, named = max(old, key=lambda o: o[0])
    which = "" if named is None else f" ({', '.join(named)})" if len(named) <= 3 else f" ({len(named)} types)"
    return (
        f"warning: prices as of {as_of}{which} are {age / 365.25:.1f} years old: `{REFRESH}` fetches current ones "
        "into a file to pass with --prices"
    )


def _override_file(path: Path) -> Path:
    """``path``, or the one file in the folder ``path`` (how a processing job receives an S3 object)."""
    if not path.is_dir():
        return path
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    if len(files) != 1:
        raise UserError(
            f"price folder {path} holds {len(files)} files ({', '.join(p.name for p in files[:5]) or 'none'}); "
            "it must hold exactly one price file: pass that file to --prices"
        )
    return files[0]


@overload
def _read_table(path: Path, *, require_provenance: Literal[True]) -> PriceTable: ...
@overload
def _read_table(path: Path, *, require_provenance: bool) -> PriceTable | None: ...
def _read_table(path: Path, *, require_provenance: bool) -> PriceTable | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"price file {path} does not exist; pass an existing JSON file to --prices") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read price file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"price file {path} is not valid JSON: {exc}; {SCHEMA}") from None
    if doc == NO_OVERRIDES and not require_provenance:
        return None
    return _parse_table(doc, path, require_provenance=require_provenance)


def _parse_table(doc, path, *, require_provenance: bool) -> PriceTable:
    if not isinstance(doc, dict):
        raise UserError(f"price file {path}: top level must be a JSON object with a 'prices' key; {SCHEMA}")
    meta = {}
    for key in ("source", "as_of", "region"):
        value = doc.get(key)
        if value is None and not require_provenance:
            continue
        if not isinstance(value, str) or not value:
            raise UserError(f"price file {path}: key {key!r} must be a non-empty string, got {value!r}; {SCHEMA}")
        meta[key] = value
    if "currency" in doc and doc["currency"] != "USD":
        raise UserError(f"price file {path}: key 'currency' must be 'USD', got {doc['currency']!r}; {SCHEMA}")
    return PriceTable(
        usd_per_hour=_validate_prices(path, doc.get("prices")),
        source=meta.get("source", f"override file {path}"),
        as_of=meta.get("as_of", UNDATED),
        region=meta.get("region", "us-east-1"),
        files=(str(path),),
    )


def _validate_prices(path: Path, prices) -> dict[str, float]:
    if not isinstance(prices, dict) or not prices:
        raise UserError(f"price file {path}: key 'prices' must be a non-empty object of instance type -> USD per hour; {SCHEMA}")
    for itype, price in prices.items():
        if not itype.startswith("ml."):
            raise UserError(
                f"price file {path}: key {itype!r} must be a SageMaker instance type such as 'ml.c5.18xlarge'; {SCHEMA}"
            )
        # bool is an int subclass; true is not a price.
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price <= 0:
            raise UserError(
                f"price file {path}: price for key {itype!r} must be a positive number of USD per hour, got {price!r}; {SCHEMA}"
            )
    return {itype: float(price) for itype, price in prices.items()}
