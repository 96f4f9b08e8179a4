"""A full disk, for real (issue 41 §5): the output on a small tmpfs that the command fills. Every stage says so in
one line naming the path, exit 2; no temporary folder is left; an earlier artifact at the target is kept intact;
a run's status never stays ``running`` once its command has ended. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _g3(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "g3cli.main", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_line(r: subprocess.CompletedProcess, path: Path) -> None:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    # refused before any work (the command's floor: "the disk holding it has 0 B free") or when a write failed
    assert str(path) in lines[0], lines[0]
    assert "No space left on device" in lines[0] or "the disk holding it has" in lines[0], lines[0]


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(folder.rglob("*"))
        if f.is_file() and "logs" not in f.parts
    }


@contextlib.contextmanager
def tmpfs(mount: Path, size: str):
    """A tmpfs of ``size`` at ``mount`` (skipped without root or mount), unmounted afterwards whatever happens."""
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs at tmp_path/disk."""
    with tmpfs(tmp_path / "disk", "1m") as mount:
        yield mount


def _fill(disk: Path) -> None:
    """Leave the filesystem (almost) no room."""
    try:
        with open(disk / "fill", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass
    (disk / "fill").touch()


@pytest.mark.slow
def test_every_stage_on_a_full_disk(tiny_store, tmp_path, small_disk):
    work = tmp_path / "work"
    work.mkdir()
    assert _g3("partition", tiny_store, "-w", "2", "-o", work / "part", cwd=work).returncode == 0
    assert _g3("plan", work / "part", "--strategy", "g3", "-o", work / "plan", cwd=work).returncode == 0
    # a run that fits, then an evaluation and a retraining that do not
    assert _g3("train", work / "plan", "-o", small_disk / "run", "--epochs", "2", cwd=work).returncode == 0
    before = _digests(small_disk / "run")
    _fill(small_disk)
    for args, target in [
        (("plan", work / "part", "--strategy", "g3", "-o", small_disk / "plan"), small_disk / "plan"),
        (("bundle", work / "plan", "--nodes", "2", "-o", small_disk / "bundle"), small_disk / "bundle"),
        (("train", work / "plan", "-o", small_disk / "new", "--epochs", "2"), small_disk / "new"),
        (("train", work / "plan", "-o", small_disk / "run", "--epochs", "2", "--force"), small_disk / "run"),
        (("eval", small_disk / "run"), small_disk / "run"),
    ]:
        r = _g3(*args, cwd=work)
        _one_line(r, target)
        assert sorted(p.name for p in small_disk.iterdir()) == ["fill", "run"], (
            args
        )  # no temp, nothing half-made
        assert _digests(small_disk / "run") == before, args  # the earlier run intact
    r = _g3("info", small_disk / "run", cwd=work)
    assert r.returncode == 0 and "completed" in r.stdout


def test_a_run_whose_launcher_was_killed_reads_as_interrupted(tiny_store, tmp_path):
    """run.json still says "running" (the launcher got SIGKILL, or the disk was too full to record the end):
    nobody holds the run's lock, so every reader says "interrupted"."""
    import json

    from stages.common.atomic import write_json_atomic
    from stages.common.run_artifact import load_run_meta

    run = tmp_path / "run"
    run.mkdir()
    write_json_atomic(
        run / "run.json",
        {"schema": "g3.run", "schema_version": 1, "plan": {}, "config": {}, "status": "running"},
        seal=True,
    )
    assert json.loads((run / "run.json").read_text())["status"] == "running"
    assert load_run_meta(run)["status"] == "interrupted"


def test_eval_of_a_run_on_a_read_only_file_system_is_one_line(tiny_store, tmp_path):
    """A run on a read-only file system: `g3 eval` says it cannot write there (exit 2), not "worker 0 exited"."""
    with tmpfs(tmp_path / "ro", "64m") as mount:
        for args in (
            ["partition", str(tiny_store), "--workers", "1", "-o", str(mount / "p")],
            ["plan", str(mount / "p"), "--hidden", "4", "-o", str(mount / "P")],
            ["train", str(mount / "P"), "--epochs", "1", "--threads", "1", "-o", str(mount / "R")],
        ):
            assert _g3(*args, cwd=tmp_path).returncode == 0
        assert subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True).returncode == 0
        for extra in ([], ["--workers", "1"]):
            r = _g3("eval", str(mount / "R"), *extra, cwd=tmp_path)
            assert r.returncode == 2, r.stderr
            assert (
                r.stderr.strip() == f"g3: error: {mount / 'R'}: cannot write eval.json and the workers' logs "
                "here (Read-only file system)"
            ), r.stderr
