"""Row gathers and scatters of a feature table by node ids: :func:`take_rows_at`, :func:`put_rows_at`,
:func:`add_rows_at` — one parallel numba pass on the CPU where it applies, the torch index op elsewhere."""

from __future__ import annotations

import numpy as np
import torch

from stages.kits.runtime.kernels.backends import backend
from stages.kits.runtime.kernels.numba_cpu import HAVE_NUMBA, _np, _rows2d, _run_on_ranges

if HAVE_NUMBA:
    from stages.kits.runtime.kernels.numba_cpu import _nb_scatter_rows, _nb_take_rows


def _rows_kernel_ok(h: torch.Tensor, ids: torch.Tensor) -> bool:
    """The numba row kernels apply: a contiguous 2-D CPU tensor of a numba dtype, CPU ids, some rows."""
    return (
        h.dim() == 2
        and backend(h) == "numba"
        and h.is_contiguous()
        and ids.device.type == "cpu"
        and len(ids) > 0
    )


def _on(t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``t`` on ``h``'s device: ids and rows that arrive in host memory (a peer's message, a host index) meet a
    device-resident table where it lives (a copy in; nothing on the CPU)."""
    return t if t.device == h.device else t.to(h.device, non_blocking=t.is_pinned())


def take_rows_at(h: torch.Tensor, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``h.index_select(0, ids)`` (``h [n, w]`` → ``[len(ids), w]``): a new tensor, or ``out`` (contiguous, on
    ``h``'s device) filled and returned — a message packed into a buffer its sender chose (a streamed worker's
    are file-backed).

    On the numba backend one parallel row-copy pass, faster than ``index_select`` even on one thread; elsewhere
    ``index_select``. A copy either way: bitwise equal."""
    if not _rows_kernel_ok(h, ids) or (out is not None and (out.dtype != h.dtype or not out.is_contiguous())):
        if out is None:
            return h.index_select(0, _on(ids, h))
        return torch.index_select(h, 0, _on(ids, h), out=out)
    rows = take_stored_rows(h.numpy(), _np(ids), None if out is None else out.numpy())
    return out if out is not None else torch.from_numpy(rows)


def put_rows_at(h: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor) -> None:
    """``h.index_copy_(0, ids, rows)`` for **distinct** ``ids``; numba row copies where they apply (as
    :func:`take_rows_at`), else ``index_copy_``."""
    _scatter_rows(h, ids, rows, add=False)


def add_rows_at(h: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor) -> None:
    """``h.index_add_(0, ids, rows)`` for **distinct** ``ids`` (``h [n, w]``, ``rows [len(ids), w]``).

    On the numba backend one parallel pass with no atomics, bitwise equal to ``index_add_`` (one add per
    element either way) and faster on one thread; elsewhere ``index_add_``."""
    _scatter_rows(h, ids, rows, add=True)


def _scatter_rows(h: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor, add: bool) -> None:
    if _rows_kernel_ok(h, ids) and rows.dtype == h.dtype and rows.device.type == "cpu":
        _run_on_ranges(_nb_scatter_rows, len(ids), h.shape[1], h.numpy(), _np(ids), _np(_rows2d(rows)), add)
    elif add:
        h.index_add_(0, _on(ids, h).long(), _on(rows, h))
    else:
        h.index_copy_(0, _on(ids, h).long(), _on(rows, h))


def take_stored_rows(table: np.ndarray, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``table[ids]`` of a 2-D array, also a read-only memory-mapped file (a streamed worker's input features):
    the numba row copy on the kernel threads where the dtype has one (one pass, no sort; the epoch of a streamed
    worker of `medium` took 19.9 s with numpy's fancy indexing of the mapped file, 14.8 s with it), else numpy's."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if not (HAVE_NUMBA and table.ndim == 2 and table.dtype in (np.float32, np.float64) and len(ids)):
        if out is None:
            return np.asarray(table[ids])
        np.take(table, ids, axis=0, out=out)
        return out
    if out is None:
        out = np.empty((len(ids), table.shape[1]), dtype=table.dtype)
    _run_on_ranges(_nb_take_rows, len(ids), table.shape[1], table, ids, out)
    return out
