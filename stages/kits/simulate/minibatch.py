"""A calibrated model of a sampling strategy's epoch (``distdgl``, ``bytegnn``) for any worker count.

Calibrated on a run of the strategy (``g3 simulate PLAN --run RUN``): from its ``metrics.jsonl`` (the epochs
after the first), per worker and step, the sampled arcs, the first block's source rows, the rows fetched from
other workers, and the seconds of sampling, gathering inputs and computing — hence seconds per sampled arc
(sampling, compute) and per source row (gathering). A step of worker w at K workers is then

    prepare = arcs × t_sample + rows × t_gather + net(remote rows)           (the sampler thread)
    step    = max(prepare, arcs × t_compute) with --prefetch, their sum without; + the gradient all-reduce
    net     = L round trips × 2 × latency + remote bytes / bandwidth
              (a request to the owners per hop beyond the targets' and one for the input rows, each answered)

with remote bytes = remote rows × (feature width × 4 + (fanout + 1) × 8 for the frontier's sampling answers).
How the workload moves with K: with ``--batch-order local`` a worker's batch (B targets) and so its arcs and
rows per step stay, and the steps per epoch fall as ⌈N_train / (K·B)⌉; with ``global`` a worker computes B/K
targets of each of ⌈N_train / B⌉ steps, its arcs and rows scaled by K₀/K. The remote share of the source
rows grows as a random partition's, (K−1)/K, scaled to the profiled run's measured share (a one-worker run has
none: the random partition's share is used, an upper bound for METIS-like partitions). Assumptions, stated in
the result's notes: rates do not change with K (no contention model), the per-step work of every worker is the
profiled mean (no imbalance).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from stages.common.artifact_json import resolve_reference
from stages.common.errors import G3InputError
from stages.common.knobs import prefetch_depth
from stages.common.run_artifact import calibration_records, load_run_meta
from stages.kits.simulate.engine import Network
from stages.kits.simulate.network import allreduce_seconds
from stages.kits.simulate.scaling import at_k_and_scaling


@dataclass
class MiniBatchProfile:
    strategy: str
    workers: int  # K₀ of the profiled run
    order: str
    batch_size: int
    fanouts: list[int]
    feat_dim: int
    num_train: int
    num_params: int
    arcs_per_step: float  # per worker
    rows_per_step: float  # the first block's sources, per worker
    remote_share: float  # of those rows, fetched from other workers
    t_sample: float  # seconds per sampled arc
    t_gather: float  # seconds per source row (local gathering and the loopback fetch of the profiled run)
    t_compute: float  # seconds per sampled arc (forward and backward)
    prefetch: bool
    measured_epoch_seconds: float

    @classmethod
    def from_run(cls, run: Path, plan_meta: dict) -> MiniBatchProfile:
        run = Path(run)
        info, _, steady, workers = calibration_records(run)
        if not workers or "sampled_arcs" not in workers[0]:
            raise G3InputError(
                "--run: the run has no sampling statistics (a distdgl or bytegnn run of g3 "
                "from after they were recorded is needed)",
                path=run,
            )
        if "source_rows" not in workers[0]:
            raise G3InputError("--run: the run predates the source-row statistics; train it again", path=run)
        options = (info.get("strategy") or {}).get("options") or {}
        steps = sum(int(r.get("steps", 1)) for r in steady) * len(steady[0]["workers"])  # worker-steps
        arcs = sum(w["sampled_arcs"] for w in workers)
        rows = sum(w["source_rows"] for w in workers)
        store = plan_meta["store"]
        labels_train = sum(int(x["num_train"]) for x in plan_meta["workers"] if "num_train" in x)
        cfg = info.get("config") or {}
        return cls(
            strategy=info["strategy"]["name"],
            workers=int(info["plan"]["num_workers"]),
            order=options.get("batch_order", "local"),
            batch_size=int(options["batch_size"]),
            fanouts=[int(f) for f in options["fanouts"]],
            feat_dim=int(store["feat_dim"]),
            num_train=labels_train,
            num_params=_num_params(run),
            arcs_per_step=arcs / steps,
            rows_per_step=rows / steps,
            remote_share=sum(w["fetched_rows"] for w in workers) / max(rows, 1),
            t_sample=sum(w["sample_seconds"] for w in workers) / max(arcs, 1),
            t_gather=sum(w["fetch_seconds"] for w in workers) / max(rows, 1),
            t_compute=sum(w["compute_seconds"] for w in workers) / max(arcs, 1),
            prefetch=prefetch_depth(cfg.get("prefetch")) > 0,
            measured_epoch_seconds=statistics.median(r["epoch_seconds"] for r in steady),
        )


def _num_params(run: Path) -> int:
    import torch

    weights = run / "model.pt" if (run / "model.pt").is_file() else run / "init.pt"
    return int(sum(t.numel() for t in torch.load(weights, weights_only=True).values()))


def run_itemsize(config: dict) -> int:
    """Bytes per feature and model value of a run of ``config`` (its ``--dtype``; float32 when it names none)."""
    return {"float64": 8, "float16": 2, "bfloat16": 2}.get(str(config.get("dtype")), 4)


def remote_share(p: MiniBatchProfile, k: int) -> float:
    if k <= 1:
        return 0.0
    random_share = (k - 1) / k
    if p.workers <= 1 or p.remote_share <= 0:
        return random_share
    return min(1.0, p.remote_share * random_share / ((p.workers - 1) / p.workers))


def run_calibrated_result(
    plan: Path, meta: dict, k: int, options, run, notes: list[str], profile, systems: list, scaling: list
) -> dict:
    """simulate.json's body for a model calibrated on a run of the plan (``rates.profile``: its fitted rates)."""
    return {
        "plan": str(plan.resolve()),
        "simulated_plan": str(plan.resolve()),
        "workers": k,
        "num_nodes": int(meta["store"]["num_nodes"]),
        "model": meta["config"],
        "network": {"bandwidth_bytes_per_second": options.bandwidth, "latency_seconds": options.latency},
        "rates": {"source": f"run {run}", "notes": notes, "profile": asdict(profile)},
        "systems": systems,
        "scaling": scaling,
    }


def step_work(
    p: MiniBatchProfile, speed: float, arcs: float, rows: float, network: float
) -> tuple[float, float]:
    """A worker's seconds per step at relative ``speed``: preparing it (sampling ``arcs``, gathering ``rows``, and
    ``network`` seconds of requests) and computing it."""
    return (arcs * p.t_sample + rows * p.t_gather) / speed + network, arcs * p.t_compute / speed


def worker_record(
    rank: int,
    steps: int,
    epoch: float,
    compute: float,
    wait: float,
    allreduce: float,
    link: float,
    sent: float,
    idle: float | None = None,
) -> dict:
    """One simulated worker's epoch as simulate.json keeps it, from its seconds per step (a step model has no
    per-bin overhead; idle: what the epoch leaves of its compute, unless given)."""
    busy = steps * compute
    return {
        "rank": rank,
        "busy": busy,
        "overhead": 0.0,
        "comm_wait": steps * wait,
        "idle": max(0.0, epoch - busy) if idle is None else idle,
        "sync": steps * allreduce,
        "link_seconds": steps * link,
        "bytes_sent": sent,
    }


def epoch_result(
    system: str,
    k: int,
    epoch: float,
    seeds: int,
    steps: int,
    allreduce: float,
    bytes_per_epoch: int,
    workers: list[dict],
    **figures,
) -> dict:
    """A step model's simulated epoch as simulate.json keeps a system's: the figures every model has, from its
    epoch time, step count, all-reduce time and per-worker records (``busy``, ``comm_wait``, ``idle``), then the
    model's own ``figures`` (which may replace one of them), then the workers."""
    return {
        "system": system,
        "workers_count": k,
        "epoch_seconds": epoch,
        "throughput": seeds / epoch if epoch > 0 else None,
        "allreduce_seconds": steps * allreduce,
        "step_seconds": 0.0,
        "bytes_per_epoch": bytes_per_epoch,
        "busy_max": max(w["busy"] for w in workers),
        "busy_mean": mean_of(w["busy"] for w in workers),
        "comm_wait_mean": mean_of(w.get("comm_wait", 0.0) for w in workers),
        "idle_mean": mean_of(w["idle"] for w in workers),
        "steps": steps,
        **figures,
        "workers": workers,
    }


def mean_of(values) -> float:
    """The mean of ``values``; exactly the value when they are all equal (a uniform cluster's numbers stay
    bit for bit what one worker's were)."""
    values = [float(v) for v in values]
    if all(v == values[0] for v in values):
        return values[0]
    return sum(values) / len(values)


def simulate_minibatch(p: MiniBatchProfile, k: int, bandwidth: float, latency: float, net=None) -> dict:
    """The modelled epoch at ``k`` workers (a system entry of simulate.json). ``net``: a :class:`Network` of
    ``k`` workers with per-worker links and speeds (a cluster of unlike hosts; default: ``bandwidth`` and
    ``latency`` for every worker): each worker's sampling, gathering and compute take its seconds ÷ its speed,
    its remote rows come from its peers evenly, each part at the slower of the two links, and the slowest
    worker's step bounds every step (the all-reduce waits for it), at the slowest link."""
    net = net or Network(bandwidth, latency)
    latency = net.latency
    if p.order == "local":
        steps = math.ceil(p.num_train / (k * p.batch_size))
        scale = 1.0
    else:
        steps = math.ceil(p.num_train / p.batch_size)
        scale = p.workers / k
    arcs, rows = p.arcs_per_step * scale, p.rows_per_step * scale
    remote = rows * remote_share(p, k)
    frontier_answer = (p.fanouts[1] + 1) * 8 if len(p.fanouts) > 1 and p.fanouts[1] > 0 else 0
    remote_bytes = remote * (p.feat_dim * 4 + frontier_answer)
    rounds = len(p.fanouts)  # L − 1 hops of remote sampling and the input rows' pull: request and reply each
    per = []  # per worker: (step, prepare, compute, network)
    for w in range(k):
        comm = (net.peer_transfer(remote_bytes, w, k) + rounds * 2 * latency) if k > 1 else 0.0
        prepare, compute = step_work(p, net.speed(w), arcs, rows, comm)
        per.append((max(prepare, compute) if p.prefetch else prepare + compute, prepare, compute, comm))
    step, prepare, compute, comm = max(per, key=lambda x: x[0])  # the slowest worker bounds the step
    allreduce = allreduce_seconds(p.num_params, k, net)
    epoch = steps * (step + allreduce)
    workers = [
        worker_record(r, steps, epoch, c, n, allreduce, n, steps * remote_bytes)
        for r, (_, _, c, n) in enumerate(per)
    ]
    parts = {"prepare": prepare, "compute": compute, "network": comm, "allreduce": allreduce}
    sent = int(steps * remote_bytes * k)
    return epoch_result(p.strategy, k, epoch, p.num_train, steps, allreduce, sent, workers, step_parts=parts)


def calibration_run(plan: Path, meta: dict, options) -> Path:
    """``--run``, checked: given, with its epochs recorded, and trained from ``plan`` (what a calibrated model
    is fitted to)."""
    if not options.run:
        raise G3InputError(
            f"a {meta['strategy']['name']} plan is simulated from a run of it: give --run RUN "
            "(g3 train PLAN -o RUN)",
            path=plan,
        )
    run = Path(options.run)
    if not (run / "metrics.jsonl").is_file():
        raise G3InputError("--run: no metrics.jsonl (train the plan first: g3 train PLAN -o RUN)", path=run)
    trained = resolve_reference(load_run_meta(run)["plan"], run, "plan.json").resolve()
    if trained != plan.resolve():
        raise G3InputError(f"--run was trained from {trained}, not from this plan", path=run)
    return run


def run_minibatch_simulation(plan: Path, meta: dict, options, out: Path) -> dict:
    """`g3 simulate PLAN --run RUN` for a sampling strategy: the modelled epoch at K and the scaling table."""
    run = calibration_run(plan, meta, options)
    profile = MiniBatchProfile.from_run(run, meta)
    k = options.workers or int(meta["num_workers"])
    main, scaling = at_k_and_scaling(
        options,
        k,
        lambda kk, net: [simulate_minibatch(profile, kk, options.bandwidth, options.latency, net=net)],
    )
    notes = [
        f"calibrated on {run} (K = {profile.workers}, measured median epoch "
        f"{profile.measured_epoch_seconds:.3f} s); throughput = training seeds per second",
        "assumes per-arc and per-row rates independent of K (no contention) and no imbalance between workers",
        "remote share of source rows grows as a random partition's (K-1)/K, scaled to the run's measured share",
    ]
    return run_calibrated_result(plan, meta, k, options, run, notes, profile, main, scaling)
