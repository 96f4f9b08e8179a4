"""What a stage cost: its wall time and the peak resident memory of its processes, as its artifact records it
(``cost`` in the store's attributes, partition.json, plan.json, run.json and eval.json; `g3 info` shows it).

The peak is the high-water mark of resident memory (Linux ``VmHWM``; ``ru_maxrss`` elsewhere) of the command's
own process plus, for a stage that runs workers, each worker's own peak summed (`g3 train` and `g3 eval`:
the workers' records) — so a user sizing a machine reads what the whole stage held at most, an upper bound
when the processes peaked at different moments.
"""

from __future__ import annotations

import contextlib
import os
import time


def process_peak_bytes() -> int:
    """This process's peak resident set (bytes)."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource
        import sys

        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale
    except (ImportError, OSError, ValueError):
        return 0


def process_anonymous_bytes() -> int:
    """The anonymous memory this process holds now (``RssAnon``: its heap, imports' data; not file pages the
    kernel can drop and read again); 0 where the kernel does not say."""
    return _status_bytes("RssAnon") or 0


def _status_bytes(field: str) -> int | None:
    """A ``kB`` field of /proc/self/status in bytes; None where it cannot be read."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def stage_cost(t0: float, workers_peak_bytes: int = 0, out=None, scratch_peak_bytes: int = 0) -> dict:
    """The ``cost`` record of a stage that started at ``time.perf_counter()`` = ``t0``: ``seconds``,
    ``peak_memory_bytes`` (this process + ``workers_peak_bytes``) and the two parts; with ``out`` (the folder the
    stage writes) ``disk_bytes``, what its files take on disk, and ``scratch_peak_bytes``, the most its processes
    held in ``TMPDIR`` at once."""
    own = process_peak_bytes()
    disk = (
        {} if out is None else {"disk_bytes": disk_bytes(out), "scratch_peak_bytes": int(scratch_peak_bytes)}
    )
    return {
        "seconds": round(time.perf_counter() - t0, 3),
        "peak_memory_bytes": own + int(workers_peak_bytes),
        "process_peak_bytes": own,
        "workers_peak_bytes": int(workers_peak_bytes),
        **disk,
    }


def disk_bytes(folder) -> int:
    """What the files under ``folder`` take on disk (their allocated blocks: a sparse file counts what it holds);
    links are not followed."""
    return files_bytes(os.path.join(root, name) for root, _, files in os.walk(folder) for name in files)


def files_bytes(paths) -> int:
    """What the files ``paths`` take on disk, their allocated blocks; one removed meanwhile takes nothing."""
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            total += os.lstat(path).st_blocks * 512
    return total


def available_memory(root: str = "/") -> tuple[int | None, str]:
    """The memory this process may still take, and where the figure comes from: the machine's ``MemAvailable``,
    or less where a cgroup (v1 or v2) limits the process — its limit less what its processes use, page cache that
    can be dropped not counted. (None, why) where neither can be read. ``root``: where /proc and /sys are (tests)."""
    from pathlib import Path

    best = _meminfo(Path(root), "MemAvailable")
    cgroup = _cgroup_memory(Path(root))
    if cgroup is not None:
        limit, used, inactive = cgroup
        room = max(0, limit - used + inactive)
        if best[0] is None or room < best[0]:
            best = (room, "the memory cgroup's limit")
    return best


def memory_limit(root: str = "/") -> tuple[int | None, str]:
    """All the memory this process's processes may ever hold together: the machine's ``MemTotal``, or a memory
    cgroup's limit where that is less; (None, why) where neither can be read. A floor above it cannot run here."""
    from pathlib import Path

    best = _meminfo(Path(root), "MemTotal")
    cgroup = _cgroup_memory(Path(root))
    if cgroup is not None and (best[0] is None or cgroup[0] < best[0]):
        best = (cgroup[0], "the memory cgroup's limit")
    return best


def _meminfo(base, field: str) -> tuple[int | None, str]:
    try:
        for line in (base / "proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024, field
    except OSError:
        pass
    return None, f"{field} unknown"


def _cgroup_memory(base) -> tuple[int, int, int] | None:
    """The process's memory cgroup: (limit, usage, inactive file pages), or None: no limit."""
    try:
        lines = (base / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one hierarchy
            folder = base / "sys/fs/cgroup" / path.lstrip("/")
            if not (folder / "memory.max").exists():
                folder = base / "sys/fs/cgroup/unified" / path.lstrip("/")
            files = ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):
            folder = base / "sys/fs/cgroup/memory" / path.lstrip("/")
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        try:
            text = (folder / files[0]).read_text().strip()
            if text == "max" or int(text) >= 1 << 60:
                continue
            used = int((folder / files[1]).read_text())
            stat = dict(s.split() for s in (folder / "memory.stat").read_text().splitlines() if s.strip())
            return int(text), used, int(stat.get(files[2], 0))
        except (OSError, ValueError):
            continue
    return None


def oom_kills(root: str = "/") -> int | None:
    """How many processes the kernel's OOM killer has ended since boot (``oom_kill`` of /proc/vmstat, which a
    memory cgroup's kills count in too); None where the kernel does not say."""
    from pathlib import Path

    try:
        for line in (Path(root) / "proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def check_memory_floor(parts: dict[str, int], what: str, fix: str) -> None:
    """Refuse, before any work, a stage whose floor — ``parts``, bytes it holds at least, by kind — exceeds all
    the memory this machine or its memory cgroup has (:func:`memory_limit`): it could only be killed. One line
    naming the floor; ``fix`` says what to change."""
    from stages.common.errors import G3InputError
    from stages.common.units import human_bytes

    need = sum(parts.values())
    total, source = memory_limit()
    if total is not None and need > total:
        detail = ", ".join(f"{name} {human_bytes(n)}" for name, n in parts.items() if n)
        raise G3InputError(
            f"{what} needs at least {human_bytes(need)} ({detail}), more than {source} ({human_bytes(total)}): {fix}"
        )


def usable_cores() -> int:
    """The cores this process may run on (its affinity: an emulated host's share, a cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
