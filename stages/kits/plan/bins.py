"""Priority list, bin limits and bins (G3 §5.3 steps 1–3) for one worker.

Local ids follow the shard: ``0..n_owned-1`` are owned nodes, ``n_owned..`` remote nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from stages.common.npy import id_dtype
from stages.common.packing import pack_by_count  # noqa: F401 - the planners' bin packing by count

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
    src_ptr[b+1]]`` its source nodes (local ids, int32 below 2^31 local rows), destinations first in row order;
    ``indices`` (aligned with the worker's ``row_ptr`` over priority order) gives each arc's source position inside
    its bin's source list (int32 while ``src_ptr[-1]`` < 2^31).
    """

    bin_ptr: np.ndarray
    src_ptr: np.ndarray
    src: np.ndarray
    indices: np.ndarray

    @property
    def num_bins(self) -> int:
        return len(self.bin_ptr) - 1


# arcs of a worker whose bins are built at once: the vectorised build holds ~80 bytes per arc of the bins it builds
BUILD_ARCS = 1 << 24


def build_layer_bins(
    bin_ptr: np.ndarray,
    prio: np.ndarray,
    row_ptr: np.ndarray,
    edge_src: np.ndarray,
    n_owned: int,
    n_local: int,
    chunk_arcs: int | None = None,
) -> LayerBins:
    """Blocks of every bin (vectorised, a run of bins of about ``chunk_arcs`` arcs at a time, so what the build
    holds beyond its output is bounded by the run, not the worker's arcs): sources = bin's destinations, then
    other in-neighbours."""
    nb = len(bin_ptr) - 1
    pos_of_owned = np.empty(n_owned, dtype=np.int64)
    pos_of_owned[prio] = np.arange(len(prio), dtype=np.int64)
    starts = row_ptr[bin_ptr[:-1]]
    step = chunk_arcs or BUILD_ARCS
    cuts = np.unique(
        np.concatenate([[0], np.searchsorted(starts, np.arange(step, int(row_ptr[-1]), step)), [nb]])
    )
    ptrs, srcs, indices = [np.zeros(1, dtype=np.int64)], [], []
    src_dtype = id_dtype(n_local - 1)  # local ids
    for b0, b1 in zip(cuts[:-1], cuts[1:], strict=True):
        part_ptr, part_src, part_idx = _bins_of(
            bin_ptr[b0 : b1 + 1], prio, row_ptr, edge_src, pos_of_owned, n_owned, n_local
        )
        ptrs.append(part_ptr[1:] + ptrs[-1][-1])
        srcs.append(part_src.astype(src_dtype))  # narrowed per run: never the whole list in int64
        indices.append(part_idx)
    src_ptr = np.concatenate(ptrs)
    index_dtype = id_dtype(int(src_ptr[-1]))
    return LayerBins(
        bin_ptr=bin_ptr,
        src_ptr=src_ptr,
        src=np.concatenate(srcs) if srcs else np.zeros(0, dtype=src_dtype),
        indices=np.concatenate([i.astype(index_dtype) for i in indices])
        if indices
        else np.zeros(0, index_dtype),
    )


def _bins_of(bin_ptr, prio, row_ptr, edge_src, pos_of_owned, n_owned: int, n_local: int):
    """(src_ptr from 0, src, indices) of the consecutive bins ``bin_ptr`` (absolute row positions)."""
    nb = len(bin_ptr) - 1
    r0, r1 = int(bin_ptr[0]), int(bin_ptr[-1])
    e0, e1 = int(row_ptr[r0]), int(row_ptr[r1])
    local_ptr = bin_ptr - r0
    row_bin = np.repeat(np.arange(nb, dtype=np.int64), np.diff(local_ptr))
    deg = np.diff(row_ptr[r0 : r1 + 1])
    edge_bin = np.repeat(row_bin, deg)
    src = np.asarray(edge_src[e0:e1], dtype=np.int64)

    owned_src = src < n_owned
    # a source's position relative to this run of rows; one outside it is in another bin
    src_pos = np.where(owned_src, pos_of_owned[np.where(owned_src, src, 0)] - r0, -1)
    in_run = owned_src & (src_pos >= 0) & (src_pos < r1 - r0)
    same_bin = in_run & (row_bin[np.clip(src_pos, 0, max(r1 - r0 - 1, 0))] == edge_bin)

    # other sources: unique (bin, local id) pairs, sorted by bin then id
    key = edge_bin[~same_bin] * n_local + src[~same_bin]
    uniq = np.unique(key)
    uniq_bin = uniq // n_local
    other_count = np.bincount(uniq_bin, minlength=nb)
    other_off = np.concatenate([[0], np.cumsum(other_count)])
    n_dst = np.diff(local_ptr)
    src_ptr = np.concatenate([[0], np.cumsum(n_dst + other_count)])

    indices = np.empty(len(src), dtype=np.int64)
    indices[same_bin] = src_pos[same_bin] - local_ptr[edge_bin[same_bin]]
    eb = edge_bin[~same_bin]
    indices[~same_bin] = n_dst[eb] + (np.searchsorted(uniq, key) - other_off[eb])

    src_list = np.empty(int(src_ptr[-1]), dtype=np.int64)
    rows = np.arange(r1 - r0, dtype=np.int64)
    src_list[src_ptr[row_bin] + (rows - local_ptr[row_bin])] = prio[r0:r1]
    k = np.arange(len(uniq), dtype=np.int64)
    src_list[src_ptr[uniq_bin] + n_dst[uniq_bin] + (k - other_off[uniq_bin])] = uniq - uniq_bin * n_local
    return src_ptr, src_list, indices


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


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
