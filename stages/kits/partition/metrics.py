"""Figures of a partition, computed from scratch: remote sets, traffic, edge-cut, balance.

Definitions (docs/ARTIFACTS.md): ``V_i^remote`` = distinct nodes outside partition *i* with an arc into a
node of *i*; ``E(V_i)`` = arcs whose destination is in *i*; degree = ``|N(v)|`` in the symmetrised graph;
edge-cut = arcs whose two endpoints lie in different partitions. Every (node, receiving worker) pair is sent
once per layer, so worker *i* receives ``|V_i^remote|`` rows and sends, summed over its peers, the number of
(owned node, peer) pairs where the node is in the peer's remote set.
"""

from __future__ import annotations

import numba
import numpy as np

FLOAT32_BYTES = 4


@numba.njit(cache=True, parallel=True)
def remote_marks(indptr, indices, part, k):
    """``mark[i, u]`` is True when ``u`` is in ``V_i^remote`` (bool [K, N])."""
    n = len(indptr) - 1
    mark = np.zeros((k, n), dtype=np.bool_)
    for v in numba.prange(n):
        pv = part[v]
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if part[u] != pv:
                mark[pv, u] = True  # concurrent writers only ever store True
    return mark


@numba.njit(cache=True, parallel=True)
def edge_cut(indptr, indices, part):
    """Arcs whose source and destination are in different partitions."""
    # one count per node, summed after the loop: numba's parfor reduction analysis of ``total += c`` fails in
    # some numba releases ("unexpected cycle in lookup()", seen with the GPU machine's numba)
    n = len(indptr) - 1
    cut = np.zeros(n, dtype=np.int64)
    for v in numba.prange(n):
        pv = part[v]
        c = 0
        for e in range(indptr[v], indptr[v + 1]):
            if part[indices[e]] != pv:
                c += 1
        cut[v] = c
    return cut.sum()


def remote_sizes(indptr, indices, part, k) -> np.ndarray:
    """``|V_i^remote|`` per partition, recounted from scratch (int64 [K])."""
    return remote_marks(indptr, indices, part, k).sum(axis=1).astype(np.int64)


def traffic_matrix(mark: np.ndarray, part: np.ndarray, k: int) -> np.ndarray:
    """``T[q, i]`` = nodes owned by ``i`` that worker ``q`` receives per layer (int64 [K, K])."""
    t = np.zeros((k, k), dtype=np.int64)
    for q in range(k):
        t[q] = np.bincount(part[mark[q]], minlength=k)
    return t


def ratios(values: np.ndarray) -> dict[str, float]:
    """max/mean (1 = perfect) and min/max (1 = perfect); both 1.0 when everything is zero."""
    values = np.asarray(values, dtype=np.float64)
    mean, top = float(values.mean()), float(values.max())
    return {
        "max_over_mean": top / mean if mean > 0 else 1.0,
        "min_over_max": float(values.min()) / top if top > 0 else 1.0,
    }


def partition_figures(
    graphs, part: np.ndarray, k: int, hidden: int, in_degree: np.ndarray, mark: np.ndarray | None = None
) -> dict:
    """Per-partition figures, totals and balance ratios of the node-ownership ``part``."""
    if mark is None:
        mark = remote_marks(graphs.indptr, graphs.indices, part, k)
    traffic = traffic_matrix(mark, part, k)
    nodes = np.bincount(part, minlength=k).astype(np.int64)
    arcs = np.bincount(part, weights=in_degree, minlength=k).astype(np.int64)
    degree_sum = np.bincount(part, weights=graphs.degree, minlength=k).astype(np.int64)
    remote, send = traffic.sum(axis=1), traffic.sum(axis=0)
    per_layer = hidden * FLOAT32_BYTES
    cut = edge_cut(graphs.indptr, graphs.indices, part)
    return layout_figures(
        nodes, arcs, degree_sum, remote, send, remote * per_layer, send * per_layer, traffic, cut
    )


def layout_figures(
    nodes, arcs, degree_sum, remote, send, recv_bytes, send_bytes, traffic: np.ndarray, cut: int
) -> dict:
    """partition.json's figures of a layout from its per-partition counts (each ``[K]``; the bytes per layer)."""
    per = [
        {
            "partition": i,
            "nodes": int(nodes[i]),
            "arcs": int(arcs[i]),
            "degree_sum": int(degree_sum[i]),
            "remote": int(remote[i]),
            "recv_bytes_per_layer": int(recv_bytes[i]),
            "send": int(send[i]),
            "send_bytes_per_layer": int(send_bytes[i]),
        }
        for i in range(len(nodes))
    ]
    balanced = {"nodes": nodes, "arcs": arcs, "degree_sum": degree_sum, "remote": remote}
    return {
        "partitions": per,
        "totals": {
            "nodes": int(nodes.sum()),
            "arcs": int(arcs.sum()),
            "remote": int(remote.sum()),
            "recv_bytes_per_layer": int(recv_bytes.sum()),
            "edge_cut": int(cut),
        },
        "balance": {name: ratios(values) for name, values in balanced.items()},
        "traffic": traffic.tolist(),
    }


def row_figures(
    graphs, part: np.ndarray, k: int, hidden: int, in_degree: np.ndarray
) -> tuple[dict, np.ndarray]:
    """The ``rows`` layout's figures and the remote marks its shards are written from."""
    mark = remote_marks(graphs.indptr, graphs.indices, part, k)
    return partition_figures(graphs, part, k, hidden, in_degree, mark), mark


def summary_figures(graphs, part: np.ndarray, k: int, remote, cut: int | None = None) -> dict:
    """The handful of numbers that compare two partitions (before/after of Algorithm 1, benchmarks)."""
    cut = edge_cut(graphs.indptr, graphs.indices, part) if cut is None else cut
    remote = np.asarray(remote, dtype=np.int64)
    rr = ratios(remote)
    return {
        "remote_max": int(remote.max()),
        "remote_min": int(remote.min()),
        "remote_total": int(remote.sum()),
        "remote_max_over_mean": rr["max_over_mean"],
        "remote_min_over_max": rr["min_over_max"],
        "degree_sum_max_over_mean": ratios(np.bincount(part, weights=graphs.degree, minlength=k))[
            "max_over_mean"
        ],
        "nodes_max_over_mean": ratios(np.bincount(part, minlength=k))["max_over_mean"],
        "edge_cut": int(cut),
        "remote_per_partition": remote.tolist(),
    }


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
