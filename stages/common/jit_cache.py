"""numba's on-disk cache, with each missing machine-code version compiled by one process while the others wait.

A kernel compiled with ``cache=True`` is compiled on its first call in a process unless the cache on disk already
holds that version. The K workers of a first run all call the same kernels at once, so on a fresh install each
compiled every version itself — K times the compile time (measured: 74 compilations of 38 versions over
tests/test_train.py), and the same version saved by several processes at once could lose another's index entry
(numba rewrites a function's whole index on each save). :class:`CompileOnceCache` takes an exclusive file lock per
function before a compilation: the first process compiles and saves; the others, once it is done, load what it
saved. :func:`adopt` gives it to the ``cache=True`` kernels of one module (each g3 kernel module calls it on its
own globals at its end); nothing else changes: numba's ``Dispatcher`` is never patched, so another library's
kernels in the same process cache as numba does (importing g3 changes nothing global; tested).
"""

from __future__ import annotations

import fcntl
import os
import time

from numba.core import dispatcher
from numba.core.caching import FunctionCache

# a lock held longer than this is not waited for any longer (one compilation takes seconds; a process whose
# compilation failed holds its lock until it exits): compiling here as well is only slower
LOCK_PATIENCE_S = 60.0


class CompileOnceCache(FunctionCache):
    """A function's cache whose misses take the function's lock (``<cache dir>/<function>.lock``) until the
    compiled version is saved: another process that misses meanwhile waits, then loads it."""

    def __init__(self, py_func):
        super().__init__(py_func)
        self._lock_path = os.path.join(self._cache_path, f"{self._impl.filename_base}.lock")
        self._held: int | None = None  # the lock's file descriptor while this process compiles

    def load_overload(self, sig, target_context):
        cres = super().load_overload(sig, target_context)
        if cres is not None or not self._enabled:
            return cres
        if self._held is None and not self._acquire():
            return None  # no lock to be had (a read-only cache folder): compile as numba would
        cres = super().load_overload(sig, target_context)  # saved by the process this one waited for
        if cres is not None:
            self._release()
        return cres

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        finally:
            self._release()

    def _acquire(self) -> bool:
        try:
            self._impl.locator.ensure_cache_path()
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return False
        deadline = time.monotonic() + LOCK_PATIENCE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    return False
                time.sleep(0.02)
        self._held = fd
        return True

    def _release(self) -> None:
        if self._held is not None:
            fd, self._held = self._held, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def compile_once(kernel):
    """Give one numba dispatcher with ``cache=True`` :class:`CompileOnceCache` (before its first call); returns
    it. For kernels made at run time (closures over compile-time constants), which :func:`adopt` cannot see."""
    if isinstance(kernel._cache, FunctionCache) and not isinstance(kernel._cache, CompileOnceCache):
        kernel._cache = CompileOnceCache(kernel.py_func)
    return kernel


def adopt(namespace: dict) -> int:
    """Give :class:`CompileOnceCache` to the ``cache=True`` numba kernels defined in the module whose globals are
    ``namespace`` (before their first call: a dispatcher's cache is only read when a version is compiled or
    loaded). Returns how many it adopted."""
    module = namespace.get("__name__")
    adopted = 0
    for value in list(namespace.values()):
        if (
            isinstance(value, dispatcher.Dispatcher)
            and isinstance(value._cache, FunctionCache)  # type: ignore[attr-defined]  # numba keeps it private
            and not isinstance(value._cache, CompileOnceCache)  # type: ignore[attr-defined]
            and getattr(value.py_func, "__module__", None) == module
        ):
            compile_once(value)
            adopted += 1
    return adopted
