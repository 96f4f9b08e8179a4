"""The ``clustergcn`` strategy's planner: every worker's partition cut into clusters by METIS (ClusterGCN,
Chiang et al., KDD 2019; G3 Fig. 12c's mini-batch baseline), plus the boundary tables of the exact evaluation.

Worker w's owned nodes and the arcs among them (arcs from other workers' nodes are never used in training)
are symmetrised and cut into ``--clusters`` parts (fewer when the worker owns fewer nodes) with METIS, seeded
by ``--cluster-seed``. ``worker-RRRRR/clusters.npy`` (int32 ``[n_owned]``) holds each owned node's cluster.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from stages.common.errors import G3InputError
from stages.common.plan_options import PlanOption, positive_int
from stages.kits.plan.boundary import plan_boundary
from stages.kits.plan.context import PlanContext
from stages.kits.plan.residency import DEVICE_MEMORY_RECORDED


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("expected an integer") from None


OPTIONS = (
    PlanOption(
        "clusters",
        "--clusters",
        "50",
        parse=positive_int("the cluster count"),
        metavar="C",
        help="ClusterGCN: METIS clusters per worker (of the worker's own nodes and the arcs among them; "
        "fewer when it owns fewer nodes).",
    ),
    PlanOption(
        "clusters_per_batch",
        "--clusters-per-batch",
        "5",
        parse=positive_int("the clusters per batch"),
        metavar="Q",
        help="ClusterGCN: clusters per step on each worker; a step trains on the subgraph they induce "
        "(arcs between clusters, and from other workers, dropped). ceil(C/Q) steps per epoch.",
    ),
    PlanOption(
        "cluster_seed",
        "--cluster-seed",
        "0",
        parse=_seed,
        metavar="SEED",
        help="ClusterGCN: METIS's seed for the clusters.",
    ),
    DEVICE_MEMORY_RECORDED,
)


def worker_clusters(shard, clusters: int, seed: int) -> np.ndarray:
    """The cluster of every owned node of ``shard`` (int32 ``[n_owned]``)."""
    import pymetis

    n = shard.num_owned
    c = min(clusters, n)
    if c <= 1:
        return np.zeros(n, dtype=np.int32)
    indptr = np.asarray(shard.indptr, dtype=np.int64)
    indices = np.asarray(shard.indices, dtype=np.int64)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    own = indices < n  # arcs among owned nodes
    a = sp.csr_matrix((np.ones(int(own.sum())), (rows[own], indices[own])), shape=(n, n))
    a = ((a + a.T) > 0).astype(np.int8).tolil()
    a.setdiag(0)
    a = a.tocsr()
    a.eliminate_zeros()
    part = pymetis.part_graph(
        c,
        pymetis.CSRAdjacency(a.indptr.astype(np.int64), a.indices.astype(np.int64)),
        options=pymetis.Options(seed=seed),
    ).vertex_part
    return np.asarray(part, dtype=np.int32)


def plan(tmp: Path, ctx: PlanContext) -> dict:
    if sum(int(len(np.asarray(s.load("train")))) for s in ctx.shards) == 0:
        raise G3InputError("the partition has no training nodes", path=ctx.part)
    workers = plan_boundary(tmp, ctx, "planning workers (clustergcn: evaluation tables)")
    for w, shard in zip(
        workers, ctx.progress(ctx.shards, "clustering every worker's nodes (METIS)"), strict=True
    ):
        wdir = tmp / f"worker-{shard.rank:05d}"
        clusters = worker_clusters(shard, ctx.options["clusters"], ctx.options["cluster_seed"])
        np.save(wdir / "clusters.npy", clusters)
        sizes = np.bincount(clusters) if len(clusters) else np.zeros(0, dtype=np.int64)
        w["clusters"] = {
            "count": int(len(sizes)),
            "min_nodes": int(sizes.min(initial=0)),
            "max_nodes": int(sizes.max(initial=0)),
        }
    return {"workers": workers}
