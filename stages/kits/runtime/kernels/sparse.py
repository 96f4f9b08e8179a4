"""``torch.sparse`` helpers of the ``sparse`` backend: CSR tensors (built without the process-wide "beta"
warning), all-ones values, the sampled dense-dense product, per-edge weights broadcast against rows."""

from __future__ import annotations

import threading
import warnings

import torch

# Building a CSR tensor warns once per process that sparse CSR is "beta" (the operations used here are stable):
# the first one is built with that warning ignored (_csr), so no filter of the process is changed for good
_CSR_FIRST = threading.Lock()
_csr_warned = False


def _csr(indptr, indices, values, n_dst, n_src) -> torch.Tensor:
    global _csr_warned
    if not _csr_warned:
        with _CSR_FIRST, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
            csr = torch.sparse_csr_tensor(indptr, indices, values, (n_dst, n_src), check_invariants=False)
            _csr_warned = True
            return csr
    return torch.sparse_csr_tensor(indptr, indices, values, (n_dst, n_src), check_invariants=False)


def _ones(nnz, like):
    return torch.ones(nnz, dtype=like.dtype, device=like.device)


def _sddmm(indptr, indices, a, b, n_dst, n_src) -> torch.Tensor:
    """``out[e] = a[row(e)] . b[indices[e]]`` for 2-D ``a [n_dst, k]``, ``b [n_src, k]``."""
    pattern = _csr(
        indptr, indices, torch.zeros(indices.numel(), dtype=a.dtype, device=a.device), n_dst, n_src
    )
    return torch.sparse.sampled_addmm(pattern, a.contiguous(), b.t(), beta=0.0).values()


def _expand_weight(w: torch.Tensor, x_dim: int) -> torch.Tensor:
    """``w [nnz, *h]`` broadcast against gathered rows ``[nnz, *h, *rest]``."""
    return w.reshape(w.shape + (1,) * (x_dim - w.dim()))
