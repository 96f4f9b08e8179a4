"""`g3 simulate PLAN`: a discrete-event simulation of one training epoch on K workers (:func:`run_simulate`).

Each strategy's spec holds its simulator (``StrategySpec.simulate``): g3's runs every full-graph system (g3 with
each ``--pipeline`` schedule, bns-gcn, sancus and an L-hop halo-replication baseline) on one bins plan's work, with
compute rates from a profile of the real runtime (``g3 train --profile``) and the network from ``--bandwidth`` and
``--latency``; the mini-batch strategies' models are calibrated on a run of the plan; neutrontp's is modelled
chunk by chunk. Output: ``simulate.json``, ``workers.png``, ``scaling.png`` (docs/DESIGN.md "Simulator").
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

from stages.common.atomic import check_result, check_work_folder, write_json_atomic
from stages.common.errors import G3InputError
from stages.kits.simulate.options import SimulateOptions
from stages.simulate.replan import replanner
from stages.strategies.registry import STRATEGIES, load_plan

SIM_SCHEMA = "g3.simulate"
SIM_VERSION = 2  # 2: the layer-barrier baseline is bns-gcn; sancus-broadcast, sancus-p2p


def run_simulate(
    plan: str | Path, options: SimulateOptions, out: str | Path | None = None, force: bool = False
) -> dict:
    """Entry point of `g3 simulate`: simulate PLAN (or its store at ``--workers K``) and the scaling table."""
    plan = Path(plan)
    out = Path(out) if out else plan.parent / f"{plan.name}.sim"
    inputs = (plan, options.profile, options.run)
    check_work_folder(out, "-o", lambda f: (f / "simulate.json").is_file(), inputs)
    if options.cache:  # the partitions and plans of other K it made before, each a part-* folder
        check_work_folder(
            Path(options.cache),
            "--cache",
            lambda f: all(p.name.startswith("part-") for p in f.iterdir()),
            inputs,
        )
    check_result(out / "simulate.json", force, "an earlier simulation")
    t0 = time.perf_counter()
    result, records = simulate_plan(plan, options, out)
    return _finish(result, out, t0, records=records)


def simulate_plan(
    plan: str | Path, options: SimulateOptions, out: str | Path | None = None
) -> tuple[dict, list[dict] | None]:
    """What `g3 simulate` computes, without writing simulate.json or plots: (simulate.json's body, the systems
    with their timeline spans or None). The same checks as `g3 simulate` (bad options are G3InputError); ``out``
    is where a simulator may put files of its own (none of today's do) [default: PLAN.sim]. `g3 advise` calls
    it for every candidate."""
    plan = Path(plan)
    meta, spec = load_plan(plan)
    if spec.simulate is None:
        modelled = ", ".join(s.name for s in STRATEGIES.values() if s.simulate)
        raise G3InputError(f"g3 simulate has no model of the {spec.name} strategy (only of {modelled})")
    if not 0.0 < options.boundary_sample <= 1.0:
        raise G3InputError("--boundary-sample must be in (0, 1]")
    if options.staleness_epochs < 0:
        raise G3InputError("--staleness-epochs must be >= 0")
    if options.bandwidth <= 0 or options.latency < 0:
        raise G3InputError("--bandwidth must be positive and --latency non-negative")
    if not 0.0 < options.link_share <= 1.0:
        raise G3InputError("--link-share must be in (0, 1]")
    k = options.workers or int(meta["num_workers"])
    options = _per_worker(options, k)
    if options.hosts is not None:
        if options.hosts < 1 or k % options.hosts:
            raise G3InputError(f"--hosts {options.hosts} does not divide the {k} workers")
        if not spec.simulates_hosts:
            hosted = ", ".join(s.name for s in STRATEGIES.values() if s.simulates_hosts)
            raise G3InputError(
                f"--hosts is modelled for the plans of {hosted}; the {spec.name} model has one worker per host"
            )
    out = Path(out) if out else plan.parent / f"{plan.name}.sim"
    # every model moves payload: the share of the link rate that headers leave (calibration.py)
    payload = replace(
        options,
        bandwidth=options.bandwidth * options.link_share,
        worker_bandwidth=None
        if options.worker_bandwidth is None
        else tuple(b * options.link_share for b in options.worker_bandwidth),
    )
    cache = Path(options.cache) if options.cache else plan.parent / f"{plan.name}.simcache"
    result, records = spec.simulate(plan, meta, payload, out, replanner(meta, cache))
    result["network_link"] = {
        "bandwidth_bytes_per_second": options.bandwidth,
        "link_share": options.link_share,
        "hosts": options.hosts,
    }
    per_worker = {
        "speed": options.worker_speed,
        "bandwidth_bytes_per_second": options.worker_bandwidth,
        "hosts": options.worker_hosts,
    }
    if any(v is not None for v in per_worker.values()):
        result["network_link"]["per_worker"] = {key: list(v) if v else None for key, v in per_worker.items()}
    return result, records


def _per_worker(options: SimulateOptions, k: int) -> SimulateOptions:
    """Check the per-worker speeds, links and hosts (one per rank of the K workers, positive, hosts numbered
    0 … H−1 in order of first rank) and drop what is uniform: all speeds 1 → None; one link rate for all → that
    rate as ``bandwidth``; one worker per host → None. So a uniform cluster is simulated exactly as without."""
    speed, bandwidth, hosts = options.worker_speed, options.worker_bandwidth, options.worker_hosts
    if speed is None and bandwidth is None and hosts is None:
        return options
    for name, values in (("worker_speed", speed), ("worker_bandwidth", bandwidth), ("worker_hosts", hosts)):
        if values is not None and len(values) != k:
            raise G3InputError(f"{name}: {len(values)} values for {k} workers")
    if speed is not None and not all(math.isfinite(s) and s > 0 for s in speed):
        raise G3InputError("worker_speed: every speed must be positive")
    if bandwidth is not None and not all(b > 0 for b in bandwidth):
        raise G3InputError("worker_bandwidth: every link rate must be positive")
    if hosts is not None:
        if options.hosts is not None:
            raise G3InputError("--hosts and per-worker hosts are exclusive")
        first = list(dict.fromkeys(hosts))
        if first != list(range(len(first))):
            raise G3InputError("worker_hosts: hosts must be numbered 0, 1, … in order of their first rank")
    if any(kk != k for kk in options.scaling):
        raise G3InputError(
            f"per-worker speeds, links and hosts are given for K = {k}: no scaling table at other K"
        )
    if speed is not None and all(s == 1.0 for s in speed):
        speed = None
    if bandwidth is not None and len(set(bandwidth)) == 1:
        options = replace(options, bandwidth=bandwidth[0])
        bandwidth = None
    if hosts is not None and len(set(hosts)) == k:
        hosts = None
    return replace(
        options,
        worker_speed=None if speed is None else tuple(float(s) for s in speed),
        worker_bandwidth=None if bandwidth is None else tuple(float(b) for b in bandwidth),
        worker_hosts=None if hosts is None else tuple(int(h) for h in hosts),
    )


def _finish(result: dict, out: Path, t0: float, records: list[dict] | None = None) -> dict:
    """simulate.json and the plots of a simulation (``records``: the systems with their timeline spans)."""
    result = {
        "schema": SIM_SCHEMA,
        "schema_version": SIM_VERSION,
        **result,
        "seconds": round(time.perf_counter() - t0, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    main, scaling = records or result["systems"], result["scaling"]
    out.mkdir(parents=True, exist_ok=True)
    from stages.simulate.report import plot_scaling, plot_timeline, plot_workers

    result["files"] = {"json": str(out / "simulate.json"), "workers_png": str(out / "workers.png")}
    plot_workers(main, out / "workers.png")
    if any(r.get("workers") and r["workers"][0].get("spans") for r in main):
        plot_timeline(main, out / "timeline.png")
        result["files"]["timeline_png"] = str(out / "timeline.png")
    if len(scaling) > 1:
        plot_scaling(scaling, out / "scaling.png", baselines=result.get("baselines", ()))
        result["files"]["scaling_png"] = str(out / "scaling.png")
    write_json_atomic(out / "simulate.json", result)
    result["path"] = str(out)
    return result
