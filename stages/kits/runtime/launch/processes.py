"""Starting the ranks of a run: ``--workers K`` local processes, or the one rank of this process under torchrun.

A rank's entry is run by :func:`run_guarded`: its log goes to ``RUN/logs/<prefix>rank-NNNNN.log``, and if it
raises, its error to ``…rank-NNNNN.error``. The launcher notices the first rank that exits non-zero, stops
the others and raises :class:`G3RuntimeError` naming that rank and its error (or the signal that killed it).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from stages.common.cost import memory_limit, oom_kills
from stages.common.errors import G3InputError, G3RuntimeError

log = logging.getLogger("g3.runtime")


@dataclass(frozen=True)
class HostFile:
    """An input file each host needs its own copy of (the weights `g3 eval` evaluates)."""

    path: str


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def log_path(run_dir: Path, rank: int, prefix: str, suffix: str) -> Path:
    return Path(run_dir) / "logs" / f"{prefix}rank-{rank:05d}.{suffix}"


class _LogFileHandler(logging.FileHandler):
    """A rank's log file; a record it cannot write (a full disk) is dropped rather than printed with a traceback
    on the launcher's standard error — the launcher names the full disk (:func:`failure_message`)."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def setup_logging(run_dir: Path, rank: int, prefix: str = "") -> None:
    path = log_path(run_dir, rank, prefix, "log")
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = _LogFileHandler(path)
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
        with contextlib.suppress(OSError):  # a full disk: the launcher finds it without the file (disk_full)
            log_path(run_dir, rank, prefix, "error").write_text(f"{type(exc).__name__}: {exc}\n")
        raise
    finally:
        import torch.distributed as dist  # imported by the entry already; not at import (`g3 eval` starts faster)

        if dist.is_initialized():
            dist.destroy_process_group()


# Local workers fork from one server process that has already imported torch and the runtime (multiprocessing's
# forkserver): K workers cost one import of torch instead of K, and a process that launches many runs (`g3 bench`,
# the test suite) pays it once — on 2 cores, most of a small run's wall time was K interpreters importing torch.
# The server is started before any thread or process group exists, so forking it is safe. Each worker takes the
# launcher's current environment and working directory (the server's are those of its start).
# G3_START_METHOD=spawn restores fresh interpreters. "__main__": the server runs the launching script's main
# module once and the workers, finding it there, do not run it again (every worker of `g3 train` re-imported the
# CLI, 3.7 s of CPU each on the 2-core sandbox before the CLI imported its commands lazily). The server ignores a
# module it cannot import, so tests/test_train.py imports each of them.
PRELOAD = ["__main__", "torch", "torch.distributed", "numpy", "numba", f"{__package__}.preload"]
# What the workers of an evaluation (`g3 eval`: forward only) need: no optimizer, so not torch._dynamo (1.4 s of
# the server's 3.5 s start on the 2-core sandbox; docs/BENCHMARKS.md, "g3 eval start-up"). Used when this process
# starts the server; one already running (a process that trained first) has PRELOAD, a superset.
INFERENCE_PRELOAD = [*PRELOAD[:-1], f"{__package__}.preload_inference"]


def preload_for(entry, preload: list[str] | None = None) -> list[str]:
    """What the fork server imports to run ``entry``: ``preload`` (default :data:`PRELOAD`) and the module of
    ``entry`` itself, which imports every strategy's runtime (``stages.strategies.registry.import_runtimes``)."""
    return [*(PRELOAD if preload is None else preload), entry.__module__]


def start_resource_tracker_quietly() -> None:
    """Start multiprocessing's resource tracker (if this process has none yet) with its "leaked semaphore"
    warning off. When a worker fails, the launcher stops its peers with a signal, and a stopped peer cannot
    release the named semaphores a library made in it; the tracker, shared with the launcher, then unlinks them
    — as it should — but also printed a warning on the launcher's standard error, under the one line that names
    the failure. The tracker takes its warning filters from this interpreter's flags when it starts; they are
    set only for that moment (nothing else in the process changes)."""
    from multiprocessing import resource_tracker

    quiet = "ignore:resource_tracker:UserWarning"
    sys.warnoptions.append(quiet)
    try:
        resource_tracker.ensure_running()
    finally:
        sys.warnoptions.remove(quiet)


def start_method(preload: list[str] | None = None) -> str:
    """The start method of local workers; for the fork server, what it imports when this process starts it
    (``preload``, default :data:`PRELOAD`)."""
    method = os.environ.get("G3_START_METHOD") or (
        "forkserver" if sys.platform.startswith("linux") else "spawn"
    )
    if method not in ("forkserver", "spawn"):
        raise G3InputError(f"G3_START_METHOD={method} is not one of forkserver, spawn")
    start_resource_tracker_quietly()
    if method == "forkserver":
        import multiprocessing

        multiprocessing.set_forkserver_preload(_preload(PRELOAD if preload is None else preload))
        _start_server_deaf_to_ctrl_c()
    return method


def _start_server_deaf_to_ctrl_c() -> None:
    """Start the fork server (if not running) with SIGINT blocked, a mask it and the workers forked from it
    inherit. A Ctrl-C at a terminal reaches the whole process group; it is the launcher's to answer (it kills
    its workers and says what was kept): the server, still starting its interpreter or importing torch, printed
    a traceback (or "Fatal Python error") under the launcher's one line. Blocked, not ignored, in this thread
    while the server starts: a Ctrl-C in that moment stays pending and reaches the launcher right after."""
    from multiprocessing import forkserver

    _socket_folder_that_fits()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# a socket's path holds at most 107 bytes; the fork server's is TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX
SOCKET_PATH_BYTES, SOCKET_NAME_BYTES = 107, 34


def _socket_folder_that_fits() -> None:
    """The fork server listens on a socket in multiprocessing's ``pymp-*`` folder under TMPDIR: under a long
    TMPDIR (a job scheduler's per-job folder) its start fails with "AF_UNIX path too long". As CPython 3.12 and
    later do themselves, that folder then goes under the system's own temporary folder, removed at exit."""
    import shutil
    import tempfile
    from multiprocessing import process, util

    config = process.current_process()._config
    if (
        hasattr(util, "_get_base_temp_dir")  # a CPython that does this itself
        or config.get("tempdir") is not None
        or len(tempfile.gettempdir()) + SOCKET_NAME_BYTES <= SOCKET_PATH_BYTES
    ):
        return
    folder = tempfile.mkdtemp(prefix="pymp-", dir="/tmp")
    util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)
    config["tempdir"] = folder


def start_server_early(preload: list[str] | None = None) -> None:
    """Start the fork server now (if local workers fork from one and it is not running), so that its imports
    overlap what this process does before it launches the workers (`g3 eval` checks the weights meanwhile).
    Nothing here waits for the server: the first worker's start does."""
    if start_method(preload) == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def run_in_process(entry, run_dir: Path, prefix: str, master_addr: str, master_port: int, *args) -> None:
    """Run the one rank of a 1-worker job in this process (``entry(0, 1, init_method, *args)``), as
    :func:`spawn_workers` would in a worker — its log and error file, failures named the same way — without
    starting a worker process (`g3 eval` of a 1-worker run: no fork server, whose start is most of the command's
    time on a small graph). This process's "g3" log handlers are restored afterwards."""
    port = master_port or free_port(master_addr)
    root = logging.getLogger("g3")
    saved = root.handlers[:], root.level
    try:
        run_guarded(entry, 0, 1, Path(run_dir), prefix, f"tcp://{master_addr}:{port}", *args)
    # named as a failed worker is (spawn_workers): the error file's first line, the log
    except Exception as exc:
        message = failure_message(Path(run_dir), 0, None, prefix)
        raise (G3InputError if _bad_input(Path(run_dir), 0, prefix) else G3RuntimeError)(message) from exc
    finally:
        for handler in root.handlers:
            if handler not in saved[0]:
                handler.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


# Floors of local worker processes, lower bounds measured on synthetic:tiny at K = 2 (torch 2.13, CPU): a g3
# process that has imported torch holds 188 MiB of its own, the fork server 270 MiB once it has imported torch,
# numba and the runtime, and a worker forked from it 38 MiB beyond the pages they share, before its partition; a
# machine or cgroup with less than these can only kill the run
PROCESS_BYTES = 150 << 20
FORK_SERVER_BYTES = 200 << 20
WORKER_OWN_BYTES = 32 << 20


def check_workers_fit(world: int, in_process: bool = False) -> None:
    """Refuse, before any process starts, ``world`` local workers whose floor exceeds all the memory this machine
    or its memory cgroup has (this process, the fork server they start from, each worker's own pages);
    ``in_process``: the one worker runs in this process (no fork server)."""
    from stages.common.cost import check_memory_floor, process_anonymous_bytes

    check_memory_floor(
        {
            "this process": max(process_anonymous_bytes(), PROCESS_BYTES),
            "the fork server": 0 if in_process else FORK_SERVER_BYTES,
            f"{world} workers' own memory": world * WORKER_OWN_BYTES,
        },
        f"running {world} worker processes on this machine",
        "run fewer workers here (--workers, or --hosts to spread them over machines), or give it more memory",
    )


def spawn_workers(
    entry,
    world: int,
    run_dir: Path,
    prefix: str,
    master_addr: str,
    master_port: int,
    *args,
    timeout: float = 60.0,
    preload: list[str] | None = None,
) -> None:
    """Start ``world`` local processes running ``entry(rank, world, init_method, *args)``; if any fails, or stops
    answering (no heartbeat for ``timeout`` seconds: stopped, or stuck), every one is stopped and the rank is
    named. ``preload``: what the fork server imports if this call starts it (default :data:`PRELOAD`)."""
    import torch.multiprocessing as mp

    check_workers_fit(world)
    port = master_port or free_port(master_addr)
    init_method = f"tcp://{master_addr}:{port}"
    started = time.time()
    for r in range(world):  # no stale heartbeat of an earlier attempt
        heartbeat_path(Path(run_dir), r, prefix).unlink(missing_ok=True)
    launcher = {"env": dict(os.environ), "cwd": os.getcwd()}
    oom_before = oom_kills()  # a worker killed while this count grows was the OOM killer's
    with main_without_a_file():
        ctx = mp.start_processes(
            _spawn_entry,
            args=(entry, world, str(run_dir), prefix, init_method, os.getpid(), args, launcher),
            nprocs=world,
            join=False,
            start_method=start_method(preload_for(entry, preload)),
        )
    # Watched here rather than by ctx.join: on a failure, torch's join first SIGTERMs the other workers and waits
    # up to 30 s for each, so a stopped worker has been killed (and cannot be named) by the time it returns.
    procs = ctx.processes
    try:
        while True:
            live = [p.sentinel for p in procs if p.exitcode is None]
            if live:
                multiprocessing.connection.wait(live, timeout=1.0)
            failed = _first_failed(Path(run_dir), procs, prefix)
            if failed is not None:
                # a peer that timed out waiting for a stopped rank: name that one
                stopped = _stopped_rank(procs)
                _stop(ctx)
                # a rank that found bad input is the cause: its peers' errors (a closed connection) follow from it
                bad = [r for r in range(world) if _bad_input(Path(run_dir), r, prefix)]
                failed = bad[0] if bad else failed
                message = failure_message(Path(run_dir), failed, procs[failed].exitcode, prefix, oom_before)
                if stopped is not None and stopped != failed:
                    raise G3RuntimeError(
                        f"worker {stopped} stopped answering (its process was stopped); every "
                        f"worker was stopped — worker {failed} had given up waiting: {message}"
                    )
                if _bad_input(Path(run_dir), failed, prefix):
                    raise G3InputError(message)  # what the worker read is at fault: exit 2, as for any stage
                raise G3RuntimeError(message)
            if all(p.exitcode == 0 for p in procs):
                return
            hung = _silent_rank(Path(run_dir), procs, prefix, started, timeout)
            if hung is not None:
                _stop(ctx)
                raise G3RuntimeError(
                    f"worker {hung} stopped answering: no heartbeat for {timeout:.0f} s (stopped, "
                    f"or stuck outside Python); every worker was stopped (log: "
                    f"{log_path(Path(run_dir), hung, prefix, 'log')})"
                )
    # KeyboardInterrupt (SIGINT, or SIGTERM turned into one), a failure: no worker stays
    except BaseException:
        _stop(ctx)
        raise
    finally:
        for f in ctx.error_files:  # torch's pickled tracebacks of failed workers (ours are in the run's logs)
            Path(f).unlink(missing_ok=True)
        for r in range(world):
            heartbeat_path(Path(run_dir), r, prefix).unlink(missing_ok=True)


@contextlib.contextmanager
def main_without_a_file():
    """A launching ``__main__`` whose ``__file__`` is no file (a script piped to ``python -``: ``<stdin>``) is
    hidden from the workers while they start, as an interactive session's is: multiprocessing would have each
    worker run that path and fail. The workers' entry is g3's own code and needs nothing of it."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or os.path.isfile(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _first_failed(run_dir: Path, processes, prefix: str) -> int | None:
    """The rank that failed first among those that exited non-zero: one killed by a signal without writing an
    error (SIGKILL, the OOM killer: its peers then fail on the closed connection and write theirs), else the
    earliest written error file (the others usually failed because of it), else the lowest rank. Called before
    this launcher stops anyone, so a signal here came from outside."""
    failed = [r for r, p in enumerate(processes) if p.exitcode not in (None, 0)]
    if not failed:
        return None
    killed = [
        r for r in failed if processes[r].exitcode < 0 and not log_path(run_dir, r, prefix, "error").is_file()
    ]
    if killed:
        return killed[0]

    def written(r: int) -> float:
        err = log_path(run_dir, r, prefix, "error")
        return err.stat().st_mtime if err.is_file() else float("inf")

    return min(failed, key=lambda r: (written(r), r))


def _stopped_rank(processes) -> int | None:
    """The first worker whose process is stopped (SIGSTOP, a debugger), as the OS sees it."""
    import psutil

    for r, p in enumerate(processes):
        try:
            if p.is_alive() and psutil.Process(p.pid).status() in (
                psutil.STATUS_STOPPED,
                psutil.STATUS_TRACING_STOP,
            ):
                return r
        except psutil.Error:
            continue
    return None


def _stop(ctx) -> None:
    """Kill every worker still there (SIGKILL: a stopped process does not act on SIGTERM) and reap it."""
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
    for p in ctx.processes:
        p.join(timeout=10)


HEARTBEAT_SECONDS = 1.0


def heartbeat_path(run_dir: Path, rank: int, prefix: str) -> Path:
    return log_path(run_dir, rank, prefix, "alive")


def _silent_rank(run_dir: Path, processes, prefix: str, started: float, timeout: float) -> int | None:
    """The first live rank whose heartbeat file has not been touched for ``timeout`` seconds (a rank that has not
    started yet is given ``timeout`` from the launch, plus the time to import torch and numba)."""
    now = time.time()
    for r, proc in enumerate(processes):
        if not proc.is_alive():  # finished (or failed: join reports that)
            continue
        f = heartbeat_path(run_dir, r, prefix)
        last = f.stat().st_mtime if f.is_file() else started + STARTUP_GRACE
        if now - last > timeout:
            return r
    return None


STARTUP_GRACE = 60.0  # seconds a worker may take to start (imports, numba) before its first heartbeat


def _beat(path: Path, parent: int) -> None:
    """A worker's heartbeat thread: touch ``path`` every second; leave at once if the launcher is gone (a
    killed launcher must not leave its workers training). Asked of the launcher itself, not of this process's
    parent: a forked worker's parent is the fork server, which outlives a killed launcher while its workers
    run (they hold its liveness pipe)."""
    import psutil

    try:
        launcher = psutil.Process(parent)
    except psutil.NoSuchProcess:
        launcher = None
    while True:
        if not _alive(launcher):
            if logging.getLogger("g3").handlers:  # into the rank's log; never onto the terminal's stderr
                log.error("the launcher (pid %d) is gone: leaving", parent)
            logging.shutdown()
            os._exit(3)
        with contextlib.suppress(OSError):
            path.touch()
        time.sleep(HEARTBEAT_SECONDS)


def start_heartbeat(run_dir: Path, rank: int, prefix: str, launcher: int) -> None:
    """This worker's heartbeat thread (:func:`_beat`): its file in the run's logs, touched every second while the
    launcher (pid ``launcher``) lives."""
    hb = heartbeat_path(run_dir, rank, prefix)
    hb.parent.mkdir(exist_ok=True)  # in the run folder the launcher made: never re-made after it was removed
    threading.Thread(target=_beat, args=(hb, launcher), daemon=True, name="heartbeat").start()


def _alive(proc) -> bool:
    """``proc`` (a psutil.Process) still runs: the same process (pid and start time), not a zombie."""
    import psutil

    try:
        return proc is not None and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _spawn_entry(
    rank: int,
    entry,
    world: int,
    run_dir: str,
    prefix: str,
    init_method: str,
    parent: int,
    args: tuple,
    launcher: dict,
) -> None:
    os.environ.clear()  # the launcher's environment now, not the fork server's at its start
    os.environ.update(launcher["env"])
    os.chdir(launcher["cwd"])
    os.environ.setdefault("LOCAL_WORLD_SIZE", str(world))
    # the launcher stopped, and removed its attempt, before this worker started
    if not Path(run_dir).is_dir():
        os._exit(3)
    start_heartbeat(Path(run_dir), rank, prefix, parent)
    try:
        run_guarded(entry, rank, world, Path(run_dir), prefix, init_method, *args)
    except BaseException:
        # a failed rank leaves through torch's wrapper and the fork server's os._exit: release its semaphores
        # first, or the resource tracker warns of "leaked semaphore objects" on the launcher's standard error
        release_process_resources()
        raise
    # the heartbeat file stays until the launcher has seen this process exit (it removes it): removed here, a
    # launcher polling between the removal and the exit took the rank for one that never started
    # The rank's work is done and written (model, metrics, logs; the process group destroyed). Leave without the
    # interpreter's teardown: there, native threads of torch's libraries are destroyed in no fixed order, and
    # about one worker process in a few hundred aborted ("terminate called without an active exception",
    # SIGABRT) after logging "finished", which failed a run whose every artifact was complete.
    leave_now()


def release_process_resources() -> None:
    """Run multiprocessing's finalizers of priority >= 0, as a normal exit would (the named semaphores libraries
    created in this process are unlinked by them)."""
    from multiprocessing import util

    with contextlib.suppress(Exception):  # best effort
        util._run_finalizers(0)


def leave_now() -> None:
    """End a worker whose work is written, without the interpreter's teardown, after releasing what outlives
    processes: the named semaphores that libraries created in it (numcodecs' blosc takes a
    ``multiprocessing.Lock`` on its first use) are unlinked by multiprocessing's finalizers, which ``os._exit``
    skips — the resource tracker, shared with the launcher, then warned of "leaked semaphore objects" on the
    launcher's standard error when it exited."""
    release_process_resources()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


BAD_INPUT = (
    "G3InputError",
    "FileNotFoundError",
    "PermissionError",
    "IsADirectoryError",
    "NotADirectoryError",
)
ENVIRONMENT = (
    "No space left on device",
    "Read-only file system",
    "Disk quota exceeded",
    "Permission denied",
    "file write failed",
)  # the last: torch.save's words for a write the disk refused


def disk_full(folder: Path) -> bool:
    """Whether the filesystem holding ``folder`` has no room left (under 1 MiB for an unprivileged writer)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (1 << 20)


def _error_text(run_dir: Path, rank: int, prefix: str) -> str:
    err = log_path(run_dir, rank, prefix, "error")
    try:
        return err.read_text().strip() if err.is_file() else ""
    except OSError:
        return ""


def _bad_input(run_dir: Path, rank: int, prefix: str) -> bool:
    """The failed rank's error is bad input or the environment (a damaged file, a full disk), not a crash; a rank
    that could not even write its error file on a full disk is the environment too."""
    text = _error_text(run_dir, rank, prefix)
    return (
        text.startswith(BAD_INPUT) or any(e in text for e in ENVIRONMENT) or (not text and disk_full(run_dir))
    )


def failure_message(
    run_dir: Path, rank: int, exitcode: int | None, prefix: str = "", oom_before: int | None = None
) -> str:
    """Name the rank that failed and its error (its .error file), or what killed it: the kernel's OOM killer
    when a SIGKILL came while its count of kills (``oom_before`` at the workers' start) grew, else the signal."""
    log_file = log_path(run_dir, rank, prefix, "log")
    if text := _error_text(run_dir, rank, prefix):
        return f"worker {rank} failed: {text.splitlines()[0]} (log: {log_file})"
    if disk_full(run_dir):
        return f"{run_dir}: No space left on device (worker {rank} could not write there)"
    if exitcode == -signal.SIGKILL and oom_before is not None and (oom_kills() or 0) > oom_before:
        return f"{out_of_memory(rank)} (log: {log_file})"
    if exitcode is not None and exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
    else:
        how = f"exited with code {exitcode}"
    if not log_file.is_file():  # it never reached its own code: the interpreter's start failed
        script = user_script()
        hint = (
            f"; a worker imports the script that started it ({script}): put that script's calls under "
            '`if __name__ == "__main__":`'
            if script
            else ""
        )
        return f"worker {rank} {how} before it started (no log){hint}"
    return f"worker {rank} {how} (log: {log_file})"


def out_of_memory(rank: int) -> str:
    """What to tell of a worker the kernel's OOM killer ended: the memory it had, and what lowers a worker's."""
    from stages.common.units import human_bytes

    total, source = memory_limit()
    had = f"{source}: {human_bytes(total)}" if total is not None else source
    return (
        f"worker {rank} ran out of memory: the kernel's OOM killer ended it ({had}, for every process of the run); "
        "give the run more memory, or hold less per worker: `g3 train --stream-bins on` (rows on disk), "
        "`g3 plan --device-memory SIZE` (smaller bins), or more workers on more machines"
    )


def user_script() -> str | None:
    """The launching process's main script when it is a user's (not g3's CLI): worker processes import it."""
    main = sys.modules.get("__main__")
    spec_name = getattr(getattr(main, "__spec__", None), "name", "") or ""
    path = getattr(main, "__file__", None)
    # `python -m g3cli…`, or the console script, whose module holds the CLI's own main function
    cli_script = getattr(getattr(main, "main", None), "__module__", "") == "g3cli.main"
    if path is None or spec_name.startswith("g3cli.") or spec_name == "g3cli" or cli_script:
        return None
    return str(path)


def _preload(modules: list[str]) -> list[str]:
    """The fork server's imports: the launching script's main module only when it is g3's own CLI — a user's
    script is never run in the server (one without a ``__main__`` guard would run its whole pipeline there)."""
    return [m for m in modules if m != "__main__" or user_script() is None]
