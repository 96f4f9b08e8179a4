"""One worker process on an emulated host: what torchrun's agent runs there (``python -m
stages.kits.runtime.launch.host_worker HOST/job.pkl``), or what the fork server runs there (:func:`forked`).

The job file (written by :mod:`stages.kits.runtime.launch.emulated_hosts`) holds the entry and its arguments with the host's
own paths. The process takes the rank ``ranks[LOCAL_RANK]`` of its host, as a node folder of ``g3 bundle``
does, joins the group through torchrun's environment (``env://``) and runs the entry as a locally spawned
worker would: its log and error files in the host's run folder, a heartbeat the launcher watches, and an exit
without the interpreter's teardown once its work is written.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
from pathlib import Path

from stages.kits.runtime.launch.processes import leave_now, run_guarded, start_heartbeat

CLONE_NEWNET = 0x40000000  # <sched.h>: setns joins the file's network namespace


def forked(job_file: str, namespace: str, cores: list[int], env: dict, log: str) -> None:
    """A worker forked from the fork server onto an emulated host, as torchrun's agent would start it there: its
    output into the host's log, then into the host's network namespace (``ip netns``'s file of it), onto the
    host's cores, with the host's environment (``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR``… as torchrun sets
    them), in the host's folder; then :func:`main`. A forked child has one thread, so every thread it starts
    (gloo's, the heartbeat) lives in the host's namespace."""
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"cannot enter network namespace {namespace}: {os.strerror(errno)}")
    finally:
        os.close(fd)
    os.sched_setaffinity(0, cores)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(Path(job_file).parent)
    main(job_file)


def main(job_file: str) -> None:
    # a trainer's children start with SIGINT ignored when the launcher runs in the background; the launcher
    # stops the workers itself, so the default is right here
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    with open(job_file, "rb") as f:
        job = pickle.load(f)
    rank = job["ranks"][int(os.environ.get("LOCAL_RANK", 0))]
    # a host started again after a crash: its agent counts restarts from 0, but its workers are a restart of the
    # group (they resume from the newest checkpoint every host has), however the other hosts' agents saw it
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) + int(
        os.environ.get("G3_HOST_RESTARTS", 0)
    )
    os.environ["TORCHELASTIC_RESTART_COUNT"] = str(restarts)
    if rank == 0 and job.get("console"):
        _write_errors_to(job["console"])
    run_dir = Path(job["run_dir"])
    # leaves at once if the launcher is gone (a launcher killed with SIGKILL must not leave workers training)
    start_heartbeat(run_dir, rank, job["prefix"], job["launcher_pid"])
    try:
        run_guarded(
            job["entry"],
            rank,
            job["world"],
            run_dir,
            job["prefix"],
            "env://",
            job["plan"],
            str(run_dir),
            job["cfg"],
            *job["extra"],
        )
    except BaseException:
        # logged with its traceback and written to the rank's .error file, from which the launcher says it in one
        # line; rank 0's standard error is the user's console, where a traceback would stand above that line
        sys.stderr.flush()
        os._exit(1)
    leave_now()  # as a spawned worker: no teardown of torch's native threads after the work is written


def _write_errors_to(path: str) -> None:
    """Python's standard error (the live display, progress lines, warnings) to ``path`` (the launcher's, through
    /proc), opened for appending: a terminal or a pipe takes it as it comes, and a file the launcher's standard
    error was sent to is not overwritten. File descriptor 2 stays on the host's log, where native libraries
    write (c10d warns there that an emulated address has no host name). Left as it is where ``path`` cannot be
    opened."""
    try:
        stream = open(path, "a", buffering=1, encoding=sys.stderr.encoding, errors="backslashreplace")  # noqa: SIM115
    except OSError:
        return
    sys.stderr.flush()
    sys.stderr = stream


if __name__ == "__main__":
    main(sys.argv[1])
