"""Coarsening a graph METIS cannot hold: size-constrained label propagation, then METIS on the clusters.

METIS holds the whole graph several times while it coarsens it (about 88 bytes per arc for the whole `g3
partition` stage on `synthetic:products`, docs/BENCHMARKS.md), so a graph of a billion arcs needs hundreds of
GB. Here the graph is first coarsened in memory bounded by the nodes, not the arcs — as KaMinPar and mt-metis
coarsen — and METIS partitions the clusters:

1. **Size-constrained label propagation** over the symmetrised CSR (:func:`propagate`): every node starts in
   its own cluster; in rounds, each node (in a seeded order) joins the neighbouring cluster it has the most
   arc weight to, if that cluster stays within the size cap (ties: the smaller cluster id; staying is a tie's
   winner). Memory: the labels, the clusters' weights and a scratch row per thread — O(N), read-only over the
   arcs.
2. **Contraction** (:func:`contract`): arcs between clusters summed into weighted coarse arcs, row block by row
   block (each block's pairs made unique before they are merged), so the peak is the coarse graph plus one
   block's pairs, not the fine graph's arcs again.
3. Repeated on the coarse graph (its node weights the cluster sizes, its arc weights the arc counts) until it
   has at most the arc budget.
4. METIS on the coarsest graph with every constraint column **summed per cluster** and the arc counts as edge
   weights: a cluster's weights are its nodes' weights, so the fine partition's balance per constraint and its
   edge cut are exactly the coarse partition's — METIS's guarantees carry over, only the granularity is the
   clusters' (the cap keeps every cluster below a small share of a partition).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

# the share of the heaviest cluster in the mean partition's weight: METIS can balance within a few percent
# when every unit it moves is this small
CLUSTER_SHARE = 1 / 16
ROUNDS = 5  # label propagation rounds per level (KaMinPar's default)
MAX_LEVELS = 8
BLOCK_ARCS = 1 << 22  # arcs contracted per block (~60 bytes each while a block is made unique)


@dataclass
class Coarsening:
    """The clusters of the fine nodes (``labels``, int64 [N]) and the coarsest graph METIS partitions."""

    labels: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    arc_weights: np.ndarray
    node_weights: np.ndarray  # int64 [C, ncon]
    levels: int

    def record(self, fine_arcs: int, budget: int) -> dict:
        """What partition.json says about it."""
        return {
            "levels": self.levels,
            "clusters": len(self.indptr) - 1,
            "coarse_arcs": len(self.indices),
            "fine_arcs": fine_arcs,
            "arc_budget": budget,
        }


@numba.njit(cache=True)
def _propagate(indptr, indices, arc_w, node_w, cap, order, rounds, labels, cluster_w):
    n = len(indptr) - 1
    unit = 1 if len(arc_w) == 0 else 0  # no weights given: every arc weighs 1 (no arcs-sized array of ones)
    conn = np.zeros(n, dtype=np.int64)
    touched = np.empty(n, dtype=np.int64)
    for _ in range(rounds):
        moved = 0
        for v in order:
            t = 0
            for a in range(indptr[v], indptr[v + 1]):
                c = labels[indices[a]]
                if conn[c] == 0:
                    touched[t] = c
                    t += 1
                conn[c] += arc_w[a] if unit == 0 else 1
            own = labels[v]
            best, best_w = own, conn[own]
            for i in range(t):
                c = touched[i]
                w = conn[c]
                if (
                    c != own
                    and (w > best_w or (w == best_w and c < best and best != own))
                    and cluster_w[c] + node_w[v] <= cap
                ):
                    best, best_w = c, w
            for i in range(t):
                conn[touched[i]] = 0
            if best != own:
                cluster_w[own] -= node_w[v]
                cluster_w[best] += node_w[v]
                labels[v] = best
                moved += 1
        if moved == 0:
            break


def propagate(
    indptr: np.ndarray,
    indices: np.ndarray,
    arc_weights: np.ndarray | None,
    node_weights: np.ndarray,
    cap: int,
    seed: int,
) -> np.ndarray:
    """Cluster labels (int64 [N], numbered 0 … C − 1 by first node) of size-constrained label propagation: no
    cluster's summed ``node_weights`` exceeds ``cap`` (a node heavier than it stays alone). ``arc_weights``
    None: every arc weighs 1."""
    n = len(indptr) - 1
    labels = np.arange(n, dtype=np.int64)
    node_weights = np.ascontiguousarray(node_weights, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    _propagate(
        indptr,
        indices,
        _weights(arc_weights),
        node_weights,
        int(cap),
        order,
        ROUNDS,
        labels,
        node_weights.copy(),
    )
    _, first, dense = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # clusters numbered by their first node
    return rank[dense]


def _weights(arc_weights: np.ndarray | None) -> np.ndarray:
    return np.zeros(0, dtype=np.int64) if arc_weights is None else arc_weights


def contract(
    indptr: np.ndarray, indices: np.ndarray, arc_weights: np.ndarray | None, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The graph of the clusters ``labels``: ``(indptr, indices, weights)``, an arc per pair of distinct
    clusters joined by at least one arc, weighted by the arcs' summed weight; rows sorted.

    The nodes are taken cluster by cluster, in blocks of about :data:`BLOCK_ARCS` arcs: a block's cluster pairs
    are made unique together with the pairs of the last cluster the previous block left open, and every cluster
    before the next block's first is then complete, so what is held is the coarse graph so far, one block and
    one cluster's pairs — not every block's pairs, which on a graph of small clusters are nearly one per cut arc
    (16 bytes per fine arc)."""
    c = int(labels.max()) + 1 if len(labels) else 0
    n = len(indptr) - 1
    order = np.argsort(labels, kind="stable")  # the nodes cluster by cluster
    deg = np.diff(indptr)[order]
    ends = np.cumsum(deg)  # arcs of the nodes up to each one, in that order
    done_k, done_w = [], []
    open_k, open_w = np.zeros(0, np.int64), np.zeros(0, np.int64)
    start = 0
    while start < n:
        base = int(ends[start - 1]) if start else 0
        stop = min(max(int(np.searchsorted(ends, base + BLOCK_ARCS, side="right")), start + 1), n)
        nodes, lens = order[start:stop], deg[start:stop]
        total = int(ends[stop - 1]) - base
        # the blocks' arcs: each node's row of the CSR, one after the other
        arc = np.repeat(indptr[nodes] - (ends[start:stop] - lens - base), lens) + np.arange(total)
        src = np.repeat(labels[nodes], lens)
        dst = labels[indices[arc]]
        cut = src != dst
        block_w = np.ones(int(cut.sum()), np.int64) if arc_weights is None else arc_weights[arc[cut]]
        k, inverse = np.unique(np.concatenate([open_k, src[cut] * c + dst[cut]]), return_inverse=True)
        w = np.bincount(inverse, weights=np.concatenate([open_w, block_w]), minlength=len(k)).astype(np.int64)
        # complete: every cluster before the next block's first
        split = np.searchsorted(k, int(labels[order[stop]]) * c) if stop < n else len(k)
        done_k.append(k[:split])
        done_w.append(w[:split])
        open_k, open_w = k[split:], w[split:]
        start = stop
    k = np.concatenate(done_k) if done_k else np.zeros(0, np.int64)
    w = np.concatenate(done_w) if done_w else np.zeros(0, np.int64)
    out_ptr = np.zeros(c + 1, dtype=np.int64)
    np.cumsum(np.bincount(k // max(c, 1), minlength=c), out=out_ptr[1:])
    return out_ptr, (k % max(c, 1)).astype(np.int64), w


def coarsen(
    indptr: np.ndarray, indices: np.ndarray, node_weights: np.ndarray, k: int, arc_budget: int, seed: int
) -> Coarsening:
    """Coarsen the symmetrised graph ``indptr``/``indices`` (``node_weights``: int64 [N, ncon]) until it has at
    most ``arc_budget`` arcs (or :data:`MAX_LEVELS` levels, or no level shrinks it by 5 %)."""
    weights = np.asarray(node_weights, dtype=np.int64).reshape(len(indptr) - 1, -1)
    # the size the cap bounds: every constraint column scaled to the node count's total, summed (a cluster may
    # not be heavy in any one of them)
    totals = np.maximum(weights.sum(axis=0), 1)
    size = (weights * (len(weights) / totals)).sum(axis=1)
    size = np.maximum(np.rint(size * 16).astype(np.int64), 1)  # fixed point: sixteenths of a node
    cap = max(int(size.sum() / k * CLUSTER_SHARE), 1)
    labels = np.arange(len(weights), dtype=np.int64)
    ptr, idx = np.asarray(indptr, dtype=np.int64), indices
    arc_w = None  # the fine graph's arcs weigh 1 each
    levels = 0
    mean_part = max(int(size.sum() / k), 1)
    while len(idx) > arc_budget:
        if levels == MAX_LEVELS or cap > mean_part // 2:
            raise ValueError(
                f"cannot coarsen the graph to {arc_budget:,} arcs (still {len(idx):,} after {levels} levels)"
            )
        level = propagate(ptr, idx, arc_w, size, cap, seed + levels)
        clusters = int(level.max()) + 1
        if clusters > 0.95 * (len(ptr) - 1):
            cap *= 2  # nothing left to merge under the cap: larger clusters
            continue
        ptr, idx, arc_w = contract(ptr, idx, arc_w, level)
        size = np.bincount(level, weights=size, minlength=clusters).astype(np.int64)
        labels = level[labels]
        levels += 1
    clusters = int(labels.max()) + 1 if len(labels) else 0
    node_w = np.stack(
        [np.bincount(labels, weights=weights[:, j], minlength=clusters) for j in range(weights.shape[1])],
        axis=1,
    ).astype(np.int64)
    return Coarsening(labels, ptr, idx, arc_w, node_w, levels)


def refine(
    indptr: np.ndarray,
    indices: np.ndarray,
    part: np.ndarray,
    node_weights: np.ndarray,
    k: int,
    imbalance: float,
    seed: int,
) -> np.ndarray:
    """The projected partition improved on the fine graph by size-constrained label propagation with the K
    partitions as the labels (KaMinPar's refinement): a node moves to the partition it has the most arcs to
    while that partition stays within ``imbalance`` × the mean weight. Single-constraint: ``node_weights`` [N]."""
    n = len(indptr) - 1
    node_weights = np.ascontiguousarray(node_weights, dtype=np.int64)
    labels = np.asarray(part, dtype=np.int64).copy()
    part_w = np.bincount(labels, weights=node_weights, minlength=k).astype(np.int64)
    cap = int(np.ceil(imbalance * node_weights.sum() / k))
    cap = max(cap, int(part_w.max()))  # never a cap the start already breaks
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    _propagate(indptr, indices, _weights(None), node_weights, cap, order, ROUNDS, labels, part_w)
    return labels
