"""Which implementation a kernel call uses: :func:`backend` chooses per call, :func:`use_backend` forces one.

The implementations are described in the package's docstring (:mod:`stages.kits.runtime.kernels`); the forced
backend is this module's state (``_FORCED_BACKEND``), read at every call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from stages.kits.runtime.kernels.numba_cpu import HAVE_NUMBA

BACKENDS = ("numba", "sparse", "index")
_FORCED_BACKEND: str | None = None


def backend(x: torch.Tensor) -> str:
    """The implementation used for features ``x``: ``"numba"``, ``"sparse"`` or ``"index"``.

    ``"numba"`` for float32/float64 on CPU (``"sparse"`` if numba is missing), ``"sparse"`` for them on CUDA,
    ``"index"`` otherwise (other devices and dtypes), unless :func:`use_backend` forces one (``"numba"``, a
    CPU-only backend, is ignored for a tensor elsewhere).
    """
    float_type = x.dtype in (torch.float32, torch.float64)
    cpu_float = x.device.type == "cpu" and float_type
    if _FORCED_BACKEND is not None and (
        cpu_float
        or _FORCED_BACKEND == "index"
        or (_FORCED_BACKEND == "sparse" and x.device.type == "cuda" and float_type)
    ):
        return _FORCED_BACKEND
    if x.device.type == "cuda" and float_type:
        return "sparse"
    if not cpu_float:
        return "index"
    return "numba" if HAVE_NUMBA else "sparse"


@contextlib.contextmanager
def use_backend(name: str | None) -> Iterator[None]:
    """Force a backend (``"numba"``, ``"sparse"``, ``"index"``, or ``None`` for the default) inside the block."""
    global _FORCED_BACKEND
    if name not in (None, *BACKENDS):
        raise ValueError(f"unknown kernel backend {name!r}")
    if name == "numba" and not HAVE_NUMBA:
        raise ValueError("the numba backend needs numba")
    old, _FORCED_BACKEND = _FORCED_BACKEND, name
    try:
        yield
    finally:
        _FORCED_BACKEND = old
