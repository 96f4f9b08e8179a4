"""Helper threads of a worker (receiving, sending, prefetching): how they run their kernels, and the pools.

A helper thread runs its torch and numba kernels on one thread, off the cores the compute kernels use: its
numba kernels on itself alone (``kernels.use_serial_kernels_in_this_thread``), its torch ops with one thread —
with OpenMP the setting is the calling thread's own; elsewhere it would set the whole process's, so it is left
alone there. The thread that starts helpers first calls :func:`keep_caller_threads`: a thread takes
the process-wide count at its first parallel op, and a helper's ``set_num_threads(1)`` changes that count.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from stages.kits.runtime.kernels import use_serial_kernels_in_this_thread


def helper_thread_init() -> None:
    """Initialise the calling thread as a helper (see the module docstring)."""
    use_serial_kernels_in_this_thread()
    if torch.backends.openmp.is_available():
        torch.set_num_threads(1)


def keep_caller_threads() -> None:
    """Fix the calling (compute) thread's torch thread count before any helper thread sets its own."""
    torch.get_num_threads()


def helper_executor(name: str) -> ThreadPoolExecutor:
    """One helper thread running submitted jobs in order (a prefetch or sender thread)."""
    keep_caller_threads()
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=helper_thread_init)


class DaemonThreads:
    """Helper threads that run submitted jobs, one job per thread at a time, growing so that every open job
    has its own thread (a job may block until a peer sends: the receiving threads wait on gloo, whose works
    cannot be polled). Daemons, so that a worker whose peer died can still exit while a thread waits on that
    peer (a ``ThreadPoolExecutor`` joins its threads at exit). Threads are kept once started: starting them
    anew for every layer cost up to ~20 ms at a busy epoch start."""

    def __init__(self, name: str, size: int = 0):
        keep_caller_threads()
        self.name = name
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.threads = 0
        self.busy = 0  # jobs submitted and not finished
        self.ensure(size)

    def ensure(self, size: int) -> None:
        with self.lock:
            while self.threads < size:
                threading.Thread(target=self._run, daemon=True, name=f"{self.name}-{self.threads}").start()
                self.threads += 1

    def _run(self) -> None:
        helper_thread_init()
        while True:
            fn, args = self.jobs.get()
            try:
                fn(*args)
            finally:
                with self.lock:
                    self.busy -= 1

    def submit(self, fn, *args) -> None:
        with self.lock:
            self.busy += 1
            needed = self.busy
        self.ensure(needed)
        self.jobs.put((fn, args))
