"""The run folder's disk is a budget `g3 train` and `g3 eval` check before any worker starts: each estimates the
least it writes there (weights, checkpoints with Adam's moments and the strategy's declared state, metrics, logs;
eval.json), refuses a disk with less free in one line naming the folder and the figures, writing nothing, and
records the estimate beside the bytes it wrote (``cost``)."""

from __future__ import annotations

import json
import os
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
from helpers import invoke, ok

from stages.train import TrainConfig

Usage = namedtuple("Usage", "total used free")


def _files_bytes(folder: Path, pattern: str = "*") -> int:
    """The bytes of the files under ``folder`` (their sizes, before the file system's blocks)."""
    return sum(f.lstat().st_size for f in folder.rglob(pattern) if f.is_file())


@pytest.fixture(scope="module")
def plans(tiny_store, tmp_path_factory):
    """2-worker plans of the tiny store (2000 nodes, 32 features, 8 classes), hidden 64, by strategy, each made
    once: sancus's ranks keep state of their own (the cached remote rows) in every checkpoint, p3's ranks their
    slices of layer 1's weights and those slices' Adam moments."""
    root, made = tmp_path_factory.mktemp("run-disk"), {}

    def get(strategy: str) -> Path:
        if strategy not in made:
            method = "p3" if strategy == "p3" else "g3"
            part = root / f"part-{method}"
            if not part.exists():
                ok(["partition", tiny_store, "--workers", "2", "--method", method, "-o", part])
            ok(["plan", part, "--strategy", strategy, "--hidden", "64", "-o", root / strategy])
            made[strategy] = root / strategy
        return made[strategy]

    return get


@pytest.fixture(scope="module")
def sancus_plan(plans) -> Path:
    return plans("sancus")


TRAIN = [
    "--epochs",
    "4",
    "--checkpoint-every",
    "1",
    "--threads",
    "1",
    "--dtype",
    "float64",
    "--eval-every",
    "0",
]


@pytest.mark.parametrize("strategy", ["sancus", "p3"])
def test_the_estimate_is_a_floor_of_what_a_run_writes_and_close_to_it(plans, tmp_path, strategy):
    """On a short run (4 epochs, a checkpoint each, hidden 64, float64): estimate <= the files' bytes <= the
    disk they take (cost.disk_bytes), and the files' bytes within 1.25x of the estimate (measured: sancus
    1.02x, p3 1.10x — the weights, Adam's moments and sancus's caches are most of it); `g3 eval`'s likewise a
    floor of what it wrote."""
    from stages.strategies.registry import load_plan
    from stages.train.disk import run_folder_bytes

    plan, run = plans(strategy), tmp_path / "run"
    ok(["train", plan, *TRAIN, "-o", run])
    cost = json.loads((run / "run.json").read_text())["cost"]
    estimate, written = cost["disk_estimate_bytes"], _files_bytes(run)
    assert 0 < estimate <= written <= cost["disk_bytes"], (estimate, written, cost)
    assert written <= 1.25 * estimate, (estimate, written)
    meta = load_plan(plan)[0]
    cfg = TrainConfig(epochs=4, checkpoint_every=1, dtype="float64")
    assert sum(run_folder_bytes(meta, cfg).values()) == estimate
    if strategy != "sancus":
        return
    # the strategy's declared state is a floor of its ranks' own files
    from stages.strategies.sancus.spec import checkpoint_state_bytes

    own = checkpoint_state_bytes(meta, 8)
    assert 0 < 4 * own <= _files_bytes(run / "checkpoints", "*.rank-*.pt")
    ok(["eval", run])
    cost = json.loads((run / "eval.json").read_text())["cost"]
    assert 0 < cost["disk_estimate_bytes"] <= _files_bytes(run, "eval*") <= cost["disk_bytes"], cost


def test_a_resume_counts_only_the_epochs_left(sancus_plan):
    from stages.strategies.registry import load_plan
    from stages.train.disk import checkpoints_written, run_folder_bytes

    meta = load_plan(sancus_plan)[0]
    cfg = TrainConfig(epochs=10, checkpoint_every=3)
    assert checkpoints_written(cfg, 0) == 3 and checkpoints_written(cfg, 6) == 1  # after epochs 2, 5, 8
    fresh, resumed = run_folder_bytes(meta, cfg, 0), run_folder_bytes(meta, cfg, 6)
    assert resumed["init.pt"] == 0 and resumed["checkpoints"] * 3 == fresh["checkpoints"]
    assert resumed["metrics"] * 10 == fresh["metrics"] * 4


def _small_disk(monkeypatch, under: Path, free: int) -> None:
    """The file system holding ``under`` reports ``free`` bytes free (others as they are)."""
    real = shutil.disk_usage

    def usage(path):
        found = real(path)
        if Path(os.path.realpath(path)).is_relative_to(os.path.realpath(under)):
            return Usage(found.total, found.used, free)
        return found

    monkeypatch.setattr(shutil, "disk_usage", usage)


def test_a_run_folder_too_small_is_refused_before_any_worker_writing_nothing(
    sancus_plan, tmp_path, monkeypatch
):
    _small_disk(monkeypatch, tmp_path, 100_000)
    run = tmp_path / "run"
    r = invoke(["train", sancus_plan, *TRAIN, "-o", run])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line, line
    assert str(run) in line and "97.7 KiB free" in line and "checkpoints" in line, line
    assert "--checkpoint-every" in line, line  # what to change
    assert list(tmp_path.iterdir()) == []  # no folder, no lock beside it
    # without checkpoints the same disk takes it
    ok(["train", sancus_plan, *TRAIN[:2], *TRAIN[4:], "-o", run])


def test_an_evaluation_whose_disk_is_full_is_refused_writing_nothing(sancus_plan, tmp_path, monkeypatch):
    run = tmp_path / "run"
    ok(["train", sancus_plan, "--epochs", "1", "--threads", "1", "--eval-every", "0", "-o", run])
    before = sorted(tmp_path.rglob("*"))
    _small_disk(monkeypatch, tmp_path, 100)
    r = invoke(["eval", run])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and str(run) in line and "100 B free" in line and "eval.json" in line, line
    assert sorted(tmp_path.rglob("*")) == before  # no eval.json, no log, no lock
    # nor do `g3 predict`'s logits (2000 nodes x 8 classes, float32) fit
    r = invoke(["predict", run, "-o", tmp_path / "p.npy"])
    assert r.exit_code == 2 and "62.6 KiB" in r.output and "logits" in r.output, r.output
    assert sorted(tmp_path.rglob("*")) == before


def test_a_torchrun_host_checks_its_own_folders_disk_before_joining(sancus_plan, tmp_path, monkeypatch):
    """Under torchrun each host keeps its own run folder: a rank refuses, before the group forms and writing
    nothing, a folder whose disk cannot take what its host writes there; a host other than rank 0's does not
    write init.pt, model.pt or the metrics, so only its checkpoints, run.json and logs count."""
    from stages.common.errors import G3InputError
    from stages.strategies.registry import load_plan
    from stages.train.disk import run_folder_bytes
    from stages.train.run import check_torchrun_start

    meta = load_plan(sancus_plan)[0]
    cfg = TrainConfig(epochs=4, checkpoint_every=1)
    parts = run_folder_bytes(meta, cfg)
    other_host = sum(n for name, n in parts.items() if name not in ("init.pt", "model.pt", "metrics"))
    assert 0 < other_host < sum(parts.values())
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    _small_disk(monkeypatch, tmp_path, other_host)
    run = tmp_path / "run"
    monkeypatch.setenv("GROUP_RANK", "0")
    with pytest.raises(G3InputError, match="free, and this training") as err:
        check_torchrun_start(run, sancus_plan, meta, cfg, force=False)
    assert "model.pt" in str(err.value)
    assert list(tmp_path.iterdir()) == []  # no mark, no folder
    monkeypatch.setenv("GROUP_RANK", "1")
    check_torchrun_start(run, sancus_plan, meta, cfg, force=False)  # exactly what this host writes
    assert (run / "logs" / "torchrun-job.started").is_file()
