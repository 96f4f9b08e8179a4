"""Aggregation kernels of g3's GNN layers, as ``torch.autograd.Function``s over a block's in-edge CSR.

The interface is deliberately small so that faster kernels can replace the bodies without touching the layers:

* :func:`csr_sum`  — ``out[v] = sum_{e in row v} w_e * x_src[indices[e]]`` with an optional per-edge weight
  ``[nnz]`` or per-edge-per-head weight ``[nnz, H]`` (then ``x_src`` is ``[n_src, H, d]``); gradients for
  ``x_src`` and for the weights (GAT's attention coefficients need the latter).
* :func:`csr_mean` — ``csr_sum`` divided by the row length (0 for a row without edges).
* :func:`edge_softmax` — softmax of per-edge scores ``[nnz, H]`` within each row (each destination).
* :func:`add_self_loops` — the CSR with the arc ``v -> v`` prepended to every row (GAT attends to itself).
* :func:`csr_transpose` — the transposed CSR, an optional argument of the sums that makes backward a CSR
  product instead of a scatter; a block's is computed once and cached (:func:`block_transpose`).

Rows may be unsorted and may repeat a source (multi-edges): every arc counts once.

Three implementations, chosen per call by :func:`backend`:

* ``"numba"`` (default on CPU for float32/float64): row-parallel numba kernels, one thread per output row, the
  row accumulated in vector registers by an LLVM routine specialised on the row width; backward is the same
  kernel on the cached transposed CSR (no atomics). Every output element is summed in a fixed order by one
  thread, so results are bitwise reproducible (docs/DESIGN.md, "CPU aggregation kernels").
* ``"sparse"`` (default on CUDA for float32/float64, and the device path's on the CPU):
  ``torch.sparse_csr_tensor`` products — forward ``A @ x``, input gradient ``A^T @ g`` and weight gradient as a
  sampled dense-dense product (``torch.sparse.sampled_addmm``). cuSPARSE sums rows with unsorted and repeated
  sources as ``index_add_`` does, so no sort is needed (docs/BENCHMARKS.md, "Aggregation kernels on the GPU").
  On CUDA a weight that needs its gradient (GAT's attention) takes the ``index`` path.
* ``"index"`` (other devices and dtypes, and CUDA weight gradients): gather rows, ``index_add_`` them.
  Portable, but it materialises one message row per arc ([nnz, F]).

All three are checked against a dense reference and by ``torch.autograd.gradcheck`` in ``tests/test_models.py``.
"""

from __future__ import annotations

from stages.kits.runtime.kernels.autograd import (
    CSRSum,
    EdgeSoftmax,
    ReluDropout,
    csr_mean,
    csr_mean_grad,
    csr_mean_rows,
    csr_sum,
    edge_softmax,
    relu_dropout,
    relu_dropout_grad,
)
from stages.kits.runtime.kernels.backends import BACKENDS, backend, use_backend
from stages.kits.runtime.kernels.csr import (
    CSRTranspose,
    add_self_loops,
    block_self_loops,
    block_transpose,
    csr_transpose,
    row_ids,
)
from stages.kits.runtime.kernels.csr import _nb_transpose_of as _nb_transpose_of
from stages.kits.runtime.kernels.numba_cpu import HAVE_NUMBA, use_serial_kernels_in_this_thread
from stages.kits.runtime.kernels.numba_cpu import _nb_threads as _nb_threads
from stages.kits.runtime.kernels.rows import add_rows_at, put_rows_at, take_rows_at, take_stored_rows

# The private names re-exported (``as`` themselves) are reached from outside: _nb_transpose_of by
# examples/bench_single_worker.py, _nb_threads by tests/test_transport.py, and a numba dispatcher, through which
# tests/test_api.py checks that g3's kernels have g3's compile-once cache. State (the forced backend, the kernel
# pool and its threshold) is read and patched in its own module (.backends, .numba_cpu), never copied here.
if HAVE_NUMBA:
    from stages.kits.runtime.kernels.numba_cpu import _nb_transpose as _nb_transpose
