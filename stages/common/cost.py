"""What a stage cost: its wall time and the peak resident memory of its processes, as its artifact records it
(``cost`` in the store's attributes, partition.json, plan.json, run.json and eval.json; `g3 info` shows it).

The peak is the high-water mark of resident memory (Linux ``VmHWM``; ``ru_maxrss`` elsewhere) of the command's
own process plus, for a stage that runs workers, each worker's own peak summed (`g3 train` and `g3 eval`:
the workers' records) — so a user sizing a machine reads what the whole stage held at most, an upper bound
when the processes peaked at different moments.
"""

from __future__ import annotations

import time


def process_peak_bytes() -> int:
    """This process's peak resident set (bytes)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import resource
        import sys

        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale
    except (ImportError, OSError, ValueError):
        return 0


def stage_cost(t0: float, workers_peak_bytes: int = 0) -> dict:
    """The ``cost`` record of a stage that started at ``time.perf_counter()`` = ``t0``: ``seconds``,
    ``peak_memory_bytes`` (this process + ``workers_peak_bytes``) and the two parts."""
    own = process_peak_bytes()
    return {
        "seconds": round(time.perf_counter() - t0, 3),
        "peak_memory_bytes": own + int(workers_peak_bytes),
        "process_peak_bytes": own,
        "workers_peak_bytes": int(workers_peak_bytes),
    }
