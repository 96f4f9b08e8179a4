"""`g3 simulate` model of the ``clustergcn`` strategy: every worker trains on its own cluster subgraphs, step by
step, and the gradients are all-reduced after each step.

The work is the plan's, exactly: every worker's clusters (``worker-RRRRR/clusters.npy``) and its shard's in-arcs
give, per cluster, its nodes, its training nodes, the in-arcs its nodes scan, and per pair of clusters the arcs
between them. A step of worker w takes the clusters the runtime takes (the same per-(seed, epoch, worker)
permutation, ``--clusters-per-batch`` Q of them), so its batch's nodes V and arcs A (the arcs among the chosen
clusters: every layer runs over them) are the run's own, batch by batch. For another worker count the plan's store
is partitioned again with the plan's method and parameters and every worker's nodes clustered with the planner's
own function (``--cache``), which is what `g3 plan` would write.

Calibrated on a run of the plan (``--run RUN``, its epochs after the first), three rates, each the run's measured
seconds over the work this model counts for it (the model's batches are checked against the run's recorded
``sampled_arcs`` and ``source_rows``: they must be equal):

    t_unit  compute seconds per multiply-add unit, forward and backward: a batch is
            W = Σ_l (A × edge_width_l + V × d_in_l × d_out_l) units (every layer aggregates A arcs and
            projects V rows); only steps with a training node compute
    t_scan  sampler seconds per in-arc scanned building the induced subgraph (every in-arc of the batch's nodes)
    t_row   seconds per input row gathered (V rows)
    t_opt   seconds of the optimizer step per update (the run's sync seconds minus its all-reduce)

One step at K workers, the slowest worker bounding it (the gradient all-reduce waits for every worker):

    prepare_w = scanned_w × t_scan + V_w × t_row                         (the sampler thread)
    compute_w = W_w × t_unit  (0 when worker w's batch holds no training node)
    step_w    = max(prepare_w, compute_w) with --prefetch, their sum without
    step      = max_w step_w + scalar + [all-reduce + scalar + t_opt]    (bracket: when any worker has a target)
    scalar    = a ring all-reduce of one 8-byte value (the step's global target count; the loss)
    all-reduce = ring all-reduce of the model's P float32 values: 2(K−1)/K × 4P bytes per worker, 2(K−1) latencies

An epoch is the sum over the runtime's steps (max_w ⌈C_w / Q⌉); the prediction is the mean of the modelled
epochs, the run's epochs after the first (a batch's clusters change with the epoch). Nothing else crosses the
network: ``bytes_per_epoch`` is 0, as the run records (the all-reduce is reported apart, as in every model).
Assumptions, in the result's notes: rates independent of K and of the batch's size (no contention between the
sampler thread and the compute thread, nor between workers sharing cores); Python work outside the timed
spans (the loss, building the blocks) is left out.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stages.common.errors import G3InputError
from stages.common.knobs import prefetch_depth
from stages.common.plan_artifact import load_plan_meta
from stages.common.run_artifact import calibration_records
from stages.kits.simulate.engine import Network
from stages.kits.simulate.minibatch import calibration_run, run_calibrated_result
from stages.kits.simulate.network import allreduce_seconds
from stages.kits.simulate.scaling import at_k_and_scaling

SCALAR_VALUES = 2  # an int64 or float64 scalar all-reduced per collective, in float32 values


@dataclass
class WorkerClusters:
    """One worker's clusters as the work the model counts: per cluster its nodes, training nodes and in-arcs
    scanned, and ``arcs[a, b]``: the in-arcs of cluster a's nodes from cluster b's."""

    nodes: np.ndarray
    train: np.ndarray
    scanned: np.ndarray
    arcs: np.ndarray

    @classmethod
    def of(cls, shard, clusters: np.ndarray) -> WorkerClusters:
        n = shard.num_owned
        c = np.asarray(clusters, dtype=np.int64)
        count = int(c.max()) + 1 if len(c) else 0
        indptr = np.asarray(shard.indptr, dtype=np.int64)
        indices = np.asarray(shard.indices, dtype=np.int64)
        degree = np.diff(indptr)
        labels = np.asarray(shard.load("labels"))
        rows = np.asarray(shard.load("train"), dtype=np.int64)
        rows = rows[labels[rows] >= 0]  # the runtime's training rows (labelled_rows)
        dst = np.repeat(np.arange(n, dtype=np.int64), degree)
        own = indices < n  # arcs from other workers' nodes are never in a batch
        pair = c[dst[own]] * count + c[indices[own]]
        return cls(
            nodes=np.bincount(c, minlength=count),
            train=np.bincount(c[rows], minlength=count),
            scanned=np.bincount(c, weights=degree, minlength=count).astype(np.int64),
            arcs=np.bincount(pair, minlength=count * count).reshape(count, count),
        )


@dataclass
class Batches:
    """Every step's batch on every worker, ``[steps, K]``: nodes, arcs among them, in-arcs scanned, targets."""

    nodes: np.ndarray
    arcs: np.ndarray
    scanned: np.ndarray
    train: np.ndarray


def runtime_steps(workers: list[WorkerClusters], per_batch: int) -> int:
    """The runtime's steps per epoch: the most any worker needs (``max_w ⌈C_w / Q⌉``)."""
    return max((math.ceil(len(w.nodes) / per_batch) for w in workers), default=0)


def batches(workers: list[WorkerClusters], per_batch: int, seed: int, epoch: int) -> Batches:
    """The batches of ``epoch``: worker r's step s takes clusters ``order[s·Q:(s+1)·Q]`` of its permutation of
    (seed, epoch, stream r), as the runtime (stages/strategies/clustergcn/runtime.py)."""
    from stages.kits.runtime.minibatch import shuffled

    steps, k = runtime_steps(workers, per_batch), len(workers)
    out = Batches(*(np.zeros((steps, k), dtype=np.int64) for _ in range(4)))
    for r, w in enumerate(workers):
        order = shuffled(np.arange(len(w.nodes), dtype=np.int64), seed, epoch, stream=r)
        for s in range(steps):
            chosen = order[s * per_batch : (s + 1) * per_batch]
            out.nodes[s, r] = w.nodes[chosen].sum()
            out.arcs[s, r] = w.arcs[np.ix_(chosen, chosen)].sum()
            out.scanned[s, r] = w.scanned[chosen].sum()
            out.train[s, r] = w.train[chosen].sum()
    return out


def units(layers: list[tuple[int, int]], arcs, nodes):
    """Multiply-add units of one forward pass over a batch: Σ_l (arcs × edge width + nodes × d_in × d_out)."""
    return sum(arcs * e + nodes * p for e, p in layers)


@dataclass
class ClusterProfile:
    workers: int  # K₀ of the run
    clusters: int  # --clusters (per worker)
    clusters_per_batch: int  # Q
    cluster_seed: int
    seed: int  # the run's --seed: it orders the clusters of every epoch
    epochs: list[int]  # the run's epochs after the first: the modelled epochs
    layers: list[tuple[int, int]]  # per layer (edge width, d_in × d_out)
    num_blocks: int  # blocks a step runs: the run's sampled_arcs count a batch's arcs once each
    num_train: int
    num_params: int  # P: values all-reduced per update
    t_unit: float  # compute seconds per multiply-add unit (forward and backward)
    t_scan: float  # sampler seconds per in-arc scanned
    t_row: float  # seconds per input row gathered
    t_opt: float  # optimizer step seconds per update
    prefetch: bool
    measured_epoch_seconds: float
    updates_per_epoch: list[int]  # the run's optimizer steps per modelled epoch (as the model counts them)

    @classmethod
    def from_run(cls, run: Path, plan: Path, meta: dict) -> ClusterProfile:
        from stages.common.model_spec import ModelSpec
        from stages.kits.simulate.minibatch import _num_params

        info, _, steady, _ = calibration_records(run)
        k0 = int(meta["num_workers"])
        if any(len(r["workers"]) != k0 for r in steady) or "sampled_arcs" not in steady[0]["workers"][0]:
            raise G3InputError(
                "--run: the run has no per-worker sampling statistics (sampled_arcs): train the plan again",
                path=run,
            )
        opts, cfg = meta["strategy"]["options"], info.get("config") or {}
        spec = ModelSpec.from_plan(meta)
        layers = [(s.edge_width, s.d_in * s.d_out) for s in spec.layer_shapes()]
        workers = plan_clusters(plan, meta)
        per_batch, seed = int(opts["clusters_per_batch"]), int(cfg.get("seed") or 0)
        work = scanned = rows = opt = 0.0
        compute = sample = fetch = 0.0
        updates = []
        for rec in steady:
            b = batches(workers, per_batch, seed, int(rec["epoch"]))
            for r, w in enumerate(rec["workers"]):
                want = (spec.num_blocks * int(b.arcs[:, r].sum()), int(b.nodes[:, r].sum()))
                if (int(w["sampled_arcs"]), int(w["source_rows"])) != want:
                    raise G3InputError(
                        f"--run: worker {r}'s batches of epoch {rec['epoch']} are not the plan's clusters at seed "
                        f"{seed} ({w['sampled_arcs']} arcs, {w['source_rows']} rows recorded; the model counts "
                        f"{want[0]} and {want[1]})",
                        path=run,
                    )
                has = b.train[:, r] > 0
                work += float(units(layers, b.arcs[has, r], b.nodes[has, r]).sum())
                scanned += float(b.scanned[:, r].sum())
                rows += float(b.nodes[:, r].sum())
                compute += float(w["compute_seconds"])
                sample += float(w["sample_seconds"])
                fetch += float(w["fetch_seconds"])
                opt += max(0.0, float(w.get("sync_seconds", 0.0)) - float(w.get("all_reduce_seconds", 0.0)))
            n_updates = int((b.train.sum(axis=1) > 0).sum())
            recorded = int(rec.get("steps", 1))
            if n_updates != recorded and not (n_updates == 0 and recorded == 1):
                raise G3InputError(
                    f"--run: epoch {rec['epoch']} took {recorded} optimizer steps, the plan's clusters "
                    f"give {n_updates}",
                    path=run,
                )
            updates.append(n_updates)
        total_updates = sum(updates) * k0
        return cls(
            workers=k0,
            clusters=int(opts["clusters"]),
            clusters_per_batch=per_batch,
            cluster_seed=int(opts["cluster_seed"]),
            seed=seed,
            epochs=[int(r["epoch"]) for r in steady],
            layers=layers,
            num_blocks=spec.num_blocks,
            num_train=int(sum(int(w.train.sum()) for w in workers)),
            num_params=_num_params(run),
            t_unit=compute / work if work > 0 else 0.0,
            t_scan=sample / scanned if scanned > 0 else 0.0,
            t_row=fetch / rows if rows > 0 else 0.0,
            t_opt=opt / total_updates if total_updates else 0.0,
            prefetch=prefetch_depth(cfg.get("prefetch")) > 0,
            measured_epoch_seconds=statistics.median(r["epoch_seconds"] for r in steady),
            updates_per_epoch=updates,
        )


# ------------------------------------------------------------------------------------------------------------
# The clusters at K: the plan's own, or those `g3 plan` would make for another worker count
# ------------------------------------------------------------------------------------------------------------


def plan_clusters(plan: Path, meta: dict) -> list[WorkerClusters]:
    """The plan's clusters on its partition's shards."""
    from stages.common.partition_artifact import open_shard
    from stages.common.plan_artifact import WorkerPlan

    k = int(meta["num_workers"])
    part = meta["partition"]["path"]
    return [
        WorkerClusters.of(open_shard(part, r, k), WorkerPlan(plan, r).array("clusters")) for r in range(k)
    ]


def clusters_for_workers(plan: Path, meta: dict, k: int, replan) -> list[WorkerClusters]:
    """Every worker's clusters at ``k`` workers: the plan's at its own K; else those of a plan of the same
    strategy, options and model for ``k`` workers (``replan``: the plan's store partitioned again with its method
    and parameters)."""
    if k == int(meta["num_workers"]):
        return plan_clusters(plan, meta)
    again = replan(k, meta["strategy"]["name"], meta["strategy"]["options"])
    return plan_clusters(again, load_plan_meta(again))


# ------------------------------------------------------------------------------------------------------------
# The model
# ------------------------------------------------------------------------------------------------------------


def _epoch_parts(p: ClusterProfile, b: Batches, speed, scalar, allreduce, t_opt) -> tuple:
    """One modelled epoch's seconds, updates, per-worker busy, sync, comm, step maxima and mean batch size."""
    prepare = (b.scanned * p.t_scan + b.nodes * p.t_row) / speed
    compute = np.where(b.train > 0, units(p.layers, b.arcs, b.nodes) * p.t_unit / speed, 0.0)
    per_worker = np.maximum(prepare, compute) if p.prefetch else prepare + compute
    update = b.train.sum(axis=1) > 0  # a step without a target on any worker takes no update
    n_up = int(update.sum())
    steps = len(update)
    return (
        float(per_worker.max(axis=1, initial=0.0).sum())
        + steps * scalar
        + n_up * (allreduce + scalar + t_opt),
        n_up,
        compute.sum(axis=0),
        n_up * (allreduce + t_opt),
        (steps + n_up) * scalar,
        float(prepare.max(axis=1, initial=0.0).mean()) if steps else 0.0,
        float(compute.max(axis=1, initial=0.0).mean()) if steps else 0.0,
        float(b.nodes.sum()) / max(b.nodes.size, 1),
        float(b.arcs.sum()) / max(b.arcs.size, 1),
    )


def _worker_entries(busy_w: np.ndarray, epoch: float, sync: float, comm: float) -> list[dict]:
    """simulate.json's per-worker entries of the modelled epoch."""
    return [
        {
            "rank": r,
            "busy": float(busy_w[r]),
            "overhead": 0.0,
            "comm_wait": comm,
            "idle": max(0.0, epoch - float(busy_w[r]) - sync - comm),
            "sync": sync,
            "end": epoch,
            "bytes_sent": 0,
            "messages": 0,
            "link_seconds": 0.0,
        }
        for r in range(len(busy_w))
    ]


def simulate_clustergcn(
    p: ClusterProfile, workers: list[WorkerClusters], bandwidth: float, latency: float, net=None
) -> dict:
    """The modelled epoch on ``workers``' clusters (their count is K; a system entry of simulate.json).
    ``net``: per-worker links and speeds (a cluster of unlike hosts): worker w's sampler and compute seconds ÷
    its speed (the slowest worker still bounds each step), the all-reduces at the slowest link, the optimizer
    step at the slowest speed."""
    k = len(workers)
    net = net or Network(bandwidth, latency)
    speed = np.array([net.speed(r) for r in range(k)], dtype=np.float64)
    t_opt = p.t_opt / net.slowest_speed()
    allreduce = allreduce_seconds(p.num_params, k, net)
    scalar = allreduce_seconds(SCALAR_VALUES, k, net)
    ring_bytes = 2 * (k - 1) / k * p.num_params * 4 if k > 1 else 0.0
    parts: tuple[list, ...] = tuple([] for _ in range(9))
    for epoch in p.epochs:
        b = batches(workers, p.clusters_per_batch, p.seed, epoch)
        for col, value in zip(parts, _epoch_parts(p, b, speed, scalar, allreduce, t_opt), strict=True):
            col.append(value)
    epochs, updates, busy, sync, comm, prep_max, comp_max, batch_nodes, batch_arcs = parts
    nodes, arcs = sum(batch_nodes, 0.0), sum(batch_arcs, 0.0)
    n = len(p.epochs)
    epoch = sum(epochs) / n
    busy_w = np.mean(busy, axis=0)
    steps = runtime_steps(workers, p.clusters_per_batch)
    mean_updates = sum(updates) / n
    workers_out = _worker_entries(busy_w, epoch, sum(sync) / n, sum(comm) / n)
    return {
        "system": "clustergcn",
        "workers_count": k,
        "epoch_seconds": epoch,
        "throughput": p.num_train / epoch if epoch > 0 else None,
        "allreduce_seconds": mean_updates * allreduce,
        "step_seconds": mean_updates * t_opt,
        "bytes_per_epoch": 0,
        "allreduce_bytes_per_epoch": round(mean_updates * k * ring_bytes),
        "busy_max": float(busy_w.max(initial=0.0)),
        "busy_mean": float(busy_w.mean()) if k else 0.0,
        "comm_wait_mean": sum(comm) / n,
        "idle_mean": float(np.mean([w["idle"] for w in workers_out])),
        "steps": steps,
        "optimizer_steps": mean_updates,
        "epochs_modelled": list(p.epochs),
        "epoch_seconds_per_epoch": epochs,
        "batch": {"nodes": nodes / n, "arcs": arcs / n},
        "bytes_per_step": {"allreduce": ring_bytes},
        "step_parts": {
            "prepare": sum(prep_max) / n,
            "compute": sum(comp_max) / n,
            "allreduce": allreduce,
            "scalars": 2 * scalar,
            "optimizer": t_opt,
        },
        "workers": workers_out,
    }


def simulate(plan: Path, meta: dict, options, out: Path, replan) -> tuple[dict, None]:
    """`g3 simulate PLAN` of a clustergcn plan (its spec\'s ``simulate``)."""
    run = calibration_run(plan, meta, options)
    p = ClusterProfile.from_run(run, plan, meta)
    k = options.workers or int(meta["num_workers"])
    main, scaling = at_k_and_scaling(
        options,
        k,
        lambda kk, net: [
            simulate_clustergcn(
                p, clusters_for_workers(plan, meta, kk, replan), options.bandwidth, options.latency, net=net
            )
        ],
        extra=("steps", "allreduce_seconds"),
    )
    notes = [
        f"calibrated on {run} (K = {p.workers}, measured median epoch {p.measured_epoch_seconds:.3f} s); "
        "throughput = training seeds per second",
        f"clustergcn: every worker's batch of {p.clusters_per_batch} clusters as the runtime draws them (epochs "
        f"{', '.join(map(str, p.epochs))}, seed {p.seed}); the slowest worker bounds each step; one gradient "
        "all-reduce and two scalar all-reduces per step; no other bytes",
        "other K: the store partitioned again with the plan's method and each worker clustered as g3 plan would",
        "assumes rates independent of K and batch size (no contention between the sampler and compute threads "
        "or between workers sharing cores); Python work outside the timed spans (loss, blocks) left out",
    ]
    return run_calibrated_result(plan, meta, k, options, run, notes, p, main, scaling), None
