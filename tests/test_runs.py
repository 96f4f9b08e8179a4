"""Runs that survive: the run folder's lock, `--force` that never loses the old run, `--resume` rules, a
resumed record without repeats, hung and dead workers and launchers (issue 23 §2–3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from helpers import g3_partition, g3_plan, invoke, short_scratch
from test_train import max_weight_diff

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plan(store, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    return g3_plan(g3_partition(store, root / "part", 2, method="random"), root / "plan", bin_size=60)


COMMON = ["--threads", "1", "--seed", "3", "--eval-every", "0", "--dtype", "float64"]


def train(plan: Path, run: Path, *args):
    return invoke(["train", str(plan), "-o", str(run), *COMMON, *args])


def epochs_recorded(run: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def is_worker(p: psutil.Process) -> bool:
    """A training worker: a spawned interpreter, or a child of multiprocessing's fork server (the server itself
    is not one: it stays for the next run)."""
    if "spawn_main" in " ".join(p.cmdline()):
        return True
    parent = p.parent()
    return parent is not None and "forkserver" in " ".join(parent.cmdline())


def workers_of(root: psutil.Process) -> list[psutil.Process]:
    """The live worker processes under ``root``."""
    out = []
    for p in root.children(recursive=True):
        try:
            if is_worker(p) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def spawned_workers() -> list[psutil.Process]:
    """This process's live worker processes."""
    return workers_of(psutil.Process())


def test_resume_refuses_what_cannot_be_resumed(plan, tmp_path):
    run = tmp_path / "run"
    assert train(plan, run, "--epochs", "2").exit_code == 0
    cases = [
        (train(plan, run, "--epochs", "4", "--resume"), "the run has no checkpoint to resume from"),
        (train(plan, tmp_path / "none", "--epochs", "4", "--resume"), "no run to resume here"),
    ]
    assert train(plan, run, "--epochs", "4", "--checkpoint-every", "2", "--force").exit_code == 0
    cases += [
        (
            train(plan, run, "--epochs", "4", "--resume", "--checkpoint-every", "2"),
            "nothing to train: the run completed epoch 3",
        ),
        (
            train(plan, run, "--epochs", "6", "--resume", "--lr", "0.02"),
            "--lr 0.02 differs from the run's 0.01",
        ),
        (
            invoke(["train", str(plan), "-o", str(run), *COMMON[:-2], "--epochs", "6", "--resume"]),
            "--dtype float32 differs from the run's float64",
        ),
        (
            invoke(
                [
                    "train",
                    str(plan),
                    "-o",
                    str(run),
                    "--threads",
                    "1",
                    "--eval-every",
                    "0",
                    "--dtype",
                    "float64",
                    "--epochs",
                    "6",
                    "--resume",
                ]
            ),
            "--seed 0 differs from the run's 3",
        ),
        (
            train(plan, run, "--epochs", "6", "--resume", "--dropout", "0.1"),
            "--dropout 0.1 differs from the run's 0.5",
        ),
    ]
    for r, message in cases:
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, (message, r.output)
    before = torch.load(run / "model.pt", weights_only=True)
    r = train(plan, run, "--epochs", "6", "--resume", "--checkpoint-every", "2")  # more epochs: it continues
    assert r.exit_code == 0, r.output
    assert epochs_recorded(run) == list(range(6))
    assert max_weight_diff(before, torch.load(run / "model.pt", weights_only=True)) > 0


def test_a_resumed_record_has_no_repeated_epochs(plan, tmp_path, monkeypatch):
    """Killed at epoch 4 with the last checkpoint after epoch 1: metrics.jsonl held epochs 0-3; the resumed
    run trains 2-3 again and its record says each epoch once — and its weights are the uninterrupted run's."""
    run, full = tmp_path / "run", tmp_path / "full"
    assert train(plan, full, "--epochs", "6", "--checkpoint-every", "2").exit_code == 0
    monkeypatch.setenv("G3_FAULT", "0:4:kill")
    r = train(plan, run, "--epochs", "6", "--checkpoint-every", "2")
    assert r.exit_code == 1 and "SIGKILL" in r.output
    assert epochs_recorded(run) == [0, 1, 2, 3]
    monkeypatch.delenv("G3_FAULT")
    r = train(plan, run, "--epochs", "6", "--resume")  # keeps the run's cadence: --checkpoint-every 2
    assert r.exit_code == 0, r.output
    assert epochs_recorded(run) == list(range(6))
    assert json.loads((run / "run.json").read_text())["config"]["checkpoint_every"] == 2
    assert sorted(p.name for p in (run / "checkpoints").glob("*.pt"))[-1] == "epoch-00005.pt"
    assert (
        max_weight_diff(
            torch.load(full / "model.pt", weights_only=True), torch.load(run / "model.pt", weights_only=True)
        )
        == 0.0
    )
    assert [h["status"] for h in json.loads((run / "run.json").read_text())["history"]] == [
        "running",
        "failed",
        "running",
        "completed",
    ]


def test_force_keeps_the_old_run_until_the_new_one_finishes(plan, tmp_path, monkeypatch):
    run = tmp_path / "run"
    assert train(plan, run, "--epochs", "2").exit_code == 0
    old = torch.load(run / "model.pt", weights_only=True)
    monkeypatch.setenv("G3_FAULT", "1:1:raise")
    r = train(plan, run, "--epochs", "3", "--force")
    assert r.exit_code == 1 and f"the earlier run in {run} is kept" in r.output, r.output
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    assert max_weight_diff(old, torch.load(run / "model.pt", weights_only=True)) == 0.0
    # a failed attempt's folder stays for its logs, until the next attempt: at most one is kept
    assert train(plan, run, "--epochs", "3", "--force").exit_code == 1
    assert len(list(tmp_path.glob(".run.tmp-*"))) == 1
    monkeypatch.delenv("G3_FAULT")
    assert train(plan, run, "--epochs", "3", "--force", "--seed", "4").exit_code == 0
    assert not list(tmp_path.glob(".run.tmp-*"))
    assert epochs_recorded(run) == [0, 1, 2]
    assert json.loads((run / "run.json").read_text())["config"]["seed"] == 4
    assert json.loads((run / "run.json").read_text())["path"] == str(run)


def _launch(plan: Path, run: Path, *args, env=None, cgroup: Path | None = None) -> subprocess.Popen:
    """`g3 train` as a user starts it from a terminal: SIGINT and SIGHUP at their defaults even when the test suite
    itself runs as a background job or under nohup (started with them ignored, which Python then keeps);
    ``cgroup``: the ``cgroup.procs`` of a cgroup it starts in."""

    def as_from_a_terminal():
        for sig in (signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if cgroup is not None:
            cgroup.write_text(str(os.getpid()))

    cmd = [sys.executable, "-m", "g3cli.main", "train", str(plan), "-o", str(run), *COMMON, *args]
    scratch = short_scratch()  # a launcher killed with SIGKILL cannot remove its fork server's socket
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch), **(env or {})},
        preexec_fn=as_from_a_terminal,
    )


def _stop(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    """Signal the launcher and wait for it; killed if it does not end (no training left running)."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def _wait_for_epochs(run: Path, n: int, proc: subprocess.Popen, limit: float = 120) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if (run / "metrics.jsonl").is_file() and len(epochs_recorded(run)) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("the run did not start")


def test_one_run_folder_one_launcher(plan, tmp_path):
    """A second `g3 train` into a run folder while one trains there (a concurrent --resume) is refused."""
    run = tmp_path / "run"
    assert train(plan, run, "--epochs", "2", "--checkpoint-every", "1").exit_code == 0
    proc = _launch(plan, run, "--epochs", "100000", "--checkpoint-every", "1", "--resume")
    try:
        _wait_for_epochs(run, 3, proc)
        r = train(plan, run, "--epochs", "200000", "--checkpoint-every", "1", "--resume")
        assert r.exit_code == 2 and "another g3 process is training into this" in r.output, r.output
    finally:
        _stop(proc)
    # Ctrl-C says how to continue the run from its checkpoints
    err = proc.stderr.read()
    assert (
        "g3: interrupted" in err
        and f"continue it with: g3 train {plan} -o {run} --resume --epochs 100000" in err
    ), err


def test_a_stopped_worker_is_named_and_the_run_ends_within_the_timeout(plan, tmp_path, monkeypatch):
    """SIGSTOP on a worker: before, the run ended after 92.5 s blaming a peer that timed out."""
    monkeypatch.setenv("G3_FAULT", "1:2:stop")
    t0 = time.monotonic()
    r = train(plan, tmp_path / "run", "--epochs", "50", "--timeout", "5")
    elapsed = time.monotonic() - t0
    assert r.exit_code == 1 and "worker 1 stopped answering" in r.output, r.output
    assert elapsed < 40, elapsed
    assert spawned_workers() == []
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "failed"


@pytest.mark.parametrize(
    "sig,status",
    [
        (signal.SIGTERM, "interrupted"),
        (signal.SIGINT, "interrupted"),
        (signal.SIGHUP, "interrupted"),
        (signal.SIGKILL, "running"),
    ],
)
def test_the_launcher_stopped_leaves_no_worker_and_says_so(plan, tmp_path, sig, status):
    """SIGINT / SIGTERM / SIGHUP (its terminal closed) to the launcher: workers stopped, run.json
    `interrupted`. SIGKILL cannot be handled:
    run.json stays `running`, but the workers notice their launcher is gone and leave, and `g3 report` sees
    that nobody holds the folder's lock (`interrupted`)."""
    run = tmp_path / "run"
    proc = _launch(plan, run, "--epochs", "100000")
    _wait_for_epochs(run, 2, proc)
    workers = workers_of(psutil.Process(proc.pid))
    assert len(workers) == 2
    _stop(proc, sig)
    gone, alive = psutil.wait_procs(workers, timeout=20)
    assert alive == [], alive
    assert json.loads((run / "run.json").read_text())["status"] == status
    from stages.report.run import run_report

    assert run_report([run], out=tmp_path / "rep")["runs"][0]["status"] == "interrupted"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--lr", "-0.01"], "--lr must be a positive number"),
        (["--lr", "nan"], "--lr must be a positive number"),
        (["--timeout", "0"], "--timeout must be a positive number of seconds"),
        (["--eval-every", "-1"], "must be >= 0 (0: never)"),
        (["--checkpoint-every", "-1"], "must be >= 0 (0: never)"),
        (["--threads", "0"], "--threads must be >= 1"),
        (["--epochs", "0"], "--epochs must be >= 1"),
        # once found only by a worker: a traceback or a ValueError per rank, and a run folder left behind
        (["--master-port", "70000"], "--master-port must be a TCP port in [0, 65535]"),
        (["--seed", str(2**70)], "--seed must be in [0, 2^63)"),
        (["--master-addr", "no.such.host.invalid"], "--master-addr no.such.host.invalid does not resolve"),
        (["--profile", "{plan}/plan.json/PROFILE.json"], "is a file, not a folder: cannot write the profile"),
    ],
)
def test_bad_option_values_are_refused_before_anything_is_written(plan, tmp_path, args, message):
    """Before: rejected inside the workers (80 lines of C++ frames for --timeout 0) with a failed run folder
    left behind, or accepted silently."""
    run = tmp_path / "run"
    r = train(plan, run, *(a.format(plan=plan) for a in args))
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert not run.exists()


def test_under_torchrun_a_host_folder_with_an_earlier_run_is_refused_before_the_group_forms(
    plan, tmp_path, monkeypatch
):
    """Each host checks its own run folder before joining: a fresh start over an earlier run's files, --force
    (hosts cannot agree to replace folders), and a "restart" of a job that never started here are refused."""
    for name, value in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
        "TORCHELASTIC_RUN_ID": "job7",
    }.items():
        monkeypatch.setenv(name, value)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "init.pt").write_bytes(b"")
    r = train(plan, run)
    assert r.exit_code == 2 and "holds an earlier run (init.pt, checkpoints)" in r.output, r.output
    r = train(plan, run, "--force")
    assert r.exit_code == 2 and "--force is not available under torchrun" in r.output, r.output
    r = train(plan, run, "--resume")
    assert r.exit_code == 2 and "no checkpoint to resume from" in r.output, r.output
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    r = train(plan, run)
    assert r.exit_code == 2 and "holds an earlier run" in r.output, r.output
    assert not (run / "logs" / "torchrun-job7.started").exists()


def test_a_completed_run_leaves_nothing_on_standard_error(plan, tmp_path):
    """`g3 train` as a user starts it: standard error holds the progress lines and nothing else — no warning of
    semaphores that workers left behind (numcodecs' blosc takes a multiprocessing lock on first use; workers end
    with os._exit, so launch.leave_now unlinks it first)."""
    proc = _launch(plan, tmp_path / "run", "--epochs", "2", env={"G3_QUIET": "0"})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("epoch ") for ln in lines), err


def test_bad_input_found_by_a_worker_is_one_line_exit_2_and_leaves_nothing(plan, tmp_path, monkeypatch):
    """Issue 41 §3: a G3InputError raised inside a worker reaches the user as bad input (exit 2, one line naming
    the file), and the run folder this command created is gone; an earlier run --force would replace is kept."""
    monkeypatch.setenv("G3_FAULT", "1:1:input")
    run = tmp_path / "run"
    r = train(plan, run, "--epochs", "3")
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "worker-00000/rows.npy: a row of the shard is out of range" in r.output
    assert not run.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".run")]
    monkeypatch.delenv("G3_FAULT")
    assert train(plan, run, "--epochs", "1").exit_code == 0
    before = (run / "model.pt").read_bytes()
    monkeypatch.setenv("G3_FAULT", "0:0:input")
    r = train(plan, run, "--epochs", "2", "--force")
    assert r.exit_code == 2 and (run / "model.pt").read_bytes() == before, r.output
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run")]


def test_artifacts_made_from_relative_paths_record_absolute_ones_and_a_moved_run_still_evaluates(
    tiny_store, tmp_path, monkeypatch
):
    """plan.json and run.json record where their inputs are as absolute paths (beside the relative ones), not
    relative to the folder the command ran in: a run moved elsewhere still finds its plan, partition and store."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_store, "s.g3")
    for args in (
        ["partition", "s.g3", "--workers", "1", "-o", "p"],
        ["plan", "p", "--hidden", "4", "-o", "P"],
        ["train", "P", "--epochs", "1", "--threads", "1", "-o", "R"],
    ):
        r = invoke(args)
        assert r.exit_code == 0, r.output
    plan, run = json.loads(Path("P/plan.json").read_text()), json.loads(Path("R/run.json").read_text())
    for ref in (plan["store"], plan["partition"], run["plan"], run["partition"], run["store"]):
        assert Path(ref["path"]).is_absolute(), ref
    (tmp_path / "elsewhere").mkdir()
    shutil.move("R", tmp_path / "elsewhere" / "R")
    monkeypatch.chdir(tmp_path / "elsewhere")
    r = invoke(["eval", "R"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("after_epochs", [0, 2])
def test_ctrl_c_during_a_force_rerun_keeps_the_earlier_run_and_leaves_nothing_else(
    plan, tmp_path, after_epochs
):
    """Ctrl-C at a terminal (SIGINT to the whole process group: launcher, fork server, workers) while
    `--force` retrains over a run — at its start or mid-training: one line saying the earlier run is kept, no
    traceback from the fork server, and no `.RUN.tmp-…` folder left beside it."""
    run = tmp_path / "run"
    assert train(plan, run, "--epochs", "1").exit_code == 0
    before = sorted(p.name for p in run.iterdir())
    cmd = [
        sys.executable,
        "-m",
        "g3cli.main",
        "train",
        str(plan),
        "-o",
        str(run),
        *COMMON,
        "--epochs",
        "100000",
        "--force",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        t0 = time.monotonic()  # the attempt's folder made (workers starting), or some epochs trained in it
        while not any(
            after_epochs == 0 or ((p / "metrics.jsonl").is_file() and len(epochs_recorded(p)) >= after_epochs)
            for p in tmp_path.glob(".run.tmp-*")
        ):
            assert proc.poll() is None and time.monotonic() - t0 < 120, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == f"g3: interrupted: the earlier run in {run} is kept", err
    assert "Traceback" not in err, err
    time.sleep(1.5)  # a worker that started late would notice its launcher gone within a heartbeat
    assert not list(tmp_path.glob(".run.tmp-*")) and sorted(p.name for p in run.iterdir()) == before


def test_ctrl_c_while_python_executes_a_string_exits_130_under_python_m(tmp_path):
    """A Ctrl-C that lands while Python executes a string (a dataclass or namedtuple built during an import)
    is answered like any other — one line, exit 130 — also under `python -m g3cli.main`, where CPython would
    otherwise kill the process with SIGINT after it exited (returncode -2; seen in CI)."""
    (tmp_path / "interrupt_in_exec.py").write_text(
        "import runpy, sys\n"
        "import g3cli.info_cmd\n"
        "g3cli.info_cmd.summarize = lambda *a, **k: exec('raise KeyboardInterrupt')\n"
        "sys.argv = ['g3', 'info', 'anything']\n"
        "runpy.run_module('g3cli.main', run_name='__main__', alter_sys=True)\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "interrupt_in_exec"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert (r.returncode, r.stderr.strip()) == (130, "g3: interrupted"), (r.returncode, r.stderr)


def test_a_long_tmpdir_does_not_stop_the_workers_starting(plan, tmp_path):
    """Under a TMPDIR too long for the fork server's socket path (107 bytes at most; a job scheduler's per-job
    folder can be longer), `g3 train` still starts its workers: the socket's folder goes under /tmp."""
    tmpdir = tmp_path / ("scheduler-job-folder-" + "x" * 60)
    tmpdir.mkdir()
    run = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-m", "g3cli.main", "train", str(plan), "-o", str(run), *COMMON, "--epochs", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )
    assert r.returncode == 0 and (run / "model.pt").is_file(), r.stderr
    assert len(str(tmpdir)) + 34 > 107  # what the check is about: the default folder would not fit


def test_train_and_eval_refuse_workers_that_cannot_fit_before_starting_them(plan, tmp_path):
    """In a memory cgroup smaller than this process, the fork server and the workers take at least, `g3 train`
    and `g3 eval` refuse in one line naming the floor, exit 2, before any worker starts: no run folder, no
    eval.json, nothing killed."""
    from helpers import memory_cgroup

    run = tmp_path / "run"
    assert train(plan, run, "--epochs", "1").exit_code == 0
    with memory_cgroup(400 << 20) as procs:
        proc = _launch(plan, tmp_path / "small", "--epochs", "1", cgroup=procs)
        _, err = proc.communicate(timeout=300)
        ev = subprocess.run(
            [sys.executable, "-m", "g3cli.main", "eval", str(run)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=lambda: procs.write_text(str(os.getpid())),
        )
    for rc, stderr in ((proc.returncode, err), (ev.returncode, ev.stderr)):
        lines = stderr.strip().splitlines()
        assert rc == 2 and len(lines) == 1, stderr
        assert lines[0].startswith("g3: error: running 2 worker processes on this machine needs at least"), (
            lines
        )
        assert "the fork server" in lines[0] and "the memory cgroup's limit (400.0 MiB)" in lines[0], lines
    assert not (tmp_path / "small").exists() and not list(tmp_path.glob(".small*"))
    assert not (run / "eval.json").exists()


def test_a_worker_the_oom_killer_ends_is_named_as_out_of_memory(plan, tmp_path):
    """A worker that takes more memory than its cgroup allows is ended by the kernel (SIGKILL): the one line says
    it ran out of memory, the limit it had and what lowers a worker's memory — not a bare SIGKILL."""
    from helpers import memory_cgroup

    with memory_cgroup(1 << 30) as procs:
        proc = _launch(plan, tmp_path / "run", "--epochs", "2", env={"G3_FAULT": "1:0:hog"}, cgroup=procs)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("g3: error: worker 1 ran out of memory"), err
    assert "the memory cgroup's limit: 1.0 GiB" in lines[0] and "--stream-bins on" in lines[0], lines[0]
