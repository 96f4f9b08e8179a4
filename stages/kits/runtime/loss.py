"""The training loss: softmax cross-entropy over the labelled training nodes, value and gradient in one pass.

``loss = (1 / n_train) * sum_{v in train} (logsumexp(z_v) - z_v[y_v])`` where ``n_train`` is the number of
training nodes over *all* workers, and ``dloss/dz_v = (softmax(z_v) - onehot(y_v)) / n_train`` for a training
node (0 for every other row). Computing both in one row-parallel numba pass replaces torch's gather of the
training rows, log-softmax, NLL and their backward (index-put into a zero matrix): on the 500K-node benchmark
graph that was a third of a single-worker epoch. The device path (CUDA, or forced on the CPU) takes torch's.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F

from stages.kits.runtime.kernels import backend

# float32 exp for x <= 0, written out so the loop over a row's classes vectorises: numba's np.exp on float32
# is a scalar libm call (pip's llvmlite has no SVML), which made the loss ~10 % of a one-worker epoch on the
# 500K-node benchmark graph (400K training rows x 47 classes: 45 ms on 2 threads, 15 ms with this). Cephes'
# expf: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-6 polynomial, 2^n put in the exponent bits; relative
# error <= 1e-7 against float64 exp on [-87, 0] (np.exp in float32: 2e-7); below -87 it gives exp(-87) ~ 1.6e-38
# instead of a denormal or 0, negligible next to the row's largest term, exp(0) = 1.
_EXP_CLAMP, _LOG2E, _LN2_HI, _LN2_LO = -87.0, 1.44269504088896341, 0.693359375, -2.12194440e-4
_EXP_POLY = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)


@numba.njit(inline="always")
def _expf_parts(x):
    """``exp(x)`` for float32 ``x <= 0`` as ``(y, bits)``: ``exp(x) = y * 2^n``, ``bits`` = the int32 whose
    float32 reading is ``2^n``."""
    f32 = np.float32
    x = max(x, f32(_EXP_CLAMP))
    n = np.floor(x * f32(_LOG2E) + f32(0.5))
    r = x - n * f32(_LN2_HI) - n * f32(_LN2_LO)
    c0, c1, c2, c3, c4, c5 = _EXP_POLY
    p = (((((f32(c0) * r + f32(c1)) * r + f32(c2)) * r + f32(c3)) * r + f32(c4)) * r + f32(c5)) * (r * r)
    return p + r + f32(1.0), (np.int32(n) + np.int32(127)) << 23


@numba.njit(parallel=True, cache=True, fastmath={"reassoc", "contract", "arcp"})
def _nb_cross_entropy_f32(z, labels, idx, scale, grad, row_loss, bad):
    """:func:`_nb_cross_entropy` for float32 with the vectorised exp; chunks of rows per thread, each with its
    own exponent buffer. The fast-math flags allow reordering sums only: NaN and inf still propagate."""
    n, n_classes = idx.shape[0], z.shape[1]
    n_chunks = max(1, min(n, 256))
    for ch in numba.prange(n_chunks):
        bits = np.empty(n_classes, np.int32)
        two_n = bits.view(np.float32)
        for t in range(ch * n // n_chunks, (ch + 1) * n // n_chunks):
            v = idx[t]
            if _out_of_range(v, labels, z):
                bad[0] = 1  # any thread may set it: only whether one did matters
                continue
            row = z[v]
            g = grad[v]  # may be row itself: each logit is read before its gradient is written
            m = row[0]
            for c in range(1, n_classes):
                m = max(m, row[c])
            z_label = row[labels[v]]
            for c in range(n_classes):
                g[c], bits[c] = _expf_parts(row[c] - m)
            s = 0.0
            for c in range(n_classes):
                g[c] *= two_n[c]
                s += g[c]
            row_loss[t] = m + np.log(s) - z_label
            f = np.float32(scale / s)
            for c in range(n_classes):
                g[c] *= f
            g[labels[v]] -= np.float32(scale)


@numba.njit(inline="always")
def _out_of_range(v, labels, z):
    """Row ``v`` or its label outside ``z`` (checked, so that a label beyond the model's classes is an error,
    not a write past the gradient)."""
    return v < 0 or v >= z.shape[0] or labels[v] < 0 or labels[v] >= z.shape[1]


@numba.njit(parallel=True, cache=True)
def _nb_cross_entropy(z, labels, idx, scale, grad, row_loss, bad):
    for t in numba.prange(idx.shape[0]):
        v = idx[t]
        if _out_of_range(v, labels, z):
            bad[0] = 1
            continue
        row = z[v]
        m = row[0]
        for c in range(1, row.shape[0]):
            m = max(m, row[c])
        z_label = row[labels[v]]
        g = grad[v]
        s = 0.0
        for c in range(row.shape[0]):
            g[c] = np.exp(row[c] - m)
            s += g[c]
        row_loss[t] = m + np.log(s) - z_label
        f = scale / s
        for c in range(row.shape[0]):
            g[c] *= f
        g[labels[v]] -= scale


def cross_entropy_with_grad(
    logits: torch.Tensor,
    labels: torch.Tensor,
    train_idx: torch.Tensor,
    n_train: int,
    reuse_logits: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, grad)``: this worker's share of the mean training loss (a 0-d tensor; the shares of all workers
    add up to the mean over every training node) and its gradient with respect to ``logits`` (same shape).

    ``logits [n, C]``, ``labels [n]`` (int64), ``train_idx [m]`` (distinct rows with a label), ``n_train`` over
    all ranks. ``reuse_logits``: the caller has no further use for the logits, so the gradient may be written
    over them (the numba path: one ``[n, C]`` array instead of two, the same values).
    """
    if backend(logits) != "numba":  # CUDA, the device path on the CPU, other dtypes
        z = logits.detach().requires_grad_(True)
        # labels and rows may have been made on the host (a strategy preparing its steps there): moved, not
        # mixed (CUDA refuses a loss over tensors of two devices)
        labels, train_idx = labels.to(z.device), train_idx.to(z.device)
        loss = F.cross_entropy(z[train_idx], labels[train_idx], reduction="sum") / n_train
        loss.backward()
        return loss.detach(), z.grad
    z = logits.detach().contiguous()
    grad = z if reuse_logits else torch.zeros_like(z)
    row_loss = np.empty(len(train_idx), dtype=np.float64)
    kernel = _nb_cross_entropy_f32 if z.dtype == torch.float32 else _nb_cross_entropy
    bad = np.zeros(1, dtype=np.int64)
    kernel(z.numpy(), labels.numpy(), train_idx.numpy(), 1.0 / n_train, grad.numpy(), row_loss, bad)
    if bad[0]:
        raise ValueError(
            f"a training row or its label is outside the logits ({z.shape[0]} rows, {z.shape[1]} classes)"
        )
    if reuse_logits:  # rows without a loss: their logits become a zero gradient
        untouched = np.ones(len(z), dtype=np.bool_)
        untouched[train_idx.numpy()] = False
        grad.numpy()[untouched] = 0
    return torch.tensor(row_loss.sum() / n_train, dtype=z.dtype), grad


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
