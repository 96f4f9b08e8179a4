"""The simulator of the strategies whose work is a plan's bins (g3, bns-gcn, sancus): every full-graph system of
`g3 simulate` (g3 with each ``--pipeline`` schedule, bns-gcn, sancus, the halo baseline) runs the bins and P2P
tables of one bins plan, on the same partitions and rates (:mod:`.schedules`). For another worker count (``--workers
K`` ≠ the plan's, and the scaling table) the plan's store is partitioned and planned again with the plan's
partition method and configuration into a cache folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..common.atomic import write_json_atomic
from ..common.errors import G3InputError
from ..common.partition_artifact import load_assignment
from .engine import Network
from .profile import default_rates, load_rates
from .scaling import recorded_systems
from .schedules import halo_loads
from .workload import Workload, load_workload


def simulate(plan: Path, meta: dict, options, out: Path) -> tuple[dict, list[dict]]:
    """simulate.json's body for a bins-workload plan, and the systems at K with their timeline spans."""
    from . import network as options_network
    from . import simulate_workload, systems_for

    cache = Path(options.cache) if options.cache else plan.parent / f"{plan.name}.simcache"
    k = options.workers or int(meta["num_workers"])
    per_host = k // options.hosts if options.hosts else 1  # workers of one host talk over its loopback

    def network(kk: int) -> Network:  # at K, a cluster's per-worker links, speeds and hosts (one K only)
        return options_network(options, kk, workers_per_host=per_host if kk % per_host == 0 else 1)

    net = network(k)
    systems = systems_for(options)

    target = plan_for_workers(plan, meta, k, cache)
    wl = load_workload(target)
    rates = load_rates(options.profile, wl.shapes) if options.profile else default_rates(wl.shapes)
    csr = _load_csr(meta["store"].get("path")) if options.baselines else None
    main = simulate_workload(
        wl,
        systems,
        rates,
        net,
        halo=_halo_for(target, wl, csr) if csr else None,
        record=True,
        options=options,
    )

    scaling = []
    for kk in options.scaling:
        p = plan_for_workers(plan, meta, kk, cache)
        w2 = wl if kk == k else load_workload(p)
        res = (
            main
            if kk == k
            else simulate_workload(
                w2, systems, rates, network(kk), halo=_halo_for(p, w2, csr) if csr else None, options=options
            )
        )
        scaling.append(
            {
                "workers": kk,
                "plan": str(p),
                "systems": {
                    r["system"]: {
                        "epoch_seconds": r["epoch_seconds"],
                        "throughput": r["throughput"],
                        "bytes_per_epoch": r["bytes_per_epoch"],
                        "busy_max": r["busy_max"],
                        "comm_wait_mean": r["comm_wait_mean"],
                        "idle_mean": r["idle_mean"],
                    }
                    for r in res
                },
            }
        )

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


def plan_for_workers(plan: Path, meta: dict, k: int, cache: Path) -> Path:
    """PLAN itself when it is a bins plan for ``k`` workers; else a plan of the bins strategy (g3) of the same
    store, partition method and model configuration for ``k`` workers in ``cache`` (built once, reused while the
    store and configuration match). The bins and tables of that plan are the work every simulated system runs."""
    from ..common.strategies import bins_strategy, strategy_info

    bins = bins_strategy()
    same_strategy = strategy_info(meta["strategy"]["name"]).bins
    if int(meta["num_workers"]) == k and same_strategy:
        return plan
    from ..common.partition_artifact import load_partition_meta
    from ..common.partition_methods import partition_method
    from ..common.plan_artifact import load_plan_meta
    from ..partition import PartitionOptions, run_partition
    from ..plan import PlanConfig, run_plan

    part_meta = load_partition_meta(meta["partition"]["path"])
    method = part_meta["method"]
    params = part_meta.get("parameters", {})
    bin_opts = meta["strategy"]["options"] if same_strategy else {}
    cfg = {
        **{key: meta["config"][key] for key in ("model", "layers", "hidden", "heads")},
        "device_memory": meta.get("device_memory"),
        "bin_size": bin_opts.get("bin_size"),
    }
    part_dir = cache / f"part-{method}-{k}"
    plan_dir = cache / f"part-{method}-{k}.plan-{cfg['model']}"
    want = {"store": meta["store"].get("checksums"), "config": cfg, "method": method}
    stamp = plan_dir / "simulate-cache.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == json.loads(json.dumps(want)):
        try:
            load_plan_meta(plan_dir)
            return plan_dir
        except G3InputError:
            pass
    cache.mkdir(parents=True, exist_ok=True)
    # the method's own options, as the plan's partition had them (every other option keeps its default)
    same = {f: params[f] for f in partition_method(method).options if params.get(f) is not None}
    run_partition(
        meta["store"]["path"], PartitionOptions(workers=k, method=method, **same), out=part_dir, force=True
    )
    run_plan(
        part_dir,
        PlanConfig(
            model=cfg["model"],
            layers=cfg["layers"],
            hidden=cfg["hidden"],
            heads=cfg["heads"],
            strategy=bins.name,
            options={"device_memory": cfg["device_memory"], "bin_size": cfg["bin_size"]},
        ),
        out=plan_dir,
        force=True,
    )
    write_json_atomic(stamp, want)
    return plan_dir


def _halo_for(plan: Path, wl: Workload, csr) -> list | None:
    """Halo loads from the store's CSR and the plan's partition assignment (None when unavailable)."""
    from ..common.plan_artifact import load_plan_meta

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
    from ..common.store import GraphStore

    return GraphStore.open(store_path).load_csr()
