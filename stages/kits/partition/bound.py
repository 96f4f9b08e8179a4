"""A lower bound on the total remote set of any assignment within a degree limit, from hub blocks.

Web crawls hold dense blocks: a set ``H`` of hub pages whose in-neighbours share a large common set ``S`` (every
node of ``S`` has an arc into every hub). Such a block costs communication however it is cut:

* a partition holding a hub receives every node of ``S`` it does not own (each has an arc into its hub);
* the degree limit ``L = degree_tol x mean degree sum`` caps how much of the block one partition can hold: the
  hubs need at least ``P = ceil(sum_H d / L)`` partitions, and those ``P`` partitions can own at most ``X``
  nodes of ``S``, the largest ``X`` with ``sum_H d + (the X smallest degrees of S) <= P x L``.

So any assignment whose degree sums all stay within ``L`` has a total remote set of at least
``P x |S| - X`` from the block (more hub partitions only raise it). Blocks with disjoint ``S`` count distinct
(node, partition) pairs, so their bounds add up. The bound ignores everything else in the graph: it proves a
goal infeasible, it does not say what is reachable.

Blocks are found greedily among the ``CANDIDATES`` nodes of largest in-degree: from each candidate as the first
hub, add the candidates sharing most in-neighbours with the block while the bound grows; keep the best block,
remove its ``S`` and search again. Cost: one sparse product for the pairwise overlaps, then
O(CANDIDATES^2) intersections of shrinking in-neighbour lists per block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from stages.kits.partition.graph import Graphs

CANDIDATES = 64  # hubs considered: the nodes of largest in-degree
MAX_BLOCKS = 8  # blocks summed at most


@dataclass
class HubBlock:
    hubs: list[int]  # node ids of H
    shared: int  # |S|: nodes with an arc into every hub (hubs excluded)
    hub_partitions: int  # P: partitions the hubs need at least
    bound: float  # P x |S| - X remote (node, partition) pairs at least; inf if a single hub exceeds the limit
    hub_degrees: np.ndarray = field(repr=False, default=None)
    shared_degrees: np.ndarray = field(repr=False, default=None)


@dataclass
class RemoteLowerBound:
    total: float  # sum of the blocks' bounds (inf: no assignment can meet the degree limit)
    degree_limit: float  # L, the degree-sum cap the bound assumes
    mean_degree_sum: float  # L / degree_tol
    blocks: list[HubBlock] = field(default_factory=list)

    def degree_tol_needed(self, budget: float, high: float) -> float | None:
        """Smallest degree tolerance (to 3 decimals, at most ``high``) at which these blocks' bound no longer
        exceeds ``budget``: below it the goal is infeasible (the blocks stay valid for any limit; a search at
        the looser limit could only find more). None if even ``high`` does not bring it down."""

        def bound_at(tol: float) -> float:
            return sum(
                block_bound(b.hub_degrees, b.shared_degrees, tol * self.mean_degree_sum)[0]
                for b in self.blocks
            )

        lo = self.degree_limit / self.mean_degree_sum
        if bound_at(lo) <= budget:
            return lo
        if bound_at(high) > budget:
            return None
        for _ in range(60):  # bound_at falls as tol grows
            mid = (lo + high) / 2
            lo, high = (lo, mid) if bound_at(mid) <= budget else (mid, high)
        return math.ceil(high * 1000) / 1000

    def as_dict(self) -> dict:
        return {
            "total_remote": _json_number(self.total),
            "degree_limit": round(self.degree_limit, 3),
            "blocks": [
                {
                    "hubs": len(b.hubs),
                    "hub_ids": b.hubs[:32],
                    "shared": b.shared,
                    "hub_partitions": b.hub_partitions,
                    "bound": _json_number(b.bound),
                }
                for b in self.blocks
            ],
        }


def infeasible_statement(bound: dict, budget: float) -> str:
    """One sentence for the report and the explanation, from partition.json's ``refine.lower_bound``."""
    total, needed = bound["total_remote"], bound["degree_tol_needed"]
    floor = (
        "no assignment fits the degree limit at all (a node's degree exceeds it)"
        if total == "infinite"
        else (f"any assignment within the degree limit has a total remote of at least {total:,} (hub blocks)")
    )
    return f"the budget {budget:,.0f} is infeasible: {floor}" + (
        f"; below --degree-tol {needed} none fits the budget" if needed else ""
    )


def _json_number(x: float) -> float | str:
    return "infinite" if math.isinf(x) else int(x)


def block_bound(hub_degrees: np.ndarray, shared_degrees: np.ndarray, limit: float) -> tuple[float, int]:
    """(bound, P) for one block: ``hub_degrees`` of H and ``shared_degrees`` of S, degree-sum cap ``limit``."""
    hub_sum = float(hub_degrees.sum())
    if len(hub_degrees) == 0 or len(shared_degrees) == 0:
        return 0.0, 0
    if float(hub_degrees.max()) > limit:
        return math.inf, 0  # that hub alone breaks the limit in any partition
    p = max(1, math.ceil(hub_sum / limit - 1e-9))
    room = p * limit - hub_sum
    owned = int(np.searchsorted(np.cumsum(np.sort(shared_degrees)), room, side="right"))
    return float(p * len(shared_degrees) - owned), p


def remote_lower_bound(
    graphs: Graphs, k: int, degree_tol: float, candidates: int = CANDIDATES, max_blocks: int = MAX_BLOCKS
) -> RemoteLowerBound:
    """Lower bound on ``sum_i |V_i^remote|`` over all K-way assignments whose degree sums (``graphs.degree``)
    are all at most ``degree_tol x`` their mean. Uses the in-edge CSR (remote sets follow in-arcs)."""
    deg = np.asarray(graphs.degree, dtype=np.int64)
    mean = float(deg.sum()) / k
    result = RemoteLowerBound(0.0, degree_tol * mean, mean)
    if k <= 1 or graphs.num_nodes == 0:
        return result
    in_degree = np.diff(graphs.indptr)
    top = np.argsort(-in_degree, kind="stable")[:candidates]
    top = top[in_degree[top] > 0]
    removed = np.zeros(graphs.num_nodes, dtype=bool)  # S nodes already counted by an earlier block
    for _ in range(max_blocks):
        rows = {int(h): _in_row(graphs, int(h), removed) for h in top}
        overlap = _overlaps([rows[int(h)] for h in top], graphs.num_nodes)
        best = None
        for i, start in enumerate(top):
            order = [
                int(top[j]) for j in np.argsort(-overlap[i], kind="stable") if j != i and overlap[i, j] > 0
            ]
            block = _grow_block(int(start), order, rows, deg, result.degree_limit)
            if best is None or block[0].bound > best[0].bound:
                best = block
        if best is None or best[0].bound <= 0:
            break
        block, shared = best
        result.blocks.append(block)
        result.total += block.bound
        if math.isinf(block.bound):
            break
        removed[shared] = True
    return result


def _in_row(graphs: Graphs, v: int, removed: np.ndarray) -> np.ndarray:
    row = np.asarray(graphs.indices[graphs.indptr[v] : graphs.indptr[v + 1]], dtype=np.int64)  # sorted
    if len(row) > 1:
        row = row[np.concatenate(([True], row[1:] != row[:-1]))]  # a store may keep duplicate arcs
    return row[~removed[row]]


def _overlaps(rows: list[np.ndarray], n: int) -> np.ndarray:
    """``[i, j]`` = in-neighbours rows i and j share (one sparse product)."""
    import scipy.sparse as sp

    incidence = sp.csr_matrix(
        (
            np.ones(sum(len(r) for r in rows), dtype=np.int32),
            np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64),
            np.concatenate([[0], np.cumsum([len(r) for r in rows])]),
        ),
        shape=(len(rows), n),
    )
    return (incidence @ incidence.T).toarray()


def _intersect_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elements of sorted ``a`` that are in sorted ``b``: a binary search per element, no re-sorting."""
    if len(a) == 0 or len(b) == 0:
        return a[:0]
    at = np.minimum(np.searchsorted(b, a), len(b) - 1)
    return a[b[at] == a]


def _grow_block(
    start: int, order: list[int], rows: dict[int, np.ndarray], deg: np.ndarray, limit: float
) -> tuple[HubBlock, np.ndarray]:
    """Greedy block from ``start``: add the candidates in ``order`` (most in-neighbours shared with ``start``
    first) and keep the prefix with the largest bound."""
    hubs = [start]
    shared = rows[start][rows[start] != start]
    bound, p = block_bound(deg[hubs], deg[shared], limit)
    best = (HubBlock(list(hubs), len(shared), p, bound, deg[hubs], deg[shared]), shared)
    for h in order:
        shared = _intersect_sorted(shared, rows[h])
        hubs.append(h)
        shared = shared[~np.isin(shared, hubs)]
        if len(shared) == 0:
            break
        bound, p = block_bound(deg[hubs], deg[shared], limit)
        if bound > best[0].bound:
            best = (HubBlock(list(hubs), len(shared), p, bound, deg[hubs], deg[shared]), shared)
    return best
