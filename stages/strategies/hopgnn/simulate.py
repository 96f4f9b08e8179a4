"""`g3 simulate` model of the ``hopgnn`` strategy: K time steps per iteration, the model migrating between them.

Calibrated on a run of a hopgnn plan (``--run RUN``) like the model of ``distdgl``
(:mod:`stages.kits.simulate.minibatch`: per worker and iteration the sampled arcs and the first blocks' source rows,
summed over its time steps; seconds per arc of sampling and compute, per row of gathering), plus what a hopgnn
run records: the share of source rows read remotely per time step (``feature_misses``), how much of that
pre-gathering removes (``fetched_rows`` / ``feature_misses``: one deduplicated fetch per iteration), the roots
run away from home (``away_roots``, merged steps) and the model's size. One iteration of server s at K workers,
with m merged steps (T = K − m time steps; ``--batch-order local-only``: T = 1, nothing migrates):

    S          = ⌈N_train / B⌉ iterations (global batches; local-only ⌈N_train / (K·⌈B/K⌉)⌉)
    arcs, rows = the profiled run's per worker and iteration × K₀/K       (each server computes B/K roots)
    miss share = (1 − a)·s + a·(1 − s/(K−1))                              a = m/K roots away from home
                 s: the home share, as a random partition's (K−1)/K scaled to the run's (its epochs without
                 merging; a run that merged in every epoch: solved from its miss share and away roots); an away
                 root's rows not at home are spread over the other servers, the one computing it among them
    fetched    = rows × miss share × d       d = the run's fetched / missed rows (pre-gathering on), else 1
    prepare    = arcs × t_sample + rows × t_gather + net(fetched rows × width × item + missed rows ×
                 (fanout₂ + 1) × 8) + rounds × 3 × latency
                 rounds = T × (L − 1) sampling rounds + 1 fetch (pre-gathering) or T fetches
    migrate    = (T − 1) × (latency + 2·P·item / bandwidth)   parameters and accumulated gradients, one
                 message per server per time step (--migrate on)
    iteration  = max(prepare, arcs × t_compute + migrate) with --prefetch, their sum without; + one gradient
                 all-reduce of P values

``--merge N`` is m = min(N, K − 1); ``auto`` is the runtime's own rule (``merge_decision``) run on modelled
epochs: merge one more step while the modelled epoch falls. A plan that merges is also modelled without
merging (system ``hopgnn-merge-off``). Assumptions, in the result's notes: the time steps are balanced (no
imbalance, no wait at a migration), rates and the deduplication factor do not change with K or m, a time
step's rows do not depend on how many roots it holds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from stages.common.errors import G3InputError
from stages.common.run_artifact import calibration_records
from stages.kits.simulate.engine import Network
from stages.kits.simulate.minibatch import (
    MiniBatchProfile,
    epoch_result,
    remote_share,
    run_itemsize,
    run_minibatch_simulation,
    step_work,
    worker_record,
)
from stages.kits.simulate.network import allreduce_seconds
from stages.kits.simulate.scaling import at_k_and_scaling


@dataclass
class HopProfile:
    local_only: bool
    pregather: bool
    migrate: bool
    merge: str | int  # the plan's: "auto" or a number of steps (0 = off)
    itemsize: int  # bytes per feature value and model value (the run's --dtype)
    home_share: float  # s at K₀: the share of a home-computed root's rows on other servers
    dedup: float  # fetched rows per missed row (pre-gathering's deduplication; 1 without)
    away_share: float  # measured: roots computed away from home
    merged_measured: int  # the run's last epoch's merged steps

    @classmethod
    def from_run(cls, run: Path, plan_meta: dict, p: MiniBatchProfile) -> HopProfile:
        info, records, steady, workers = calibration_records(run)
        if "feature_misses" not in workers[0]:
            raise G3InputError(
                "--run: the run has no hopgnn statistics (feature_misses); train the plan again", path=run
            )
        opts = plan_meta["strategy"]["options"]
        away = sum(w["away_roots"] for w in workers) / max(len(steady) * p.num_train, 1)
        # the shares are counts, not times: unmerged epochs (the steady ones, else the first of --merge auto)
        # give s directly
        unmerged = [w for w in workers if w.get("merged_steps", 0) == 0] or [
            w for r in records for w in r["workers"] if w.get("merged_steps", 0) == 0
        ]
        rows = sum(w["source_rows"] for w in unmerged or workers)
        misses = sum(w["feature_misses"] for w in unmerged or workers)
        home = misses / max(rows, 1) if unmerged else _home_share(misses / max(rows, 1), away, p.workers)
        return cls(
            local_only=opts["batch_order"] == "local-only",
            pregather=bool(opts["pregather"]),
            migrate=bool(opts["migrate"]),
            merge=opts["merge"],
            itemsize=run_itemsize(info.get("config") or {}),
            home_share=home,
            dedup=sum(w["fetched_rows"] for w in unmerged or workers) / misses if misses else 1.0,
            away_share=away,
            merged_measured=int(records[-1]["workers"][0].get("merged_steps", 0)),
        )


def _home_share(miss: float, away: float, k: int) -> float:
    """s from the measured miss share μ = (1 − a)·s + a·(1 − s/(K−1)), i.e. s = (μ − a) / (1 − a·K/(K−1)).
    A run that merged (nearly) every step away leaves s undetermined: its miss share is used."""
    if k <= 1 or away <= 0:
        return miss
    den = 1 - away * k / (k - 1)
    return min(1.0, max(0.0, (miss - away) / den)) if den > 0.25 else miss


def miss_share(p: MiniBatchProfile, h: HopProfile, k: int, merged: int) -> float:
    """The share of a server's source rows read from other servers at ``k`` workers with ``merged`` steps."""
    if k <= 1:
        return 0.0
    s = remote_share(dataclasses.replace(p, remote_share=h.home_share), k)
    a = merged / k
    return (1 - a) * s + a * (1 - s / (k - 1))


def simulate_hopgnn(
    p: MiniBatchProfile,
    h: HopProfile,
    k: int,
    bandwidth: float,
    latency: float,
    merged: int,
    name: str = "hopgnn",
    net=None,
) -> dict:
    """The modelled epoch at ``k`` workers with ``merged`` time steps merged away (a system of simulate.json).
    ``net``: per-worker links and speeds (a cluster of unlike hosts): each server's sampling, gathering and
    compute ÷ its speed, its fetched rows from its peers evenly at the slower link of each pair, the migrations
    (every server at once) at the slowest link; the slowest server's iteration bounds every iteration."""
    net = net or Network(bandwidth, latency)
    latency = net.latency
    merged = 0 if h.local_only else min(merged, k - 1)
    t_steps = 1 if h.local_only else k - merged
    steps = math.ceil(p.num_train / (k * math.ceil(p.batch_size / k) if h.local_only else p.batch_size))
    arcs, rows = p.arcs_per_step * p.workers / k, p.rows_per_step * p.workers / k
    missed = rows * miss_share(p, h, k, merged)
    fetched = missed * (h.dedup if h.pregather else 1.0)
    answers = (p.fanouts[1] + 1) * 8 if len(p.fanouts) > 1 and p.fanouts[1] > 0 else 0
    feature_bytes = fetched * p.feat_dim * h.itemsize
    fetch_bytes = feature_bytes + missed * answers
    rounds = t_steps * (len(p.fanouts) - 1) + (1 if h.pregather else t_steps)
    migrations = (t_steps - 1) if (h.migrate and k > 1) else 0
    migrate_bytes = migrations * 2 * p.num_params * h.itemsize
    migrate = migrations * latency + (0.0 if net.one_host(k) else net.transfer(migrate_bytes))
    per = []  # per server: (iteration, prepare, compute, network)
    for w in range(k):
        network = (net.peer_transfer(fetch_bytes, w, k) + rounds * 3 * latency) if k > 1 else 0.0
        prepare, compute = step_work(p, net.speed(w), arcs, rows, network)
        iteration = max(prepare, compute + migrate) if p.prefetch else prepare + compute + migrate
        per.append((iteration, prepare, compute, network))
    iteration, prepare, compute, network = max(per, key=lambda x: x[0])
    allreduce = allreduce_seconds(p.num_params, k, net)
    epoch = steps * (iteration + allreduce)
    sent = steps * (fetch_bytes + migrate_bytes)
    workers = [
        worker_record(r, steps, epoch, c, n + migrate, allreduce, n + migrate, sent)
        for r, (_, _, c, n) in enumerate(per)
    ]
    figures = dict(
        time_steps=t_steps,
        merged_steps=merged,
        feature_bytes_per_epoch=round(steps * feature_bytes * k),
        migrated_bytes_per_epoch=round(steps * migrate_bytes * k),
        miss_rate=miss_share(p, h, k, merged),
        step_parts={
            "prepare": prepare,
            "compute": compute,
            "network": network,
            "migrate": migrate,
            "allreduce": allreduce,
            "rounds": rounds,
        },
    )
    return epoch_result(name, k, epoch, p.num_train, steps, allreduce, round(sent * k), workers, **figures)


def auto_merged(
    p: MiniBatchProfile, h: HopProfile, k: int, bandwidth: float, latency: float, net=None
) -> int:
    """The merged steps ``--merge auto`` settles at on modelled epochs: the runtime's rule (merge_decision)."""
    from stages.strategies.hopgnn.runtime import merge_decision

    history, merged, frozen = [], 0, k <= 1 or h.local_only
    while not frozen:
        seconds = simulate_hopgnn(p, h, k, bandwidth, latency, merged, net=net)["epoch_seconds"]
        history.append({"merged": merged, "seconds": seconds})
        merged, frozen = merge_decision(history, k)
    return merged


def systems_at(
    p: MiniBatchProfile, h: HopProfile, k: int, bandwidth: float, latency: float, net=None
) -> list[dict]:
    """The plan's hopgnn at ``k`` workers, and without merging when the plan merges."""
    merges = h.merge != 0 and not h.local_only
    merged = auto_merged(p, h, k, bandwidth, latency, net=net) if h.merge == "auto" else int(h.merge)
    out = [simulate_hopgnn(p, h, k, bandwidth, latency, merged, net=net)]
    if merges:
        out.append(simulate_hopgnn(p, h, k, bandwidth, latency, 0, name="hopgnn-merge-off", net=net))
    return out


def simulate(plan: Path, meta: dict, options, out: Path, replan) -> tuple[dict, None]:
    """`g3 simulate PLAN` of a hopgnn plan (its spec\'s ``simulate``)."""
    result = run_minibatch_simulation(plan, meta, options, out)  # checks --run, calibrates the profile
    p = MiniBatchProfile(**result["rates"]["profile"])
    h = HopProfile.from_run(Path(options.run), meta, p)
    result["systems"], result["scaling"] = at_k_and_scaling(
        options,
        result["workers"],
        lambda kk, net: systems_at(p, h, kk, options.bandwidth, options.latency, net=net),
        extra=("time_steps", "feature_bytes_per_epoch", "migrated_bytes_per_epoch"),
    )
    result["rates"]["hopgnn"] = asdict(h)
    result["rates"]["notes"] = result["rates"]["notes"][:1] + [
        "hopgnn: T = K - merged time steps per iteration, (T-1) migrations of 2P values per server (--migrate "
        "on), one gradient all-reduce per iteration; --merge auto: the runtime's rule on modelled epochs "
        f"(the run settled at {h.merged_measured} merged)",
        "assumes balanced time steps (no wait at a migration), rates and pre-gathering's deduplication "
        "independent of K and of merging, no imbalance between workers",
        "the home share of source rows grows as a random partition's (K-1)/K, scaled to the run's; a root "
        "merged away from home reads its rows from the other servers evenly",
    ]
    return result, None
