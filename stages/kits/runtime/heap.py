"""Keep freed memory in the process heap, so each epoch reuses the pages of the one before.

An epoch allocates the same large temporaries every time: gathered bin inputs, gradient buffers, logits and
their gradient, tens of MB each. glibc's malloc serves a block above its mmap threshold (128 KiB, adapting up
to 32 MiB) with a fresh ``mmap`` and unmaps it on ``free``, so every epoch page-faults on, and the kernel
zeroes, memory the process held a moment earlier. ``keep_freed_memory`` switches that off for the training
process: every block comes from the heap and freed memory stays there for the next allocation. One worker
on the 500K-node / 24.5M-arc benchmark graph: 1.5M → 0.5M minor page faults over eight epochs, epoch
0.63–0.69 s → 0.52–0.54 s, peak RSS +6–8 % (docs/BENCHMARKS.md, "Single-worker options on the CPU": the heap paragraph). The resident set stays near
its peak instead of shrinking between epochs; ``g3 train --heap system`` keeps the C library's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

HEAP_POLICIES = ("keep", "system")

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_THRESHOLD_BYTES = 2**31 - 1  # the most mallopt's int takes: free heap top beyond 2 GiB is still returned


def keep_freed_memory() -> bool:
    """Serve every allocation from the heap and keep freed memory there (glibc only; process-wide).

    Returns whether it took effect: False on a platform without glibc's ``mallopt`` (macOS, musl), where
    the allocator's defaults stay."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; large blocks no longer mmapped, and the heap top is not trimmed after a free
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
