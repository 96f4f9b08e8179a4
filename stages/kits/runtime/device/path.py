"""The device path on any device: a resident worker computes with the kernels its device runs.

A worker whose partition lives on its device (``WorkerContext.resident``) runs every aggregation, gather and
the loss through torch operations — the ``sparse`` backend of ``stages/kits/runtime/kernels/`` (CSR products,
the fastest measured on a GPU) and torch's cross-entropy — which is what CUDA runs. On a GPU that is the
default anyway; forced on the CPU (``g3 train --residency device``) the same code runs there, so the tests
check the device path's results and count its operations (:mod:`.op_counter`) without a GPU.
"""

from __future__ import annotations

import contextlib

from stages.kits.runtime.kernels import use_backend


def device_kernels(resident: bool, device_type: str):
    """A context in which the kernels are the device path's: ``sparse`` for a resident worker on the CPU
    (CUDA tensors take it anyway); nothing changes otherwise."""
    if resident and device_type == "cpu":
        return use_backend("sparse")
    return contextlib.nullcontext()
