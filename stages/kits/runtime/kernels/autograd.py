"""The layers' differentiable operations, each dispatched per call to the backend :func:`.backends.backend`
chooses: :func:`csr_sum` and :func:`csr_mean` (:class:`CSRSum`), :func:`csr_mean_grad` and
:func:`csr_mean_rows` (the mean apart from autograd), :func:`edge_softmax` (:class:`EdgeSoftmax`),
:func:`relu_dropout` and :func:`relu_dropout_grad` (:class:`ReluDropout`)."""

from __future__ import annotations

import math

import numpy as np
import torch

from stages.kits.runtime.dropout import _C1, _M32, _key, _mix, dropout_mask
from stages.kits.runtime.kernels.backends import backend
from stages.kits.runtime.kernels.csr import CSRTranspose, _nb_transpose_of, row_ids
from stages.kits.runtime.kernels.numba_cpu import (
    HAVE_NUMBA,
    _nb_div_by_degree_of,
    _nb_edge_dots,
    _nb_sum,
    _np,
    _rows2d,
    _run_on_ranges,
    _run_on_row_chunks,
)
from stages.kits.runtime.kernels.sparse import _csr, _expand_weight, _ones, _sddmm

if HAVE_NUMBA:
    from stages.kits.runtime.kernels.numba_cpu import (
        _nb_relu_dropout,
        _nb_relu_dropout_backward,
        _nb_softmax,
        _nb_softmax_backward,
    )


class CSRSum(torch.autograd.Function):
    """``out[v] = sum_{e in row v} w_e * x_src[indices[e]]``; see :func:`csr_sum`."""

    @staticmethod
    def forward(ctx, indptr, indices, x_src, n_dst, edge_weight, transpose, mean=False):
        n_src, nnz = x_src.shape[0], indices.numel()
        ctx.n_dst, ctx.n_src = n_dst, n_src
        ctx.mode = backend(x_src)
        if (
            ctx.mode == "sparse"
            and x_src.device.type == "cuda"
            and edge_weight is not None
            and (edge_weight.dim() > 1 or ctx.needs_input_grad[4])
        ):
            ctx.mode = "index"  # per-head products and cuSPARSE's sampled product: not measured on a GPU
        ctx.transpose = transpose
        ctx.mean = mean  # numba only: the mean is divided inside the kernel (csr_mean divides for the others)
        ctx.save_for_backward(indptr, indices, x_src, edge_weight)
        if ctx.mode == "numba":
            return _nb_sum(indptr, indices, x_src, n_dst, edge_weight, mean=mean)
        out = x_src.new_zeros((n_dst, *x_src.shape[1:]))
        if nnz == 0 or n_dst == 0:
            return out
        if ctx.mode == "sparse":
            if edge_weight is None or edge_weight.dim() == 1:
                vals = _ones(nnz, x_src) if edge_weight is None else edge_weight.contiguous()
                a = _csr(indptr, indices, vals, n_dst, n_src)
                prod = a @ x_src.reshape(n_src, -1)
                if x_src.dim() == 2:  # the product itself (a reshaped one would be a view autograd forbids)
                    return prod
                out.copy_(prod.reshape(out.shape))
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
            return None, None, grad_x, None, grad_w, None, None
        if ctx.mode == "numba":
            if ctx.mean:  # d(sum / deg) = d(sum) / deg, in one pass
                grad_out = _nb_div_by_degree_of(indptr, grad_out)
            if need_x:  # the transposed CSR: a row per source, no atomics
                t = ctx.transpose if ctx.transpose is not None else _nb_transpose_of(indptr, indices, n_src)
                grad_x = _nb_sum(
                    t.indptr,
                    t.indices,
                    grad_out,
                    n_src,
                    edge_weight,
                    perm=None if edge_weight is None else t.perm,
                )
            if need_w:
                grad_w = _nb_edge_dots(indptr, indices, grad_out, x_src, edge_weight)
            return None, None, grad_x, None, grad_w, None, None
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

                def dots(g, x):  # per edge: g's row of its destination . x's row of its source
                    return _sddmm(indptr, indices, g.reshape(n_dst, -1), x.reshape(n_src, -1), n_dst, n_src)

                if heads is None:
                    grad_w = dots(grad_out, x_src)
                else:
                    grad_w = torch.stack([dots(grad_out[:, h], x_src[:, h]) for h in range(heads)], dim=1)
            return None, None, grad_x, None, grad_w, None, None
        dst = row_ids(indptr, nnz)
        g_edge = grad_out.index_select(0, dst)
        if need_x:
            msg = g_edge if edge_weight is None else g_edge * _expand_weight(edge_weight, g_edge.dim())
            grad_x = torch.zeros_like(x_src).index_add_(0, indices, msg)
        if need_w:
            prod = g_edge * x_src.index_select(0, indices)
            grad_w = prod.reshape(nnz, *edge_weight.shape[1:], -1).sum(-1)
        return None, None, grad_x, None, grad_w, None, None


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
            raise ValueError(
                f"per-head edge_weight {tuple(edge_weight.shape)} needs x_src [n_src, H, d], got {tuple(x_src.shape)}"
            )
    return CSRSum.apply(indptr, indices, x_src, int(n_dst), edge_weight, transpose)


def csr_mean(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    x_src: torch.Tensor,
    n_dst: int,
    transpose: CSRTranspose | None = None,
) -> torch.Tensor:
    """Mean over in-edges (0 for a destination without in-edges); shapes and ``transpose`` as :func:`csr_sum`.

    The numba backend divides by the row length inside the aggregation (one pass, no extra ``[n_dst, F]``).
    """
    if backend(x_src) == "numba":
        return CSRSum.apply(indptr, indices, x_src, int(n_dst), None, transpose, True)
    deg = (indptr[1:] - indptr[:-1]).to(x_src.dtype).clamp_(min=1)
    out = csr_sum(indptr, indices, x_src, n_dst, transpose=transpose)
    return out / deg.reshape((-1,) + (1,) * (x_src.dim() - 1))


def csr_mean_grad(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    grad_out: torch.Tensor,
    n_src: int,
    transpose: CSRTranspose | None = None,
) -> torch.Tensor:
    """The gradient of :func:`csr_mean` with respect to ``x_src`` (``grad_out [n_dst, d]`` → ``[n_src, d]``),
    computed apart from autograd for a caller that read its sources in place (:func:`csr_mean_rows`). The
    numba backend's own backward, bitwise: the gradient divided by the row lengths, then summed over the
    transposed CSR (one row per source, no atomics)."""
    if backend(grad_out) != "numba":
        raise ValueError("csr_mean_grad: numba backend only")
    t = transpose if transpose is not None else _nb_transpose_of(indptr, indices, n_src)
    return _nb_sum(t.indptr, t.indices, _nb_div_by_degree_of(indptr, grad_out), int(n_src))


def csr_mean_rows(indptr: torch.Tensor, rows: torch.Tensor, h: torch.Tensor, n_dst: int) -> torch.Tensor:
    """:func:`csr_mean` of ``x_src = h[src]`` given ``rows = src[indices]``, reading ``h`` directly (numba
    backend; no gradient reaches ``h``: backward goes through :func:`csr_mean_grad`): the same kernel, sums and
    order as on the gathered rows."""
    if backend(h) != "numba" or h.requires_grad:
        raise ValueError("csr_mean_rows: numba backend and no gradient only")
    return _nb_sum(indptr, rows, h, int(n_dst), mean=True)


class EdgeSoftmax(torch.autograd.Function):
    """``alpha[e] = exp(s[e]) / sum_{e' in row(e)} exp(s[e'])`` per head; see :func:`edge_softmax`."""

    @staticmethod
    def forward(ctx, indptr, scores):
        n, nnz = indptr.numel() - 1, scores.shape[0]
        ctx.numba = backend(scores) == "numba"
        if ctx.numba:
            alpha = torch.empty_like(scores, memory_format=torch.contiguous_format)
            if nnz and alpha.numel():
                ip = _np(indptr)
                _run_on_row_chunks(_nb_softmax, ip, _np(_rows2d(scores)), alpha.view(nnz, -1).numpy())
            ctx.save_for_backward(indptr, alpha)
            return alpha
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
        if ctx.numba:
            indptr, alpha = ctx.saved_tensors
            out = torch.empty_like(alpha)
            nnz = alpha.shape[0]
            if nnz and alpha.numel():
                _run_on_row_chunks(
                    _nb_softmax_backward,
                    _np(indptr),
                    alpha.view(nnz, -1).numpy(),
                    _np(_rows2d(grad_alpha)),
                    out.view(nnz, -1).numpy(),
                )
            return None, out
        dst, alpha = ctx.saved_tensors
        ga = grad_alpha * alpha
        row = ga.new_zeros((ctx.n, *ga.shape[1:])).index_add_(0, dst, ga)
        return None, ga - alpha * row.index_select(0, dst)


def edge_softmax(indptr: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores [nnz, ...]`` over the edges of each CSR row (numerically stable); same shape."""
    return EdgeSoftmax.apply(indptr, scores)


class ReluDropout(torch.autograd.Function):
    """``relu(h) * dropout_mask(...)`` in one pass (numba); backward from the output alone (no mask kept)."""

    @staticmethod
    def forward(ctx, h, seed, epoch, layer, node_ids, p):
        k = _key(int(seed), int(epoch), int(layer))
        ids = node_ids.to(torch.int64)
        # the per-column part exactly as dropout.dropout_uniform_bits computes it (the per-node one is in the kernel)
        col = _mix((torch.arange(h.shape[1], dtype=torch.int64) + _mix(k ^ _C1)) & _M32)
        scale = _dropout_scale(h.dtype, p)
        out = torch.empty(h.shape, dtype=h.dtype)
        if h.numel():
            h2 = _rows2d(h)
            _run_on_ranges(
                _nb_relu_dropout,
                h2.shape[0],
                h2.shape[1],
                _np(h2),
                ids.numpy().view(np.uint64),
                np.uint64(k),
                col.numpy().view(np.uint64),
                np.uint64(math.ceil(p * 2.0**32)),
                scale,
                out.view(h.shape[0], -1).numpy(),
            )
        ctx.scale = scale
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return _relu_dropout_backward_nb(y, grad, ctx.scale), None, None, None, None, None


def _dropout_scale(dtype: torch.dtype, p: float):
    """The kept entries' factor ``1 / (1 - p)``, rounded to ``dtype`` exactly as the dropout mask holds it."""
    return np.dtype(str(dtype).replace("torch.", "")).type(torch.tensor(1.0 / (1.0 - p), dtype=dtype).item())


def _relu_dropout_backward_nb(y: torch.Tensor, grad: torch.Tensor, scale) -> torch.Tensor:
    """``grad * scale`` where ``y > 0``, else 0, in one numba pass (``y [n, width]``)."""
    out = torch.empty_like(y)
    if y.numel():
        y2 = _rows2d(y.contiguous())
        _run_on_ranges(
            _nb_relu_dropout_backward,
            y2.shape[0],
            y2.shape[1],
            _np(y2),
            _np(_rows2d(grad.contiguous())),
            scale,
            out.view(y.shape[0], -1).numpy(),
        )
    return out


def relu_dropout_grad(y: torch.Tensor, grad: torch.Tensor, p: float) -> torch.Tensor:
    """The gradient of :func:`relu_dropout`'s input from its output ``y`` alone (``p = 0``: plain ReLU's):
    ``grad * scale`` where ``y > 0``, else 0 — bitwise what autograd gives through either implementation."""
    if p <= 0.0:
        return torch.where(y > 0, grad, torch.zeros((), dtype=grad.dtype, device=grad.device))
    scale = _dropout_scale(y.dtype, p)
    if y.dim() == 2 and backend(y) == "numba" and p < 1.0:
        return _relu_dropout_backward_nb(y, grad, scale)
    return torch.where(y > 0, grad * float(scale), torch.zeros((), dtype=grad.dtype, device=grad.device))


def relu_dropout(
    h: torch.Tensor, seed: int, epoch: int, layer: int, node_ids: torch.Tensor, p: float
) -> torch.Tensor:
    """``relu(h) * dropout_mask(seed, epoch, layer, node_ids, width, p)`` (``h [n, width]``), bitwise equal to it.

    On the numba backend one fused pass hashes, thresholds and scales (the torch version makes ~12 passes over
    int64 ``[n, width]`` temporaries); elsewhere the plain composition.
    """
    if p > 0.0 and h.dim() == 2 and backend(h) == "numba" and 0.0 <= p < 1.0:
        return ReluDropout.apply(h, seed, epoch, layer, node_ids, p)
    return torch.relu(h) * dropout_mask(seed, epoch, layer, node_ids, h.shape[1], p, h.device, h.dtype)
