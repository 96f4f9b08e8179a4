"""Priority list, bin limits and bins (G3 §5.3 steps 1–3) for one worker.

Local ids follow the shard: ``0..n_owned-1`` are owned nodes, ``n_owned..`` remote nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from ..common.packing import pack_by_count  # noqa: F401 - the planners' bin packing by count

# ------------------------------------------------------------------------------------------------------------
# Step 1: BFS priority list
# ------------------------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _bfs_all_components(indptr, indices, n):
    """Visit order of a BFS started from every not-yet-visited node in id order (all components)."""
    order = np.empty(n, dtype=np.int64)
    seen = np.zeros(n, dtype=np.bool_)
    head = 0
    tail = 0
    for start in range(n):
        if seen[start]:
            continue
        seen[start] = True
        order[tail] = start
        tail += 1
        while head < tail:
            v = order[head]
            head += 1
            for k in range(indptr[v], indptr[v + 1]):
                u = indices[k]
                if not seen[u]:
                    seen[u] = True
                    order[tail] = u
                    tail += 1
    return order


def priority_list(indptr: np.ndarray, indices: np.ndarray, n_owned: int, sends: np.ndarray) -> np.ndarray:
    """Owned-local ids: BFS order over the owned subgraph (undirected view), nodes that peers need first.

    ``sends`` holds the owned-local ids some peer receives; they keep their BFS order among themselves.
    """
    rows = np.repeat(np.arange(n_owned, dtype=np.int64), np.diff(indptr))
    cols = np.asarray(indices, dtype=np.int64)
    inside = cols < n_owned
    a = sp.csr_matrix(
        (np.ones(int(inside.sum()), dtype=np.int8), (rows[inside], cols[inside])), shape=(n_owned, n_owned)
    )
    sym = (a + a.T).tocsr()
    order = _bfs_all_components(sym.indptr.astype(np.int64), sym.indices.astype(np.int64), n_owned)
    needed = np.zeros(n_owned, dtype=bool)
    needed[sends] = True
    flag = needed[order]
    return np.concatenate([order[flag], order[~flag]])


# ------------------------------------------------------------------------------------------------------------
# Step 3: index-based bin packing (by count: stages.common.packing; by bytes: stages.common.bin_memory, with
# step 2, what a bin holds on the device, from stages.common.model_spec.bin_cost)
# ------------------------------------------------------------------------------------------------------------


@dataclass
class LayerBins:
    """Bins of one layer over the priority list, with each bin's block.

    ``bin_ptr[b]:bin_ptr[b+1]`` are the bin's rows (positions in the priority list); ``src[src_ptr[b]:
    src_ptr[b+1]]`` its source nodes (local ids), destinations first in row order; ``indices`` (aligned
    with the worker's ``row_ptr`` over priority order) gives each arc's source position inside its bin's
    source list.
    """

    bin_ptr: np.ndarray
    src_ptr: np.ndarray
    src: np.ndarray
    indices: np.ndarray

    @property
    def num_bins(self) -> int:
        return len(self.bin_ptr) - 1


def build_layer_bins(
    bin_ptr: np.ndarray,
    prio: np.ndarray,
    row_ptr: np.ndarray,
    edge_src: np.ndarray,
    n_owned: int,
    n_local: int,
) -> LayerBins:
    """Blocks of every bin at once (vectorised): sources = bin's destinations, then other in-neighbours."""
    nb = len(bin_ptr) - 1
    n = len(prio)
    row_bin = np.repeat(np.arange(nb, dtype=np.int64), np.diff(bin_ptr))
    pos_of_owned = np.empty(n_owned, dtype=np.int64)
    pos_of_owned[prio] = np.arange(n, dtype=np.int64)
    deg = np.diff(row_ptr)
    edge_bin = np.repeat(row_bin, deg)
    src = edge_src.astype(np.int64, copy=False)

    owned_src = src < n_owned
    src_pos = np.where(owned_src, pos_of_owned[np.where(owned_src, src, 0)], -1)
    same_bin = owned_src & (row_bin[np.maximum(src_pos, 0)] == edge_bin)

    # other sources: unique (bin, local id) pairs, sorted by bin then id
    key = edge_bin[~same_bin] * n_local + src[~same_bin]
    uniq = np.unique(key)
    uniq_bin = uniq // n_local
    other_count = np.bincount(uniq_bin, minlength=nb)
    other_off = np.concatenate([[0], np.cumsum(other_count)])
    n_dst = np.diff(bin_ptr)
    src_ptr = np.concatenate([[0], np.cumsum(n_dst + other_count)])

    indices = np.empty(len(src), dtype=np.int64)
    indices[same_bin] = src_pos[same_bin] - bin_ptr[edge_bin[same_bin]]
    eb = edge_bin[~same_bin]
    indices[~same_bin] = n_dst[eb] + (np.searchsorted(uniq, key) - other_off[eb])

    src_list = np.empty(int(src_ptr[-1]), dtype=np.int64)
    rows = np.arange(n, dtype=np.int64)
    src_list[src_ptr[row_bin] + (rows - bin_ptr[row_bin])] = prio
    k = np.arange(len(uniq), dtype=np.int64)
    src_list[src_ptr[uniq_bin] + n_dst[uniq_bin] + (k - other_off[uniq_bin])] = uniq - uniq_bin * n_local
    index_dtype = np.int32 if int(src_ptr[-1]) < 2**31 else np.int64
    return LayerBins(bin_ptr=bin_ptr, src_ptr=src_ptr, src=src_list, indices=indices.astype(index_dtype))


def rows_in_priority_order(
    indptr: np.ndarray, indices: np.ndarray, prio: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The shard's in-edge CSR with rows permuted into priority order: (row_ptr, edge_src local ids)."""
    deg = np.diff(indptr)[prio]
    row_ptr = np.concatenate([[0], np.cumsum(deg)])
    starts = np.asarray(indptr)[prio]
    edge_pos = np.repeat(starts - row_ptr[:-1], deg) + np.arange(int(row_ptr[-1]), dtype=np.int64)
    return row_ptr, np.asarray(indices)[edge_pos]


@numba.njit(cache=True)
def last_use_bin(edge_src, row_ptr, bin_ptr, n_owned, n_remote):
    """For each remote node, the highest bin that reads it: backward runs a layer's bins in plan order, so
    the node's input gradient is final (and goes back to its owner) after that bin."""
    out = np.full(n_remote, -1, dtype=np.int64)
    nb = len(bin_ptr) - 1
    for b in range(nb):
        for e in range(row_ptr[bin_ptr[b]], row_ptr[bin_ptr[b + 1]]):
            s = edge_src[e]
            if s >= n_owned:
                out[s - n_owned] = b
    return out


from ..common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
