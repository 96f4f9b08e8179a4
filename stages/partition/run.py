"""`g3 partition`: split a store's nodes over K workers and write one self-contained shard per worker.

Methods are those of the registry (:func:`stages.strategies.partition_methods`) (``g3``: multi-constraint METIS +
Algorithm 1, paper §4.2; ``metis``, ``random``, ``chunk``, ``distdgl``, ``bytegnn``, ``feature``, ...): each names
the function that assigns nodes to workers and the layouts its shards are written in (``rows``: node
partitions; ``columns``: a feature-column split). This module runs the chosen method, measures the result in
its primary layout and writes every layout's shards. The artifact is described in docs/ARTIFACTS.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numba
import numpy as np

from stages.common.artifact_json import reference
from stages.common.atomic import atomic_dir, check_free_space, check_target, write_json_atomic
from stages.common.cost import available_memory, check_memory_floor, stage_cost
from stages.common.errors import G3InputError
from stages.common.npy import npy_entry
from stages.common.partition_artifact import PARTITION_SCHEMA, PARTITION_VERSION
from stages.common.progress import make_progress
from stages.common.settings import REQUIRED, setting
from stages.common.store import GraphStore
from stages.common.units import parse_size
from stages.common.version import VERSION
from stages.kits.partition.methods import LAYOUTS
from stages.strategies.registry import default_method, partition_method, partition_methods

DEFAULT_METHOD = default_method()

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

    workers: int = setting(
        REQUIRED,
        "Number of partitions K (one per worker). 1 is valid; more than the node count is an error.",
        short="-w",
    )
    method: str = setting(
        DEFAULT_METHOD,
        "g3: multi-constraint METIS (balanced node count and degree sum) then Algorithm 1 swaps "
        "that balance the remote sets (paper §4.2). metis: plain edge-cut METIS (DGL, BNS-GCN). random: hash of "
        "node id and seed. chunk: contiguous id ranges of equal size (NeuGraph, ROC, NeutronStar). distdgl: METIS "
        "with DistDGL's five balance constraints (nodes, train, valid and test nodes, arcs; each within 1.05 of "
        "the mean). bytegnn: ByteGNN's partitioner (seed paper 001 §4.2.3) grows a block of every labelled "
        "(train/valid/test) node's --bytegnn-hops in-neighbourhood and assigns blocks greedily by cross edges x "
        "balance of train/valid/test counts (Algorithm 2). p3: P3's independent partitioning (§3.1): the "
        "structure by a hash of node id and --seed (each arc with its destination) and, separately, ceil(F/K) "
        "feature columns of every node per worker (the last workers get the remainder; OUT/columns/). feature: "
        "every worker keeps the whole topology and ceil(F/K) feature columns (NeutronTP).",
        choices=tuple(partition_methods()),
    )
    gamma: float = setting(
        0.005, "g3: Algorithm 1 stops once min/max of the remote set sizes is at least 1 - gamma."
    )
    balance_tol: float = setting(
        1.05,
        "g3: allowed max/mean of the feature-size constraint (Eq. 1, METIS stage), and of the degree sums "
        "too unless --degree-tol is given. METIS uses the allowance, and a worker's compute grows a little faster "
        "than its share: 1.02 kept per-worker compute within 1.05 of the mean on four workers "
        "(docs/BENCHMARKS.md). bytegnn: no partition may hold more than ceil(this x mean) train, valid or test "
        "nodes (each split separately).",
    )
    degree_tol: float | None = setting(
        None,
        "g3: no partition's degree sum (Eq. 2, the aggregation work) may exceed this times the mean: "
        "METIS's degree constraint, and swaps never push a partition past it [default: --balance-tol]. Graphs "
        "with dense hub/leaf blocks (web crawls) cannot balance degree sums without cutting those blocks; a "
        "looser value (e.g. 2 or 4) cuts less and communicates less, at the price of unbalanced compute "
        "(figures in docs/BENCHMARKS.md).",
    )
    max_swaps: int | None = setting(
        None, "g3: stop Algorithm 1 after this many swaps [default: the node count]."
    )
    refine_steps: int | None = setting(
        None,
        "g3: when Algorithm 1 stops short of 1 - gamma (stalled, cycle, swap limit), or reaches it by "
        "raising the total remote above --remote-budget x its start's, anneal its assignment with up to this "
        "many single-node moves in all under the same balance limits, until min/max remote reaches 1 - gamma "
        "within the budget. The moves are spent in restarts of growing length (4 x 1 %, 10 %, 86 %; several at "
        "once with --threads), and the first restart that meets the goal ends it. The result replaces Algorithm "
        "1's if it meets that goal, or if Algorithm 1 missed the ratio and the refinement shrinks the largest "
        "remote set within the budget. 0 turns the refinement off [default: 1000 x the node count, 100 x (in one "
        "anneal) where a lower bound proves the budget infeasible under the degree limit; 12-71 s per 100 M "
        "steps on one core on cnr-2000, more with larger K and on slower cores (docs/BENCHMARKS.md)].",
    )
    remote_budget: float = setting(
        1.05,
        "g3 refinement: the total remote set may not end above this multiple of plain edge-cut METIS's "
        "total (one extra METIS call, made only when the refinement runs). Where hub blocks make that impossible "
        "under the degree limit, the report says so, with a lower bound on the total and the --degree-tol below "
        "which the budget stays infeasible.",
    )
    bytegnn_alpha: float = setting(
        0.5,
        "bytegnn: weight of the training-node balance in Algorithm 2's balancing score. The three weights "
        "are relative (divided by their sum); training nodes are visited every epoch, valid/test only at "
        "evaluation, hence the larger default. Must be >= 0.",
    )
    bytegnn_beta: float = setting(
        0.25, "bytegnn: weight of the validation-node balance in the balancing score (>= 0)."
    )
    bytegnn_gamma: float = setting(
        0.25,
        "bytegnn: weight of the test-node balance in the balancing score (>= 0; the three weights may not "
        "all be 0).",
    )
    bytegnn_hops: int = setting(
        2,
        "bytegnn: radius of a block in in-hops, i.e. the number of GNN layers (>= 1). A node joins the block "
        "of its nearest labelled node within this many hops (ties: lowest node id); nodes farther from every "
        "labelled node go to the partitions with the fewest nodes.",
    )
    seed: int = setting(
        0,
        "Seed of METIS, of the random hash and of bytegnn's order among equal blocks; the same seed gives the "
        "same partition.",
    )
    threads: int | None = setting(
        None,
        "CPU threads for the parallel steps (candidate-swap search, counting, refinement restarts, shard "
        "CSR) [default: all cores]. METIS itself is single-threaded. The partition does not depend on it.",
    )
    metis_memory: int | None = setting(
        None,
        "Memory METIS may hold (8GiB, 512MB). METIS needs about 70 bytes per symmetrised arc; a graph that "
        "needs more is first coarsened by size-constrained label propagation in memory bounded by its nodes, "
        "METIS partitions the clusters (every balance constraint summed per cluster, so balance and cut carry "
        "over) and the result is projected back (partition.json: metis_memory). The cut is a little worse than "
        "METIS's on the whole graph (docs/BENCHMARKS.md) [default: half the memory available when the stage "
        "starts: MemAvailable, or what a memory cgroup limiting the stage leaves].",
        parse=parse_size,
        metavar="SIZE",
    )
    hidden: int = setting(16, "Hidden width used to report bytes sent and received per layer (float32).")

    @property
    def degree_limit(self) -> float:
        """Allowed degree-sum max/mean (Eq. 2): ``degree_tol``, or ``balance_tol`` when not given."""
        return self.balance_tol if self.degree_tol is None else self.degree_tol


def default_output(store_path: str | Path, method: str, workers: int) -> Path:
    """``STORE.part-<method>-<K>`` beside the store."""
    store_path = Path(store_path).resolve()
    return store_path.parent / f"{store_path.name}.part-{method}-{workers}"


def check_options(o: PartitionOptions) -> None:
    partition_method(o.method)  # an unknown method: one line naming the choices
    if o.workers < 1:
        raise G3InputError(f"--workers must be at least 1, got {o.workers}")
    if not 0.0 < o.gamma < 1.0:
        raise G3InputError(f"--gamma must be in (0, 1), got {o.gamma}")
    for flag, ratio in (("--balance-tol", o.balance_tol), ("--degree-tol", o.degree_tol)):
        if ratio is not None and not (math.isfinite(ratio) and ratio >= 1.0):
            raise G3InputError(f"{flag} must be a finite number >= 1 (a max/mean ratio), got {ratio}")
    if o.hidden < 1:
        raise G3InputError(f"--hidden must be >= 1, got {o.hidden}")
    if o.threads is not None and o.threads < 1:
        raise G3InputError(f"--threads must be >= 1, got {o.threads}")
    if o.max_swaps is not None and o.max_swaps < 0:
        raise G3InputError(f"--max-swaps must be >= 0, got {o.max_swaps}")
    if o.refine_steps is not None and o.refine_steps < 0:
        raise G3InputError(f"--refine-steps must be >= 0, got {o.refine_steps}")
    if not (math.isfinite(o.remote_budget) and o.remote_budget > 0.0):
        raise G3InputError(
            f"--remote-budget must be > 0 (a multiple of plain METIS's total remote), got {o.remote_budget}"
        )
    for name in ("alpha", "beta", "gamma"):
        value = getattr(o, f"bytegnn_{name}")
        if not (math.isfinite(value) and value >= 0.0):
            raise G3InputError(f"--bytegnn-{name} must be a finite number >= 0, got {value}")
    if not o.bytegnn_alpha + o.bytegnn_beta + o.bytegnn_gamma > 0.0:
        raise G3InputError("--bytegnn-alpha, --bytegnn-beta and --bytegnn-gamma must not all be 0")
    if o.bytegnn_hops < 1:
        raise G3InputError(f"--bytegnn-hops must be >= 1 (the model's layers), got {o.bytegnn_hops}")
    if o.metis_memory is not None and o.metis_memory < METIS_MEMORY_FLOOR:
        raise G3InputError(
            f"--metis-memory must be at least {METIS_MEMORY_FLOOR >> 20} MiB, got {o.metis_memory:,} bytes"
        )


# METIS's own memory per symmetrised arc beyond the graph g3 holds (68.5 measured on synthetic:medium, K = 8,
# docs/BENCHMARKS.md "Partitioning in bounded memory"): a graph whose METIS would need more than --metis-memory
# is coarsened first (stages/kits/partition/coarsen.py)
METIS_BYTES_PER_ARC = 70
METIS_MEMORY_FLOOR = 1 << 20


def metis_memory(o: PartitionOptions) -> tuple[int, str]:
    """The bytes METIS may hold and where the figure comes from: ``--metis-memory``, else half the memory this
    process may take now (``MemAvailable``, or a memory cgroup's room where one limits it; the rest is the stage's
    own arrays and the shards)."""
    if o.metis_memory is not None:
        return o.metis_memory, "--metis-memory"
    available, source = available_memory()
    if available is None:
        return 1 << 62, f"no limit ({source})"
    return available // 2, f"half of {source}"


def shard_bytes(store: GraphStore, o: PartitionOptions) -> dict[str, int]:
    """What the shards hold at least (plain .npy, uncompressed): every node's feature row once, and the in-CSR's
    indices (int32) for a layout with topology."""
    layouts = partition_method(o.method).layouts
    parts = {"features": store.num_nodes * store.feat_dim * store.feature_dtype.itemsize}
    if "rows" in layouts:
        parts["indices"] = 4 * store.num_arcs
    return parts


def memory_floor(store: GraphStore, o: PartitionOptions) -> dict[str, int]:
    """What the stage holds at least, by kind: the assignment and per-node figures (8 bytes per node; measured ~76),
    the int32 in-CSR of a layout with topology, and METIS's budget where --metis-memory gives one."""
    parts = {"per-node arrays": 8 * store.num_nodes}
    if "rows" in partition_method(o.method).layouts:
        parts["the graph's arcs"] = 4 * store.num_arcs
    if o.metis_memory is not None:
        parts["--metis-memory"] = o.metis_memory
    return parts


def run_partition(
    store_path: str | Path,
    options: PartitionOptions,
    out: str | Path | None = None,
    force: bool = False,
    plot: str | Path | None = None,
) -> dict:
    """Entry point of `g3 partition`: partition, measure, write OUT atomically; returns the partition.json dict."""
    check_options(options)
    if plot is not None:
        if Path(plot).suffix.lower() != ".png":
            raise G3InputError("--plot needs a .png file name", path=plot)
        if not Path(plot).resolve().parent.is_dir():
            raise G3InputError("--plot: the folder does not exist", path=plot)
    store = GraphStore.open(store_path)
    if options.workers > store.num_nodes:
        raise G3InputError(
            f"--workers {options.workers} is more than the {store.num_nodes:,} nodes of the store",
            path=store.path,
        )
    out = Path(out) if out is not None else default_output(store.path, options.method, options.workers)
    check_target(out, force, "partition", (store.path,))  # fail before any work
    check_free_space(out, shard_bytes(store, options), "this partition")
    check_memory_floor(
        memory_floor(store, options),
        "this partition",
        "give a smaller --metis-memory, or partition on a machine with more memory",
    )
    if options.threads is not None:
        numba.set_num_threads(min(options.threads, numba.config.NUMBA_NUM_THREADS))
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    with atomic_dir(out, force=force, kind="partition", inputs=(store.path,)) as tmp:
        summary = _partition_into(tmp, store, options, timing)
        summary["cost"] = stage_cost(t0, out=tmp)  # the shards are written: partition.json is the rest
        summary["path"] = str(out.resolve())
        summary["store"].update(reference(store.path, out))
        summary["files"] = {"assignment.npy": npy_entry(tmp / "assignment.npy")}  # readers verify it
        write_json_atomic(tmp / "partition.json", summary, seal=True)
    if plot is not None:
        from stages.partition.report import plot_remote

        plot_remote(summary, plot)
    return summary


def _partition_into(tmp: Path, store: GraphStore, o: PartitionOptions, timing: dict[str, float]) -> dict:
    from stages.kits.partition.graph import load_graphs

    t_start = time.perf_counter()
    with make_progress() as progress:
        task = progress.add_task("loading graph", total=None)
        graphs = load_graphs(store)
        limit, source = metis_memory(o)
        graphs.metis_arc_budget = limit // METIS_BYTES_PER_ARC
        in_degree = np.diff(graphs.indptr)
        progress.update(task, total=1, completed=1)
        timing["load"] = time.perf_counter() - t_start
        # node -> partition (int32 [N]) and the method's extras (``summary``: keys for partition.json,
        # ``parameters``: for its parameters, ``before``: (assignment, remote sizes) the method started from)
        t0 = time.perf_counter()
        part, extra = partition_method(o.method).assign(graphs, store, o, timing, progress)
        timing["assign"] = time.perf_counter() - t0
        summary = _summary(store, o, graphs, part, in_degree, extra, timing, progress)
        summary["metis_memory"] = {
            "bytes": int(min(limit, 1 << 62)),
            "from": source,
            "arc_budget": int(graphs.metis_arc_budget),
            "bytes_per_arc": METIS_BYTES_PER_ARC,
            "coarsened": graphs.coarsenings,
        }
        t0 = time.perf_counter()
        np.save(tmp / "assignment.npy", part.astype(np.int32))
        _write_shards(tmp, store, graphs, part, o, extra, progress)
        timing["shards"] = time.perf_counter() - t0
    timing["total"] = time.perf_counter() - t_start
    summary["timing"] = {k: round(v, 3) for k, v in timing.items()}
    return summary


def _summary(
    store, o: PartitionOptions, graphs, part, in_degree, extra: dict, timing: dict, progress
) -> dict:
    from stages.kits.partition.metrics import summary_figures
    from stages.kits.partition.shards import shard_name, store_reference

    t0 = time.perf_counter()
    task = progress.add_task("measuring partitions", total=None)
    k = o.workers
    method = partition_method(o.method)
    figures, extra["mark"] = LAYOUTS[method.primary_layout].measure(graphs, part, k, o.hidden, in_degree)
    after = summary_figures(
        graphs, part, k, [p["remote"] for p in figures["partitions"]], figures["totals"]["edge_cut"]
    )
    before = None
    if "before" in extra:
        start, start_remote = extra["before"]
        before = summary_figures(graphs, start, k, start_remote)
    progress.update(task, total=1, completed=1)
    timing["measure"] = time.perf_counter() - t0
    summary = {
        "schema": PARTITION_SCHEMA,
        "schema_version": PARTITION_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "g3_version": VERSION,
        "store": store_reference(store),
        "method": o.method,
        "layouts": list(method.layouts),
        "num_partitions": k,
        "parameters": {
            **asdict(o),
            "degree_tol": o.degree_limit,
            "threads": numba.get_num_threads(),
            **extra.get("parameters", {}),
        },
        "definitions": DEFINITIONS,
        **extra.get("summary", {}),
        "before": before,
        "after": after,
        **figures,
        "shards": [shard_name(i) for i in range(k)],
    }
    for name in method.layouts:
        layout_summary = LAYOUTS[name].summary
        if layout_summary is not None:
            summary.update(layout_summary(store, k))
    return summary


def _write_shards(tmp: Path, store, graphs, part, o: PartitionOptions, extra: dict, progress) -> None:
    """Every layout's shards: the primary layout's in PART, each further layout's in PART/<layout>."""
    from stages.kits.partition.shards import seal_shards, store_reference

    info = {"method": o.method, "num_workers": o.workers, "store": store_reference(store)}
    for i, name in enumerate(partition_method(o.method).layouts):
        root = tmp if i == 0 else tmp / name
        root.mkdir(exist_ok=True)
        marks = extra["mark"] if i == 0 else None
        LAYOUTS[name].write(root, store, graphs, part, o.workers, {**info, "layout": name}, marks, progress)
    seal_shards(tmp)
