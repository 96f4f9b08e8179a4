"""`g3 advise`'s candidates and their predictions: memory per worker from the plan, the simulated epoch, its
breakdown and time to target, and the ranking."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from stages.advise.calibration import Cache
from stages.advise.options import ANCHOR_FLOOR, AdviseOptions, latency
from stages.common.errors import G3InputError
from stages.common.units import human_bytes, parse_rate
from stages.strategies.registry import knob_declarations


def plan_memory(meta: dict) -> tuple[int | None, str]:
    """Peak memory of the plan's largest worker, and where it comes from: bins sized by the device (two bins
    resident: one computes while the next is copied in), a plan sized by its ``device_memory`` (chunks: at most
    half each, two resident), else the plan's per-worker estimate (the whole partition as one bin, every layer's
    activations kept for backward)."""
    workers = meta.get("workers") or []
    bins = [
        lay.get("max_bin_bytes")
        for w in workers
        for lay in (w.get("layers") or [])
        if lay.get("max_bin_bytes")
    ]
    if bins:
        return 2 * int(max(bins)), "plan: two of its largest bins (sized by --device-memory)"
    per_worker = [w.get("memory_bytes") for w in workers if w.get("memory_bytes")]
    if per_worker:
        return int(max(per_worker)), "plan: per-worker estimate (memory_bytes)"
    if meta.get("device_memory"):
        return int(meta["device_memory"]), "plan: sized to fit --device-memory (no finer estimate)"
    return None, "the plan has no memory estimate"


def worker_memory(meta: dict) -> list[int | None]:
    """Peak memory of every worker (by rank), from where :func:`plan_memory` takes the plan's: two of the
    worker's largest bins, else its per-worker estimate, else the plan's ``device_memory`` (None: no estimate)."""
    workers = sorted(meta.get("workers") or [], key=lambda w: int(w.get("rank", 0)))
    bins = [
        [lay["max_bin_bytes"] for lay in (w.get("layers") or []) if lay.get("max_bin_bytes")] for w in workers
    ]
    if any(bins):
        return [2 * int(max(b)) if b else None for b in bins]
    if any(w.get("memory_bytes") for w in workers):
        return [int(w["memory_bytes"]) if w.get("memory_bytes") else None for w in workers]
    return [int(meta["device_memory"]) if meta.get("device_memory") else None for _ in workers]


def breakdown(system: dict, epoch: float | None = None) -> dict:
    """Shares of the predicted epoch (``epoch``: the model's, or the model's plus its anchor): computing, waiting
    on the network (and the gradient all-reduce), the rest (idle: waiting for a peer, sampling, the optimizer
    step, and the anchor: what the model missed at its calibration point)."""
    epoch = float(epoch if epoch is not None else system["epoch_seconds"]) or 1e-12
    net = float(system.get("comm_wait_mean") or 0.0) + float(system.get("allreduce_seconds") or 0.0)
    parts = system.get("step_parts") or {}
    if not system.get("comm_wait_mean") and parts.get("network") and system.get("steps"):
        # a model that overlaps the network with sampling (bytegnn's DAGs): at most its period per step
        per_step = min(float(parts["network"]), float(parts.get("period") or parts["network"]))
        net += per_step * int(system["steps"])
    compute = float(system.get("busy_mean") or 0.0)
    net, compute = min(net, epoch), min(compute, epoch)
    return {
        "compute_share": compute / epoch,
        "network_share": net / epoch,
        "other_share": max(0.0, 1.0 - (compute + net) / epoch),
    }


def describe(b: dict, link: str) -> str:
    """What bounds the epoch, from the simulation's breakdown."""
    net, comp, other = b["network_share"], b["compute_share"], b["other_share"]
    if net >= 0.5:
        return f"communication-bound: {net:.0%} of the epoch is waiting on the network at {link}"
    if comp >= 0.5:
        return f"compute-bound: {comp:.0%} of the epoch computes ({net:.0%} network at {link})"
    if other >= 0.5:
        return (
            f"overhead-bound: {other:.0%} of the epoch is neither compute nor transfer (sampling, waiting for "
            f"peers, per-message latency, the overhead measured on the calibration run; {net:.0%} network at "
            f"{link})"
        )
    return f"mixed: {comp:.0%} compute, {net:.0%} network at {link}, {other:.0%} other"


def train_command(plan: str | None, link: str | None, knobs: dict, k: int) -> str | None:
    """``g3 train PLAN --emulate-link RATE [knobs]``; ``link`` None (a cluster of unlike hosts: run it on the
    cluster's hosts): no emulated link."""
    if plan is None:
        return None
    flags = "".join(f" {knob_declarations()[key][0][1].command_line(value)}" for key, value in knobs.items())
    return f"g3 train {plan}" + (f" --emulate-link {link}" if link else "") + flags


@dataclass
class Candidate:
    strategy: str
    variant: str
    k: int
    plan_options: dict
    knobs: dict
    simulate: dict
    plan: Path | None = None
    calibration: Path | None = None  # run (sampling strategies) or profile
    refused: str | None = None  # cannot run: why
    unpredicted: str | None = None  # runs, but no prediction: why

    @property
    def options_key(self) -> tuple[str, str]:
        """The strategy and its plan options: what a calibration run or a speed fit is kept under."""
        return self.strategy, json.dumps(self.plan_options, sort_keys=True)


def entry(
    c: Candidate,
    info,
    link: str,
    peak,
    source: str,
    fits,
    options: AdviseOptions,
    cluster=None,
    hosts: list[dict] | None = None,
) -> dict:
    e = {
        "strategy": c.strategy,
        "variant": c.variant,
        "family": info.family,
        "workers": c.k,
        "link": link,
        "plan_options": c.plan_options,
        "train_options": c.knobs,
        "status": "refused",
        "predicted_epoch_seconds": None,
        "bytes_per_epoch": None,
        "peak_memory_bytes": peak,
        "memory_source": source,
        "fits": fits,
        "time_to_target_seconds": None,
        "epochs_to_target": None,
        "optimizer_steps_per_epoch": None,
        "breakdown": None,
        "model_epoch_seconds": None,
        "anchor_seconds": None,
        "simulated_system": None,
        "model_check_error": None,
        "compute_speed": None,
        "exactness": info.exactness,
        "reason": c.refused,
    }
    if cluster is not None:
        e["hosts"] = hosts  # per host kind: its device memory, its workers' peak, whether it fits
        short = next((h for h in hosts or () if h["fits"] is False), None)
        if short is not None:
            kind = next(x for x in cluster.kinds if x.name == short["name"])
            e["misfit"] = (
                f"on host kind {kind.name!r} ({kind.count} host{'s' if kind.count > 1 else ''}, "
                f"{human_bytes(kind.device_memory_bytes)} per worker) its workers need "
                f"{human_bytes(short['peak_memory_bytes'])}"
            )
    if options.plans and c.plan is not None:
        e["plan"] = str(c.plan)
        e["train_command"] = train_command(str(c.plan), None if cluster is not None else link, c.knobs, c.k)
    return e


def predict(
    c: Candidate,
    info,
    link: str,
    e: dict,
    meta: dict,
    options: AdviseOptions,
    profile_path,
    profile_error,
    profile_check,
    calibration_runs: dict,
    cache: Cache,
    sims: dict,
    cluster=None,
    speed_fits: dict | None = None,
) -> None:
    speed, profile_check = _fitted_speed(c, info, e, profile_check, speed_fits)
    if info.mini_batch:
        got = calibration_runs.get(c.options_key)
        if not isinstance(got, tuple):
            e["status"], e["reason"] = "not predicted", f"not predicted: {got or 'no calibration run'}"
            return
        plan, run, profile, check = got[0], got[1], None, got[2]
    else:
        if profile_path is None:
            e["status"], e["reason"] = "not predicted", f"not predicted: {profile_error or 'no profile'}"
            return
        plan, run, profile, check = c.plan, None, profile_path, profile_check
    result = _simulated(c, link, options, cache, sims, cluster, speed, plan, run, profile)
    if isinstance(result, G3InputError):
        e["status"], e["reason"] = "not predicted", f"not predicted: {result}"
        return
    _record(c, info, link, e, options, cluster, result, check)


def _fitted_speed(c: Candidate, info, e: dict, profile_check, speed_fits: dict | None) -> tuple[float, dict]:
    """The candidate's compute speed and model check: its own run's fit, else 1.0 and the profile's check."""
    speed = 1.0
    if info.fits_own_speed:
        got = (speed_fits or {}).get(c.options_key)
        if isinstance(got, tuple):  # its own run's speed and check, in place of the profile plan's check
            speed, profile_check = float(got[0]["speed"]), got[1]
            e["compute_speed"] = speed
        else:  # predicted from the profile's rates as they are
            e["compute_speed_note"] = got or "compute speed not fitted: no run of its own plan"
    return speed, profile_check


def _simulated(
    c: Candidate, link: str, options, cache: Cache, sims: dict, cluster, speed, plan, run, profile
):
    """The simulation of the candidate's plan (kept in ``sims``), or the G3InputError that stopped it."""
    from stages.simulate import SimulateOptions, simulate_plan

    if cluster is None:
        per_worker = {"bandwidth": parse_rate(link) / 8}
        if speed != 1.0:
            per_worker["worker_speed"] = (speed,) * c.k
    else:  # each rank its host kind's link and speed, and its host (docs/DESIGN.md "Advisor")
        per_worker = {
            "bandwidth": cluster.slowest_link().link_bits_per_second / 8,
            "worker_bandwidth": cluster.link_bytes(),
            "worker_speed": tuple(speed * s for s in cluster.speeds()),
            "worker_hosts": tuple(cluster.rank_hosts()),
        }
    so = SimulateOptions(
        workers=c.k,
        latency=latency(options),
        profile=str(profile) if profile else None,
        run=str(run) if run else None,
        scaling=(),
        cache=str(cache.root / "simcache"),
        **per_worker,
        **c.simulate,
    )
    key = (str(plan), c.k, link, json.dumps(c.simulate, sort_keys=True), speed)
    if key not in sims:
        try:
            sims[key] = simulate_plan(plan, so, out=cache.root / "sim")[0]
        except G3InputError as exc:
            sims[key] = exc
    return sims[key]


def _record(c: Candidate, info, link: str, e: dict, options, cluster, result: dict, check) -> None:
    """Fill the entry ``e`` with the prediction for the candidate's system in the simulation ``result``."""
    from stages.plan import parse_options

    parsed = parse_options(c.strategy, {k: v for k, v in c.plan_options.items()})
    want = info.simulated_system(parsed, c.knobs)
    system = next((s for s in result["systems"] if s["system"] == want), None)
    if system is None:
        e["status"], e["reason"] = "not predicted", f"not predicted: the model has no system {want!r}"
        return
    model = float(system["epoch_seconds"])
    anchor = anchor_seconds(check, system) if options.anchor else 0.0
    epoch = max(model + anchor, model * ANCHOR_FLOOR)
    b = breakdown(system, epoch)
    e.update(
        status="ok" if e["fits"] is not False else "does not fit",
        predicted_epoch_seconds=epoch,
        model_epoch_seconds=model,
        anchor_seconds=epoch - model,
        bytes_per_epoch=int(system["bytes_per_epoch"]),
        breakdown=b,
        simulated_system=want,
        time_to_target_seconds=epoch * epochs_to_target(system, options),
        epochs_to_target=epochs_to_target(system, options),
        optimizer_steps_per_epoch=updates_per_epoch(system),
        reason=describe(b, link if cluster is None else f"{cluster.name}'s links"),
        model_check_error=(check or {}).get("error"),
    )


def updates_per_epoch(system: dict) -> float:
    """Optimizer steps a modelled epoch takes: a mini-batch model's steps (the updates it takes, where it says:
    clustergcn skips a step with no training node), one for full-graph training."""
    return float(system.get("optimizer_steps") or system.get("steps") or 1)


def epochs_to_target(system: dict, options: AdviseOptions) -> int:
    """Epochs this candidate needs under the convergence model (CONVERGENCE_MODELS)."""
    if options.convergence == "epochs":
        return options.target_epochs
    return max(1, math.ceil(options.target_epochs / updates_per_epoch(system)))


def anchor_seconds(check: dict | None, system: dict) -> float:
    """What the model misses at its calibration point, carried to this candidate: the calibration run's measured
    epoch minus the model's epoch for that run (model_check), per step of a sampling model (scaled by this
    epoch's steps over the calibration's), per epoch otherwise. Zero without a check."""
    if not check or check.get("predicted_epoch_seconds") is None:
        return 0.0
    residual = float(check["measured_epoch_seconds"]) - float(check["predicted_epoch_seconds"])
    if check.get("steps") and system.get("steps"):
        residual *= int(system["steps"]) / int(check["steps"])
    return residual


def rank(entries: list[dict], memory: int) -> list[dict]:
    """Best first: predicted and fitting by epoch time; then predicted but not fitting; then not predicted; then
    refused. Each entry's reason says why it is where it is."""

    tiers = {"ok": 0, "does not fit": 1, "not predicted": 2}  # then refused
    order = sorted(
        entries,
        key=lambda e: (
            tiers.get(e["status"], 3),
            e["predicted_epoch_seconds"] if e["predicted_epoch_seconds"] is not None else math.inf,
            e["strategy"],
            e["variant"],
            e["workers"],
        ),
    )
    best = next((e for e in order if e["status"] == "ok"), None)
    for i, e in enumerate(order, start=1):
        e["rank"] = i
        if e["status"] == "ok":
            lead = (
                "fastest predicted epoch"
                if e is best
                else f"{e['predicted_epoch_seconds'] / best['predicted_epoch_seconds']:.2f}x the best's epoch"
            )
            e["reason"] = f"{lead}; {e['reason']}"
        elif e["status"] == "does not fit" and e.get("misfit"):
            e["reason"] = f"does not fit: {e['misfit']} ({e['memory_source']}); predicted: {e['reason']}"
        elif e["status"] == "does not fit":
            e["reason"] = (
                f"does not fit: needs {human_bytes(e['peak_memory_bytes'])} per worker, the device has "
                f"{human_bytes(memory)} ({e['memory_source']}); predicted: {e['reason']}"
            )
        elif e["status"] == "refused" and e["reason"] and not e["reason"].startswith("refused"):
            e["reason"] = f"refused: {e['reason']}"
    return order
