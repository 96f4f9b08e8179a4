"""The CSR structure of a block and what is derived from it once: the row of every edge, self-loops, the
transposed CSR (a numba counting sort on the CPU), and a block's cached copies of them."""

from __future__ import annotations

from typing import NamedTuple

import torch

from stages.kits.runtime.kernels.backends import backend
from stages.kits.runtime.kernels.numba_cpu import HAVE_NUMBA, _np

if HAVE_NUMBA:
    from stages.kits.runtime.kernels.numba_cpu import _nb_transpose


def row_ids(indptr: torch.Tensor, nnz: int | None = None) -> torch.Tensor:
    """The row (destination) of every edge, int64 ``[nnz]``.

    Pass ``nnz`` when known: it saves a device-to-host synchronisation on CUDA.
    """
    n = indptr.numel() - 1
    if nnz is None:
        nnz = int(indptr[-1])
    counts = indptr[1:] - indptr[:-1]
    return torch.repeat_interleave(torch.arange(n, device=indptr.device), counts, output_size=nnz)


def add_self_loops(
    indptr: torch.Tensor, indices: torch.Tensor, n_dst: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSR with arc ``v -> v`` (source ``v``: the first ``n_dst`` sources are the destinations) first in row ``v``.

    O(nnz) without sorting: row ``v`` moves right by ``v + 1`` slots, its self-loop takes the slot before it.
    """
    nnz = indices.numel()
    dev = indptr.device
    ar = torch.arange(n_dst + 1, device=dev)
    new_indptr = indptr + ar
    new_indices = torch.empty(nnz + n_dst, dtype=indices.dtype, device=dev)
    new_indices[new_indptr[:-1]] = ar[:-1].to(indices.dtype)
    new_indices[torch.arange(nnz, device=dev) + row_ids(indptr, nnz) + 1] = indices
    return new_indptr, new_indices


class CSRTranspose(NamedTuple):
    """The in-edge CSR transposed (rows = sources): row ``u`` lists the destinations of ``u``'s arcs.

    ``perm[i]`` is the edge (position in the original ``indices``) that is the ``i``-th entry of the transpose,
    so per-edge values reorder as ``values[perm]``.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    perm: torch.Tensor


def csr_transpose(indptr: torch.Tensor, indices: torch.Tensor, n_src: int) -> CSRTranspose:
    """The transposed CSR (a stable sort of the edges by source), int64 throughout.

    Backward of a sum over in-edges is a sum over out-edges; with the transpose at hand the CPU computes it as
    one CSR product with short rows — an order of magnitude faster than scattering. A block's structure is the
    same every epoch, so callers compute it once (:meth:`Block.cached`) and pass it to :func:`csr_sum`.
    """
    if HAVE_NUMBA and indices.device.type == "cpu":
        t = _nb_transpose_of(indptr, indices, n_src)
        return CSRTranspose(t.indptr, t.indices.to(torch.int64), t.perm.to(torch.int64))
    nnz = indices.numel()
    perm = torch.argsort(indices, stable=True)
    t_indptr = torch.zeros(n_src + 1, dtype=torch.int64, device=indices.device)
    # counted by a scatter, not bincount, which reads the largest index back to the host
    counts = torch.zeros(n_src, dtype=torch.int64, device=indices.device).index_add_(
        0, indices, torch.ones_like(indices, dtype=torch.int64)
    )
    torch.cumsum(counts, 0, out=t_indptr[1:])
    return CSRTranspose(t_indptr, row_ids(indptr, nnz).index_select(0, perm), perm)


def block_transpose(block, x: torch.Tensor) -> CSRTranspose | None:
    """The block's transposed CSR, cached on the block; ``None`` when the backend for ``x`` would not use it.

    The numba backend's copy (int32 indices and permutation when they fit) is cached apart from the int64 one
    that the sparse backend needs.
    """
    return _cached_transpose(block, x, block.indptr, block.indices, "transpose")


def block_self_loops(block, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, CSRTranspose | None]:
    """The block's CSR with self-loops (:func:`add_self_loops`) and, as :func:`block_transpose`, its transpose."""
    indptr, indices = block.cached(
        "self_loops", lambda: add_self_loops(block.indptr, block.indices, block.n_dst)
    )
    return indptr, indices, _cached_transpose(block, x, indptr, indices, "self_loops_t")


def _cached_transpose(block, x: torch.Tensor, indptr, indices, key: str) -> CSRTranspose | None:
    mode = backend(x)
    if mode == "numba":
        return block.cached(key + "_nb", lambda: _nb_transpose_of(indptr, indices, block.n_src))
    if mode != "sparse":
        return None
    return block.cached(key, lambda: csr_transpose(indptr, indices, block.n_src))


def _nb_transpose_of(indptr, indices, n_src) -> CSRTranspose:
    """:func:`csr_transpose` by counting sort (O(nnz)); indices and perm int32 when they fit."""
    nnz = indices.numel()
    small = max(nnz, indptr.numel()) < 2**31 - 1
    idt = torch.int32 if small else torch.int64
    t_indptr = torch.empty(n_src + 1, dtype=torch.int64)
    t_indices = torch.empty(nnz, dtype=idt)
    perm = torch.empty(nnz, dtype=idt)
    _nb_transpose(_np(indptr), _np(indices), t_indptr.numpy(), t_indices.numpy(), perm.numpy())
    return CSRTranspose(t_indptr, t_indices, perm)
