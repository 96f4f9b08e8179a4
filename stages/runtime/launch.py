"""Starting the ranks of a run: ``--workers K`` local processes, or the one rank of this process under torchrun.

A rank's entry is run by :func:`run_guarded`: its log goes to ``RUN/logs/<prefix>rank-NNNNN.log``, and if it
raises, its error to ``…rank-NNNNN.error``. The launcher notices the first rank that exits non-zero, stops
the others and raises :class:`G3RuntimeError` naming that rank and its error (or the signal that killed it).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import traceback
from pathlib import Path

import torch.distributed as dist

from ..common.errors import G3InputError, G3RuntimeError

log = logging.getLogger("g3.runtime")


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def log_path(run_dir: Path, rank: int, prefix: str, suffix: str) -> Path:
    return Path(run_dir) / "logs" / f"{prefix}rank-{rank:05d}.{suffix}"


def setup_logging(run_dir: Path, rank: int, prefix: str = "") -> None:
    path = log_path(run_dir, rank, prefix, "log")
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(f"%(asctime)s rank {rank} %(levelname)s %(message)s"))
    root = logging.getLogger("g3")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def run_guarded(entry, rank: int, world: int, run_dir: Path, prefix: str, *args) -> None:
    """``entry(rank, world, *args)`` with this rank's log; an error is logged and written to the .error file."""
    setup_logging(run_dir, rank, prefix)
    try:
        entry(rank, world, *args)
    except BaseException as exc:
        log.error("failed: %s\n%s", exc, traceback.format_exc())
        log_path(run_dir, rank, prefix, "error").write_text(f"{type(exc).__name__}: {exc}\n")
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn_workers(entry, world: int, run_dir: Path, prefix: str, master_addr: str, master_port: int, *args) -> None:
    """Start ``world`` local processes running ``entry(rank, world, init_method, *args)``; if any fails, the
    others are stopped and the failure is reported."""
    import torch.multiprocessing as mp

    port = master_port or free_port(master_addr)
    init_method = f"tcp://{master_addr}:{port}"
    ctx = mp.start_processes(_spawn_entry, args=(entry, world, str(run_dir), prefix, init_method, args),
                             nprocs=world, join=False, start_method="spawn")
    try:
        while not ctx.join(timeout=1.0):
            pass
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
        rank = getattr(exc, "error_index", None)
        message = failure_message(Path(run_dir), rank, exc, prefix)
        if rank is not None and _bad_input(Path(run_dir), rank, prefix):
            raise G3InputError(message) from None  # what the worker read is at fault: exit 2, as for any stage
        raise G3RuntimeError(message) from None
    except KeyboardInterrupt:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        raise


def _spawn_entry(rank: int, entry, world: int, run_dir: str, prefix: str, init_method: str, args: tuple) -> None:
    os.environ.setdefault("LOCAL_WORLD_SIZE", str(world))
    run_guarded(entry, rank, world, Path(run_dir), prefix, init_method, *args)
    # The rank's work is done and written (model, metrics, logs; the process group destroyed). Leave without the
    # interpreter's teardown: there, native threads of torch's libraries are destroyed in no fixed order, and
    # about one worker process in a few hundred aborted ("terminate called without an active exception",
    # SIGABRT) after logging "finished", which failed a run whose every artifact was complete.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


BAD_INPUT = ("G3InputError", "FileNotFoundError", "PermissionError", "IsADirectoryError", "NotADirectoryError")
ENVIRONMENT = ("No space left on device", "Read-only file system", "Disk quota exceeded")


def _bad_input(run_dir: Path, rank: int, prefix: str) -> bool:
    """The failed rank's error is bad input or the environment (a damaged file, a full disk), not a crash."""
    err = log_path(run_dir, rank, prefix, "error")
    text = err.read_text() if err.is_file() else ""
    return text.startswith(BAD_INPUT) or any(e in text for e in ENVIRONMENT)


def failure_message(run_dir: Path, rank, exc, prefix: str = "") -> str:
    """Name the rank that failed first (as torch's process context saw it) and its error."""
    if rank is None:
        return f"a worker failed: {exc}"
    err, log_file = log_path(run_dir, rank, prefix, "error"), log_path(run_dir, rank, prefix, "log")
    if err.is_file() and err.read_text().strip():
        return f"worker {rank} failed: {err.read_text().strip().splitlines()[0]} (log: {log_file})"
    sig = getattr(exc, "signal_name", None)
    how = f"was killed by {sig}" if sig else f"exited with code {getattr(exc, 'exit_code', '?')}"
    return f"worker {rank} {how} (log: {log_file})"
