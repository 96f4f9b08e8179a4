"""The simulator of the strategies whose work is a plan's bins (g3, bns-gcn, sancus): every full-graph system of
`g3 simulate` (g3 with each ``--pipeline`` schedule, bns-gcn, sancus, the halo baseline) runs the bins and P2P
tables of one bins plan, on the same partitions and rates (:mod:`.schedules`). For another worker count (``--workers
K`` ≠ the plan's, and the scaling table) the plan's store is partitioned and planned again with the plan's
partition method and configuration into a cache folder.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from stages.common.errors import G3InputError
from stages.common.partition_artifact import load_assignment
from stages.kits.simulate.engine import Deadlock, Engine, Network
from stages.kits.simulate.network import allreduce_seconds, rates_at
from stages.kits.simulate.network import network as options_network
from stages.kits.simulate.options import SimulateOptions
from stages.kits.simulate.profile import Rates, default_rates, load_rates
from stages.kits.simulate.scaling import recorded_systems, summary
from stages.kits.simulate.workload import Workload, load_workload
from stages.strategies.g3.pipeline import SCHEDULES
from stages.strategies.g3.schedules import (
    NAME,
    SystemContext,
    baselines,
    halo_loads,
    skips_stale_sends,
    system_workers,
)


def simulate(plan: Path, meta: dict, options: SimulateOptions, out: Path, replan) -> tuple[dict, list[dict]]:
    """simulate.json's body for a bins-workload plan, and the systems at K with their timeline spans."""
    k = options.workers or int(meta["num_workers"])
    per_host = k // options.hosts if options.hosts else 1  # workers of one host talk over its loopback

    def network(kk: int) -> Network:  # at K, a cluster's per-worker links, speeds and hosts (one K only)
        return options_network(options, kk, workers_per_host=per_host if kk % per_host == 0 else 1)

    net = network(k)
    systems = systems_for(options)

    target = plan_for_workers(plan, meta, k, replan)
    wl = load_workload(target)
    rates = load_rates(options.profile, wl.shapes) if options.profile else default_rates(wl.shapes)
    csr = _load_csr(meta["store"].get("path")) if options.baselines else None
    main = simulate_workload(
        wl, systems, rates, net, halo=_halo_for(target, wl, csr), record=True, options=options
    )

    scaling = []
    for kk in options.scaling:
        p = plan_for_workers(plan, meta, kk, replan)
        if kk == k:
            res = main
        else:
            w2 = load_workload(p)
            res = simulate_workload(
                w2, systems, rates, network(kk), halo=_halo_for(p, w2, csr), options=options
            )
        scaling.append({"workers": kk, "plan": str(p), "systems": {r["system"]: summary(r) for r in res}})

    return {
        "plan": str(plan.resolve()),
        "simulated_plan": str(Path(target).resolve()),
        "workers": k,
        "num_nodes": wl.num_nodes,
        "model": wl.config,
        "network": {
            "bandwidth_bytes_per_second": options.bandwidth,
            "latency_seconds": options.latency,
            "workers_per_host": per_host,
            **_per_worker(net),
        },
        "rates": {
            "source": rates.source,
            "notes": rates.notes,
            "overhead_per_bin": rates.overhead_per_bin,
            "step_seconds": rates.step_seconds,
            "layers": [asdict(lr) for lr in rates.layers],
        },
        "systems": recorded_systems(main),
        "baselines": [s for s in systems if s in baselines()],
        "scaling": scaling,
    }, main


def _per_worker(net: Network) -> dict:
    """The per-worker links, speeds and hosts of a cluster of unlike hosts (nothing when uniform)."""
    out = {
        "worker_bandwidth_bytes_per_second": net.links,
        "worker_speed": net.speeds,
        "worker_hosts": net.hosts,
    }
    return {key: list(value) for key, value in out.items() if value is not None}


def plan_for_workers(plan: Path, meta: dict, k: int, replan) -> Path:
    """PLAN itself when it is a g3 plan for ``k`` workers; else a g3 plan of the same store, partition method and
    model configuration for ``k`` workers (``replan``). The bins and tables of that plan are the work every
    simulated system runs."""
    same_strategy = meta["strategy"]["name"] == NAME
    if int(meta["num_workers"]) == k and same_strategy:
        return plan
    bin_opts = meta["strategy"]["options"] if same_strategy else {}
    return replan(k, NAME, {"device_memory": meta.get("device_memory"), "bin_size": bin_opts.get("bin_size")})


def _halo_for(plan: Path, wl: Workload, csr) -> list | None:
    """Halo loads from the store's CSR and the plan's partition assignment (None when unavailable)."""
    from stages.common.plan_artifact import load_plan_meta

    if csr is None:
        return None
    meta = load_plan_meta(plan)
    assign = load_assignment(meta["partition"]["path"])
    if assign is None:
        return None
    return halo_loads(csr[0], csr[1], np.asarray(assign), wl.k, wl)


def _load_csr(store_path: str | None):
    if not store_path or not Path(store_path).exists():
        return None
    from stages.common.store import GraphStore

    return GraphStore.open(store_path).load_csr()


# the figures of a sancus epoch that are the mean of a sending epoch and N skipping ones
STALENESS_MEANS = ("epoch_seconds", "bytes_per_epoch", "busy_max", "busy_mean", "comm_wait_mean", "idle_mean")


def simulate_system(
    wl: Workload,
    system: str,
    rates: Rates,
    net: Network,
    halo=None,
    record: bool = False,
    boundary_sample: float = 1.0,
    staleness_epochs: int = 1,
) -> dict:
    """One epoch of ``system`` (``g3-<pipeline>``, ``bns-gcn``, ``sancus-broadcast``, ``sancus-p2p`` or
    ``halo``) on the workload's K workers. A sancus epoch is the mean of a sending epoch and
    ``staleness_epochs`` skipping ones (``--staleness epoch:N``)."""
    if skips_stale_sends(system):
        n = staleness_epochs
        fresh = _simulate(wl, system, rates, net, halo, record, boundary_sample, True)
        stale = _simulate(wl, system, rates, net, halo, False, boundary_sample, False)
        mean = {key: (fresh[key] + n * stale[key]) / (n + 1) for key in STALENESS_MEANS}
        mean["throughput"] = wl.num_nodes / mean["epoch_seconds"] if mean["epoch_seconds"] > 0 else None
        return {
            **fresh,
            **mean,
            "staleness_epochs": n,
            "fresh_epoch_seconds": fresh["epoch_seconds"],
            "stale_epoch_seconds": stale["epoch_seconds"],
        }
    return _simulate(wl, system, rates, net, halo, record, boundary_sample, True)


def _simulate(
    wl: Workload,
    system: str,
    rates: Rates,
    net: Network,
    halo,
    record: bool,
    boundary_sample: float,
    fresh: bool,
) -> dict:
    k = wl.k
    engine = Engine(k, net, record=record)
    context = SystemContext(wl, rates, engine, halo, boundary_sample, fresh)
    if net.speeds is None:
        gens = system_workers(system, context)
    else:  # each worker's generator from its speed's rates (generators are lazy: the others are never run)
        by_speed = {
            s: system_workers(system, replace(context, rates=rates_at(rates, s))) for s in set(net.speeds)
        }
        gens = [by_speed[net.speed(r)][r] for r in range(k)]
    try:
        stats = engine.run(gens)
    except Deadlock as exc:
        raise G3InputError(f"{system}: {exc} (the plan's send and receive tables do not match)") from None
    t_end = max((s.end for s in stats), default=0.0)
    ar = allreduce_seconds(wl.num_params, k, net)
    # the optimizer step: every worker's, the slowest's last
    sync = ar + rates.step_seconds / net.slowest_speed()
    epoch = t_end + sync
    workers = [
        {
            "rank": r,
            "busy": s.busy,
            "overhead": s.overhead,
            "comm_wait": s.comm_wait,
            "idle": s.gather_wait + s.barrier_wait + (t_end - s.end),
            "sync": sync,
            "end": s.end,
            "bytes_sent": s.bytes_sent,
            "messages": s.messages,
            "link_seconds": s.link_seconds,
            **({"spans": s.spans} if record else {}),
        }
        for r, s in enumerate(stats)
    ]
    return {
        "system": system,
        "workers_count": k,
        "epoch_seconds": epoch,
        "throughput": wl.num_nodes / epoch if epoch > 0 else None,
        "allreduce_seconds": ar,
        "step_seconds": rates.step_seconds,
        "bytes_per_epoch": int(sum(s.bytes_sent for s in stats)),
        "busy_max": max((s.busy for s in stats), default=0.0),
        "busy_mean": float(np.mean([s.busy for s in stats])) if stats else 0.0,
        "comm_wait_mean": float(np.mean([s.comm_wait for s in stats])) if stats else 0.0,
        "idle_mean": float(np.mean([w["idle"] for w in workers])) if workers else 0.0,
        "workers": workers,
    }


def systems_for(options: SimulateOptions) -> list[str]:
    """The systems a simulation runs: g3 with each ``--pipeline`` schedule (every one by default), then the
    baselines unless ``--no-baselines``."""
    for p in options.pipelines:
        if p not in SCHEDULES:
            raise G3InputError(f"unknown --pipeline {p!r} (choose from {', '.join(SCHEDULES)})")
    out = [f"g3-{p}" for p in options.pipelines or SCHEDULES]
    if options.baselines:
        out += baselines()
    return out


def simulate_workload(
    wl: Workload,
    systems: list[str],
    rates: Rates,
    net: Network,
    halo=None,
    record: bool = False,
    options: SimulateOptions | None = None,
) -> list[dict]:
    o = options or SimulateOptions()
    return [
        simulate_system(
            wl,
            s,
            rates,
            net,
            halo=halo,
            record=record,
            boundary_sample=o.boundary_sample,
            staleness_epochs=o.staleness_epochs,
        )
        for s in systems
        if s != "halo" or halo is not None
    ]
