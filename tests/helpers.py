"""Set-up the test modules share: `g3` run in-process, its options written as keywords, the partition → plan →
train steps with the training settings the strategy tests share, and a run's files read back.

Only set-up: what a test checks stays in the test, and the references (tests/reference*.py) import nothing here.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from g3cli.main import cli

# the training settings of the strategy tests (each module keeps its own epoch count)
LR, DROPOUT, SEED = 0.02, 0.3, 7


def invoke(args: list):
    """`g3 <args>` in this process: the click result (exit code, output)."""
    from click.testing import CliRunner

    return CliRunner().invoke(cli, [str(a) for a in args])


def ok(args: list):
    """`g3 <args>`, which must succeed: the click result."""
    r = invoke(args)
    assert r.exit_code == 0, r.output
    return r


def flags(**options) -> list[str]:
    """`--name value` for each keyword in order (underscores as dashes); None leaves the option out."""
    out: list[str] = []
    for name, value in options.items():
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    return out


def train_flags(workers, epochs, dtype: str | None = "float64") -> list[str]:
    """The `g3 train` options of the strategy tests: LR, DROPOUT, SEED, no evaluation, one thread per worker
    (dtype None: the default's)."""
    return flags(
        epochs=epochs,
        lr=LR,
        dropout=DROPOUT,
        seed=SEED,
        workers=workers,
        dtype=dtype,
        eval_every=0,
        threads=1,
    )


def g3_partition(store: Path, out: Path, workers, *extra, **options) -> Path:
    """`g3 partition STORE --workers K [options] -o OUT`."""
    ok(["partition", store, "--workers", workers, *flags(**options), *extra, "-o", out])
    return out


def g3_plan(part: Path, out: Path, *extra, **options) -> Path:
    """`g3 plan PART [options] -o OUT`."""
    ok(["plan", part, *flags(**options), *extra, "-o", out])
    return out


def g3_train(plan_dir: Path, out: Path, epochs, *extra, workers=None, dtype: str | None = "float64") -> Path:
    """`g3 train PLAN` with `train_flags` (on the plan's worker count unless WORKERS is given) and the extra
    options, into OUT."""
    if workers is None:
        workers = json.loads((plan_dir / "plan.json").read_text())["num_workers"]
    ok(["train", plan_dir, *train_flags(workers, epochs, dtype), "-o", out, *extra])
    return out


def cut_and_resume(
    plan_dir: Path,
    tmp: Path,
    epochs: int,
    cut_at: int,
    *options,
    at_cut: Callable[[Path], None] | None = None,
) -> tuple[Path, Path]:
    """`g3 train PLAN [options]` for EPOCHS into TMP/full, and stopped after CUT_AT epochs (AT_CUT called on its
    folder then) and resumed to EPOCHS into TMP/cut: the two run folders."""
    full, cut = tmp / "full", tmp / "cut"
    ok(["train", plan_dir, "--epochs", epochs, "-o", full, *options])
    ok(["train", plan_dir, "--epochs", cut_at, "-o", cut, *options])
    if at_cut is not None:
        at_cut(cut)
    ok(["train", plan_dir, "--epochs", epochs, "--resume", "-o", cut, *options])
    return full, cut


def minibatch_run(
    part: Path,
    tmp: Path,
    strategy: str,
    model: str = "sage",
    *,
    epochs: int,
    options: tuple[str, ...] = (),
    layers: int | None = None,
    hidden: int = 6,
    fanouts: str = "3,2",
    batch: int = 40,
    order: str = "global",
    train: tuple[str, ...] = (),
    plan_name: str | None = None,
    out: str = "run",
) -> Path:
    """A mini-batch strategy planned into TMP/PLAN_NAME (TMP/plan-OUT by default; an existing plan is reused),
    in ORDER unless OPTIONS name a --batch-order, and trained with `train_flags` into TMP/OUT."""
    plan_dir = tmp / (plan_name or f"plan-{out}")
    if not plan_dir.exists():
        order_flag = flags(batch_order=None if "--batch-order" in options else order)
        sampling = flags(
            strategy=strategy, model=model, layers=layers, hidden=hidden, fanouts=fanouts, batch_size=batch
        )
        g3_plan(part, plan_dir, *sampling, *order_flag, *options)
    return g3_train(plan_dir, tmp / out, epochs, *train)


def weights(run: Path) -> tuple[dict, dict]:
    """A run's initial and final weights."""
    return torch.load(run / "init.pt", weights_only=True), torch.load(run / "model.pt", weights_only=True)


def records(run: Path) -> list[dict]:
    """A run's metrics.jsonl, a record per epoch."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# the graph of the `store` fixture (tests/conftest.py)
STORE_SPEC = dict(nodes=240, avg_degree=6, feat_dim=10, num_classes=4, communities=6, seed=5)


def synthetic_store(out: Path, **spec) -> Path:
    """A synthetic graph's store (`g3 ingest --synthetic` with these parameters), ingested with the spec's seed."""
    from stages.ingest.build import IngestOptions, build_store
    from stages.ingest.synthetic import resolve_spec, synthetic_source

    build_store(synthetic_source(resolve_spec(None, **spec)), out, IngestOptions(seed=spec["seed"]))
    return out


def advise(store: Path, root: Path, name: str, **options) -> dict:
    """`g3 advise` through its stage (run_advise) into ROOT/NAME, with the plans and cache under ROOT that every
    call there shares, calibrated on the local link; OPTIONS are AdviseOptions' fields."""
    from stages.advise import AdviseOptions, run_advise

    common = dict(plans=str(root / "plans"), cache=str(root / "cache"), calibrate_link="local")
    return run_advise(store, AdviseOptions(**common, **options), out=root / name)


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int):
    """A memory cgroup (v2, or v1's memory controller) below this process's, limited to ``limit_bytes``: yields
    its ``cgroup.procs`` file (write a pid there to move that process in), removed after; skips the test with
    the reason where one cannot be made (not root, no writable cgroup file system)."""
    import os

    import pytest

    root = Path("/sys/fs/cgroup")
    v2 = (root / "cgroup.controllers").is_file()
    own = ""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (v2 and controllers == "") or (not v2 and "memory" in controllers.split(",")):
            own = path.lstrip("/")
    base = (root if v2 else root / "memory") / own
    folder = base / f"g3-test-{os.getpid()}"
    try:
        folder.mkdir()
        (folder / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(limit_bytes))
        if not v2 and (folder / "memory.memsw.limit_in_bytes").exists():
            (folder / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
    except OSError as exc:
        if folder.is_dir():
            folder.rmdir()
        pytest.skip(f"no memory cgroup can be made here ({base}: {exc.strerror})")
    try:
        yield folder / "cgroup.procs"
    finally:
        for _ in range(100):  # its processes have ended or are ending: an empty cgroup can be removed
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)


SCRATCH: list[Path] = []


def short_scratch() -> Path:
    """A folder for the TMPDIR of a process the test may kill (a launcher killed with SIGKILL cannot remove its
    fork server's socket folder): under /tmp, with a path short enough for that socket (107 bytes at most; the
    test's own folder can be longer), removed after the test (conftest)."""
    path = Path(tempfile.mkdtemp(prefix="g3t-", dir="/tmp"))
    SCRATCH.append(path)
    return path


def remove_scratch() -> None:
    while SCRATCH:
        shutil.rmtree(SCRATCH.pop(), ignore_errors=True)
