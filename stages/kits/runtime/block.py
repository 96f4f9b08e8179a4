"""The unit of work of every GNN layer in g3: a *block*, i.e. one bin of one layer.

A bin is a set of destination nodes together with **all** their in-edges (G3 §5.1). The runtime gathers the
input rows of the bin's source nodes into ``x_src`` and calls a layer on ``(block, x_src)``; a layer returns
the outputs of the destinations only. Because every destination sees all of its in-edges, the result of a
bin does not depend on how the nodes were cut into bins or workers (G3 §5.3, "correctness").

Local numbering: sources are ``0 .. n_src-1`` (the rows of ``x_src``); the first ``n_dst`` sources **are** the
destinations, in the same order, so a layer reads a destination's own input as ``x_src[:n_dst]`` (SAGE's
self term, GCN's and GAT's self-loops) without a second gather.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from stages.kits.runtime.kernels.csr import row_ids


@dataclass(eq=False)  # identity semantics: comparing tensors field by field is never meant
class Block:
    """One bin of one layer: ``n_dst`` destination nodes and their in-edges.

    Sources are numbered ``0..n_src-1`` in ``x_src``; the first ``n_dst`` sources ARE the destinations (same
    order), the rest are other in-neighbours (owned elsewhere or remote). ``indptr``/``indices``: in-edge CSR
    over rows = destinations (row ``v`` lists the local source ids of the arcs into ``v``; unsorted rows and
    repeated sources are allowed).

    Attributes:
        n_dst: number of destination nodes.
        n_src: number of source nodes (``>= n_dst``).
        indptr: int64 ``[n_dst + 1]``.
        indices: int64 ``[nnz]``, values in ``[0, n_src)``.
        src_out_degree: float ``[n_src]``, GLOBAL out-degree of each source (from the store), for GCN.
        dst_in_degree: float ``[n_dst]``, GLOBAL in-degree of each destination, for GCN.
        dst_global: int64 ``[n_dst]``, global node ids of the destinations (the dropout masks use them).
        order_by_cost: how a layer whose weights commute with its aggregation (SAGE, GCN) orders the two:
            False (the default), by width alone — project first when that narrows the rows (``in > out``,
            DGL's rule); True, by this block's sizes (:func:`project_first`) — for sampled blocks, whose
            sources far outnumber their destinations. The same value either way, rounded differently.
    """

    n_dst: int
    n_src: int
    indptr: torch.Tensor
    indices: torch.Tensor
    src_out_degree: torch.Tensor
    dst_in_degree: torch.Tensor
    dst_global: torch.Tensor
    order_by_cost: bool = False
    # structures derived from the block by the layers (transposed CSR, CSR with self-loops), computed on first
    # use and kept as long as the block: the runtime keeps its blocks across epochs, so they are built once
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def whole_graph(
        cls, indptr: torch.Tensor, indices: torch.Tensor, out_degree: torch.Tensor, in_degree: torch.Tensor
    ) -> Block:
        """The whole graph as one block (single-process training): every node a destination and a source."""
        n = len(indptr) - 1
        return cls(
            n_dst=n,
            n_src=n,
            indptr=indptr,
            indices=indices,
            src_out_degree=out_degree,
            dst_in_degree=in_degree,
            dst_global=torch.arange(n, dtype=torch.int64),
        )

    @property
    def nnz(self) -> int:
        return int(self.indices.numel())

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per block and key."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def has_cached(self, key: str) -> bool:
        return key in self._cache

    def map_tensors(self, fn) -> Block:
        """The block with ``fn`` applied to every tensor; ``self`` (and its cache) when nothing changed."""
        kw, same = {}, True
        for f in fields(self):
            if f.init:
                v = getattr(self, f.name)
                kw[f.name] = fn(v) if isinstance(v, torch.Tensor) else v
                same = same and kw[f.name] is v
        return self if same else Block(**kw)

    def to(self, device, non_blocking: bool = False) -> Block:
        """The block with every tensor on ``device``: ``self`` when already there (keeping its cache)."""
        return self.map_tensors(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Block:
        """A copy in page-locked host memory, so that ``to(cuda, non_blocking=True)`` is truly asynchronous."""
        return self.map_tensors(lambda t: t.pin_memory())


def project_first(block: Block, in_dim: int, out_dim: int) -> bool:
    """Whether a layer ``in_dim → out_dim`` that may apply its weight before or after its aggregation over
    ``block`` projects the sources first. By width (``in_dim > out_dim``) unless ``block.order_by_cost``; then
    by the multiply-adds of the forward on this block: projecting first costs ``n_src·in·out`` for the product
    and ``nnz·out`` for the aggregation, aggregating first ``nnz·in`` and ``n_dst·in·out`` (the backward's
    products scale alike). A sampled block of fanouts (25, 10) has about 7 sources per destination, so its
    first layer at 100 → 16 aggregates first: 5× fewer multiply-adds than projecting its 150,000 sources."""
    if not block.order_by_cost:
        return in_dim > out_dim
    return cheaper_to_project(block.n_src, block.n_dst, block.nnz, in_dim, out_dim)


def cheaper_to_project(n_src: int, n_dst: int, nnz: int, in_dim: int, out_dim: int) -> bool:
    """:func:`project_first`'s rule by size, for a block of ``n_src`` sources, ``n_dst`` destinations and
    ``nnz`` arcs (a sampler decides with it before the block is made)."""
    return n_src * in_dim * out_dim + nnz * out_dim < nnz * in_dim + n_dst * in_dim * out_dim


def gather_rows(indptr: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions in ``indices`` of the CSR rows ``rows`` (concatenated in that order) and the new indptr.

    Vectorised segment gather: no Python loop over rows.
    """
    starts = indptr[rows]
    new_indptr = torch.zeros(rows.numel() + 1, dtype=torch.int64, device=indptr.device)
    torch.cumsum(indptr[rows + 1] - starts, 0, out=new_indptr[1:])
    row_of = row_ids(new_indptr)
    # position = start of its row + offset inside the row
    pos = starts[row_of] + (torch.arange(row_of.numel(), device=indptr.device) - new_indptr[:-1][row_of])
    return pos, new_indptr
