"""`g3 partition`: split a store's nodes over K workers and write one self-contained shard per worker.

Methods: ``g3`` (multi-constraint METIS + Algorithm 1, paper §4.2), ``metis`` (plain edge-cut METIS, as DGL and
BNS-GCN), ``random`` (hashed ids), ``chunk`` (contiguous id ranges: NeuGraph, ROC, NeutronStar) and
``feature`` (feature-column split: NeutronTP, P3), ``distdgl`` (METIS with DistDGL's five constraints) and
``bytegnn`` (ByteGNN's K-hop blocks and greedy block assignment, seed paper 001 §4.2.3). The artifact is described in docs/ARTIFACTS.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numba
import numpy as np

from ..common.artifact_json import reference
from ..common.atomic import atomic_dir, check_target, write_json_atomic
from ..common.errors import G3InputError
from ..common.progress import make_progress
from ..common.store import GraphStore

METHODS = ("g3", "metis", "random", "chunk", "distdgl", "bytegnn", "feature")
PARTITION_SCHEMA = "g3.partition"
PARTITION_VERSION = 1
DEFINITIONS = {
    "remote": "V_i^remote = distinct nodes outside partition i with an arc into a node of i",
    "arcs": "E(V_i) = arcs whose destination is in partition i",
    "degree": "d_v = |N(v)|, neighbours in the symmetrised graph (union of in- and out-neighbours, no self-loops)",
    "edge_cut": "arcs whose source and destination are in different partitions",
    "send": "(owned node, peer) pairs where the node is in the peer's remote set",
}


@dataclass
class PartitionOptions:
    """Everything `g3 partition` can be told (see ``g3 partition --help``)."""

    workers: int
    method: str = "g3"
    gamma: float = 0.005
    balance_tol: float = 1.05
    degree_tol: float | None = None  # None: the same as balance_tol
    seed: int = 0
    threads: int | None = None
    hidden: int = 16
    max_swaps: int | None = None
    refine_steps: int | None = None  # None: 1000 x N; 0: no refinement
    remote_budget: float = 1.05  # refinement's cap on total remote, x plain METIS's total
    bytegnn_alpha: float = 0.5  # ByteGNN balancing-score weights of train / valid / test counts (relative)
    bytegnn_beta: float = 0.25
    bytegnn_gamma: float = 0.25
    bytegnn_hops: int = 2  # block radius in in-hops: the model's layers

    @property
    def degree_limit(self) -> float:
        """Allowed degree-sum max/mean (Eq. 2): ``degree_tol``, or ``balance_tol`` when not given."""
        return self.balance_tol if self.degree_tol is None else self.degree_tol


def default_output(store_path: str | Path, method: str, workers: int) -> Path:
    """``STORE.part-<method>-<K>`` beside the store."""
    store_path = Path(store_path).resolve()
    return store_path.parent / f"{store_path.name}.part-{method}-{workers}"


def check_options(o: PartitionOptions) -> None:
    if o.method not in METHODS:
        raise G3InputError(f"unknown method {o.method!r} (choose from {', '.join(METHODS)})")
    if o.workers < 1:
        raise G3InputError(f"--workers must be at least 1, got {o.workers}")
    if not 0.0 < o.gamma < 1.0:
        raise G3InputError(f"--gamma must be in (0, 1), got {o.gamma}")
    if o.balance_tol < 1.0:
        raise G3InputError(f"--balance-tol must be >= 1 (a max/mean ratio), got {o.balance_tol}")
    if o.degree_tol is not None and not o.degree_tol >= 1.0:
        raise G3InputError(f"--degree-tol must be >= 1 (a max/mean ratio), got {o.degree_tol}")
    if o.hidden < 1:
        raise G3InputError(f"--hidden must be >= 1, got {o.hidden}")
    if o.threads is not None and o.threads < 1:
        raise G3InputError(f"--threads must be >= 1, got {o.threads}")
    if o.max_swaps is not None and o.max_swaps < 0:
        raise G3InputError(f"--max-swaps must be >= 0, got {o.max_swaps}")
    if o.refine_steps is not None and o.refine_steps < 0:
        raise G3InputError(f"--refine-steps must be >= 0, got {o.refine_steps}")
    if not o.remote_budget > 0.0:
        raise G3InputError(f"--remote-budget must be > 0 (a multiple of plain METIS's total remote), "
                           f"got {o.remote_budget}")
    for name in ("alpha", "beta", "gamma"):
        value = getattr(o, f"bytegnn_{name}")
        if not (math.isfinite(value) and value >= 0.0):
            raise G3InputError(f"--bytegnn-{name} must be a finite number >= 0, got {value}")
    if not o.bytegnn_alpha + o.bytegnn_beta + o.bytegnn_gamma > 0.0:
        raise G3InputError("--bytegnn-alpha, --bytegnn-beta and --bytegnn-gamma must not all be 0")
    if o.bytegnn_hops < 1:
        raise G3InputError(f"--bytegnn-hops must be >= 1 (the model's layers), got {o.bytegnn_hops}")


def run_partition(store_path: str | Path, options: PartitionOptions, out: str | Path | None = None,
                  force: bool = False, plot: str | Path | None = None) -> dict:
    """Entry point of `g3 partition`: partition, measure, write OUT atomically; returns the partition.json dict."""
    check_options(options)
    if plot is not None:
        if Path(plot).suffix.lower() != ".png":
            raise G3InputError("--plot needs a .png file name", path=plot)
        if not Path(plot).resolve().parent.is_dir():
            raise G3InputError("--plot: the folder does not exist", path=plot)
    store = GraphStore.open(store_path)
    if options.workers > store.num_nodes:
        raise G3InputError(f"--workers {options.workers} is more than the {store.num_nodes:,} nodes of the store",
                           path=store.path)
    out = Path(out) if out is not None else default_output(store.path, options.method, options.workers)
    check_target(out, force)  # fail before any work
    if options.threads is not None:
        numba.set_num_threads(min(options.threads, numba.config.NUMBA_NUM_THREADS))
    timing: dict[str, float] = {}
    with atomic_dir(out, force=force) as tmp:
        summary = _partition_into(tmp, store, options, timing)
        summary["path"] = str(out.resolve())
        summary["store"].update(reference(store.path, out))
        write_json_atomic(tmp / "partition.json", summary)
    if plot is not None:
        from .report import plot_remote

        plot_remote(summary, plot)
    return summary


def _partition_into(tmp: Path, store: GraphStore, o: PartitionOptions, timing: dict[str, float]) -> dict:
    from .graph import load_graphs

    t_start = time.perf_counter()
    with make_progress() as progress:
        task = progress.add_task("loading graph", total=None)
        graphs = load_graphs(store)
        in_degree = np.diff(graphs.indptr)
        progress.update(task, total=1, completed=1)
        timing["load"] = time.perf_counter() - t_start
        part, extra = _assign(graphs, store, o, timing, progress)
        summary = _summary(store, o, graphs, part, in_degree, extra, timing, progress)
        t0 = time.perf_counter()
        np.save(tmp / "assignment.npy", part.astype(np.int32))
        _write_shards(tmp, store, graphs, part, o, extra, progress)
        timing["shards"] = time.perf_counter() - t0
    timing["total"] = time.perf_counter() - t_start
    summary["timing"] = {k: round(v, 3) for k, v in timing.items()}
    return summary


def _assign(graphs, store: GraphStore, o: PartitionOptions, timing: dict, progress) -> tuple[np.ndarray, dict]:
    """Node -> partition (int32 [N]) and method-specific extras (g3: METIS result, stop reason, ...)."""
    from .baselines import chunk_partition, random_partition
    from .metis import metis_partition

    n, k = graphs.num_nodes, o.workers
    t0 = time.perf_counter()
    extra: dict = {}
    if o.method == "random":
        part = random_partition(n, k, o.seed)
    elif o.method in ("chunk", "feature"):
        part = chunk_partition(n, k)
    elif o.method == "metis":
        task = progress.add_task("METIS (edge-cut)", total=None)
        part = metis_partition(graphs, k, o.seed)  # METIS defaults, as DGL and BNS-GCN call it
        progress.update(task, total=1, completed=1)
    elif o.method == "distdgl":
        task = progress.add_task("METIS (5 constraints: nodes, train, valid, test, arcs)", total=None)
        part = metis_partition(graphs, k, o.seed, vertex_weights=distdgl_weights(store, graphs.num_nodes),
                               ubvec=[DISTDGL_UBVEC] * 5)
        progress.update(task, total=1, completed=1)
    elif o.method == "bytegnn":
        from .bytegnn import bytegnn_partition

        task = progress.add_task(f"ByteGNN ({o.bytegnn_hops}-hop blocks, Algorithm 2)", total=None)
        splits = {s: store.split_index(s) for s in ("train", "valid", "test")}
        part, extra["bytegnn"] = bytegnn_partition(graphs, splits, k, o.seed, o.bytegnn_alpha, o.bytegnn_beta,
                                                   o.bytegnn_gamma, o.bytegnn_hops, o.balance_tol)
        progress.update(task, total=1, completed=1)
    else:
        part, extra = _assign_g3(graphs, store, o, timing, progress)
        return part, extra
    timing["assign"] = time.perf_counter() - t0
    return part, extra


DISTDGL_UBVEC = 1.05  # METIS's default imbalance (ufactor 30 = 1.03 for k-way) loosened as DGL's partitioner does


def distdgl_weights(store: GraphStore, n: int) -> np.ndarray:
    """DistDGL's multi-constraint vertex weights (ncon = 5, as ``dgl.distributed.partition_graph`` with
    ``balance_ntypes`` = the train/valid/test masks and ``balance_edges``): every node 1, its membership of the
    train, valid and test splits, and its in-degree (the arcs it owns), so METIS balances each across parts."""
    in_degree, _ = store.load_degrees()
    w = np.zeros((n, 5), dtype=np.int64)
    w[:, 0] = 1
    for c, split in enumerate(("train", "valid", "test"), start=1):
        w[store.split_index(split), c] = 1
    w[:, 4] = np.asarray(in_degree, dtype=np.int64)
    return w


def _ubvec(o: PartitionOptions) -> list[float]:
    """METIS's allowed max/mean per constraint of g3's stage 1: (feature size, degree); at least 1.001, the
    tightest imbalance METIS's ``ufactor`` can express, and at most 1e6 (METIS takes 32-bit floats; any value
    of K or more already means "no limit")."""
    return [round(min(max(1.001, t), 1e6), 6) for t in (o.balance_tol, o.degree_limit)]


def _assign_g3(graphs, store: GraphStore, o: PartitionOptions, timing: dict, progress) -> tuple[np.ndarray, dict]:
    from .g3 import STOP_EXPLANATIONS, run_algorithm1
    from .metis import metis_partition
    from .refine import needs_refinement, refine_after_algorithm1

    k = o.workers
    t0 = time.perf_counter()
    task = progress.add_task("METIS (multi-constraint: feature size, degree)", total=None)
    feature_bytes = store.feat_dim * store.feature_dtype.itemsize
    weights = np.stack([np.full(graphs.num_nodes, feature_bytes, dtype=np.int64), graphs.degree], axis=1)
    first = metis_partition(graphs, k, o.seed, vertex_weights=weights, ubvec=_ubvec(o))
    del weights
    progress.update(task, total=1, completed=1)
    timing["metis"] = time.perf_counter() - t0
    task = progress.add_task("Algorithm 1 (swaps)", total=None)

    def on_progress(swaps: int, ratio: float) -> None:
        progress.update(task, completed=swaps, description=f"Algorithm 1 (min/max remote {ratio:.4f})")

    result = run_algorithm1(graphs, first, k, o.gamma, o.degree_limit, o.max_swaps, on_progress)
    progress.update(task, total=result.swaps, completed=result.swaps)
    timing["algorithm1"] = result.seconds
    extra = {
        "metis_part": first,
        "metis_remote": result.initial_remote,
        "stop_reason": result.stop_reason,
        "stop_explanation": STOP_EXPLANATIONS[result.stop_reason],
        "swaps": result.swaps,
        "search": {"pairs_evaluated": result.pairs_evaluated, "single_deltas": result.single_deltas,
                   "widened_searches": result.widened_searches},
        "remote_trace": result.remote_trace,
    }
    part = result.part
    if o.refine_steps != 0 and needs_refinement(result, o.remote_budget):
        part, extra["refine"] = refine_after_algorithm1(graphs, result, o, timing, progress)
    return part, extra


def _summary(store, o: PartitionOptions, graphs, part, in_degree, extra: dict, timing: dict, progress) -> dict:
    from .feature import feature_columns, feature_figures
    from .metrics import partition_figures, remote_marks, summary_figures
    from .shards import shard_name, store_reference

    t0 = time.perf_counter()
    task = progress.add_task("measuring partitions", total=None)
    k = o.workers
    if o.method == "feature":
        figures, mark = feature_figures(graphs, k, o.hidden, in_degree), None
    else:
        mark = remote_marks(graphs.indptr, graphs.indices, part, k)
        figures = partition_figures(graphs, part, k, o.hidden, in_degree, mark)
    extra["mark"] = mark
    after = summary_figures(graphs, part, k, [p["remote"] for p in figures["partitions"]],
                            figures["totals"]["edge_cut"])
    before = None
    if "metis_part" in extra:
        before = summary_figures(graphs, extra["metis_part"], k, extra["metis_remote"])
    progress.update(task, total=1, completed=1)
    timing["measure"] = time.perf_counter() - t0
    summary = {
        "schema": PARTITION_SCHEMA,
        "schema_version": PARTITION_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "g3_version": _version(),
        "store": store_reference(store),
        "method": o.method,
        "num_partitions": k,
        "parameters": {**asdict(o), "degree_tol": o.degree_limit, "threads": numba.get_num_threads(),
                       "metis_ubvec": _ubvec(o) if o.method == "g3" else None},
        "definitions": DEFINITIONS,
        "stop_reason": extra.get("stop_reason"),
        "stop_explanation": extra.get("stop_explanation"),
        "swaps": extra.get("swaps", 0),
        "search": extra.get("search"),
        "remote_trace": extra.get("remote_trace"),
        "refine": extra.get("refine"),
        "bytegnn": extra.get("bytegnn"),
        "before": before,
        "after": after,
        **figures,
        "shards": [shard_name(i) for i in range(k)],
    }
    if o.method == "feature":
        summary["feature_split"] = {"columns": feature_columns(store.feat_dim, k), "owner": "contiguous id ranges"}
    return summary


def _write_shards(tmp: Path, store, graphs, part, o: PartitionOptions, extra: dict, progress) -> None:
    from .baselines import chunk_bounds
    from .shards import NodeShardBuilder, store_reference, write_feature_shards

    info = {"method": o.method, "num_workers": o.workers, "store": store_reference(store)}
    rows = progress.add_task("copying features", total=store.num_nodes)
    if o.method == "feature":
        write_feature_shards(tmp, store, o.workers, chunk_bounds(store.num_nodes, o.workers), info,
                             on_rows=lambda r: progress.update(rows, advance=r))
        return
    builder = NodeShardBuilder(tmp, store, graphs, part, o.workers, extra["mark"])
    task = progress.add_task("writing shards", total=o.workers)
    for i in range(o.workers):
        builder.write_worker(i, info)
        progress.update(task, advance=1)
    builder.write_features(on_rows=lambda r: progress.update(rows, advance=r))


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("g3")
    except Exception:
        return "unknown"


__all__ = ["run_partition", "PartitionOptions", "METHODS", "default_output", "PARTITION_SCHEMA", "PARTITION_VERSION"]
