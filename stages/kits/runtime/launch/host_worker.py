"""One worker process on an emulated host: what torchrun's agent runs there (``python -m
stages.kits.runtime.launch.host_worker HOST/job.pkl``).

The job file (written by :mod:`stages.kits.runtime.launch.emulated_hosts`) holds the entry and its arguments with the host's
own paths. The process takes the rank ``ranks[LOCAL_RANK]`` of its host, as a node folder of ``g3 bundle``
does, joins the group through torchrun's environment (``env://``) and runs the entry as a locally spawned
worker would: its log and error files in the host's run folder, a heartbeat the launcher watches, and an exit
without the interpreter's teardown once its work is written.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from pathlib import Path

from stages.kits.runtime.launch.processes import leave_now, run_guarded, start_heartbeat


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
    """This process's standard error to ``path`` (the launcher's, through /proc), opened for appending: a
    terminal or a pipe takes it as it comes, and a file the launcher's standard error was sent to is not
    overwritten. Left as it is where that cannot be opened."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1])
