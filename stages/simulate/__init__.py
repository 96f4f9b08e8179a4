"""`g3 simulate PLAN`: a discrete-event simulation of one training epoch on K workers.

Each strategy registers its simulator (``simulator`` in stages/common/strategies/): a module here whose
``simulate(plan, meta, options, out)`` returns simulate.json's body. :mod:`.bins` runs every full-graph system
(g3 with each ``--pipeline`` schedule, bns-gcn, sancus and an L-hop halo-replication baseline, :mod:`.schedules`)
on one bins plan's work (:mod:`.workload`), with compute rates from a profile of the real runtime
(``g3 train --profile``, :mod:`.profile`) and the network from ``--bandwidth`` and ``--latency``
(:mod:`.engine`); :mod:`.minibatch` models a sampling strategy per step from a run of it; :mod:`.tensor_parallel`
models tensor parallelism chunk by chunk. Output: ``simulate.json``, ``workers.png``, ``scaling.png``
(docs/DESIGN.md "Simulator").
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..common.atomic import check_result, check_work_folder, write_json_atomic
from ..common.errors import G3InputError
from ..common.settings import setting
from .calibration import LINK_SHARE, MESSAGE_SECONDS
from .engine import Deadlock, Engine, Network
from .profile import Rates
from .report import print_simulation
from .schedules import BASELINES, SCHEDULES, SystemContext, skips_stale_sends, system_workers
from .workload import Workload

SIM_SCHEMA = "g3.simulate"
SIM_VERSION = 2  # 2: the layer-barrier baseline is bns-gcn; sancus-broadcast, sancus-p2p
DEFAULT_SCALING = (2, 4, 8, 16)


_BW_UNITS = {
    "bit": 1 / 8,
    "kbit": 1e3 / 8,
    "mbit": 1e6 / 8,
    "gbit": 1e9 / 8,
    "tbit": 1e12 / 8,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "bps": 1 / 8,
    "kbps": 1e3 / 8,
    "mbps": 1e6 / 8,
    "gbps": 1e9 / 8,
}


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
    if t == "none":
        return ()
    if not t:
        raise ValueError("empty: give worker counts (2,4,8,16), a range (2-16) or 'none'")
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
        raise ValueError(
            f"not a list of worker counts: {text!r} (examples: 2,4,8,16 or 2-16 or none)"
        ) from None
    if any(k < 1 for k in ks):
        raise ValueError("worker counts must be >= 1")
    return ks


def parse_pipelines(values: tuple[str, ...]) -> tuple[str, ...]:
    """``--pipeline`` values, repeated or comma-separated, in order, each once (none given: every schedule)."""
    out: list[str] = []
    for v in values or (",".join(SCHEDULES),):
        for p in v.split(","):
            p = p.strip()
            if p not in SCHEDULES:
                raise ValueError(f"{p!r} is not one of {', '.join(SCHEDULES)}")
            if p not in out:
                out.append(p)
    return tuple(out)


@dataclass
class SimulateOptions:
    """What `g3 simulate` is told: each field with a ``setting`` is its option."""

    workers: int | None = setting(
        None,
        "Worker count K to simulate [default: the plan's]. Another K partitions and plans the plan's store "
        "again (same method, model and bins) into the --cache folder.",
        short="-w",
    )
    bandwidth: float = setting(
        10e9 / 8,
        "Link bandwidth per worker and direction, e.g. 10Gbit, 100Gbit, 1.25GB (bytes/s), inf.",
        parse=parse_bandwidth,
        cli_default="10Gbit",
    )  # bytes per second per link direction
    latency: float = setting(
        MESSAGE_SECONDS,
        "One-way latency per message, e.g. 50us, 0.2ms, 0.",
        parse=parse_latency,
        cli_default="100us",
        show_default="100us: a gloo message on this machine, calibration.py",
    )
    link_share: float = setting(
        LINK_SHARE,
        "Share of each link's bytes that carry payload (headers take the rest; "
        "stages/simulate/calibration.py).",
        show_default="0.956: TCP over Ethernet, MTU 1500",
    )
    hosts: int | None = setting(
        None,
        "Hosts the K workers run on, K/H consecutive ranks each, talking over the host's loopback and "
        "sharing its link, as `g3 train --emulate-link --hosts` [default: one per worker; full-graph plans "
        "only].",
    )
    profile: str | None = setting(
        None,
        "PROFILE.json from `g3 train PLAN --profile PROFILE.json` (seconds per arc / node / bin per layer "
        "on the real runtime). Without it, placeholder rates (not calibrated).",
        path="input",
    )
    pipelines: tuple[str, ...] = setting(
        tuple(SCHEDULES),
        "g3 schedules to simulate (repeat or comma-separate): none, intra, inter, multi "
        "[default: all four]. A neutrontp plan: 'none' simulates the bulk collectives, any other value the "
        "inter-chunk pipeline (neutrontp-TP and neutrontp-TP+pipe; both by default).",
        flag="--pipeline",
        parse=parse_pipelines,
        repeat=True,
    )
    baselines: bool = setting(
        True,
        "Also simulate the other strategies on the same partitions and rates — bns-gcn "
        "(layer-synchronous, whole partition: BNS-GCN, NeutronStar as G3 ran it), sancus-broadcast and "
        "sancus-p2p (SANCUS, --staleness epoch:N) — and the L-hop halo-replication baseline (DistGNN/ROC). Not "
        "beside a neutrontp plan (a feature split has no vertex partition: simulate a g3 plan of the store).",
    )
    boundary_sample: float = setting(
        1.0, "bns-gcn's sampling ratio P: the hidden layers' boundary rows (and their gradients) scale by P."
    )
    staleness_epochs: int = setting(
        1,
        "sancus's epoch:N: hidden layers' rows move every N+1 epochs; the epoch reported is the mean of a "
        "sending epoch and N skipping ones.",
    )
    scaling: tuple[int, ...] = setting(
        DEFAULT_SCALING,
        "Worker counts of the scaling table (like the paper's Figs. 7-11, 16, 17): a list, a "
        "range of powers of two (2-16), or 'none'. Each K is partitioned and planned once into --cache.",
        parse=parse_workers_list,
        cli_default="2,4,8,16",
    )
    run: str | None = setting(
        None,
        "A mini-batch strategy's plan (distdgl, bytegnn, clustergcn, p3, hopgnn): a run of PLAN whose "
        "metrics calibrate the model of a step (seconds per sampled arc and per source row, remote share; "
        "docs/DESIGN.md 'Simulator').",
        path="input",
    )
    cache: str | None = setting(
        None,
        "Folder for the partitions and plans of other worker counts [default: PLAN.simcache].",
        path="output",
    )
    # a cluster of unlike hosts (`g3 advise --cluster`): per rank of the K workers its compute speed relative to
    # the profiled machine, its host's link rate (bytes/s per direction, as ``bandwidth``) and its host (full-graph
    # plans: ranks of one host share its link and talk over its loopback); None: uniform, as without them
    worker_speed: tuple[float, ...] | None = None
    worker_bandwidth: tuple[float, ...] | None = None
    worker_hosts: tuple[int, ...] | None = None


# ------------------------------------------------------------------------------------------------------------
# One simulation
# ------------------------------------------------------------------------------------------------------------


def allreduce_seconds(num_params: int, k: int, net: Network) -> float:
    """Ring all-reduce of the float32 weight gradients: 2(K-1)/K of the bytes per link, 2(K-1) latencies (at
    the slowest link when the links differ: every worker's part passes through it)."""
    if k <= 1 or net.one_host(k):  # one worker, or every worker on one host
        return 0.0
    return 2 * (k - 1) / k * net.transfer(num_params * 4) + 2 * (k - 1) * net.latency


def network(options: SimulateOptions, k: int, workers_per_host: int = 1) -> Network:
    """The network of ``options`` (bandwidth already the payload's, see :func:`simulate_plan`) at ``k`` workers:
    with the per-worker links, speeds and hosts of a cluster, which are given for that K."""
    per_worker = (
        options.worker_speed is not None
        or options.worker_bandwidth is not None
        or options.worker_hosts is not None
    )
    if not per_worker:
        return Network(options.bandwidth, options.latency, workers_per_host=workers_per_host)
    if any(
        v is not None and len(v) != k
        for v in (options.worker_speed, options.worker_bandwidth, options.worker_hosts)
    ):
        raise G3InputError(f"per-worker speeds, links and hosts are given for another K than {k}")
    return Network(
        options.bandwidth,
        options.latency,
        workers_per_host=workers_per_host,
        links=options.worker_bandwidth,
        speeds=options.worker_speed,
        hosts=options.worker_hosts,
    )


def rates_at(rates: Rates, speed: float) -> Rates:
    """``rates`` on a worker ``speed`` times as fast as the profiled one: every duration divided by it."""
    if speed == 1.0:
        return rates
    from .profile import LayerRates, PhaseRates

    def phase(p: PhaseRates) -> PhaseRates:
        return PhaseRates(p.per_arc / speed, p.per_node / speed, p.per_bin / speed)

    return replace(
        rates,
        layers=[
            LayerRates(phase(lr.forward), phase(lr.backward), lr.gather_per_row / speed)
            for lr in rates.layers
        ],
        overhead_per_bin=rates.overhead_per_bin / speed,
        step_seconds=rates.step_seconds / speed,
    )


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
        mean = {
            key: (fresh[key] + n * stale[key]) / (n + 1)
            for key in (
                "epoch_seconds",
                "bytes_per_epoch",
                "busy_max",
                "busy_mean",
                "comm_wait_mean",
                "idle_mean",
            )
        }
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
    sync = (
        ar + rates.step_seconds / net.slowest_speed()
    )  # the optimizer step: every worker's, the slowest's last
    epoch = t_end + sync
    workers = []
    for r, s in enumerate(stats):
        workers.append(
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
        )
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


# ------------------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------------------


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
    if not 0.0 < options.link_share <= 1.0:
        raise G3InputError("--link-share must be in (0, 1]")
    simulator = _simulator(meta)
    options = _per_worker(options, options.workers or int(meta["num_workers"]))
    if options.hosts is not None:
        from ..common.strategies import strategy_info

        k = options.workers or int(meta["num_workers"])
        if options.hosts < 1 or k % options.hosts:
            raise G3InputError(f"--hosts {options.hosts} does not divide the {k} workers")
        if strategy_info(meta["strategy"]["name"]).simulator != "bins":
            raise G3InputError(
                "--hosts is modelled for the plans whose work is bins (g3, bns-gcn, sancus); the "
                f"{meta['strategy']['name']} model has one worker per host"
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
    result, records = simulator.simulate(plan, meta, payload, out)
    result["network_link"] = {
        "bandwidth_bytes_per_second": options.bandwidth,
        "link_share": options.link_share,
        "hosts": options.hosts,
    }
    if (
        options.worker_speed is not None
        or options.worker_bandwidth is not None
        or options.worker_hosts is not None
    ):
        result["network_link"]["per_worker"] = {
            "speed": list(options.worker_speed) if options.worker_speed else None,
            "bandwidth_bytes_per_second": list(options.worker_bandwidth)
            if options.worker_bandwidth
            else None,
            "hosts": list(options.worker_hosts) if options.worker_hosts else None,
        }
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


def _simulator(meta: dict):
    """The simulator module registered with the plan's strategy (stages/common/strategies/)."""
    from ..common.strategies import STRATEGIES, strategy_info

    info = strategy_info(meta["strategy"]["name"])
    if info.simulator is None:
        modelled = ", ".join(s.name for s in STRATEGIES.values() if s.simulator)
        raise G3InputError(f"g3 simulate has no model of the {info.name} strategy (only of {modelled})")
    return info.simulator_module()


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


__all__ = [
    "print_simulation",
    "run_simulate",
    "simulate_plan",
    "SimulateOptions",
    "simulate_system",
    "simulate_workload",
    "parse_bandwidth",
    "parse_latency",
    "parse_workers_list",
    "allreduce_seconds",
    "Network",
    "network",
    "rates_at",
]
