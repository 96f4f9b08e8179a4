"""Aggregation kernels of g3's GNN layers, as ``torch.autograd.Function``s over a block's in-edge CSR.

The interface is deliberately small so that faster kernels (numba on CPU, custom CUDA) can replace the bodies
without touching the layers:

* :func:`csr_sum`  — ``out[v] = sum_{e in row v} w_e * x_src[indices[e]]`` with an optional per-edge weight
  ``[nnz]`` or per-edge-per-head weight ``[nnz, H]`` (then ``x_src`` is ``[n_src, H, d]``); gradients for
  ``x_src`` and for the weights (GAT's attention coefficients need the latter).
* :func:`csr_mean` — ``csr_sum`` divided by the row length (0 for a row without edges).
* :func:`edge_softmax` — softmax of per-edge scores ``[nnz, H]`` within each row (each destination).
* :func:`add_self_loops` — the CSR with the arc ``v -> v`` prepended to every row (GAT attends to itself).
* :func:`csr_transpose` — the transposed CSR, an optional argument of the sums that makes backward a CSR
  product instead of a scatter; a block's is computed once and cached.

Rows may be unsorted and may repeat a source (multi-edges): every arc counts once.

Two implementations of the sums, chosen per call by :func:`backend`:

* ``"sparse"`` (default on CPU): ``torch.sparse_csr_tensor`` matrix products — forward ``A @ x``, input
  gradient ``A^T @ g`` (with the transposed CSR when given, else through a CSC view) and weight gradient as a
  sampled dense-dense product (``torch.sparse.sampled_addmm``). On 2 CPU cores they are 5-30x faster than
  gather/scatter and need no ``[nnz, d]`` temporaries.
* ``"index"`` (default elsewhere, and for other dtypes): gather rows, ``index_add_`` them. Plain, portable,
  correct on any device; used on CUDA because cuSPARSE's CSR routines are specified for sorted,
  duplicate-free column indices, which a block's rows need not be.

Both are checked against each other and by ``torch.autograd.gradcheck`` in ``tests/test_models.py``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import NamedTuple

import torch

# Building a CSR tensor warns once per process that sparse CSR is "beta"; the operations used here are stable.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")

_FORCED_BACKEND: str | None = None


def backend(x: torch.Tensor) -> str:
    """The implementation used for features ``x``: ``"sparse"`` or ``"index"``.

    ``"sparse"`` for float32/float64 on CPU (the dtypes the CPU sparse routines implement), ``"index"`` otherwise,
    unless :func:`use_backend` forces one.
    """
    if _FORCED_BACKEND is not None:
        return _FORCED_BACKEND
    return "sparse" if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) else "index"


@contextlib.contextmanager
def use_backend(name: str | None) -> Iterator[None]:
    """Force a backend (``"sparse"``, ``"index"``, or ``None`` for the default) inside the ``with`` block."""
    global _FORCED_BACKEND
    if name not in (None, "sparse", "index"):
        raise ValueError(f"unknown kernel backend {name!r}")
    old, _FORCED_BACKEND = _FORCED_BACKEND, name
    try:
        yield
    finally:
        _FORCED_BACKEND = old


def row_ids(indptr: torch.Tensor, nnz: int | None = None) -> torch.Tensor:
    """The row (destination) of every edge, int64 ``[nnz]``.

    Pass ``nnz`` when known: it saves a device-to-host synchronisation on CUDA.
    """
    n = indptr.numel() - 1
    if nnz is None:
        nnz = int(indptr[-1])
    counts = indptr[1:] - indptr[:-1]
    return torch.repeat_interleave(torch.arange(n, device=indptr.device), counts, output_size=nnz)


def add_self_loops(indptr: torch.Tensor, indices: torch.Tensor, n_dst: int) -> tuple[torch.Tensor, torch.Tensor]:
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
    """The transposed CSR (a stable sort of the edges by source, O(nnz log nnz)).

    Backward of a sum over in-edges is a sum over out-edges; with the transpose at hand the CPU computes it as
    one CSR product with short rows — an order of magnitude faster than scattering. A block's structure is the
    same every epoch, so callers compute it once (:meth:`Block.cached`) and pass it to :func:`csr_sum`.
    """
    nnz = indices.numel()
    perm = torch.argsort(indices, stable=True)
    t_indptr = torch.zeros(n_src + 1, dtype=torch.int64, device=indices.device)
    torch.cumsum(torch.bincount(indices, minlength=n_src), 0, out=t_indptr[1:])
    return CSRTranspose(t_indptr, row_ids(indptr, nnz).index_select(0, perm), perm)


def block_transpose(block, x: torch.Tensor) -> CSRTranspose | None:
    """The block's transposed CSR, cached on the block; ``None`` when the backend for ``x`` would not use it."""
    if backend(x) != "sparse":
        return None
    return block.cached("transpose", lambda: csr_transpose(block.indptr, block.indices, block.n_src))


def block_self_loops(block, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, CSRTranspose | None]:
    """The block's CSR with self-loops (:func:`add_self_loops`) and, as :func:`block_transpose`, its transpose."""
    indptr, indices = block.cached("self_loops", lambda: add_self_loops(block.indptr, block.indices, block.n_dst))
    if backend(x) != "sparse":
        return indptr, indices, None
    return indptr, indices, block.cached("self_loops_t", lambda: csr_transpose(indptr, indices, block.n_src))


# --- sparse-matrix helpers ------------------------------------------------------------------------------------
def _csr(indptr, indices, values, n_dst, n_src) -> torch.Tensor:
    return torch.sparse_csr_tensor(indptr, indices, values, (n_dst, n_src), check_invariants=False)


def _ones(nnz, like):
    return torch.ones(nnz, dtype=like.dtype, device=like.device)


def _sddmm(indptr, indices, a, b, n_dst, n_src) -> torch.Tensor:
    """``out[e] = a[row(e)] . b[indices[e]]`` for 2-D ``a [n_dst, k]``, ``b [n_src, k]``."""
    pattern = _csr(indptr, indices, torch.zeros(indices.numel(), dtype=a.dtype, device=a.device), n_dst, n_src)
    return torch.sparse.sampled_addmm(pattern, a.contiguous(), b.t(), beta=0.0).values()


def _expand_weight(w: torch.Tensor, x_dim: int) -> torch.Tensor:
    """``w [nnz, *h]`` broadcast against gathered rows ``[nnz, *h, *rest]``."""
    return w.reshape(w.shape + (1,) * (x_dim - w.dim()))


class CSRSum(torch.autograd.Function):
    """``out[v] = sum_{e in row v} w_e * x_src[indices[e]]``; see :func:`csr_sum`."""

    @staticmethod
    def forward(ctx, indptr, indices, x_src, n_dst, edge_weight, transpose):
        n_src, nnz = x_src.shape[0], indices.numel()
        ctx.n_dst, ctx.n_src = n_dst, n_src
        ctx.mode = backend(x_src)
        ctx.transpose = transpose
        ctx.save_for_backward(indptr, indices, x_src, edge_weight)
        out = x_src.new_zeros((n_dst, *x_src.shape[1:]))
        if nnz == 0 or n_dst == 0:
            return out
        if ctx.mode == "sparse":
            if edge_weight is None or edge_weight.dim() == 1:
                vals = _ones(nnz, x_src) if edge_weight is None else edge_weight.contiguous()
                a = _csr(indptr, indices, vals, n_dst, n_src)
                out.copy_((a @ x_src.reshape(n_src, -1)).reshape(out.shape))
            else:  # one matrix per head: x_src [n_src, H, ...], weight [nnz, H]
                for h in range(edge_weight.shape[1]):
                    a = _csr(indptr, indices, edge_weight[:, h].contiguous(), n_dst, n_src)
                    out[:, h] = (a @ x_src[:, h].reshape(n_src, -1)).reshape(out[:, h].shape)
            return out
        dst = row_ids(indptr, nnz)
        msg = x_src.index_select(0, indices)
        if edge_weight is not None:
            msg = msg * _expand_weight(edge_weight, msg.dim())
        return out.index_add_(0, dst, msg)

    @staticmethod
    def backward(ctx, grad_out):
        indptr, indices, x_src, edge_weight = ctx.saved_tensors
        n_dst, n_src, nnz = ctx.n_dst, ctx.n_src, indices.numel()
        need_x, need_w = ctx.needs_input_grad[2], ctx.needs_input_grad[4]
        grad_x = grad_w = None
        if nnz == 0 or n_dst == 0:
            if need_x:
                grad_x = torch.zeros_like(x_src)
            if need_w:
                grad_w = torch.zeros_like(edge_weight)
            return None, None, grad_x, None, grad_w, None
        grad_out = grad_out.contiguous()
        if ctx.mode == "sparse":
            heads = None if edge_weight is None or edge_weight.dim() == 1 else edge_weight.shape[1]
            if need_x:
                t = ctx.transpose

                def a_t(vals):
                    if t is None:  # CSC view of A^T: no copy, but a slower product than a true CSR
                        return _csr(indptr, indices, vals, n_dst, n_src).t()
                    return _csr(t.indptr, t.indices, vals.index_select(0, t.perm), n_src, n_dst)

                if heads is None:
                    vals = _ones(nnz, x_src) if edge_weight is None else edge_weight.contiguous()
                    grad_x = (a_t(vals) @ grad_out.reshape(n_dst, -1)).reshape(x_src.shape)
                else:
                    grad_x = torch.empty_like(x_src)
                    for h in range(heads):
                        gx = a_t(edge_weight[:, h].contiguous()) @ grad_out[:, h].reshape(n_dst, -1)
                        grad_x[:, h] = gx.reshape(grad_x[:, h].shape)
            if need_w:
                if heads is None:
                    grad_w = _sddmm(indptr, indices, grad_out.reshape(n_dst, -1), x_src.reshape(n_src, -1), n_dst, n_src)
                else:
                    grad_w = torch.stack(
                        [
                            _sddmm(indptr, indices, grad_out[:, h].reshape(n_dst, -1),
                                   x_src[:, h].reshape(n_src, -1), n_dst, n_src)
                            for h in range(heads)
                        ],
                        dim=1,
                    )
            return None, None, grad_x, None, grad_w, None
        dst = row_ids(indptr, nnz)
        g_edge = grad_out.index_select(0, dst)
        if need_x:
            msg = g_edge if edge_weight is None else g_edge * _expand_weight(edge_weight, g_edge.dim())
            grad_x = torch.zeros_like(x_src).index_add_(0, indices, msg)
        if need_w:
            prod = g_edge * x_src.index_select(0, indices)
            grad_w = prod.reshape(nnz, *edge_weight.shape[1:], -1).sum(-1)
        return None, None, grad_x, None, grad_w, None


def csr_sum(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    x_src: torch.Tensor,
    n_dst: int,
    edge_weight: torch.Tensor | None = None,
    transpose: CSRTranspose | None = None,
) -> torch.Tensor:
    """Sum over in-edges: ``out[v] = sum_{e = indptr[v]}^{indptr[v+1]-1} w_e * x_src[indices[e]]``.

    Shapes: ``x_src [n_src, *feat]`` → ``out [n_dst, *feat]``. ``edge_weight``: ``None`` (all 1), ``[nnz]``, or
    ``[nnz, H]`` with ``x_src [n_src, H, d]`` (one weight per edge and head). Differentiable in ``x_src`` and
    ``edge_weight``. ``transpose``: optional :func:`csr_transpose` of this CSR, which speeds up backward.
    """
    if edge_weight is not None:
        if edge_weight.shape[0] != indices.numel() or edge_weight.dim() > 2:
            raise ValueError(f"edge_weight of shape {tuple(edge_weight.shape)} for {indices.numel()} edges")
        if edge_weight.dim() == 2 and (x_src.dim() < 3 or x_src.shape[1] != edge_weight.shape[1]):
            raise ValueError(f"per-head edge_weight {tuple(edge_weight.shape)} needs x_src [n_src, H, d], got {tuple(x_src.shape)}")
    return CSRSum.apply(indptr, indices, x_src, int(n_dst), edge_weight, transpose)


def csr_mean(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    x_src: torch.Tensor,
    n_dst: int,
    transpose: CSRTranspose | None = None,
) -> torch.Tensor:
    """Mean over in-edges (0 for a destination without in-edges); shapes and ``transpose`` as :func:`csr_sum`."""
    deg = (indptr[1:] - indptr[:-1]).to(x_src.dtype).clamp_(min=1)
    out = csr_sum(indptr, indices, x_src, n_dst, transpose=transpose)
    return out / deg.reshape((-1,) + (1,) * (x_src.dim() - 1))


class EdgeSoftmax(torch.autograd.Function):
    """``alpha[e] = exp(s[e]) / sum_{e' in row(e)} exp(s[e'])`` per head; see :func:`edge_softmax`."""

    @staticmethod
    def forward(ctx, indptr, scores):
        n, nnz = indptr.numel() - 1, scores.shape[0]
        dst = row_ids(indptr, nnz)
        idx = dst.reshape(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
        # subtracting the row max keeps exp() finite; the max is a constant for the gradient
        rmax = scores.new_full((n, *scores.shape[1:]), float("-inf"))
        rmax.scatter_reduce_(0, idx, scores, reduce="amax", include_self=True)
        e = (scores - rmax.index_select(0, dst)).exp_()
        denom = scores.new_zeros((n, *scores.shape[1:])).index_add_(0, dst, e)
        alpha = e.div_(denom.index_select(0, dst))
        ctx.save_for_backward(dst, alpha)
        ctx.n = n
        return alpha

    @staticmethod
    def backward(ctx, grad_alpha):
        dst, alpha = ctx.saved_tensors
        ga = grad_alpha * alpha
        row = ga.new_zeros((ctx.n, *ga.shape[1:])).index_add_(0, dst, ga)
        return None, ga - alpha * row.index_select(0, dst)


def edge_softmax(indptr: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores [nnz, ...]`` over the edges of each CSR row (numerically stable); same shape."""
    return EdgeSoftmax.apply(indptr, scores)
