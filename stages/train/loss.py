"""The training loss: softmax cross-entropy over the labelled training nodes, value and gradient in one pass.

``loss = (1 / n_train) * sum_{v in train} (logsumexp(z_v) - z_v[y_v])`` where ``n_train`` is the number of
training nodes over *all* workers, and ``dloss/dz_v = (softmax(z_v) - onehot(y_v)) / n_train`` for a training
node (0 for every other row). Computing both in one row-parallel numba pass replaces torch's gather of the
training rows, log-softmax, NLL and their backward (index-put into a zero matrix): on the 500K-node benchmark
graph that was a third of a single-worker epoch. CUDA tensors take the torch path.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F


@numba.njit(parallel=True, cache=True)
def _nb_cross_entropy(z, labels, idx, scale, grad, row_loss):
    for t in numba.prange(idx.shape[0]):
        v = idx[t]
        row = z[v]
        m = row[0]
        for c in range(1, row.shape[0]):
            m = max(m, row[c])
        g = grad[v]
        s = 0.0
        for c in range(row.shape[0]):
            g[c] = np.exp(row[c] - m)
            s += g[c]
        row_loss[t] = m + np.log(s) - row[labels[v]]
        f = scale / s
        for c in range(row.shape[0]):
            g[c] *= f
        g[labels[v]] -= scale


def cross_entropy_with_grad(logits: torch.Tensor, labels: torch.Tensor, train_idx: torch.Tensor,
                            n_train: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, grad)``: this worker's share of the mean training loss (a 0-d tensor; the shares of all workers
    add up to the mean over every training node) and its gradient with respect to ``logits`` (same shape).

    ``logits [n, C]``, ``labels [n]`` (int64), ``train_idx [m]`` (rows with a label), ``n_train`` over all ranks.
    """
    if logits.device.type != "cpu" or logits.dtype not in (torch.float32, torch.float64):
        z = logits.detach().requires_grad_(True)
        loss = F.cross_entropy(z[train_idx], labels[train_idx], reduction="sum") / n_train
        loss.backward()
        return loss.detach(), z.grad
    z = logits.detach().contiguous()
    grad = torch.zeros_like(z)
    row_loss = np.empty(len(train_idx), dtype=np.float64)
    _nb_cross_entropy(z.numpy(), labels.numpy(), train_idx.numpy(), 1.0 / n_train, grad.numpy(), row_loss)
    return torch.tensor(row_loss.sum() / n_train, dtype=z.dtype), grad
