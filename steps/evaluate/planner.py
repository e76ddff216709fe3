"""The planner's model: what a cluster of given instance groups will do, from one measured run.

A heterogeneous step runs three stages at once, and the slowest sets the pace:

- **compute**: the trainer hosts' step with data resident, ``trainers / step_s_per_sample`` samples/s:
  the training loop's own compute time per step (``compute_s_per_step``: from a batch in host memory
  to the step done, with the data plane running beside it) when the run had data hosts, else the
  step measured alone after training (``isolated_costs``);
- **input**: the data hosts' CPUs, ``count * vcpus / cpu_s_per_sample * scaling`` samples/s,
  where ``cpu_s_per_sample`` is what the data hosts measured of themselves (decode in their
  workers plus framing and sending in the service) and ``scaling`` the share of that ideal
  rate the profiled host reached when it was the bottleneck (1.0, and said so, when it never was),
  plus the trainer hosts' spare vCPUs (hybrid decode: ``trainers * (vcpus - kept) / decode_cpu_s_per_sample
  * scaling``, ``kept`` what the profiled trainers kept for their loop, else two on a GPU host, one busy
  with the step and one with the data plane, and every vCPU on a CPU host, whose step uses them all);
- **transport**: each host's network bandwidth over the bytes a sample takes on the wire,
  ``count * data_gbps`` out of the data hosts and ``trainers * trainer_gbps`` into the trainers.

The predicted rate is the minimum of the three; its stage is the bottleneck. With no data
host the trainer decodes on its own vCPUs, one left to the training loop
(``vcpus - 1``), decode only. Prices turn rates into cost per epoch and samples per dollar.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from steps.common.errors import UserError
from steps.contract import METRICS_FILE
from steps.evaluate.diagnosis import WAIT_SHARE
from steps.evaluate.metrics import per_sample

ENOUGH_THROUGHPUT = 0.95  # the planner picks the cheapest candidate within this share of the best rate


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    price_per_hour: float
    network_gbps: float | None = None  # None: not limiting (one machine's loopback)
    gpus: int = 0
    network_burst: bool = False  # the bandwidth is AWS's "up to" figure: sustained is lower


@dataclass(frozen=True)
class Profile:
    """Per-sample costs of one workload, from one measured run."""

    step_s_per_sample: float  # one trainer host, data resident
    cpu_s_per_sample: float  # a data host: decode workers + service
    decode_cpu_s_per_sample: float  # decode alone (what a trainer decoding for itself spends)
    scaling: float  # measured / ideal per-vCPU rate of a saturated data host; 1.0 when not measured
    scaling_measured: bool
    bytes_per_sample: float | None  # on the wire; None when the run had no data host
    source: str = ""
    trainer_kept_cpus: int | None = None  # vCPUs the profiled trainers kept for the loop in hybrid decode; None: not measured
    local_workers: float = 0.0  # decode workers per trainer host in the profiled run (hybrid decode; 0: none)


@dataclass(frozen=True)
class Prediction:
    trainer: str
    trainers: int
    data: str | None
    data_count: int
    samples_per_second: float
    bottleneck: str  # compute | input | transport
    stage_rates: dict
    gpu_busy_share: float
    cluster_price_per_hour: float
    cost_per_epoch: float
    samples_per_dollar: float
    notes: tuple = ()

    def as_dict(self) -> dict:
        return asdict(self)


def profile_from_metrics(doc: dict, source: str = METRICS_FILE) -> Profile:
    """A `Profile` from a trainer's metrics.json (a heterogeneous run's data hosts measured themselves;
    a homogeneous run gives decode from ``isolated_costs`` and no transport numbers)."""
    costs = doc.get("isolated_costs")
    if not costs:
        raise UserError(
            f"{source} has no isolated_costs (step alone with data resident): the planner needs a run "
            "whose trainer measured it; rerun with validation shards",
            headline="cannot plan",
        )
    batch = float(costs["batch_size"])
    decode = float(costs["decode_cpu_s_per_batch"]) / batch
    hosts = doc.get("data_hosts") or []
    if not hosts:
        return Profile(
            float(costs.get("step_s_per_batch_median", costs["step_s_per_batch"])) / batch,
            decode,
            decode,
            1.0,
            False,
            None,
            source,
        )
    step = float(doc["compute_s_per_step"]) / batch
    cpu = per_sample(hosts, "decode_cpu_s_per_sample", "service_cpu_s_per_sample") or 0.0
    decode_hosts = per_sample(hosts, "decode_cpu_s_per_sample") or 0.0
    wire = per_sample(hosts, "bytes_sent_per_sample") or 0.0
    local = [m for m in doc.get("local_decode") or [] if m.get("workers")]
    local_workers = sum(int(m["workers"]) for m in local)
    scaling, measured = 1.0, False
    if doc.get("data_wait_share", 0.0) >= WAIT_SHARE and doc.get("samples_per_second"):
        ideal = sum(h["cpus"] for h in hosts) / cpu + (local_workers / decode_hosts if decode_hosts else 0.0)
        scaling, measured = min(1.0, float(doc["samples_per_second"]) / ideal), True
    kept = max(int(m["kept_cpus"]) for m in local) if local else None
    trainers = sum(g["count"] for g in doc.get("instance_groups", []) if g.get("role") == "trainer") or 1
    return Profile(step, cpu, decode_hosts, scaling, measured, wire, source, kept, local_workers / trainers)


def spare_vcpus(profile: Profile, trainer: InstanceType) -> int:
    """A trainer host's vCPUs left to decode beside its training loop (hybrid decode)."""
    kept = profile.trainer_kept_cpus if profile.trainer_kept_cpus is not None else (2 if trainer.gpus else trainer.vcpus)
    return max(trainer.vcpus - kept, 0)


def predict(
    profile: Profile,
    trainer: InstanceType,
    trainers: int,
    data: InstanceType | None,
    count: int,
    epoch_samples: int,
    *,
    spare: float | None = None,
) -> Prediction:
    """What ``trainers`` x ``trainer`` fed by ``count`` x ``data`` (none: decode on the trainers) will do; with data hosts,
    each trainer's ``spare`` vCPUs decode too (hybrid decode; None: `spare_vcpus`)."""
    rates = {"compute": trainers / profile.step_s_per_sample}
    if data is None or count == 0:
        rates["input"] = trainers * max(trainer.vcpus - 1, 1) / profile.decode_cpu_s_per_sample * profile.scaling
    else:
        spare = spare_vcpus(profile, trainer) if spare is None else spare
        local = trainers * spare / profile.decode_cpu_s_per_sample * profile.scaling
        rates["input"] = count * data.vcpus / profile.cpu_s_per_sample * profile.scaling + local
        wire = profile.bytes_per_sample
        links = [(count, data), (trainers, trainer)]
        limits = [(n * t.network_gbps * 1e9 / 8 / wire, t) for n, t in links if t.network_gbps and wire]
        if limits:
            rates["transport"], narrowest = min(limits, key=lambda limit: limit[0])
    bottleneck = min(rates, key=rates.get)
    rate = rates[bottleneck]
    notes = []
    if data is not None and count and spare:
        notes.append(
            f"input counts {trainers} x {spare:g} spare vCPU(s) of {trainer.name} decoding "
            f"beside the data hosts (hybrid decode): {local:,.0f} samples/s"
        )
    if bottleneck == "transport" and narrowest.network_burst:
        notes.append(
            f"transport uses {narrowest.name}'s 'up to' {narrowest.network_gbps:g} Gbps, a burst figure: "
            "sustained bandwidth is lower"
        )
    price = trainers * trainer.price_per_hour + (count * data.price_per_hour if data is not None else 0.0)
    return Prediction(
        trainer=trainer.name,
        trainers=trainers,
        data=data.name if data is not None and count else None,
        data_count=count if data is not None else 0,
        samples_per_second=rate,
        bottleneck=bottleneck,
        stage_rates=rates,
        gpu_busy_share=rate / rates["compute"],
        cluster_price_per_hour=price,
        cost_per_epoch=price * epoch_samples / rate / 3600,
        samples_per_dollar=rate * 3600 / price,
        notes=tuple(notes),
    )


def measured(
    trainer: InstanceType,
    trainers: int,
    samples_per_second: float,
    data_wait_share: float,
    bottleneck: str,
    epoch_samples: int,
    note: str,
) -> Prediction:
    """A homogeneous configuration that was run: its measured rate stands in for the model's (the trainer
    computed for the share of its steps it did not wait)."""
    price = trainers * trainer.price_per_hour
    return Prediction(
        trainer=trainer.name,
        trainers=trainers,
        data=None,
        data_count=0,
        samples_per_second=samples_per_second,
        bottleneck=bottleneck,
        stage_rates={},
        gpu_busy_share=1 - data_wait_share,
        cluster_price_per_hour=price,
        cost_per_epoch=price * epoch_samples / samples_per_second / 3600,
        samples_per_dollar=samples_per_second * 3600 / price,
        notes=(note,),
    )


def candidates(
    profile: Profile, trainer: InstanceType, trainers: int, data_types: list[InstanceType], *, max_count: int, epoch_samples: int
) -> list[Prediction]:
    """Staying homogeneous, and every data type at 1..max_count hosts."""
    found = [predict(profile, trainer, trainers, None, 0, epoch_samples)]
    for data in data_types:
        found += [predict(profile, trainer, trainers, data, n, epoch_samples) for n in range(1, max_count + 1)]
    return found


def frontier(predictions: list[Prediction]) -> list[Prediction]:
    """The candidates no other beats on both rate and cost per epoch, fastest last."""
    ordered = sorted(predictions, key=lambda p: (p.cost_per_epoch, -p.samples_per_second))
    best: list[Prediction] = []
    for p in ordered:
        if not best or p.samples_per_second > best[-1].samples_per_second:
            best.append(p)
    return best


def recommend(predictions: list[Prediction], enough: float = ENOUGH_THROUGHPUT) -> Prediction:
    """The cheapest per epoch among the candidates within ``enough`` of the best predicted rate."""
    top = max(p.samples_per_second for p in predictions)
    fast = [p for p in predictions if p.samples_per_second >= enough * top]
    return min(fast, key=lambda p: (p.cost_per_epoch, -p.samples_per_second))
