"""Cutting rows into bins by what each bin holds on the device (:class:`~.model_spec.BinCost`): its
destinations, its in-arcs and its *distinct* sources, which depend on which rows share the bin, so the rows
are packed in one sequential pass that counts each bin's sources as it grows (numba).

The g3 planner packs the priority list with it (stages/strategies/g3/plan.py); the ``inter`` schedule packs rows in node-id
order with it at run time (stages/strategies/g3/runtime.py), and the simulator does as the runtime does
(stages/strategies/g3/schedules.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from stages.common.errors import G3InputError
from stages.common.model_spec import BinCost

NO_LIMIT = np.iinfo(np.int64).max


@dataclass(frozen=True)
class PackedBins:
    """Consecutive bins along an order of rows: bin ``b`` is ``order[bounds[b]:bounds[b + 1]]``; its bytes
    (:meth:`BinCost.bytes`) and distinct sources."""

    bounds: np.ndarray
    bytes: np.ndarray
    sources: np.ndarray

    @property
    def num_bins(self) -> int:
        return len(self.bounds) - 1


@numba.njit(cache=True)
def _row_sources(p, row_ptr, edge_src, prio, mark, stamp):
    """Sources row ``p`` adds to the bin marked ``stamp``: its own node and in-neighbours not marked yet (marks
    them)."""
    new = 0
    v = prio[p]
    if mark[v] != stamp:
        mark[v] = stamp
        new += 1
    for j in range(row_ptr[p], row_ptr[p + 1]):
        s = edge_src[j]
        if mark[s] != stamp:
            mark[s] = stamp
            new += 1
    return new


@numba.njit(cache=True)
def _pack(order, row_ptr, edge_src, prio, n_local, max_rows, per_dst, per_src, per_arc, fixed, limit):
    """Bins along ``order`` (row positions): a bin closes at ``max_rows`` rows, or before the row whose
    destination, arcs and new distinct sources would take its bytes past ``limit`` (a bin holds at least one
    row). A source is marked with the number of the bin that counted it; a row that does not fit is counted
    again for the next bin (the marks it left belong to a closed bin)."""
    n = len(order)
    bounds = np.empty(n + 1, dtype=np.int64)
    out_bytes = np.empty(max(n, 1), dtype=np.int64)
    out_srcs = np.empty(max(n, 1), dtype=np.int64)
    mark = np.full(n_local, -1, dtype=np.int64)
    bounds[0] = 0
    k = 0
    used = fixed
    srcs = 0
    rows = 0
    for i in range(n):
        p = order[i]
        arcs = row_ptr[p + 1] - row_ptr[p]
        new = _row_sources(p, row_ptr, edge_src, prio, mark, k)
        add = per_dst + per_arc * arcs + per_src * new
        if rows > 0 and (rows == max_rows or used + add > limit):
            out_bytes[k] = used
            out_srcs[k] = srcs
            k += 1
            bounds[k] = i
            used = fixed
            srcs = 0
            rows = 0
            new = _row_sources(p, row_ptr, edge_src, prio, mark, k)
            add = per_dst + per_arc * arcs + per_src * new
        used += add
        srcs += new
        rows += 1
    if n > 0:
        out_bytes[k] = used
        out_srcs[k] = srcs
        k += 1
        bounds[k] = n
    return bounds[: k + 1], out_bytes[:k], out_srcs[:k]


def pack_bins(
    cost: BinCost,
    row_ptr: np.ndarray,
    edge_src: np.ndarray,
    prio: np.ndarray,
    n_local: int,
    limit: int = NO_LIMIT,
    order: np.ndarray | None = None,
    max_rows: int | None = None,
) -> PackedBins:
    """Rows cut into consecutive bins along ``order`` (default: every row in turn) while a bin's bytes stay
    within ``limit`` and its rows within ``max_rows``.

    ``row_ptr [rows + 1]``/``edge_src``: the rows' in-arcs and each arc's source (local ids, ``< n_local``);
    ``prio[p]``: the local id of row ``p``'s own node (a bin's destinations are among its sources)."""
    row_ptr = np.asarray(row_ptr, dtype=np.int64)
    n_rows = len(row_ptr) - 1
    order = np.arange(n_rows, dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
    bounds, nbytes, srcs = _pack(
        order,
        row_ptr,
        np.asarray(edge_src, dtype=np.int64),
        np.asarray(prio, dtype=np.int64),
        int(n_local),
        int(max_rows or n_rows or 1),
        int(cost.per_dst),
        int(cost.per_src),
        int(cost.per_arc),
        int(cost.fixed),
        int(limit),
    )
    return PackedBins(bounds, nbytes, srcs)


def pack_within(
    cost: BinCost, row_ptr: np.ndarray, edge_src: np.ndarray, prio: np.ndarray, n_local: int, limit: int
) -> PackedBins:
    """:func:`pack_bins` over the rows in turn for a planner: G3InputError when one row alone needs more than
    ``limit`` bytes."""
    packed = pack_bins(cost, row_ptr, edge_src, prio, n_local, limit)
    over = np.flatnonzero(packed.bytes > limit)
    if len(over):
        b = int(over[0])
        raise G3InputError(
            f"one node needs {int(packed.bytes[b]):,} bytes, more than the bin limit of {int(limit):,} bytes; "
            "raise --device-memory or use --bin-size"
        )
    return packed


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
