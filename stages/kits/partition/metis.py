"""METIS k-way partitioning of the symmetrised graph, single- or multi-constraint, deterministic for a seed.

METIS is called through ctypes on the library that pymetis ships (``pymetis._internal`` exports the METIS C
API). Two reasons: pymetis 2025.2 passes ``ncon = 1`` whatever the length of ``vweights``, so its
``part_graph`` silently ignores every constraint after the first (checked: interleaved ``(1, degree)`` weights
give the same partition as the first n entries alone); and the direct call works on the numpy arrays
without copying them into Python lists, which matters at 100M+ arcs.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from stages.common.errors import G3RuntimeError
from stages.kits.partition.graph import Graphs

METIS_OK = 1
METIS_NOPTIONS = 40
OBJTYPE_CUT = 0
REAL_T = (
    np.float32
)  # METIS's real_t in pymetis's build (REALTYPEWIDTH 32: a float64 ubvec is rejected as garbage)


@functools.cache
def _library():
    from pymetis import _internal
    from pymetis._internal import options_indices

    if _internal._idx_type_width() != 64:
        raise G3RuntimeError("the METIS inside pymetis does not use 64-bit indices; g3 needs them")
    lib = ctypes.CDLL(_internal.__file__)
    if not hasattr(lib, "METIS_PartGraphKway"):
        raise G3RuntimeError(f"{_internal.__file__} does not export METIS_PartGraphKway; reinstall pymetis")
    lib.METIS_PartGraphKway.restype = ctypes.c_int
    lib.METIS_SetDefaultOptions.restype = ctypes.c_int
    return lib, options_indices


def _ptr(a: np.ndarray | None):
    return None if a is None else a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))


def metis_options(seed: int, ufactor: int | None = None) -> np.ndarray:
    """METIS defaults, C numbering, the edge-cut objective, a fixed seed (same seed, same partition) and the
    allowed imbalance ``ufactor`` in thousandths (METIS's default when None)."""
    lib, idx = _library()
    options = np.zeros(METIS_NOPTIONS, dtype=np.int64)
    lib.METIS_SetDefaultOptions(_ptr(options))
    options[idx.NUMBERING] = 0
    options[idx.OBJTYPE] = OBJTYPE_CUT
    options[idx.SEED] = seed
    if ufactor is not None:
        options[idx.UFACTOR] = ufactor
    return options


def metis_partition(
    graphs: Graphs,
    k: int,
    seed: int,
    vertex_weights: np.ndarray | None = None,
    ufactor: int | None = None,
    ubvec: list[float] | None = None,
) -> np.ndarray:
    """k-way METIS on the symmetrised graph; ``vertex_weights`` is [N, ncon] (one column per constraint).

    ``ubvec`` gives each constraint its own allowed max/mean (METIS's ``ubvec``: one ``real_t`` per
    constraint, 32-bit floats in pymetis's build); it replaces ``ufactor``, which applies one imbalance to all.
    Returns int32 [N]. K = 1 puts every node in partition 0 without calling METIS.
    """
    n = graphs.num_nodes
    if k == 1:
        return np.zeros(n, dtype=np.int32)
    ncon, vwgt = 1, None
    if vertex_weights is not None:
        w = np.array(vertex_weights, dtype=np.int64).reshape(n, -1)
        w[:, w.sum(axis=0) == 0] = (
            1  # METIS divides by each constraint's total: an all-zero column means "count"
        )
        ncon, vwgt = w.shape[1], np.ascontiguousarray(w.ravel())  # interleaved: node-major, as METIS expects
    ub = None
    if ubvec is not None:
        ub = np.array(ubvec, dtype=REAL_T)
        if ub.shape != (ncon,) or not np.all(ub > 1.0):
            raise ValueError(f"ubvec needs {ncon} values above 1, got {list(ubvec)}")
    budget = graphs.metis_arc_budget
    if budget is not None and len(graphs.sym_indices) > budget:
        return _coarsened(graphs, k, seed, vwgt, ncon, ufactor, ub, budget)
    part = np.empty(n, dtype=np.int64)
    with graphs.adjacency_int64() as adjncy:
        rc = _call_kway(graphs.sym_indptr, adjncy, vwgt, ncon, k, metis_options(seed, ufactor), part, ub)
    if rc != METIS_OK:
        raise G3RuntimeError(f"METIS_PartGraphKway failed with status {rc} (K={k}, ncon={ncon})")
    return part.astype(np.int32)


def _coarsened(
    graphs: Graphs,
    k: int,
    seed: int,
    vwgt: np.ndarray | None,
    ncon: int,
    ufactor: int | None,
    ub: np.ndarray | None,
    budget: int,
) -> np.ndarray:
    """METIS on the graph coarsened to at most ``budget`` arcs (:mod:`.coarsen`), projected back: every
    constraint summed per cluster and the arcs between clusters counted, so the fine partition's balance and
    edge cut are the coarse one's."""
    from stages.kits.partition.coarsen import coarsen, refine

    n = graphs.num_nodes
    weights = np.ones((n, 1), dtype=np.int64) if vwgt is None else vwgt.reshape(n, ncon)
    c = coarsen(graphs.sym_indptr, graphs.sym_indices, weights, k, budget, seed)
    coarse_k = min(k, len(c.indptr) - 1)
    part = np.zeros(len(c.indptr) - 1, dtype=np.int64)
    if coarse_k > 1:
        rc = _call_kway(
            c.indptr,
            c.indices,
            np.ascontiguousarray(c.node_weights.ravel()),
            ncon,
            k,
            metis_options(seed, ufactor),
            part,
            ub,
            adjwgt=c.arc_weights,
        )
        if rc != METIS_OK:
            raise G3RuntimeError(
                f"METIS_PartGraphKway failed with status {rc} on the coarsened graph (K={k}, ncon={ncon})"
            )
    graphs.coarsenings.append(c.record(len(graphs.sym_indices), budget))
    part = part[c.labels]
    if ncon == 1 and coarse_k > 1:  # one constraint: the fine graph's own moves recover part of the cut
        limit = float(ub[0]) if ub is not None else 1.0 + (ufactor if ufactor is not None else 30) / 1000
        part = refine(graphs.sym_indptr, graphs.sym_indices, part, weights[:, 0], k, limit, seed)
    return part.astype(np.int32)


def _call_kway(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    vwgt: np.ndarray | None,
    ncon: int,
    k: int,
    options: np.ndarray,
    part: np.ndarray,
    ubvec: np.ndarray | None = None,
    adjwgt: np.ndarray | None = None,
) -> int:
    lib, _ = _library()
    n = len(xadj) - 1
    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    if adjwgt is not None:  # held here: METIS reads it after this line
        adjwgt = np.ascontiguousarray(adjwgt, dtype=np.int64)
    if len(adjncy) == 0:
        adjncy = np.zeros(1, dtype=np.int64)  # METIS reads adjncy[0] even for an edgeless graph
        adjwgt = None if adjwgt is None else np.zeros(1, dtype=np.int64)
    objval = np.zeros(1, dtype=np.int64)
    scalars = [np.array([v], dtype=np.int64) for v in (n, ncon, k)]
    return lib.METIS_PartGraphKway(
        _ptr(scalars[0]),
        _ptr(scalars[1]),
        _ptr(xadj),
        _ptr(adjncy),
        _ptr(vwgt),
        None,
        _ptr(adjwgt),
        _ptr(scalars[2]),
        None,
        None if ubvec is None else ubvec.ctypes.data_as(ctypes.c_void_p),
        _ptr(options),
        _ptr(objval),
        _ptr(part),
    )


def assign(graphs: Graphs, store, o, timing: dict, progress) -> tuple[np.ndarray, dict]:
    """The ``metis`` method: METIS defaults, as DGL and BNS-GCN call it."""
    task = progress.add_task("METIS (edge-cut)", total=None)
    part = metis_partition(graphs, o.workers, o.seed)
    progress.update(task, total=1, completed=1)
    return part, {}
