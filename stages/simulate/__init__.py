"""`g3 simulate PLAN`: a discrete-event simulation of one training epoch on K workers.

Work comes from the plan (exact bins and per-peer message tables, :mod:`.workload`), compute rates from a
profile of the real runtime (``g3 train --profile``, :mod:`.profile`), the network from ``--bandwidth`` and
``--latency`` (:mod:`.engine`). Systems: g3 with each ``--pipeline`` schedule, the other strategies and an
L-hop halo-replication baseline, all on the same partitions and rates (:mod:`.schedules`). For other worker counts (``--workers K`` ≠ the plan's, and the scaling
table) the plan's store is partitioned and planned again with the plan's method and configuration into a cache
folder. A sampling strategy's plan (distdgl, bytegnn) is modelled per step from a run of it (:mod:`.minibatch`).
A ``neutrontp`` plan (tensor parallelism, naive or decoupled) is modelled by :mod:`.tensor_parallel`: per chunk
the aggregation of each worker's column slice (arcs × slice width × the per-arc rate), the dense update of its
owned rows, and the all-to-alls the plan lists (latency + the slowest worker's busier link direction /
bandwidth), layer-synchronous (``neutrontp-<tp>``) or cut per chunk and overlapped with the next chunk's
aggregation (``neutrontp-<tp>+pipe``); other worker counts re-derive the chunks and collectives with the
planner's functions, without writing plans. Output: ``simulate.json``, ``workers.png``, ``scaling.png``
(docs/DESIGN.md "Simulator").
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..common.atomic import check_result, write_json_atomic
from ..common.errors import G3InputError
from .engine import Deadlock, Engine, Network
from .minibatch import run_minibatch_simulation
from .profile import Rates, default_rates, load_rates
from .schedules import BASELINES, SCHEDULES, bns_gcn_worker, g3_worker, halo_loads, halo_worker, sancus_worker
from .tensor_parallel import run_tp_simulation
from .workload import Workload, load_workload

SIM_SCHEMA = "g3.simulate"
SIM_VERSION = 2  # 2: the layer-barrier baseline is bns-gcn; sancus-broadcast, sancus-p2p
DEFAULT_SCALING = (2, 4, 8, 16)


@dataclass
class SimulateOptions:
    workers: int | None = None  # None: the plan's
    bandwidth: float = 10e9 / 8  # bytes per second per link direction
    latency: float = 50e-6  # seconds
    profile: str | None = None
    pipelines: tuple[str, ...] = ("none", "intra", "inter", "multi")
    baselines: bool = True
    boundary_sample: float = 1.0  # bns-gcn's P
    staleness_epochs: int = 1  # sancus's epoch:N
    scaling: tuple[int, ...] = DEFAULT_SCALING
    cache: str | None = None
    run: str | None = None  # sampling strategies: the run their model is calibrated on


_BW_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
             "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
             "bps": 1 / 8, "kbps": 1e3 / 8, "mbps": 1e6 / 8, "gbps": 1e9 / 8}


def parse_bandwidth(text: str) -> float:
    """Bytes per second from ``10Gbit``, ``25Gbps``, ``1.25GB`` (per second) or ``inf``."""
    t = str(text).strip().lower().removesuffix("/s")
    if t in ("inf", "infinite", "unlimited"):
        return math.inf
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)", t)
    if not m or m.group(2) not in _BW_UNITS:
        raise ValueError(f"not a bandwidth: {text!r} (examples: 10Gbit, 100Gbit, 1.25GB, 400Mbit)")
    value = float(m.group(1)) * _BW_UNITS[m.group(2)]
    if value <= 0:
        raise ValueError("bandwidth must be positive")
    return value


_LAT_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_latency(text: str) -> float:
    """Seconds from ``50us``, ``0.2ms``, ``1e-5s``, ``0``."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(s|ms|us|µs|ns)?\s*", str(text).lower())
    if not m:
        raise ValueError(f"not a latency: {text!r} (examples: 50us, 0.2ms, 2ms)")
    return float(m.group(1)) * _LAT_UNITS[m.group(2) or "s"]


def parse_workers_list(text: str) -> tuple[int, ...]:
    """``2,4,8,16`` or ``2-16`` (powers of two) or ``none``."""
    t = str(text).strip().lower()
    if t in ("", "none", "0"):
        return ()
    if re.fullmatch(r"\d+-\d+", t):
        lo, hi = (int(x) for x in t.split("-"))
        out, k = [], 1
        while k <= hi:
            if k >= lo:
                out.append(k)
            k *= 2
        return tuple(out)
    try:
        ks = tuple(int(x) for x in t.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"not a list of worker counts: {text!r} (examples: 2,4,8,16 or 2-16 or none)") from None
    if any(k < 1 for k in ks):
        raise ValueError("worker counts must be >= 1")
    return ks


# ------------------------------------------------------------------------------------------------------------
# One simulation
# ------------------------------------------------------------------------------------------------------------


def allreduce_seconds(num_params: int, k: int, net: Network) -> float:
    """Ring all-reduce of the float32 weight gradients: 2(K-1)/K of the bytes per link, 2(K-1) latencies."""
    if k <= 1:
        return 0.0
    return 2 * (k - 1) / k * net.transfer(num_params * 4) + 2 * (k - 1) * net.latency


def simulate_system(wl: Workload, system: str, rates: Rates, net: Network, halo=None, record: bool = False,
                    boundary_sample: float = 1.0, staleness_epochs: int = 1) -> dict:
    """One epoch of ``system`` (``g3-<pipeline>``, ``bns-gcn``, ``sancus-broadcast``, ``sancus-p2p`` or
    ``halo``) on the workload's K workers. A sancus epoch is the mean of a sending epoch and
    ``staleness_epochs`` skipping ones (``--staleness epoch:N``)."""
    if system.startswith("sancus-"):
        n = staleness_epochs
        fresh = _simulate(wl, system, rates, net, halo, record, boundary_sample, True)
        stale = _simulate(wl, system, rates, net, halo, False, boundary_sample, False)
        mean = {key: (fresh[key] + n * stale[key]) / (n + 1) for key in
                ("epoch_seconds", "bytes_per_epoch", "busy_max", "busy_mean", "comm_wait_mean", "idle_mean")}
        mean["throughput"] = wl.num_nodes / mean["epoch_seconds"] if mean["epoch_seconds"] > 0 else None
        return {**fresh, **mean, "staleness_epochs": n, "fresh_epoch_seconds": fresh["epoch_seconds"],
                "stale_epoch_seconds": stale["epoch_seconds"]}
    return _simulate(wl, system, rates, net, halo, record, boundary_sample, True)


def _simulate(wl: Workload, system: str, rates: Rates, net: Network, halo, record: bool, boundary_sample: float,
              fresh: bool) -> dict:
    k = wl.k
    engine = Engine(k, net, record=record)
    if system.startswith("g3-"):
        sched = SCHEDULES[system[3:]]
        gens = [g3_worker(wl, w, sched, rates, engine) for w in wl.workers]
    elif system == "bns-gcn":
        gens = [bns_gcn_worker(wl, w, rates, k, boundary_sample) for w in wl.workers]
    elif system.startswith("sancus-"):
        gens = [sancus_worker(wl, w, rates, k, system.removeprefix("sancus-"), fresh) for w in wl.workers]
    elif system == "halo":
        if halo is None:
            raise G3InputError("the halo baseline needs the plan's store and partition (not available)")
        gens = [halo_worker(wl, halo[r], rates) for r in range(k)]
    else:
        raise ValueError(f"unknown system {system!r}")
    try:
        stats = engine.run(gens)
    except Deadlock as exc:
        raise G3InputError(f"{system}: {exc} (the plan's send and receive tables do not match)") from None
    t_end = max((s.end for s in stats), default=0.0)
    ar = allreduce_seconds(wl.num_params, k, net)
    sync = ar + rates.step_seconds
    epoch = t_end + sync
    workers = []
    for r, s in enumerate(stats):
        workers.append({
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
        })
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
    out = [f"g3-{p}" for p in options.pipelines]
    if options.baselines:
        out += list(BASELINES)
    return out


def simulate_workload(wl: Workload, systems: list[str], rates: Rates, net: Network, halo=None,
                      record: bool = False, options: SimulateOptions | None = None) -> list[dict]:
    o = options or SimulateOptions()
    return [simulate_system(wl, s, rates, net, halo=halo, record=record, boundary_sample=o.boundary_sample,
                            staleness_epochs=o.staleness_epochs) for s in systems if s != "halo" or halo is not None]


# ------------------------------------------------------------------------------------------------------------
# Plans for other worker counts
# ------------------------------------------------------------------------------------------------------------


def plan_for_workers(plan: Path, meta: dict, k: int, cache: Path) -> Path:
    """PLAN itself when it is a g3 plan for ``k`` workers; else a g3 plan of the same store, partition method and
    model configuration for ``k`` workers in ``cache`` (built once, reused while the store and configuration
    match). The bins and tables of a g3 plan are the work every simulated system runs."""
    if int(meta["num_workers"]) == k and meta["strategy"]["name"] == "g3":
        return plan
    from ..common.partition_artifact import load_partition_meta
    from ..common.plan_artifact import load_plan_meta
    from ..partition import PartitionOptions, run_partition
    from ..plan import PlanConfig, run_plan

    part_meta = load_partition_meta(meta["partition"]["path"])
    method = part_meta.get("method", "g3")
    params = part_meta.get("parameters", {})
    opts_g3 = meta["strategy"]["options"] if meta["strategy"]["name"] == "g3" else {}
    cfg = {**{key: meta["config"][key] for key in ("model", "layers", "hidden", "heads")},
           "device_memory": meta.get("device_memory"), "bin_size": opts_g3.get("bin_size")}
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
    opts = PartitionOptions(workers=k, method=method, gamma=params.get("gamma", 0.005),
                            balance_tol=params.get("balance_tol", 1.05), seed=params.get("seed", 0),
                            hidden=params.get("hidden", 16), max_swaps=params.get("max_swaps"),
                            degree_tol=params.get("degree_tol"))
    run_partition(meta["store"]["path"], opts, out=part_dir, force=True)
    run_plan(part_dir, PlanConfig(model=cfg["model"], layers=cfg["layers"], hidden=cfg["hidden"], heads=cfg["heads"],
                                  options={"device_memory": cfg["device_memory"], "bin_size": cfg["bin_size"]}),
             out=plan_dir, force=True)
    write_json_atomic(stamp, want)
    return plan_dir


def _halo_for(plan: Path, wl: Workload, csr) -> list | None:
    """Halo loads from the store's CSR and the plan's partition assignment (None when unavailable)."""
    from ..common.plan_artifact import load_plan_meta

    if csr is None:
        return None
    meta = load_plan_meta(plan)
    assign = Path(meta["partition"]["path"]) / "assignment.npy"
    if not assign.is_file():
        return None
    return halo_loads(csr[0], csr[1], np.load(assign), wl.k, wl)


def _load_csr(store_path: str | None):
    if not store_path or not Path(store_path).exists():
        return None
    from ..common.store import GraphStore

    return GraphStore.open(store_path).load_csr()


# ------------------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------------------


def run_simulate(plan: str | Path, options: SimulateOptions, out: str | Path | None = None,
                 force: bool = False) -> dict:
    """Entry point of `g3 simulate`: simulate PLAN (or its store at ``--workers K``) and the scaling table."""
    from ..common.plan_artifact import load_plan_meta

    plan = Path(plan)
    meta = load_plan_meta(plan)
    for p in options.pipelines:
        if p not in SCHEDULES:
            raise G3InputError(f"unknown --pipeline {p!r} (choose from {', '.join(SCHEDULES)})")
    if not options.pipelines and not options.baselines:
        raise G3InputError("nothing to simulate: no --pipeline and --no-baselines")
    if not 0.0 < options.boundary_sample <= 1.0:
        raise G3InputError("--boundary-sample must be in (0, 1]")
    if options.staleness_epochs < 0:
        raise G3InputError("--staleness-epochs must be >= 0")
    if options.bandwidth <= 0 or options.latency < 0:
        raise G3InputError("--bandwidth must be positive and --latency non-negative")
    net = Network(options.bandwidth, options.latency)
    cache = Path(options.cache) if options.cache else plan.parent / f"{plan.name}.simcache"
    out = Path(out) if out else plan.parent / f"{plan.name}.sim"
    check_result(out / "simulate.json", force, "an earlier simulation")
    t0 = time.perf_counter()
    if meta["strategy"]["name"] == "neutrontp":
        result, records = run_tp_simulation(plan, meta, options)
        return _finish(result, out, t0, records=records)
    if _is_sampling(meta):
        return _finish(run_minibatch_simulation(plan, meta, options, out), out, t0)
    k = options.workers or int(meta["num_workers"])
    systems = systems_for(options)

    target = plan_for_workers(plan, meta, k, cache)
    wl = load_workload(target)
    rates = load_rates(options.profile, wl.shapes) if options.profile else default_rates(wl.shapes)
    csr = _load_csr(meta["store"].get("path")) if options.baselines else None
    main = simulate_workload(wl, systems, rates, net, halo=_halo_for(target, wl, csr) if csr else None, record=True,
                             options=options)

    scaling = []
    for kk in options.scaling:
        p = plan_for_workers(plan, meta, kk, cache)
        w2 = wl if kk == k else load_workload(p)
        res = main if kk == k else simulate_workload(w2, systems, rates, net,
                                                     halo=_halo_for(p, w2, csr) if csr else None, options=options)
        scaling.append({"workers": kk, "plan": str(p), "systems": {
            r["system"]: {"epoch_seconds": r["epoch_seconds"], "throughput": r["throughput"],
                          "bytes_per_epoch": r["bytes_per_epoch"], "busy_max": r["busy_max"],
                          "comm_wait_mean": r["comm_wait_mean"], "idle_mean": r["idle_mean"]} for r in res}})

    return _finish({
        "plan": str(plan.resolve()),
        "simulated_plan": str(Path(target).resolve()),
        "workers": k,
        "num_nodes": wl.num_nodes,
        "model": wl.config,
        "network": {"bandwidth_bytes_per_second": options.bandwidth, "latency_seconds": options.latency},
        "rates": {"source": rates.source, "notes": rates.notes, "overhead_per_bin": rates.overhead_per_bin,
                  "step_seconds": rates.step_seconds, "layers": [asdict(lr) for lr in rates.layers]},
        "systems": [{k_: v for k_, v in r.items() if k_ != "workers"} | {"workers": [
            {k_: v for k_, v in w.items() if k_ != "spans"} for w in r["workers"]]} for r in main],
        "scaling": scaling,
    }, out, t0, records=main)


def _is_sampling(meta: dict) -> bool:
    """A sampling strategy's plan (distdgl, bytegnn): modelled from a run, not from bins."""
    from ..common.strategies import strategy_info

    name = meta["strategy"]["name"]
    info = strategy_info(name)
    if info.mini_batch and not info.samples_neighbours:
        raise G3InputError(f"g3 simulate has no model of the {name} strategy (only of g3, bns-gcn, sancus, "
                           "neutrontp and the sampling strategies distdgl and bytegnn)")
    return info.samples_neighbours


def _finish(result: dict, out: Path, t0: float, records: list[dict] | None = None) -> dict:
    """simulate.json and the plots of a simulation (``records``: the systems with their timeline spans)."""
    result = {"schema": SIM_SCHEMA, "schema_version": SIM_VERSION, **result,
              "seconds": round(time.perf_counter() - t0, 3), "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    main, scaling = records or result["systems"], result["scaling"]
    out.mkdir(parents=True, exist_ok=True)
    from .report import plot_scaling, plot_timeline, plot_workers

    result["files"] = {"json": str(out / "simulate.json"), "workers_png": str(out / "workers.png")}
    plot_workers(main, out / "workers.png")
    if any(r.get("workers") and r["workers"][0].get("spans") for r in main):
        plot_timeline(main, out / "timeline.png")
        result["files"]["timeline_png"] = str(out / "timeline.png")
    if len(scaling) > 1:
        plot_scaling(scaling, out / "scaling.png")
        result["files"]["scaling_png"] = str(out / "scaling.png")
    write_json_atomic(out / "simulate.json", result)
    result["path"] = str(out)
    return result


__all__ = ["run_simulate", "SimulateOptions", "simulate_system", "simulate_workload", "parse_bandwidth",
           "parse_latency", "parse_workers_list", "allreduce_seconds", "Network"]
