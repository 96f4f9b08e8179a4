"""The ``g3`` method of `g3 partition` (G3 §4): stage 1, multi-constraint METIS on (feature size, degree); then
Algorithm 1's swaps (:mod:`.g3`); then, when Algorithm 1 stops short of the remote-set budget, the
refinement (:mod:`.refine`). Registered in stages/kits/partition/methods.py as ``g3_method:assign``."""

from __future__ import annotations

import time

import numpy as np

from stages.kits.partition.graph import Graphs
from stages.kits.partition.metis import metis_partition
from stages.strategies.g3.refine import needs_refinement, refine_after_algorithm1
from stages.strategies.g3.repartition import STOP_EXPLANATIONS, run_algorithm1


def metis_ubvec(o) -> list[float]:
    """METIS's allowed max/mean per constraint of stage 1: (feature size, degree); at least 1.001, the tightest
    imbalance METIS's ``ufactor`` can express, and at most 1e6 (METIS takes 32-bit floats; any value of K or
    more already means "no limit")."""
    return [round(min(max(1.001, t), 1e6), 6) for t in (o.balance_tol, o.degree_limit)]


def assign(graphs: Graphs, store, o, timing: dict, progress) -> tuple[np.ndarray, dict]:
    """Stage 1 (multi-constraint METIS on feature size and degree), Algorithm 1, and the refinement when
    Algorithm 1 stops short. Extras: the METIS start (``before``), Algorithm 1's outcome and the refinement for
    partition.json, and METIS's ubvec for its parameters."""
    k = o.workers
    t0 = time.perf_counter()
    task = progress.add_task("METIS (multi-constraint: feature size, degree)", total=None)
    feature_bytes = store.feat_dim * store.feature_dtype.itemsize
    weights = np.stack([np.full(graphs.num_nodes, feature_bytes, dtype=np.int64), graphs.degree], axis=1)
    first = metis_partition(graphs, k, o.seed, vertex_weights=weights, ubvec=metis_ubvec(o))
    del weights
    progress.update(task, total=1, completed=1)
    timing["metis"] = time.perf_counter() - t0
    task = progress.add_task("Algorithm 1 (swaps)", total=None)

    def on_progress(swaps: int, ratio: float) -> None:
        progress.update(task, completed=swaps, description=f"Algorithm 1 (min/max remote {ratio:.4f})")

    result = run_algorithm1(graphs, first, k, o.gamma, o.degree_limit, o.max_swaps, on_progress)
    progress.update(task, total=result.swaps, completed=result.swaps)
    timing["algorithm1"] = result.seconds
    summary = {
        "stop_reason": result.stop_reason,
        "stop_explanation": STOP_EXPLANATIONS[result.stop_reason],
        "swaps": result.swaps,
        "search": {
            "pairs_evaluated": result.pairs_evaluated,
            "single_deltas": result.single_deltas,
            "widened_searches": result.widened_searches,
        },
        "remote_trace": result.remote_trace,
        "refine": None,
    }
    part = result.part
    if o.refine_steps != 0 and needs_refinement(result, o.remote_budget):
        part, summary["refine"] = refine_after_algorithm1(graphs, result, o, timing, progress)
    return part, {
        "before": (first, result.initial_remote),
        "summary": summary,
        "parameters": {"metis_ubvec": metis_ubvec(o)},
    }
