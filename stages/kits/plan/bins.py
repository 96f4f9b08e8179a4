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
    stamp, slot = np.full(n_local, -1, dtype=np.int64), np.empty(n_local, dtype=np.int64)
    bins64, prio64, row_ptr64 = (np.asarray(a, dtype=np.int64) for a in (bin_ptr, prio, row_ptr))
    for b0, b1 in zip(cuts[:-1], cuts[1:], strict=True):
        part_ptr, part_src, part_idx = _bins_of(
            bins64[b0 : b1 + 1], int(b0), prio64, row_ptr64, edge_src, pos_of_owned, n_owned, stamp, slot
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


@numba.njit(cache=True)
def _bins_of(bin_ptr, first_bin, prio, row_ptr, edge_src, pos_of_owned, n_owned, stamp, slot):
    """(src_ptr from 0, src, indices) of the consecutive bins ``bin_ptr`` (absolute row positions), in one pass
    over their arcs and a sort of each bin's other sources. A bin's sources are its destinations (their order in
    the bin), then the other sources it reads, ascending by local id; an arc's index is its source's position
    there. ``stamp``/``slot`` (one per local id, kept across runs): the bin (``first_bin + b``) that last listed a
    source, and its position in that bin."""
    nb = len(bin_ptr) - 1
    r0 = bin_ptr[0]
    e0, e1 = row_ptr[r0], row_ptr[bin_ptr[nb]]
    indices = np.empty(e1 - e0, dtype=np.int64)
    src = np.empty(bin_ptr[nb] - r0 + e1 - e0, dtype=np.int64)  # at most every destination and every arc
    src_ptr = np.zeros(nb + 1, dtype=np.int64)
    others = np.empty(e1 - e0, dtype=np.int64)
    out = 0
    for b in range(nb):
        lo, hi = bin_ptr[b], bin_ptr[b + 1]
        n_dst = hi - lo
        for r in range(lo, hi):
            src[out + r - lo] = prio[r]
        n_other = 0
        for e in range(row_ptr[lo], row_ptr[hi]):
            s = edge_src[e]
            if s < n_owned and lo <= pos_of_owned[s] < hi:
                continue  # a destination of this bin
            if stamp[s] != first_bin + b:
                stamp[s] = first_bin + b
                others[n_other] = s
                n_other += 1
        listed = np.sort(others[:n_other])
        for i in range(n_other):
            slot[listed[i]] = n_dst + i
            src[out + n_dst + i] = listed[i]
        for e in range(row_ptr[lo], row_ptr[hi]):
            s = edge_src[e]
            if s < n_owned and lo <= pos_of_owned[s] < hi:
                indices[e - e0] = pos_of_owned[s] - lo
            else:
                indices[e - e0] = slot[s]
        out += n_dst + n_other
        src_ptr[b + 1] = out
    return src_ptr, src[:out], indices


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
