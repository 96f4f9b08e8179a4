"""Counting what one training step asks of the device: every dispatched aten operation, and the ones that make
the host wait for the device.

On a GPU, the runtime's cost per step is set less by its arithmetic than by how many kernels it launches and
how often the host stops to read a result back (a *synchronisation*: the host idles until the device queue
drains, and the device idles until the host enqueues again). Both are properties of the code, not of the
device, so they are counted on any device — the CPU runs the device path in the tests and the counts hold it
to account without a GPU.

:class:`OpCounter` is a ``TorchDispatchMode``: every aten operation dispatched on the thread that enters it is
counted by name. An operation *synchronises* when its result's size or value must reach the host before the
next operation can be enqueued (:data:`SYNC_OPS`: a tensor turned into a Python number, ``nonzero``,
``unique``, masked selects and boolean-mask indexing, ``repeat_interleave`` without its output size,
``bincount``) or when it copies device memory into host memory. Which tensors count: those on the counted
device (``device``); on a CPU run the device *is* the host, so every such operation counts — including the
optimizer's host-side step counters, which on a GPU are no synchronisation (Adam keeps them on the host).

What the counter cannot see: host code that reads a tensor without dispatching (``Tensor.numpy()`` on the
CPU, numba kernels on numpy views). The device path does not do that on device data; on a GPU such a read of a
device tensor fails outright, so ``make gpu-check`` would find it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# operations whose result the host must wait for on a device (by overload packet name)
SYNC_OPS = frozenset(
    {
        "_local_scalar_dense",  # .item(), int(t), float(t), bool(t)
        "is_nonzero",
        "equal",
        "allclose",
        "nonzero",
        "argwhere",
        "masked_select",
        "unique",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "bincount",
        "histc",
    }
)
# operations that synchronise only with some arguments
_SIZE_FROM_DATA = {"repeat_interleave"}  # without output_size the output's length is read from the device
_INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}  # a boolean mask is a nonzero inside
_COPIES = {"_to_copy", "copy_", "to"}  # device → host copies
# bookkeeping entries of the profiler, not operations
_IGNORED = {"_record_function_enter_new", "_record_function_exit"}


def _tensors(args, kwargs) -> list[torch.Tensor]:
    return [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]


@dataclass
class OpCount:
    """What :class:`OpCounter` saw: ``ops`` and ``sync_ops`` in all, and each by operation name."""

    ops: int = 0
    sync_ops: int = 0
    by_name: Counter = field(default_factory=Counter)
    sync_by_name: Counter = field(default_factory=Counter)

    def to_json(self) -> dict:
        return {
            "ops_per_step": self.ops,
            "sync_ops_per_step": self.sync_ops,
            "ops_by_name": dict(self.by_name.most_common()),
            "sync_ops_by_name": dict(self.sync_by_name.most_common()),
        }


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched on this thread while entered (``with OpCounter(device) as c``),
    and among them the ones that synchronise the host with ``device`` (see the module's docstring).
    ``c.count`` holds the figures."""

    def __init__(self, device: torch.device | str = "cpu"):
        super().__init__()
        self.device = torch.device(device)
        self.count = OpCount()

    def _on_device(self, t: torch.Tensor) -> bool:
        return t.device.type == self.device.type

    def synchronises(self, name: str, args, kwargs) -> bool:
        if name in SYNC_OPS:
            return any(self._on_device(t) for t in _tensors(args, kwargs))
        if name in _SIZE_FROM_DATA:
            return (kwargs or {}).get("output_size") is None and (len(args) < 4 or args[3] is None)
        if name in _INDEXING:
            indices = args[1] if len(args) > 1 else ()
            return any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool and self._on_device(i)
                for i in (indices or ())
            )
        if name in _COPIES and self.device.type != "cpu":
            src = [t for t in _tensors(args, kwargs) if self._on_device(t)]
            return bool(src) and _copies_to_host(name, args, kwargs)
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in _IGNORED:
            self.count.ops += 1
            self.count.by_name[name] += 1
            if self.synchronises(name, args, kwargs):
                self.count.sync_ops += 1
                self.count.sync_by_name[name] += 1
        return func(*args, **(kwargs or {}))


def _copies_to_host(name: str, args, kwargs) -> bool:
    """A copy whose destination is host memory (``t.cpu()``, ``host.copy_(device_tensor)``)."""
    kwargs = kwargs or {}
    if name == "copy_":
        return args[0].device.type == "cpu"
    dev = kwargs.get("device")
    return dev is not None and torch.device(dev).type == "cpu"
