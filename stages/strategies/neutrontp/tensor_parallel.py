"""Tensor parallelism over a feature split (NeutronTP, 002 §3–4): chunks, their aggregation on a column slice,
and the all-to-alls between column slices and row blocks.

Every worker holds the whole topology and a column slice ``[N, c]`` of each tensor the graph aggregates. A
*chunk* is a contiguous range of destination nodes with all their in-arcs (002 §4.2.1), kept as a
:class:`~.block.Block` whose sources are the chunk's distinct in-neighbours (and, with self-loops, its own
nodes) in ascending global id; the aggregation of one chunk reads ``slice[src_ids]`` and writes the chunk's
rows, with no communication. The row block of worker ``q`` — the nodes whose dense update it runs — is the
``q``-th piece of every chunk (``owner_bounds``). Two exchanges move data between the layouts:

* :meth:`ChunkRouting.rows_to_slices` (*split*): each worker cuts its rows into the peers' column ranges;
  every worker receives its columns of everyone's rows.
* :meth:`ChunkRouting.slices_to_rows` (*gather*): each worker sends its columns of every peer's rows; every
  worker assembles whole rows of its own nodes, columns in worker order.

Both take a set of chunks, so a strategy can run them in bulk or chunk by chunk (the inter-chunk pipeline).
Forward splits send a node with the first chunk that reads it (``first_use``; 002 §4.2.2's deduplication)
and gathers a chunk's destinations after its aggregation; backward mirrors it (the gradient of a chunk's
destinations split before the transposed aggregation, a node's source gradient gathered once the lowest
chunk that reads it — the last one backward visits — is done).
"""

from __future__ import annotations

import numpy as np
import torch

from stages.kits.runtime.block import Block
from stages.kits.runtime.kernels import csr_sum, csr_transpose, put_rows_at, take_rows_at
from stages.kits.runtime.transport import Transport


def column_bounds(widths: list[int]) -> list[int]:
    """Start column of every worker's slice, then the total width."""
    return [0, *np.cumsum(widths).tolist()]


class ChunkAggregation:
    """The chunks of the whole graph and one aggregation over them: ``mean`` (SAGE: the mean over in-arcs) or
    ``gcn`` (GCN's ``D_in^-1/2 (A + I) D_out^-1/2`` with global degrees + 1, also dgcn's ``Â``)."""

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        bounds: np.ndarray,
        op: str,
        in_degree: np.ndarray,
        out_degree: np.ndarray,
        dtype: torch.dtype,
        device: torch.device,
    ):
        if op not in ("mean", "gcn"):
            raise ValueError(f"unknown aggregation {op!r}")
        self.op, self.bounds = op, np.asarray(bounds, dtype=np.int64)
        self.blocks: list[Block] = []
        self.dst_rows: list[torch.Tensor] = []  # gcn: each destination's row among the chunk's sources
        self.norms: list[tuple[torch.Tensor, torch.Tensor]] = []  # gcn: (source, destination) scale columns
        self.inv_degree: list[torch.Tensor] = []  # mean: 1 / max(1, in-arcs) per destination
        self.src_ids: list[torch.Tensor] = []  # per chunk: its sources' global ids
        self.transposes: list = []
        for a, b in zip(self.bounds[:-1], self.bounds[1:], strict=True):
            self._add_chunk(int(a), int(b), indptr, indices, in_degree, out_degree, dtype, device)

    def _add_chunk(self, a, b, indptr, indices, in_degree, out_degree, dtype, device) -> None:
        arcs = np.asarray(indices[indptr[a] : indptr[b]], dtype=np.int64)
        own = np.arange(a, b, dtype=np.int64)
        src = np.unique(np.concatenate([arcs, own]) if self.op == "gcn" else arcs)
        local_ptr = torch.from_numpy(np.asarray(indptr[a : b + 1], dtype=np.int64) - int(indptr[a]))
        local_idx = torch.from_numpy(np.searchsorted(src, arcs).astype(np.int64))
        block = Block(
            n_dst=b - a,
            n_src=len(src),
            indptr=local_ptr,
            indices=local_idx,
            src_out_degree=torch.from_numpy(out_degree[src].astype(np.float64)).to(dtype),
            dst_in_degree=torch.from_numpy(in_degree[a:b].astype(np.float64)).to(dtype),
            dst_global=torch.from_numpy(own),
        ).to(device)
        self.src_ids.append(torch.from_numpy(src))  # global ids of the sources (host: they index host slices)
        self.blocks.append(block)
        self.transposes.append(csr_transpose(block.indptr, block.indices, block.n_src))
        if self.op == "gcn":
            self.dst_rows.append(torch.from_numpy(np.searchsorted(src, own)).to(device))
            self.norms.append(
                ((block.src_out_degree + 1.0).rsqrt()[:, None], (block.dst_in_degree + 1.0).rsqrt()[:, None])
            )
        else:
            deg = (block.indptr[1:] - block.indptr[:-1]).clamp(min=1).to(dtype)
            self.inv_degree.append((1.0 / deg)[:, None])

    def span(self, j: int) -> tuple[int, int]:
        return int(self.bounds[j]), int(self.bounds[j + 1])

    def forward(self, j: int, x_slice: torch.Tensor) -> torch.Tensor:
        """Chunk ``j``'s aggregation of the slice ``x_slice [N, c]`` (host): ``[n_dst, c]`` on the device."""
        b = self.blocks[j]
        if x_slice.shape[1] == 0:  # a worker without columns (fewer columns than workers) aggregates nothing
            return x_slice.new_zeros((b.n_dst, 0), device=b.indptr.device)
        xs = take_rows_at(x_slice, self.src_ids[j]).to(b.indptr.device)
        if self.op == "mean":
            return csr_sum(b.indptr, b.indices, xs, b.n_dst).mul_(self.inv_degree[j])
        src_norm, dst_norm = self.norms[j]
        h = xs * src_norm
        return (
            csr_sum(b.indptr, b.indices, h, b.n_dst).add_(h.index_select(0, self.dst_rows[j])).mul_(dst_norm)
        )

    def backward(self, j: int, grad_dst: torch.Tensor) -> torch.Tensor:
        """The gradient of chunk ``j``'s sources (``[n_src, c]``, rows as ``src_ids[j]``) from that of
        its destinations ``grad_dst [n_dst, c]``: the transposed aggregation, one CSR sum over the sources."""
        b, t = self.blocks[j], self.transposes[j]
        if grad_dst.shape[1] == 0:
            return grad_dst.new_zeros((b.n_src, 0), device=b.indptr.device)
        g = grad_dst.to(b.indptr.device)
        if self.op == "mean":
            return csr_sum(t.indptr, t.indices, g * self.inv_degree[j], b.n_src)
        src_norm, dst_norm = self.norms[j]
        g = g * dst_norm
        out = csr_sum(t.indptr, t.indices, g, b.n_src)
        return out.index_add_(0, self.dst_rows[j], g).mul_(src_norm)


class ChunkRouting:
    """Who owns which rows, and the two exchanges between column slices and row blocks for a set of chunks.

    ``owner_bounds [n_chunks, K + 1]``: worker ``q`` owns ``owner_bounds[j, q] .. owner_bounds[j, q + 1]`` of
    chunk ``j``; ``first_use [N]``: the first chunk reading each node as a source (``n_chunks``: none)."""

    def __init__(self, owner_bounds: np.ndarray, first_use: np.ndarray, rank: int, world: int, tr: Transport):
        self.ob = np.asarray(owner_bounds, dtype=np.int64)
        self.rank, self.world, self.tr = rank, world, tr
        self.n_chunks = len(self.ob)
        self.rows = [self._dst_ids(range(self.n_chunks), q) for q in range(world)]  # every worker's rows
        self.owned = self.rows[rank]
        self._ids: dict[tuple, list[np.ndarray]] = {}
        self._indices: dict[tuple, tuple[np.ndarray, torch.Tensor]] = {}
        first_use = np.asarray(first_use)
        # per worker: its nodes grouped by the chunk that first reads them, ids ascending within a group
        self._new, self._new_ptr = [], []
        for q in range(world):
            ids = self.rows[q]
            fu = first_use[ids]
            order = np.argsort(fu, kind="stable")
            self._new.append(ids[order])
            self._new_ptr.append(np.searchsorted(fu[order], np.arange(self.n_chunks + 1)))

    def dst_ids(self, chunks, q: int) -> np.ndarray:
        """Worker ``q``'s rows of ``chunks`` (global ids, chunk order)."""
        if len(chunks) == self.n_chunks:  # every chunk (the bulk exchanges): computed once
            return self.rows[q]
        return self._dst_ids(chunks, q)

    def _dst_ids(self, chunks, q: int) -> np.ndarray:
        parts = [np.arange(self.ob[j, q], self.ob[j, q + 1], dtype=np.int64) for j in chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def new_ids(self, chunks, q: int) -> np.ndarray:
        """Worker ``q``'s nodes whose first reading chunk is in ``chunks`` (global ids)."""
        parts = [self._new[q][self._new_ptr[q][j] : self._new_ptr[q][j + 1]] for j in chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def local(self, ids: np.ndarray, device: torch.device) -> torch.Tensor:
        """Positions of owned global ``ids`` among this worker's rows, on ``device``."""
        return self._index("local", ids, device, lambda: np.searchsorted(self.owned, ids).astype(np.int64))

    def at(self, ids: np.ndarray, device: torch.device) -> torch.Tensor:
        """``ids`` as an index on ``device``."""
        return self._index("at", ids, device, lambda: ids)

    def _index(self, kind: str, ids: np.ndarray, device: torch.device, make) -> torch.Tensor:
        """An index made once per id list and device: the exchanges' id lists are made once and reused every
        step (:meth:`ids`), so no step builds an index on the host or copies one to the device."""
        key = (kind, id(ids), device)
        if key not in self._indices:
            self._indices[key] = (ids, torch.from_numpy(make()).to(device))  # holds ids: its id stays unique
        return self._indices[key][1]

    def ids(self, kind: str, chunks) -> list[np.ndarray]:
        """Every worker's nodes of ``chunks`` in an exchange, made once per (kind, chunks): ``dst`` (their rows)
        or ``new`` (the nodes those chunks read first)."""
        key = (kind, tuple(chunks))
        if key not in self._ids:
            get = self.dst_ids if kind == "dst" else self.new_ids
            self._ids[key] = [get(chunks, q) for q in range(self.world)]
        return self._ids[key]

    def rows_to_slices(
        self, rows: torch.Tensor, ids: list[np.ndarray], cols: list[int], out: torch.Tensor, label: str
    ) -> None:
        """Split: this worker's ``rows [n_owned, D]`` of the nodes ``ids[rank]`` go to every worker as its
        columns (``cols``: :func:`column_bounds`); ``ids[q]``: worker q's nodes in this exchange. Every worker's
        part lands in ``out [N, c_rank]`` at its global ids."""
        mine = (
            take_rows_at(rows, self.local(ids[self.rank], rows.device))
            if len(ids[self.rank])
            else rows.new_zeros((0, rows.shape[1]))
        )
        send = [mine[:, cols[w] : cols[w + 1]].contiguous() for w in range(self.world)]
        width = cols[self.rank + 1] - cols[self.rank]
        parts = self.tr.all_to_all_v(send, [(len(ids[q]), width) for q in range(self.world)], label)
        for q, part in enumerate(parts):
            if len(ids[q]) and width:
                put_rows_at(out, self.at(ids[q], out.device), part)

    def slices_to_rows(
        self, x_slice: torch.Tensor, ids: list[np.ndarray], cols: list[int], out: torch.Tensor, label: str
    ) -> None:
        """Gather: this worker's columns of ``x_slice [N, c_rank]`` at every worker's nodes ``ids[q]`` go to
        that worker; whole rows of this worker's nodes ``ids[rank]``, columns in worker order, are put into
        ``out [n_owned, D]`` at their positions."""
        send = [
            take_rows_at(x_slice, self.at(ids[q], x_slice.device))
            if len(ids[q])
            else x_slice.new_zeros((0, x_slice.shape[1]))
            for q in range(self.world)
        ]
        n = len(ids[self.rank])
        parts = self.tr.all_to_all_v(send, [(n, cols[w + 1] - cols[w]) for w in range(self.world)], label)
        if n:
            put_rows_at(
                out,
                self.local(ids[self.rank], out.device),
                torch.cat([p.to(out.device) for p in parts], dim=1),
            )
