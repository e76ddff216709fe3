"""The planner's model: what a cluster of given instance groups will do, from one measured run.

A heterogeneous step runs its stages at once, and the slowest sets the pace (samples/s); the
stage that sets it is the candidate's ``bottleneck``:

- **compute**: the trainer hosts' step with data resident. One host does ``gpus / measured gpus /
  step_s_per_sample`` (the training loop's compute time per sample, ``compute_s_per_step``, when the
  run had data hosts, else the step measured alone after training, ``isolated_costs``); ``trainers``
  hosts do ``trainers`` times that x an efficiency ``step / (step + all-reduce)``, the all-reduce
  measured (a multi-trainer run beside a one-trainer run of the same GPU) or modelled: ring all-reduce
  moves ``2 (n-1)/n`` x ``model_parameters x 4`` bytes per trainer per step over its network;
- **trainer_cpu** (no data host): the trainers decode on their own vCPUs but one per GPU (its training loop),
  ``trainers * (vcpus - max(gpus, 1)) / decode_cpu_s_per_sample * scaling``; a host with no vCPU beside its loop (an
  emulated one-CPU host) decodes between its steps, so decode and step take turns: ``1 / (1/decode rate + 1/compute)``;
- **data_cpu** (data hosts): ``count * vcpus / cpu_s_per_sample * scaling``, ``cpu_s_per_sample``
  what the data hosts measured of themselves (decode plus framing and sending) and ``scaling`` the
  share of that ideal rate the profiled host reached when it was the bottleneck (1.0, and said so,
  when it never was), plus the trainers' spare vCPUs (hybrid decode: ``trainers * (vcpus - kept) /
  decode_cpu_s_per_sample * scaling``, ``kept`` what the profiled trainers kept for their loop, else
  two per GPU on a GPU host and every vCPU on a CPU host, whose step uses them all);
- **network_flow**: a data host opens ``streams`` TCP connections to each trainer and one flow
  carries at most `FLOW_GBPS` between two instances, so ``count * trainers * streams * 5 Gbps``
  over the bytes a sample takes on the wire;
- **network_instance**: each host's bandwidth, ``count * data_gbps`` out of the data hosts and
  ``trainers * trainer_gbps`` into the trainers, over the same bytes;
- **s3**: the hosts that read the shards (the data hosts, else the trainers), ``connections`` each
  at `S3_MB_S_PER_CONNECTION`, and at most `S3_GETS_PER_PREFIX` shard GETs a second.

Prices turn rates into $/h, cost per epoch and samples per dollar. Every row is on one basis, the instance types'
vCPUs (`REAL_VCPUS`); a run emulated on fewer CPUs is also predicted at the CPUs it ran on (`EMULATED_CPUS`), to be
judged against its measurement, never to be compared with the candidates. A measured rate replaces a prediction only
for a cloud run's own cluster; it keeps its stage's label within `STAGE_MATCH` of the slowest predicted stage and is
labelled `MEASURED` otherwise, with the gap. The pick among the candidates: `steps.evaluate.choice`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from steps.common.errors import UserError
from steps.contract import METRICS_FILE
from steps.evaluate.diagnosis import WAIT_SHARE
from steps.evaluate.metrics import per_sample

# One TCP flow between two instances outside a cluster placement group: 5 Gbps (10 Gbps inside one); AWS EC2 User
# Guide, "Amazon EC2 instance network bandwidth". The outside figure, conservative: CreateTrainingJob (botocore's model)
# names no EC2 placement group, only UltraServer placement (InstancePlacementConfig).
FLOW_GBPS = 5.0
# Amazon S3 User Guide, "Best practices design patterns: optimizing Amazon S3 performance": 5,500 GET/HEAD requests per
# second per prefix, and one concurrent request per 85-90 MB/s of throughput (the lower figure: conservative).
S3_GETS_PER_PREFIX = 5500
S3_MB_S_PER_CONNECTION = 85.0
GRADIENT_BYTES_PER_PARAMETER = 4  # fp32 gradients: what DDP and MirroredStrategy all-reduce, whatever the precision
ALLREDUCE_MODEL = "predicted (all-reduce model)"
# A measured rate this close to the slowest predicted stage is that stage's; further off, no stage sets it: `MEASURED`.
STAGE_MATCH = 0.05
MEASURED = "measured"  # the label of a measured rate that no predicted stage explains
REAL_VCPUS = "real_vcpus"  # a row at the instance types' own vCPUs: predicted, or measured by a cloud run
EMULATED_CPUS = "emulated_cpus"  # a row at the CPUs an emulated run's hosts had: the model's error against it only


@dataclass(frozen=True)
class Inputs:
    """What the planner takes beside the measurements: the data plane's connections per data-host/trainer pair, and
    the shards' size and the S3 connections each reading host keeps open."""

    streams: int = 1
    shard_mb: float = 64.0  # the ShardSizeMB pipeline parameter's default
    s3_connections: int = 4  # per reading host

    def __post_init__(self) -> None:
        for name in ("streams", "s3_connections", "shard_mb"):
            if getattr(self, name) <= 0:
                raise UserError(
                    f"{name} {getattr(self, name)}: give a positive number (streams: 1 or more)", headline="bad option"
                )


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    price_per_hour: float
    network_gbps: float | None = None  # None: not limiting (one machine's loopback)
    gpus: int = 0
    network_burst: bool = False  # the bandwidth is AWS's "up to" figure: sustained is lower
    gpu_model: str | None = None
    price_as_of: str | None = None  # the date of its price (None: not stated)

    @property
    def family(self) -> str:
        """``c5`` of ``ml.c5.xlarge``."""
        return self.name.split(".")[1] if self.name.count(".") >= 2 else self.name


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
    trainers: int = 1  # trainer hosts of the profiled run
    trainer_gpus: int = 1  # GPUs per profiled trainer host (1 on a CPU host: the unit compute scales by)
    batch_per_trainer: int = 1  # samples one trainer host steps on
    model_parameters: int | None = None  # None: the run did not record it (no all-reduce model)


@dataclass(frozen=True)
class AllReduce:
    """Seconds an all-reduce adds to each step at ``trainers`` hosts, measured; other counts scale by the ring's
    ``2 (n-1)/n``."""

    seconds: float
    trainers: int
    source: str

    def at(self, n: int) -> float:
        return self.seconds * ring_share(n) / ring_share(self.trainers)


def ring_share(n: int) -> float:
    """The share of the gradients each of ``n`` hosts sends (and receives) in a ring all-reduce."""
    return 2 * (n - 1) / n if n > 1 else 0.0


@dataclass(frozen=True)
class Prediction:
    trainer: str
    trainers: int
    data: str | None
    data_count: int
    samples_per_second: float
    bottleneck: str  # compute | trainer_cpu | data_cpu | network_flow | network_instance | s3 | measured
    stage_rates: dict
    gpu_busy_share: float
    cluster_price_per_hour: float
    cost_per_epoch: float
    samples_per_dollar: float
    notes: tuple = ()
    streams: int = 1
    s3: dict | None = None  # the shard size and connections the s3 stage assumed
    rate_source: str = "predicted"  # predicted | measured (a cloud run of exactly this cluster)
    run: str = ""  # the run whose profile predicted it, or that measured it
    basis: str = REAL_VCPUS  # the CPUs its rate is for: REAL_VCPUS, or EMULATED_CPUS (an emulated run as it ran)
    measured_gap: float | None = None  # a measured rate over its slowest predicted stage, - 1 (None: predicted)
    price_as_of: str | None = None  # the date of its oldest price (None: a price without a date)

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
    trainers = sum(g["count"] for g in doc.get("instance_groups", []) if g.get("role") == "trainer") or 1
    params = doc.get("model_parameters")
    run: dict[str, Any] = {"source": source, "trainers": trainers, "batch_per_trainer": int(batch), "model_parameters": params}
    hosts = doc.get("data_hosts") or []
    if not hosts:
        step = float(costs.get("step_s_per_batch_median", costs["step_s_per_batch"])) / batch
        if trainers > 1 and doc.get("compute_s_per_step"):
            step = float(doc["compute_s_per_step"]) / batch  # the loop's step: with its all-reduce, as ran
        return Profile(step, decode, decode, 1.0, False, None, **run)
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
    return Profile(
        step, cpu, decode_hosts, scaling, measured, wire, trainer_kept_cpus=kept, local_workers=local_workers / trainers, **run
    )


def spare_vcpus(profile: Profile, trainer: InstanceType) -> int:
    """A trainer host's vCPUs left to decode beside its training loop (hybrid decode)."""
    # unmeasured: a step process and a data-plane client per GPU; a CPU host's step uses every vCPU
    kept = profile.trainer_kept_cpus if profile.trainer_kept_cpus is not None else (2 * trainer.gpus or trainer.vcpus)
    return max(trainer.vcpus - kept, 0)


def allreduce_seconds(profile: Profile, trainer: InstanceType, n: int, measured: AllReduce | None) -> tuple[float, str | None]:
    """Seconds an all-reduce adds to each step of ``n`` ``trainer`` hosts, and where the figure comes from (None: one
    host, nothing to add)."""
    if n < 2:
        return 0.0, None
    if measured is not None:
        return measured.at(n), measured.source
    if not profile.model_parameters or not trainer.network_gbps:
        return 0.0, f"{ALLREDUCE_MODEL}: no model_parameters in {profile.source or 'the run'}, all-reduce taken as free"
    gradient = profile.model_parameters * GRADIENT_BYTES_PER_PARAMETER
    return gradient * ring_share(n) / (trainer.network_gbps * 1e9 / 8), ALLREDUCE_MODEL


def _compute(profile, trainer, trainers, allreduce) -> tuple[float, list]:
    scale = (trainer.gpus or 1) / profile.trainer_gpus
    step = profile.batch_per_trainer * profile.step_s_per_sample  # one host's step, its batch scaled with its GPUs
    extra, source = allreduce_seconds(profile, trainer, trainers, allreduce)
    efficiency = step / (step + extra)
    notes = [f"{trainers} trainers run at {efficiency:.0%} of {trainers} x one ({source})"] if source else []
    return trainers * scale / profile.step_s_per_sample * efficiency, notes


def _network(profile, trainer, trainers, data, count, inputs) -> tuple[dict, InstanceType | None]:
    wire = profile.bytes_per_sample
    if not wire:
        return {}, None
    links = [(count, data), (trainers, trainer)]
    limits = [(n * t.network_gbps * 1e9 / 8 / wire, t) for n, t in links if t.network_gbps]
    if not limits:  # one machine's loopback: no network between the hosts
        return {}, None
    rates = {"network_flow": count * trainers * inputs.streams * FLOW_GBPS * 1e9 / 8 / wire}
    rates["network_instance"], narrowest = min(limits, key=lambda limit: limit[0])
    return rates, narrowest


def _s3(profile, readers: int, reader: InstanceType, inputs: Inputs) -> tuple[dict, dict | None]:
    """The shards' bytes per sample are not measured: the wire's (decoded, no smaller than encoded) stand in."""
    wire = profile.bytes_per_sample
    if not wire or not reader.network_gbps:  # one machine's disk (a bench), not S3
        return {}, None
    connections = readers * inputs.s3_connections
    per_shard = inputs.shard_mb * 1e6 / wire
    rate = min(connections * S3_MB_S_PER_CONNECTION * 1e6 / wire, S3_GETS_PER_PREFIX * per_shard)
    described = {"shard_mb": inputs.shard_mb, "connections": connections, "bytes_per_sample": wire}
    return {"s3": rate}, described


def predict(
    profile: Profile,
    trainer: InstanceType,
    trainers: int,
    data: InstanceType | None,
    count: int,
    epoch_samples: int,
    *,
    spare: float | None = None,
    inputs: Inputs = Inputs(),
    allreduce: AllReduce | None = None,
) -> Prediction:
    """What ``trainers`` x ``trainer`` fed by ``count`` x ``data`` (none: decode on the trainers) will do; with data hosts,
    each trainer's ``spare`` vCPUs decode too (hybrid decode; None: `spare_vcpus`)."""
    compute, notes = _compute(profile, trainer, trainers, allreduce)
    rates = {"compute": compute}
    narrowest = None
    if data is None or count == 0:
        rates["trainer_cpu"] = _trainer_cpu(profile, trainer, trainers, compute)
        s3, described = _s3(profile, trainers, trainer, inputs)
    else:
        spare = spare_vcpus(profile, trainer) if spare is None else spare
        local = trainers * spare / profile.decode_cpu_s_per_sample * profile.scaling
        rates["data_cpu"] = count * data.vcpus / profile.cpu_s_per_sample * profile.scaling + local
        network, narrowest = _network(profile, trainer, trainers, data, count, inputs)
        rates.update(network)
        s3, described = _s3(profile, count, data, inputs)
        if spare:
            notes.append(
                f"data_cpu counts {trainers} x {spare:g} spare vCPU(s) of {trainer.name} decoding "
                f"beside the data hosts (hybrid decode): {local:,.0f} samples/s"
            )
    rates.update(s3)
    bottleneck = min(rates, key=lambda stage: rates[stage])
    rate = rates[bottleneck]
    if bottleneck == "network_instance" and narrowest is not None and narrowest.network_burst:
        notes.append(
            f"network_instance uses {narrowest.name}'s 'up to' {narrowest.network_gbps:g} Gbps, a burst figure: "
            "sustained bandwidth is lower"
        )
    price = trainers * trainer.price_per_hour + (count * data.price_per_hour if data is not None else 0.0)
    dates = [t.price_as_of for t in (trainer, data if count else None) if t is not None]
    known = [d for d in dates if d is not None]
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
        streams=inputs.streams,
        s3=described,
        run=profile.source,
        price_as_of=min(known) if dates and len(known) == len(dates) else None,
    )


def _trainer_cpu(profile: Profile, trainer: InstanceType, trainers: int, compute: float) -> float:
    """The rate the trainers decode at on their own vCPUs, one kept per GPU for its training loop; with none beside
    the loop (an emulated one-CPU host), decode takes turns with the step on the same CPU: the two in series."""
    loop = max(trainer.gpus, 1)
    if trainer.vcpus > loop:
        return trainers * max(trainer.vcpus - loop, 1) / profile.decode_cpu_s_per_sample * profile.scaling
    alone = trainers * trainer.vcpus / profile.decode_cpu_s_per_sample * profile.scaling
    return 1 / (1 / alone + 1 / compute)


def measured(p: Prediction, rate: float) -> tuple[str, float]:
    """The label of ``p``'s cluster run at a measured ``rate``, and the rate over its slowest predicted stage, - 1: the
    stage's own name within `STAGE_MATCH` of it, else `MEASURED` (no stage of the model sets that rate)."""
    slowest = min(p.stage_rates, key=lambda stage: p.stage_rates[stage])
    gap = rate / p.stage_rates[slowest] - 1
    return (slowest if abs(gap) <= STAGE_MATCH else MEASURED), gap


def candidates(
    profile: Profile,
    trainer: InstanceType,
    trainers: int,
    data_types: list[InstanceType],
    *,
    max_count: int,
    epoch_samples: int,
    inputs: Inputs = Inputs(),
    allreduce: AllReduce | None = None,
) -> list[Prediction]:
    """``trainers`` x ``trainer`` homogeneous, and with every data type at 1..max_count hosts; a data group larger than
    the first that reaches its rate ceiling costs more for nothing and is left out."""
    found = [predict(profile, trainer, trainers, None, 0, epoch_samples, inputs=inputs, allreduce=allreduce)]
    for data in data_types:
        for n in range(1, max_count + 1):
            p = predict(profile, trainer, trainers, data, n, epoch_samples, inputs=inputs, allreduce=allreduce)
            if n > 1 and p.samples_per_second <= found[-1].samples_per_second * (1 + 1e-9):
                break
            found.append(p)
    return found
