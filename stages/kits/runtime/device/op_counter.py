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

It also counts *host → device copies*, which block the host as a read-back does. On a device other than the
host: a copy from host memory to the device (``t.to(device)``, ``device_tensor.copy_(host_tensor)``) and a
tensor made from host data on the device (``torch.tensor(…, device=…)``, ``torch.as_tensor``). On a CPU run no
copy can be seen, so what would be one on a GPU counts: every tensor made from host data inside the counted
step (the ``lift_fresh`` operation, and ``torch.from_numpy``, which dispatches nothing and is counted while a
CPU counter is entered). The CPU's rule errs at the margin both ways: a scalar written by indexing
(``t[i] = 0``) counts, which on a GPU is a fill, and a factory tensor moved to the device
(``torch.zeros(n).to(device)``) does not, so the device path makes its per-step tensors with ``device=``. A
fake CUDA device (``FakeTensorMode``, ``meta``) would see such moves but cannot run the step: numba kernels,
gloo and the sampler's numpy reads need real data.

On CUDA the counted step also runs under ``torch.cuda.set_sync_debug_mode("warn")``, and the synchronisations torch
itself reports are recorded beside the counter's (``cuda_syncs_per_step``): torch's rule is the ground truth the
counter's is checked against on a GPU.

Work done for the counted step on another thread (a sampler preparing it ahead) is counted there by a counter
of its own and added to this one with :meth:`OpCounter.add` (``sampler_ops``: how much of the total it was).

What the counter cannot see: host code that reads a tensor without dispatching (``Tensor.numpy()`` on the
CPU, numba kernels on numpy views). The device path does not do that on device data; on a GPU such a read of a
device tensor fails outright, so ``make gpu-check`` would find it.
"""

from __future__ import annotations

import threading
import warnings
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
_COPIES = {"_to_copy", "copy_", "to"}  # device → host and host → device copies
_FROM_HOST_DATA = "lift_fresh"  # torch.tensor, as_tensor, asarray, new_tensor: a tensor made from host data
# bookkeeping entries of the profiler, not operations
_IGNORED = {"_record_function_enter_new", "_record_function_exit"}


def _tensors(args, kwargs) -> list[torch.Tensor]:
    return [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]


@dataclass
class OpCount:
    """What :class:`OpCounter` saw: ``ops`` and ``sync_ops`` in all, and each by operation name."""

    ops: int = 0
    sync_ops: int = 0
    h2d_copies: int = 0
    sampler_ops: int = 0  # of ``ops``: dispatched on another thread preparing the step
    by_name: Counter = field(default_factory=Counter)
    sync_by_name: Counter = field(default_factory=Counter)
    h2d_by_name: Counter = field(default_factory=Counter)
    # on CUDA: what torch.cuda's sync debug mode reported (its own rule)
    cuda_reported_syncs: int | None = None

    def to_json(self) -> dict:
        reported = (
            {} if self.cuda_reported_syncs is None else {"cuda_syncs_per_step": self.cuda_reported_syncs}
        )
        return {
            **reported,
            "ops_per_step": self.ops,
            "sync_ops_per_step": self.sync_ops,
            "h2d_copies_per_step": self.h2d_copies,
            "sampler_ops_per_step": self.sampler_ops,
            "ops_by_name": dict(self.by_name.most_common()),
            "sync_ops_by_name": dict(self.sync_by_name.most_common()),
            "h2d_copies_by_name": dict(self.h2d_by_name.most_common()),
        }

    def add(self, other: OpCount) -> None:
        self.ops += other.ops
        self.sync_ops += other.sync_ops
        self.h2d_copies += other.h2d_copies
        self.sampler_ops += other.sampler_ops
        self.by_name.update(other.by_name)
        self.sync_by_name.update(other.sync_by_name)
        self.h2d_by_name.update(other.h2d_by_name)


_entered = threading.local()  # .counters: the counters entered on this thread, innermost last
_real_from_numpy = torch.from_numpy


def _counted_from_numpy(array):
    """``torch.from_numpy`` while a counter is entered: a tensor made from host data, counted by the thread's
    innermost CPU counter (on a device run the copy that follows it is what counts)."""
    counters = getattr(_entered, "counters", None)
    if counters and counters[-1].device.type == "cpu":
        counters[-1].saw_h2d("from_numpy")
    _entered.in_from_numpy = True  # torch versions whose from_numpy dispatches lift_fresh: counted once
    try:
        return _real_from_numpy(array)
    finally:
        _entered.in_from_numpy = False


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched on this thread while entered (``with OpCounter(device) as c``),
    and among them the ones that synchronise the host with ``device`` (see the module's docstring).
    ``c.count`` holds the figures."""

    _patched = 0  # counters entered on any thread (torch.from_numpy is wrapped while any is)
    _patch_lock = threading.Lock()

    def __init__(self, device: torch.device | str = "cpu"):
        super().__init__()
        self.device = torch.device(device)
        self.count = OpCount()

    def __enter__(self):
        with OpCounter._patch_lock:
            if OpCounter._patched == 0:
                torch.from_numpy = _counted_from_numpy
            OpCounter._patched += 1
        _entered.__dict__.setdefault("counters", []).append(self)
        if self.device.type == "cuda":  # torch's own account beside the counter's: each sync warns once
            self._sync_mode = torch.cuda.get_sync_debug_mode()
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if self.device.type == "cuda":
                torch.cuda.set_sync_debug_mode(self._sync_mode)
                self._warnings.__exit__(None, None, None)
                self.count.cuda_reported_syncs = sum("synchroniz" in str(w.message) for w in self._caught)
            _entered.counters.remove(self)
            with OpCounter._patch_lock:
                OpCounter._patched -= 1
                if OpCounter._patched == 0:
                    torch.from_numpy = _real_from_numpy

    @staticmethod
    def active() -> OpCounter | None:
        """The innermost counter entered on this thread, if any."""
        counters = getattr(_entered, "counters", None)
        return counters[-1] if counters else None

    def add(self, other: OpCount) -> None:
        """Adds what another thread's counter saw doing this step's work (a sampler preparing it ahead)."""
        self.count.add(other)
        self.count.sampler_ops += other.ops - other.sampler_ops

    def saw_h2d(self, name: str) -> None:
        self.count.h2d_copies += 1
        self.count.h2d_by_name[name] += 1

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
            return bool(src) and _copy_ends(name, args, kwargs)[0] == "cpu"
        return False

    def copies_to_device(self, name: str, args, kwargs) -> bool:
        """A host → device copy (see the module's docstring: on a CPU run, a tensor made from host data)."""
        if name == _FROM_HOST_DATA:
            if getattr(_entered, "in_from_numpy", False):
                return False
            return self.device.type == "cpu" or self._on_device(args[0])
        if name in _COPIES and self.device.type != "cpu":
            return _copy_ends(name, args, kwargs) == (self.device.type, "cpu")
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in _IGNORED:
            self.count.ops += 1
            self.count.by_name[name] += 1
            if self.synchronises(name, args, kwargs):
                self.count.sync_ops += 1
                self.count.sync_by_name[name] += 1
            if self.copies_to_device(name, args, kwargs):
                self.saw_h2d(name)
        return func(*args, **(kwargs or {}))


def _copy_ends(name: str, args, kwargs) -> tuple[str | None, str]:
    """A copy's destination and source device types: ``t.cpu()`` and ``host.copy_(device_tensor)`` copy to the
    host, ``host.to(device)`` and ``device_tensor.copy_(host)`` to the device (None: a copy that names no device)."""
    if name == "copy_":
        return args[0].device.type, args[1].device.type
    dev = (kwargs or {}).get("device")
    return None if dev is None else torch.device(dev).type, args[0].device.type
