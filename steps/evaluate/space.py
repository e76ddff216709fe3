"""The clusters a plan chooses among, from one or several measured runs of one workload.

Each run's step time holds only for its own GPU model, so the runs are grouped by the GPU model of
their trainer type (a CPU trainer: by its type) and each group predicts within its model: every
priced type with that GPU (bigger sizes: more vCPUs for hybrid decode, more network), 1..`max_trainers`
hosts of it, homogeneous or fed by 1..`max_data` hosts of each priced CPU type. What the data side
costs (data-host CPU per sample, bytes on the wire, scaling) does not depend on the GPU: a group whose
runs had no data host borrows it from a heterogeneous run. A candidate whose data hosts are of another
CPU family than the one measured is labelled extrapolated.

Every candidate is at its types' own vCPUs. A candidate of exactly the cluster a cloud run had carries
that run's measured rate; an emulated run (its hosts had fewer CPUs than their types: the local runner)
measured another machine, so its cluster is predicted like any other, and the run is predicted once
more at the CPUs it ran on (`as_ran`): the model's error against what it measured, never a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from steps.common.errors import UserError
from steps.evaluate.catalogue import Catalogue
from steps.evaluate.planner import (
    EMULATED_CPUS,
    MEASURED,
    REAL_VCPUS,
    AllReduce,
    Inputs,
    InstanceType,
    Prediction,
    Profile,
    allreduce_seconds,
    candidates,
    measured,
    predict,
    profile_from_metrics,
)
from steps.evaluate.prices import PriceTable

BORROWED = ("cpu_s_per_sample", "decode_cpu_s_per_sample", "scaling", "scaling_measured", "bytes_per_sample")


@dataclass(frozen=True)
class Run:
    source: str  # the execution or file it came from
    metrics: dict
    note: str | None = None  # what a candidate it measured says (None: "measured by <source>")

    def group(self, role: str) -> dict | None:
        return next((g for g in self.metrics["instance_groups"] if g["role"] == role), None)

    @property
    def trainer(self) -> dict:
        """The trainer group, of a run that has one (`plan_document` refuses a first run without; the rest are grouped
        by it)."""
        group = self.group("trainer")
        assert group is not None, f"{self.source}: no trainer group"
        return group

    @property
    def cluster(self) -> tuple:
        trainer, data = self.trainer, self.group("data")
        return (trainer["instance_type"], trainer["count"], data and data["instance_type"], data["count"] if data else 0)

    def ran_on(self) -> dict[str, int | None]:
        """The CPUs each role's hosts had, as the run measured them: the trainer's when it measured its step and decode
        alone (``isolated_costs``) or decoded beside its loop, the smallest data host's (None: not recorded)."""
        costs = self.metrics.get("isolated_costs") or {}
        local = [int(m["cpus"]) for m in self.metrics.get("local_decode") or [] if m.get("cpus")]
        data = [int(h["cpus"]) for h in self.metrics.get("data_hosts") or [] if h.get("cpus")]
        trainer = costs.get("cpus") or (max(local) if local else None)
        return {"trainer": int(trainer) if trainer else None, "data": min(data) if data else None}

    def emulated(self, catalogue: Catalogue) -> dict[str, tuple[int, int]]:
        """Role -> (CPUs its hosts ran on, its type's vCPUs) where they differ: a run emulated on another machine (the
        local runner); empty for a run on its types' own vCPUs (a cloud run, or one that recorded no CPU count)."""
        found = {}
        for role, cpus in self.ran_on().items():
            group = self.group(role)
            if group is not None and cpus is not None and cpus != catalogue.spec(group["instance_type"]).vcpus:
                found[role] = (cpus, catalogue.spec(group["instance_type"]).vcpus)
        return found


def emulation_text(run: Run, catalogue: Catalogue) -> str:
    """How an emulated run's hosts differed from their types, e.g. ``the trainer on 1 CPU where ml.g5.xlarge has 4
    vCPUs``."""
    parts = []
    for role, (cpus, vcpus) in run.emulated(catalogue).items():
        name = "the trainer" if role == "trainer" else "the data hosts"
        group = run.group(role)
        assert group is not None  # an emulated role is one of the run's groups
        parts.append(f"{name} on {cpus} CPU(s) where {group['instance_type']} has {vcpus} vCPUs")
    return ", ".join(parts)


def workload_of(run: Run) -> tuple:
    config = run.metrics.get("config") or {}
    return config.get("workload"), config.get("workload_options") or {}


def check_one_workload(runs: list[Run]) -> None:
    """Runs of different workloads (name or options) cannot share a plan."""
    first = runs[0]
    for run in runs[1:]:
        if workload_of(run) != workload_of(first):
            raise UserError(
                f"{first.source} ran workload {_workload(first)} and {run.source} ran {_workload(run)}: "
                "plan from runs of one workload",
                headline="mixed workloads",
            )


def _workload(run: Run) -> str:
    name, options = workload_of(run)
    return f"{name!r} {options}" if options else repr(name)


def gpu_key(catalogue: Catalogue, instance_type: str) -> str:
    """What a step time holds for: the GPU model, or a CPU trainer's own type."""
    return catalogue.spec(instance_type).gpu_model or instance_type


def plan_space(
    runs: list[Run],
    catalogue: Catalogue,
    prices: PriceTable,
    *,
    epoch_samples: int,
    max_trainers: int,
    max_data: int,
    inputs: Inputs,
) -> tuple[list[Prediction], list[str], dict[str, dict]]:
    """Every candidate of every GPU model the runs measured, most samples per dollar first, at the types' vCPUs (a
    cloud run's own cluster measured); a note for each GPU model whose runs cannot be profiled (a run of the first's
    model must be) and for each emulated run; and each run's cluster predicted as it ran (`as_ran`), by run."""
    donor = next(r for r in runs if r.metrics["mode"] == "heterogeneous")
    donor_data = donor.group("data")
    assert donor_data is not None  # a heterogeneous run has a data group
    data_family = donor_data["instance_type"].split(".")[1]
    data_types = [t for t in (catalogue.priced(s.name, prices) for s in catalogue.cpu_types()) if t is not None]
    found: list[Prediction] = []
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.group("trainer") is not None:
            groups.setdefault(gpu_key(catalogue, run.trainer["instance_type"]), []).append(run)
    notes: list[str] = []
    ran: dict[str, dict] = {}
    for key, members in groups.items():
        try:
            more, said, profile, allreduce = _group_candidates(
                key, members, donor, catalogue, prices, data_types, data_family, epoch_samples, max_trainers, max_data, inputs
            )
            found, notes = found + more, notes + said
        except UserError as exc:
            if donor in members:
                raise
            notes.append(f"{key} not planned: {exc.message}")  # a run beside the plan's own, on another GPU model
            continue
        for run in members:
            row = as_ran(run, profile, catalogue, prices, epoch_samples=epoch_samples, inputs=inputs, allreduce=allreduce)
            if row is not None:
                ran[run.source] = row
    for run in runs:
        if run.emulated(catalogue):
            notes.append(
                f"{run.source} ran emulated ({emulation_text(run, catalogue)}): its cluster is predicted at the types' "
                "vCPUs like every candidate; as it ran, it only checks the model against its measurement"
            )
    found = [_measured(p, runs, catalogue) for p in found]
    return sorted(found, key=lambda p: -p.samples_per_dollar), notes, ran


def _group_candidates(
    key, members, donor, catalogue, prices, data_types, data_family, epoch_samples, max_trainers, max_data, inputs
):
    chosen = min(members, key=lambda r: (r.trainer["count"] > 1, r.metrics["mode"] != "heterogeneous"))
    measured_type = catalogue.priced(chosen.trainer["instance_type"], prices)
    if measured_type is None:
        raise UserError(f"no price for the trainer type {chosen.group('trainer')['instance_type']}: add it with a price override")
    profile = profile_from_metrics(chosen.metrics, chosen.source)
    profile = replace(profile, trainer_gpus=measured_type.gpus or 1)
    if profile.bytes_per_sample is None:
        borrowed = profile_from_metrics(donor.metrics, donor.source)
        profile = replace(profile, **{f: getattr(borrowed, f) for f in BORROWED})
    allreduce = measured_allreduce(members, catalogue)
    said = []
    if profile.trainers > 1:  # the loop's step included its all-reduce: take it out, the candidates add their own
        extra, _ = allreduce_seconds(profile, measured_type, profile.trainers, allreduce)
        step = profile.step_s_per_sample - extra / profile.batch_per_trainer
        if step <= 0:  # the model's all-reduce is longer than the whole measured step: it does not fit this run
            step, allreduce = profile.step_s_per_sample, AllReduce(0.0, profile.trainers, f"as {chosen.source} measured")
            said.append(f"{chosen.source}: the all-reduce model exceeds its measured step; its step stands as measured")
        profile = replace(profile, step_s_per_sample=step, trainers=1)
    trainer_types = trainer_sizes(catalogue, prices, measured_type)
    counts = range(1, max_trainers + 1)
    if allreduce is None and not profile.model_parameters:
        counts = [chosen.trainer["count"]]
        said.append(f"{chosen.source} records no model_parameters: only {counts[0]} trainer host(s) planned (all-reduce unknown)")
    found = []
    for trainer in trainer_types:
        for n in counts:
            found += candidates(
                profile,
                trainer,
                n,
                data_types,
                max_count=max_data,
                epoch_samples=epoch_samples,
                inputs=inputs,
                allreduce=allreduce,
            )
    return [_label(p, data_family, measured_type.family) for p in found], said, profile, allreduce


def trainer_sizes(catalogue: Catalogue, prices: PriceTable, measured: InstanceType) -> list[InstanceType]:
    """The trainer types a run of ``measured`` predicts for: itself, then every other priced type with its GPU model
    (a step time holds for its GPU model; a CPU trainer's only for itself)."""
    key = gpu_key(catalogue, measured.name)
    found = [measured]
    if catalogue.spec(measured.name).gpu_model:
        same = [s.name for s in catalogue.specs.values() if s.gpu_model == key and s.name != measured.name]
        found += [t for t in (catalogue.priced(n, prices) for n in same) if t is not None]
    return found


def measured_allreduce(members: list[Run], catalogue: Catalogue) -> AllReduce | None:
    """What an all-reduce added per step, from a multi-trainer run and a one-trainer run of the same GPU model: the
    per-sample step time each measured, the difference over the multi-trainer run's batch. None without both."""
    one = [r for r in members if r.trainer["count"] == 1 and r.metrics.get("isolated_costs")]
    many = [r for r in members if r.trainer["count"] > 1 and r.metrics.get("isolated_costs")]
    if not one or not many:
        return None
    single, multi = profile_from_metrics(one[0].metrics, one[0].source), profile_from_metrics(many[0].metrics, many[0].source)
    extra = max(multi.step_s_per_sample - single.step_s_per_sample, 0.0) * multi.batch_per_trainer
    return AllReduce(extra, multi.trainers, f"all-reduce measured: {many[0].source}'s step against {one[0].source}'s")


def _label(p: Prediction, data_family: str, trainer_family: str) -> Prediction:
    """Notes on the families whose per-vCPU decode cost the candidate takes from another family's measurement."""
    notes = []
    if p.data is not None and p.data.split(".")[1] != data_family:
        notes.append(f"extrapolated: data hosts of family {p.data.split('.')[1]}, per-vCPU cost measured on {data_family}")
    if p.trainer.split(".")[1] != trainer_family:
        notes.append(f"extrapolated: trainer of family {p.trainer.split('.')[1]}, measured on {trainer_family}")
    return replace(p, notes=(*p.notes, *notes)) if notes else p


def _measured(p: Prediction, runs: list[Run], catalogue: Catalogue) -> Prediction:
    """A candidate of exactly a cloud run's cluster takes that run's measured rate, labelled by the stage that sets it
    or `MEASURED` with its gap (`steps.evaluate.planner.measured`). An emulated run measured other CPUs than its
    types': the candidate keeps its prediction at their vCPUs and says why."""
    cluster = (p.trainer, p.trainers, p.data, p.data_count)
    run = next((r for r in runs if r.cluster == cluster), None)
    if run is None:
        return p
    if run.emulated(catalogue):
        return replace(
            p,
            notes=(
                *p.notes,
                f"{run.source} ran this cluster emulated (fewer CPUs): predicted at the types' vCPUs",
            ),
        )
    rate = float(run.metrics["samples_per_second"])
    label, gap = measured(p, rate)
    notes = (run.note,) if run.note else (*p.notes, f"measured by {run.source}")
    if label == MEASURED:
        slowest = min(p.stage_rates, key=lambda stage: p.stage_rates[stage])
        notes += (
            f"measured {rate:,.0f} samples/s, {abs(gap):.0%} {'below' if gap < 0 else 'above'} its slowest predicted "
            f"stage ({slowest}, {p.stage_rates[slowest]:,.0f}): no stage of the model sets it",
        )
    return replace(
        p,
        samples_per_second=rate,
        bottleneck=label,
        measured_gap=gap,
        gpu_busy_share=1 - float(run.metrics.get("data_wait_share", 0.0)),
        cost_per_epoch=p.cost_per_epoch * p.samples_per_second / rate,
        samples_per_dollar=rate * 3600 / p.cluster_price_per_hour,
        notes=notes,
        rate_source="measured",
        run=run.source,
    )


def as_ran(
    run: Run,
    profile: Profile,
    catalogue: Catalogue,
    prices: PriceTable,
    *,
    epoch_samples: int,
    inputs: Inputs,
    allreduce: AllReduce | None,
) -> dict | None:
    """``run``'s cluster predicted at the CPUs its hosts had (an emulated run's, else its types' vCPUs) and with the
    decode workers its trainers ran beside their loop, beside what it measured: the model's error on a cluster it
    has seen. None when a type of it has no price."""
    trainer_group, data_group = run.trainer, run.group("data")
    trainer = catalogue.priced(trainer_group["instance_type"], prices)
    data = catalogue.priced(data_group["instance_type"], prices) if data_group else None
    if trainer is None or (data_group is not None and data is None):
        return None
    emulated, cpus = run.emulated(catalogue), run.ran_on()
    if "trainer" in emulated:
        trainer = replace(trainer, vcpus=emulated["trainer"][0])  # the CPUs it ran on (`Run.ran_on`)
    if "data" in emulated and data is not None:
        data = replace(data, vcpus=emulated["data"][0])
    spare = None
    if data is not None:
        local = sum(int(m["workers"]) for m in run.metrics.get("local_decode") or [] if m.get("workers"))
        spare = local / trainer_group["count"]
    predicted = predict(
        profile,
        trainer,
        trainer_group["count"],
        data,
        data_group["count"] if data_group else 0,
        epoch_samples,
        spare=spare,
        inputs=inputs,
        allreduce=allreduce,
    )
    rate = float(run.metrics["samples_per_second"])
    return {
        **replace(predicted, basis=EMULATED_CPUS if emulated else REAL_VCPUS, run=run.source).as_dict(),
        "cpus": {role: n for role, n in cpus.items() if (role == "trainer" or data_group) and n is not None},
        "measured_samples_per_second": rate,
        "model_error": predicted.samples_per_second / rate - 1,
    }
