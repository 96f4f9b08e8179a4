"""Dependency tracking for the pipelined schedules (numba): what each bin waits for, which rows are ready, which
messages are complete, and blocks for bins of arbitrary rows (``inter``'s bins of consecutive node ids).

Rows are positions in the worker's priority list; node ids are the shard's local ids (owned, then remote).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np


def transpose_rows(row_ptr: np.ndarray, edge_src: np.ndarray, n_local: int) -> tuple[np.ndarray, np.ndarray]:
    """For every local node, the rows that read it (one entry per arc): (t_ptr [n_local+1], t_rows)."""
    deg = np.bincount(edge_src, minlength=n_local)
    t_ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    rows = np.repeat(np.arange(len(row_ptr) - 1, dtype=np.int64), np.diff(row_ptr))
    order = np.argsort(edge_src, kind="stable")
    return t_ptr, rows[order]


def node_messages(
    table_nodes: np.ndarray, msg_counts: np.ndarray, n_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """For every node id, the messages (indices into a table's message list) that carry it: CSR (the messages'
    node lists, transposed)."""
    return transpose_rows(np.concatenate([[0], np.cumsum(msg_counts)]), table_nodes, n_nodes)


@numba.njit(cache=True)
def bin_dependency_pairs(bin_ptr, bin_rows, row_ptr, edge_src, prev_bin, msg_of, n_own, n_prev, n_deps):
    """The distinct (bin, dependency) pairs of one layer's bins (rows ``bin_rows[bin_ptr[b]:bin_ptr[b+1]]``): a
    row depends on the previous layer's bin computing its own node and each owned source (``prev_bin``, a
    dependency ``< n_prev``) and on the message carrying each remote source (``n_prev + msg_of[offset]``).
    Two passes with a marker per dependency: memory O(n_deps + pairs), not O(arcs). Returns (bins, deps)."""
    mark = np.full(n_deps, -1, dtype=np.int64)
    count = 0
    for fill in range(2):
        if fill:
            waiting = np.empty(count, dtype=np.int64)
            on = np.empty(count, dtype=np.int64)
            mark[:] = -1
            count = 0
        for b in range(len(bin_ptr) - 1):
            for i in range(bin_ptr[b], bin_ptr[b + 1]):
                r = bin_rows[i]
                for e in range(row_ptr[r] - 1, row_ptr[r + 1]):  # e = row_ptr[r] - 1: the row's own node
                    if e < row_ptr[r]:
                        dep = prev_bin[r]
                    else:
                        s = edge_src[e]
                        dep = prev_bin[s] if s < n_own else n_prev + msg_of[s - n_own]
                    if mark[dep] != b:
                        mark[dep] = b
                        if fill:
                            waiting[count] = b
                            on[count] = dep
                        count += 1
    return waiting, on


@numba.njit(cache=True)
def release_inputs(nodes, t_ptr, t_rows, self_row, missing, other_missing, ready_flag):
    """Nodes became available as inputs: decrement the missing-input counts of the rows that read them (and of
    their own row, for the self term); returns the rows that became ready.

    A row's inputs may be counted in two parts (local and remote): ``missing`` is the part these nodes belong
    to, and a row is ready once both counts are 0 (pass zeros as ``other_missing`` for a single count). The
    simulator's eager forward tracks readiness this way; the runtime counts it per bin
    (:func:`bin_dependency_pairs`)."""
    out = np.empty(64, dtype=np.int64)
    k = 0
    for i in range(len(nodes)):
        s = nodes[i]
        p = self_row[s]
        for j in range(t_ptr[s], t_ptr[s + 1] + (1 if p >= 0 else 0)):
            q = t_rows[j] if j < t_ptr[s + 1] else p  # the arcs, then the node's own row (the self term)
            missing[q] -= 1
            if missing[q] == 0 and other_missing[q] == 0:
                if k == len(out):
                    out = np.concatenate((out, np.empty(len(out), dtype=np.int64)))
                out[k] = q
                k += 1
                ready_flag[q] = True
    return out[:k]


@numba.njit(cache=True)
def complete_messages(nodes, msg_ptr, msg_ids, remaining):
    """Nodes were produced: decrement the remaining counts of the messages that carry them; returns the
    messages that became complete (ascending)."""
    out = np.empty(16, dtype=np.int64)
    k = 0
    for i in range(len(nodes)):
        v = nodes[i]
        for j in range(msg_ptr[v], msg_ptr[v + 1]):
            m = msg_ids[j]
            remaining[m] -= 1
            if remaining[m] == 0:
                if k == len(out):
                    out = np.concatenate((out, np.empty(len(out), dtype=np.int64)))
                out[k] = m
                k += 1
    res = out[:k].copy()
    res.sort()
    return res


def lowest_runnable_bin(
    wait: list[np.ndarray], ran: list[np.ndarray], left: list[int]
) -> tuple[int | None, int | None]:
    """The eager schedules' next bin: the lowest layer's first bin that waits for nothing (``wait[k][b] == 0``)
    and has not run; ``(None, None)`` when none can run now."""
    for k in range(len(left)):
        if left[k]:
            runnable = np.flatnonzero((wait[k] == 0) & ~ran[k])
            if len(runnable):
                return k, int(runnable[0])
    return None, None


@numba.njit(cache=True)
def build_block_arrays(rows, row_ptr, edge_src, prio, mark):
    """A block for arbitrary rows: sources = the rows' own nodes first, then their other in-neighbours in
    first-seen order; indices = each arc's source position. ``mark`` is an all -1 scratch array of n_local
    entries, left all -1 on return."""
    n_dst = len(rows)
    nnz = 0
    for i in range(n_dst):
        nnz += row_ptr[rows[i] + 1] - row_ptr[rows[i]]
    src = np.empty(n_dst + nnz, dtype=np.int64)
    indptr = np.empty(n_dst + 1, dtype=np.int64)
    indices = np.empty(nnz, dtype=np.int64)
    n_src = 0
    for i in range(n_dst):
        v = prio[rows[i]]
        mark[v] = n_src
        src[n_src] = v
        n_src += 1
    e = 0
    indptr[0] = 0
    for i in range(n_dst):
        p = rows[i]
        for j in range(row_ptr[p], row_ptr[p + 1]):
            s = edge_src[j]
            if mark[s] < 0:
                mark[s] = n_src
                src[n_src] = s
                n_src += 1
            indices[e] = mark[s]
            e += 1
        indptr[i + 1] = e
    for i in range(n_src):
        mark[src[i]] = -1
    return src[:n_src].copy(), indptr, indices


@dataclass
class BinDependencies:
    """What the forward bins of one layer wait for (``multi``, ``inter``): dependency ``i`` is bin ``i`` of the layer
    before (``i < n_bins_before``) or message ``i - n_bins_before`` of that layer's ``fwd_recv`` table; the bins
    waiting for it are ``bins[ptr[i]:ptr[i + 1]]``; ``wait[b]``: how many dependencies bin ``b`` has."""

    ptr: np.ndarray
    bins: np.ndarray
    n_bins_before: int
    wait: np.ndarray

    def dependents(self, i: int) -> np.ndarray:
        return self.bins[self.ptr[i] : self.ptr[i + 1]]


def _rows_csr(bins: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, rows) of a layer's bins given by their rows: bin b's rows are ``rows[ptr[b]:ptr[b+1]]``."""
    ptr = np.zeros(len(bins) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in bins], out=ptr[1:])
    rows = np.concatenate(bins) if bins else np.zeros(0, dtype=np.int64)
    return ptr, rows.astype(np.int64, copy=False)


def _row_bin(bins: list[np.ndarray], n_rows: int) -> np.ndarray:
    """The bin of every row, for a layer's bins given by their rows (each row in exactly one bin)."""
    out = np.full(n_rows, -1, dtype=np.int64)
    for b, rows in enumerate(bins):
        out[rows] = b
    if (out < 0).any():
        raise RuntimeError("forward bins do not cover every owned row")
    return out


def bin_dependencies(
    prev_bins: list[np.ndarray],
    bins: list[np.ndarray],
    row_ptr: np.ndarray,
    edge_src: np.ndarray,
    recv_table,
    n_own: int,
    n_remote: int,
) -> BinDependencies:
    """What each forward bin of a layer waits for, the bins given by their rows (``bins[b]``: rows of bin b;
    ``prev_bins``: the layer before's): the previous layer's bins that compute its rows' own nodes and owned
    in-neighbours, and the messages of ``recv_table`` (the previous layer's ``fwd_recv``) that carry its remote
    in-neighbours. One pass over the arcs (numba), memory of the order of the dependencies, not of the arcs."""
    slices = recv_table.message_slices()
    msg_of = np.full(n_remote, -1, dtype=np.int64)  # remote offset → its message
    for m, (_, _, sl) in enumerate(slices):
        msg_of[np.asarray(recv_table.nodes[sl], dtype=np.int64)] = m
    if (msg_of < 0).any():
        raise RuntimeError("plan: a fwd_recv table does not carry every remote input of the next layer")
    n_prev, n_bins = len(prev_bins), len(bins)
    n_deps = n_prev + len(slices)
    bin_ptr, bin_rows = _rows_csr(bins)
    waiting, on = bin_dependency_pairs(
        bin_ptr,
        bin_rows,
        np.asarray(row_ptr, dtype=np.int64),
        edge_src,
        _row_bin(prev_bins, n_own),
        msg_of,
        n_own,
        n_prev,
        n_deps,
    )
    order = np.argsort(on, kind="stable")
    ptr = np.zeros(n_deps + 1, dtype=np.int64)
    np.cumsum(np.bincount(on, minlength=n_deps), out=ptr[1:])
    return BinDependencies(
        ptr, waiting[order], n_prev, np.bincount(waiting, minlength=n_bins).astype(np.int64)
    )


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
