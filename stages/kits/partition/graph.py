"""The graphs every partitioning method reads: the store's in-edge CSR and its symmetrised adjacency.

The store holds the **in-edge CSR**: row ``v`` lists the sources ``u`` of the arcs ``u -> v``, sorted. Remote
sets are defined on these arcs (``V_i^remote`` = distinct nodes outside partition *i* with an arc into *i*).
METIS needs an undirected graph, and Algorithm 1 reasons about "neighbours" ``N(v)``; both use the
**symmetrised adjacency**: the union of in- and out-neighbours, without self-loops, each neighbour once. The
degree ``d_v`` used for balance (Eq. 2) and for Algorithm 1 is ``|N(v)|`` in that graph.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numba
import numpy as np

from stages.common.store import GraphStore


@dataclass
class Graphs:
    """In-edge CSR plus symmetrised adjacency; ``sym_*`` share the in-CSR arrays when the two are equal."""

    num_nodes: int
    indptr: np.ndarray  # int64 [N+1]
    indices: np.ndarray  # int32|int64 [E]
    sym_indptr: np.ndarray  # int64 [N+1]
    sym_indices: np.ndarray  # same dtype as indices
    degree: np.ndarray  # int64 [N], |N(v)| in the symmetrised graph
    reload_indices: Callable[[], np.ndarray] | None = None  # reads the in-CSR indices again (see below)
    # METIS takes a graph of at most this many symmetrised arcs; a larger one is coarsened first (None: any)
    metis_arc_budget: int | None = None
    coarsenings: list = field(default_factory=list)  # what each coarsened METIS call did (partition.json)

    @property
    def symmetric(self) -> bool:
        """True when the in-CSR already is the symmetrised adjacency (no copy was made)."""
        return self.sym_indices is self.indices

    @contextlib.contextmanager
    def adjacency_int64(self) -> Iterator[np.ndarray]:
        """The symmetrised adjacency as int64 (what METIS takes), with the other index arrays released meanwhile.

        METIS is the memory peak of the whole stage, so while it runs only the int64 copy is kept: afterwards
        the symmetrised indices are cast back from it and the in-CSR indices re-read from the store (or shared
        again when the graph is symmetric).
        """
        dtype, symmetric = self.sym_indices.dtype, self.symmetric
        adjncy = np.ascontiguousarray(self.sym_indices, dtype=np.int64)
        if self.reload_indices is not None:
            self.indices = self.sym_indices = None
        try:
            yield adjncy
        finally:
            if self.sym_indices is None:
                self.sym_indices = adjncy.astype(dtype)
                del adjncy
                self.indices = self.sym_indices if symmetric else np.ascontiguousarray(self.reload_indices())


def load_graphs(store: GraphStore) -> Graphs:
    """Read the store's in-edge CSR and build the symmetrised adjacency.

    A store written with symmetric arcs and without self-loops or repeated arcs (the ingest defaults for
    undirected sources) already is its own symmetrised adjacency, so nothing is built for it.
    """
    indptr, indices = store.load_csr()
    options = store.meta.get("options", {})
    if (
        store.meta.get("directed") is False
        and not options.get("keep_self_loops")
        and not options.get("keep_duplicates")
    ):
        indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        indices = np.ascontiguousarray(indices)
        graphs = Graphs(store.num_nodes, indptr, indices, indptr, indices, np.diff(indptr))
    else:
        graphs = graphs_from_csr(indptr, indices)
    graphs.reload_indices = lambda: store.read("indices", verify=False)  # verified by load_csr already
    return graphs


def graphs_from_csr(indptr: np.ndarray, indices: np.ndarray) -> Graphs:
    """In-edge CSR (rows sorted) plus its symmetrised adjacency, shared when the graph is already symmetric."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices = np.ascontiguousarray(indices)
    sym_indptr, sym_indices = symmetrize(indptr, indices)
    if np.array_equal(sym_indptr, indptr) and np.array_equal(sym_indices, indices):
        sym_indptr, sym_indices = (
            indptr,
            indices,
        )  # symmetric, no self-loops, no duplicates: one copy is enough
    degree = np.diff(sym_indptr)
    return Graphs(len(indptr) - 1, indptr, indices, sym_indptr, sym_indices, degree)


def symmetrize(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of in- and out-neighbours per node, sorted, without self-loops or repeats (O(E), no Python loops)."""
    n = len(indptr) - 1
    out_ptr, out_idx = transpose(indptr, indices, n)
    counts = _merge_count(indptr, indices, out_ptr, out_idx)
    sym_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=sym_ptr[1:])
    sym_idx = np.empty(int(sym_ptr[-1]), dtype=indices.dtype)
    _merge_fill(indptr, indices, out_ptr, out_idx, sym_ptr, sym_idx)
    return sym_ptr, sym_idx


def transpose(indptr: np.ndarray, indices: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The out-edge CSR of an in-edge CSR (rows sorted, because rows of the input are visited in order)."""
    counts = np.bincount(indices, minlength=n).astype(np.int64)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    out_idx = np.empty(len(indices), dtype=indices.dtype)
    _transpose_fill(indptr, indices, out_ptr, out_idx)
    return out_ptr, out_idx


@numba.njit(cache=True)
def _transpose_fill(indptr, indices, out_ptr, out_idx):
    cursor = out_ptr[:-1].copy()
    for v in range(len(indptr) - 1):
        for k in range(indptr[v], indptr[v + 1]):
            u = indices[k]
            out_idx[cursor[u]] = v
            cursor[u] += 1


@numba.njit(cache=True)
def _merge_row(a, b, v, out, write):
    """Merge two sorted rows into distinct ids != v; writes into ``out`` when ``write``; returns the count."""
    i = j = m = 0
    last = -1
    while i < len(a) or j < len(b):
        if j >= len(b) or (i < len(a) and a[i] <= b[j]):
            x = a[i]
            i += 1
        else:
            x = b[j]
            j += 1
        if x != v and x != last:
            if write:
                out[m] = x
            m += 1
            last = x
    return m


@numba.njit(cache=True, parallel=True)
def _merge_count(indptr, indices, out_ptr, out_idx):
    n = len(indptr) - 1
    counts = np.zeros(n, dtype=np.int64)
    dummy = np.empty(0, dtype=indices.dtype)
    for v in numba.prange(n):
        a = indices[indptr[v] : indptr[v + 1]]
        b = out_idx[out_ptr[v] : out_ptr[v + 1]]
        counts[v] = _merge_row(a, b, v, dummy, False)
    return counts


@numba.njit(cache=True, parallel=True)
def _merge_fill(indptr, indices, out_ptr, out_idx, sym_ptr, sym_idx):
    for v in numba.prange(len(indptr) - 1):
        a = indices[indptr[v] : indptr[v + 1]]
        b = out_idx[out_ptr[v] : out_ptr[v + 1]]
        _merge_row(a, b, v, sym_idx[sym_ptr[v] : sym_ptr[v + 1]], True)


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
