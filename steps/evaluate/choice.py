"""The pick among a plan's candidates: the cheapest per epoch that reaches the rate wanted, ties (`TIE_SHARE`) going to
the smaller cluster; the fallbacks to start when a type has no capacity; the frontier no candidate beats on both rate
and cost (the candidates themselves: `steps.evaluate.planner`).
"""

from __future__ import annotations

from bisect import bisect_right

from steps.evaluate.planner import Prediction

ENOUGH_THROUGHPUT = 0.95  # the planner picks the cheapest candidate within this share of the best rate
# Costs per epoch this close count as equal: the model's own error is larger (docs/performance.md#planner-accuracy), so
# the smaller cluster (fewer hosts, then lower $/h) wins: fewer hosts to start, to find capacity for, to fail.
TIE_SHARE = 0.02


def hosts(p: Prediction) -> int:
    return p.trainers + p.data_count


def frontier(predictions: list[Prediction]) -> list[Prediction]:
    """The candidates no other beats on both rate and cost per epoch, fastest last."""
    ordered = sorted(predictions, key=lambda p: (p.cost_per_epoch, -p.samples_per_second))
    best: list[Prediction] = []
    for p in ordered:
        if not best or p.samples_per_second > best[-1].samples_per_second:
            best.append(p)
    return best


def recommend(predictions: list[Prediction], target: float | None = None) -> Prediction:
    """The cheapest per epoch among the candidates that reach ``target`` samples/s (None: `ENOUGH_THROUGHPUT` of
    the best predicted rate); a tie (`TIE_SHARE`) goes to the smaller cluster."""
    return adequate(predictions, target)[0]


def adequate(predictions: list[Prediction], target: float | None = None) -> list[Prediction]:
    """The candidates that reach ``target`` (None: `ENOUGH_THROUGHPUT` of the best rate), cheapest per epoch first:
    each next one the smallest cluster (fewer hosts, then lower $/h) among those left within `TIE_SHARE` of the
    cheapest left."""
    if target is None:
        target = ENOUGH_THROUGHPUT * max(p.samples_per_second for p in predictions)
    left = sorted(
        (p for p in predictions if p.samples_per_second >= target * (1 - 1e-9)),
        key=lambda p: (p.cost_per_epoch, -p.samples_per_second),
    )
    costs = [p.cost_per_epoch for p in left]
    ordered = []
    while left:
        tied = range(bisect_right(costs, costs[0] * (1 + TIE_SHARE)))
        i = min(tied, key=lambda i: (hosts(left[i]), left[i].cluster_price_per_hour, left[i].cost_per_epoch))
        ordered.append(left.pop(i))
        del costs[i]
    return ordered


def fallbacks(predictions: list[Prediction], target: float | None = None, size: int = 3) -> list[Prediction]:
    """The recommendation, then the next cheapest adequate candidates on a trainer type none before uses (a data type
    none before uses when the trainer types run out; then the rest by cost per epoch): what to start when a type has
    no capacity."""
    ordered = adequate(predictions, target)
    chosen = {id(p) for p in ordered}
    rest = sorted((p for p in predictions if id(p) not in chosen), key=lambda p: (p.cost_per_epoch, -p.samples_per_second))
    picked = [ordered[0]]
    for pool in (ordered, rest):
        for key in (lambda p: p.trainer, lambda p: (p.trainer, p.data)):
            for p in pool:
                if len(picked) < size and key(p) not in {key(q) for q in picked}:
                    picked.append(p)
    return picked
