"""`g3 train`: distributed full-graph (or mini-batch) training of a plan with the plan's strategy.

Entry point: :func:`run_train`. With ``--workers K`` it spawns K local processes (rendezvous on loopback);
under ``torchrun`` (RANK/WORLD_SIZE/MASTER_ADDR set) it runs the one rank of this process.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from stages.bundle import host_folders
from stages.common.artifact_json import reference, resolve_reference
from stages.common.atomic import (
    check_replaceable,
    check_target,
    fsync_tree,
    publish_dir,
    remove_earlier_attempts,
    target_lock,
    write_json_atomic,
)
from stages.common.cost import stage_cost
from stages.common.errors import G3InputError, G3RuntimeError
from stages.common.model_spec import bins_device
from stages.common.partition_artifact import load_assignment, load_partition_meta, partition_digest
from stages.common.run_artifact import RUN_SCHEMA, RUN_VERSION, load_run_meta
from stages.kits.runtime.config import check_runtime
from stages.kits.runtime.launch.launchers import make_launcher
from stages.kits.runtime.launch.processes import run_guarded, under_torchrun
from stages.kits.runtime.profile import PROFILE_SCHEMA
from stages.strategies.registry import check_knobs, config_record, load_plan, resolve_knobs
from stages.train.config import TrainConfig
from stages.train.disk import check_run_space


def check_plan(plan: Path, cfg, workers: int | None = None) -> dict:
    """The plan's metadata, after checking it matches its partition, the worker count and the runtime settings
    (the strategy knobs of ``cfg`` are resolved against the plan's strategy)."""
    meta, spec = load_plan(plan)
    part = Path(meta["partition"]["path"])
    load_partition_meta(part)
    if partition_digest(part) != meta["partition"]["digest"]:
        raise G3InputError(
            f"the plan does not match its partition {part} (partition.json changed since `g3 plan`); re-run g3 plan",
            path=plan,
        )
    _check_store_unchanged(part)
    k = int(meta["num_workers"])
    if workers is not None and workers != k:
        raise G3InputError(f"the plan is for {k} workers, not {workers}; re-run g3 partition/plan", path=plan)
    if getattr(cfg, "device", "cpu") == "cuda" and bins_device(meta["strategy"].get("options")) == "cpu":
        # its bins count no per-arc message rows, which CUDA's kernels make: they could overflow the GPU
        raise G3InputError(
            "the plan's bins were sized for the CPU (g3 plan --bins-for cpu) and could overflow "
            "the GPU under --device cuda; re-plan with --bins-for cuda",
            path=plan,
        )
    check_knobs(cfg.knobs)  # a value no strategy takes is named as such before the plan's strategy weighs it
    resolve_knobs(cfg.knobs, spec)
    if getattr(cfg, "profile", None) and not spec.profiles:
        raise G3InputError(
            f"--profile fits g3's per-bin rates from the trace; the {spec.name} strategy has no "
            "bins (profile a g3 plan of the same model and store for `g3 simulate`)"
        )
    check_runtime(cfg)
    classes = (meta.get("store") or {}).get("num_classes")
    if getattr(cfg, "metric", "accuracy") == "rocauc" and classes is not None and int(classes) != 2:
        raise G3InputError(f"--metric rocauc needs a binary task: the store has {classes} classes", path=plan)
    return meta


def _check_store_unchanged(part: Path) -> None:
    """Where the partition's store is at hand, it is the one the partition was made from (its CSR checksums)."""
    from stages.common.store import GraphStore

    ref = load_partition_meta(part)["store"]
    if not ref.get("path") or not Path(ref["path"]).is_dir():
        return  # another host, or a moved run: the shards are self-contained
    now = GraphStore.open(ref["path"]).meta.get("checksums", {})
    for name, digest in (ref.get("checksums") or {}).items():
        if digest and now.get(name) and now[name] != digest:
            raise G3InputError(
                f"the store's {name} changed since `g3 partition` made this partition (store "
                f"{ref['path']}); re-run g3 partition and g3 plan",
                path=part,
            )


def check_worker_files(plan: Path, meta: dict) -> None:
    """Every worker's plan and shard files are there with the shapes and dtypes their JSONs record: a damaged
    or partly copied folder is one line before any process starts (headers only, no data read)."""
    from stages.common.npy import load_checked
    from stages.common.partition_artifact import open_shard
    from stages.common.plan_artifact import WorkerPlan

    part, k = Path(meta["partition"]["path"]), int(meta["num_workers"])
    load_assignment(part)  # small (4 bytes a node): verified whole here
    for r in range(k):
        wp, shard = WorkerPlan(plan, r), open_shard(part, r, k)
        for name in wp.meta.get("files") or {}:
            load_checked(wp.path, name, wp.meta["files"], verify=False)  # headers: workers hash their own
        for name in shard.manifest:
            load_checked(shard.path, name, shard.manifest, verify=False)


def _check_training(cfg: TrainConfig, plan: Path) -> None:
    cfg.check()
    if cfg.eval_every < 0 or cfg.checkpoint_every < 0:
        raise G3InputError("--eval-every and --checkpoint-every must be >= 0 (0: never)")
    from stages.train.loggers import check_loggers

    check_loggers(cfg.logger)
    if cfg.profile:
        target = Path(cfg.profile)
        if target.is_dir():
            raise G3InputError("--profile names a folder; give the PROFILE.json file to write", path=target)
        for ancestor in (target.parent, *target.parent.parents):  # the first that exists must be a folder
            if ancestor.exists():
                if not ancestor.is_dir():
                    raise G3InputError(
                        f"--profile: {ancestor} is a file, not a folder: cannot write the profile there",
                        path=target,
                    )
                break
        check_replaceable(target, None, (plan,))  # never the plan or a file in it
        if target.is_file() and not _is_profile(target):
            raise G3InputError(
                "--profile: exists and is not a profile g3 train wrote; it replaces only an earlier "
                "PROFILE.json (remove the file yourself, or name another)",
                path=target,
            )


def _is_profile(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("schema") == PROFILE_SCHEMA
    except (OSError, ValueError, AttributeError):
        return False


# settings that change what a run computes: a resumed run must keep them (run.json's config)
RESUME_SAME = ("seed", "lr", "weight_decay", "dropout", "dtype")


def run_train(plan: str | Path, cfg: TrainConfig, out: str | Path | None = None, force: bool = False) -> dict:
    """Entry point of `g3 train`; returns run.json.

    The run folder is locked while the run lasts (a second `g3 train` into it is refused). A new run is written
    in place, so its metrics can be watched; with ``force`` over an existing run it is written beside it and
    replaces it only once it has finished, so a failed or interrupted attempt never costs the old run. A
    resumed run must keep the settings that change the computation and have a checkpoint to start from."""
    t_stage = time.perf_counter()
    plan = Path(plan)
    run_dir = Path(out) if out else plan.parent / f"{plan.name}.run"
    cfg = with_cadences(cfg, run_dir)
    meta = check_plan(plan, cfg, cfg.workers)
    _check_training(cfg, plan)
    world = int(meta["num_workers"])
    if under_torchrun():
        if cfg.emulate_link:
            raise G3InputError("--emulate-link starts its own hosts: run it without torchrun")
        return _run_torchrun(plan, run_dir, cfg, meta, force)
    launcher = make_launcher(cfg, world, host_folders=host_folders)
    if meta.get("bundle"):
        raise G3InputError(
            f"this plan is node {meta['bundle']['node']} of a bundle: run it with torchrun on its "
            "host (its RUN.md), or train the original plan",
            path=plan,
        )
    check_worker_files(plan, meta)
    if not cfg.resume:
        check_target(run_dir, force, "run", (plan,))
    disk_estimate = check_run_space(run_dir, meta, cfg)  # before the lock: nothing written when refused
    with target_lock(run_dir, "training into"):
        work = _work_folder(run_dir, plan, cfg, force)
        try:
            info = _launch(launcher, world, work, run_dir, plan, meta, cfg, t_stage, disk_estimate)
            if work != run_dir:
                fsync_tree(work)
                publish_dir(work, run_dir, force=True)
        except KeyboardInterrupt as exc:  # whenever it comes: a --force attempt leaves nothing it cannot use
            if work != run_dir and not _has_checkpoint(work):
                shutil.rmtree(work, ignore_errors=True)  # nothing to resume from; the earlier run stays
                raise KeyboardInterrupt(f"the earlier run in {run_dir} is kept") from None
            if work != run_dir:
                raise KeyboardInterrupt(
                    f"the earlier run in {run_dir} is kept; this attempt, with its checkpoints, is in {work}"
                ) from exc
            raise
        except (
            OSError
        ) as exc:  # the disk refused (full, read-only): named by the run's path, nothing to resume lost
            if not cfg.resume and not _has_checkpoint(work):
                shutil.rmtree(work, ignore_errors=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise OSError(exc.errno, os.strerror(exc.errno), str(run_dir)) from None
            raise
    return info


def _work_folder(run_dir: Path, plan: Path, cfg: TrainConfig, force: bool) -> Path:
    """Where the run is written: the run folder itself (a new run, or one resumed), or with ``force`` over an
    existing run a folder beside it, which replaces it once the new run has finished."""
    if cfg.resume:
        check_resume(run_dir, plan, cfg)
        return run_dir
    if run_dir.exists():  # --force: the old run stays until the new one has finished
        check_target(run_dir, force, "run", (plan,))
        remove_earlier_attempts(run_dir)  # a failed attempt's folder stays for its logs until the next one
        return Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.tmp-", dir=run_dir.parent))
    run_dir.mkdir(parents=True)
    return run_dir


def _launch(
    launcher,
    world: int,
    work: Path,
    run_dir: Path,
    plan: Path,
    meta: dict,
    cfg,
    t_stage: float,
    disk_estimate: int = 0,
) -> dict:
    """The workers' run, its run.json written in ``work`` as it starts and as it ends (completed, failed or
    interrupted); returns the completed run.json. ``disk_estimate``: what the run folder's check estimated the
    run writes there (``cost.disk_estimate_bytes``)."""
    from stages.train.loop import train_rank

    where = launcher.describe(world)
    _write_run_json(work, plan, meta, cfg, status="running", path=run_dir, launcher=where)
    t0 = time.perf_counter()
    try:
        with _sigterm_as_interrupt():
            measured = launcher.run(train_rank, world, work, "", plan, cfg)
    except KeyboardInterrupt:
        _write_run_json(work, plan, meta, cfg, status="interrupted", path=run_dir)
        raise
    except (G3RuntimeError, G3InputError) as exc:
        if isinstance(exc, G3InputError) and not cfg.resume and not _has_checkpoint(work):
            # bad input found by a worker, or a full disk, with nothing to resume from: nothing is left at the
            # target (this attempt's folder goes; an earlier run --force would replace stays); its log went too
            shutil.rmtree(work, ignore_errors=True)
            raise G3InputError(re.sub(r" \(log: [^)]*\)$", "", str(exc))) from None
        with contextlib.suppress(OSError):  # a full disk: readers see the free lock and say "interrupted"
            _write_run_json(work, plan, meta, cfg, status="failed", error=str(exc), path=run_dir)
        if work != run_dir:
            raise type(exc)(
                f"{exc}; the earlier run in {run_dir} is kept, this attempt is in {work}"
            ) from None
        raise
    return _write_run_json(
        work,
        plan,
        meta,
        cfg,
        status="completed",
        seconds=time.perf_counter() - t0,
        path=run_dir,
        launcher={**where, **measured},
        cost={
            **stage_cost(
                t_stage,
                _workers_peak(work, "peak_memory_bytes"),
                work,
                _workers_peak(work, "scratch_peak_bytes"),
            ),
            "disk_estimate_bytes": disk_estimate,
        },
    )


def _workers_peak(run_dir: Path, field: str) -> int:
    """A peak of the workers summed (each worker's last epoch record: its high-water mark), 0 if unknown."""
    from stages.common.run_artifact import read_metrics

    try:
        last = read_metrics(run_dir, need=("epoch",))[-1]
    except (G3InputError, IndexError):
        return 0
    return sum(int(w.get(field) or 0) for w in last.get("workers") or [] if isinstance(w, dict))


def _has_checkpoint(run_dir: Path) -> bool:
    from stages.train.checkpoint import latest_checkpoint

    return latest_checkpoint(run_dir) is not None


CADENCE_DEFAULTS = {"eval_every": 1, "checkpoint_every": 0}


def with_cadences(cfg: TrainConfig, run_dir: Path) -> TrainConfig:
    """``cfg`` with its evaluation and checkpoint cadences set: those given, else — when resuming — the run's
    own (a resumed run keeps checkpointing as it did, so a second crash does not lose what followed the first),
    else the defaults (evaluate every epoch, no checkpoints)."""
    import dataclasses

    previous = {}
    if cfg.resume and (run_dir / "run.json").is_file():
        try:
            previous = load_run_meta(run_dir).get("config") or {}
        except G3InputError:
            previous = {}  # check_resume names what is wrong with it
    chosen = {}
    for name, default in CADENCE_DEFAULTS.items():
        given = getattr(cfg, name)
        kept = previous.get(name) if isinstance(previous.get(name), int) else None
        chosen[name] = given if given is not None else (kept if kept is not None else default)
    return dataclasses.replace(cfg, **chosen)


def check_resume(run_dir: Path, plan: Path, cfg: TrainConfig) -> int:
    """What `--resume` needs, checked before anything starts; returns the epoch it resumes at. Refused: no run
    or no checkpoint there, another plan, a setting that changes the computation, nothing left to train."""
    from stages.train.checkpoint import check_checkpoints, checkpoint_epoch, latest_checkpoint

    if not (run_dir / "run.json").is_file():
        raise G3InputError("--resume: no run to resume here (no run.json)", path=run_dir)
    prev = load_run_meta(run_dir)
    trained = resolve_reference(prev["plan"], run_dir, "plan.json").resolve()
    if trained != plan.resolve():
        raise G3InputError(
            f"--resume: the run was trained from the plan {trained}, not {plan.resolve()}", path=run_dir
        )
    old = prev.get("config") or {}
    for name in RESUME_SAME:
        if name in old and old[name] != getattr(cfg, name):
            raise G3InputError(
                f"--resume: --{name.replace('_', '-')} {getattr(cfg, name)} differs from the run's "
                f"{old[name]} (run.json); a resumed run keeps the settings that change what it "
                "computes",
                path=run_dir,
            )
    check_checkpoints(run_dir)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise G3InputError(
            "--resume: the run has no checkpoint to resume from (train with --checkpoint-every N)",
            path=run_dir,
        )
    start = checkpoint_epoch(ckpt) + 1
    if cfg.epochs <= start:
        done = "completed" if prev.get("status") == "completed" else "reached"
        raise G3InputError(
            f"--resume: nothing to train: the run {done} epoch {start - 1} and --epochs is "
            f"{cfg.epochs} (give more --epochs to continue it)",
            path=run_dir,
        )
    return start


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM or SIGHUP (the terminal closed) to the launcher is handled as an interrupt: workers stopped,
    run.json `interrupted`, the run resumable. A run meant to outlive its terminal is started under `nohup`
    (SIGHUP then ignored, which Python keeps) or a session manager."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():  # only there can Python take signals
        yield
        return
    stopping = [signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        stopping.append(signal.SIGHUP)
    previous = {sig: signal.signal(sig, handler) for sig in stopping}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def torchrun_rank(meta: dict, plan: Path) -> int:
    """This process's rank under torchrun: ``RANK``, or for a node folder of a bundle ``ranks[LOCAL_RANK]`` of
    the folder — the rendezvous hands out agent ranks in the order the hosts join, so only the folder knows
    which shards are on this host."""
    bundle = meta.get("bundle")
    if not bundle:
        return int(os.environ["RANK"])
    local, local_world = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 0))
    if local_world != len(bundle["ranks"]):
        raise G3InputError(
            f"torchrun started {local_world} processes on this host, but this node folder holds "
            f"the {len(bundle['ranks'])} ranks {bundle['ranks']} (--nproc-per-node "
            f"{len(bundle['ranks'])})",
            path=plan,
        )
    return int(bundle["ranks"][local])


def check_torchrun_start(run_dir: Path, plan: Path, meta: dict, cfg: TrainConfig, force: bool) -> None:
    """What a torchrun rank checks in its host's run folder before it joins the group. The first attempt of a
    new run needs a folder without an earlier run's results; `--resume` a checkpoint on this host (and, where
    run.json is, the same plan and settings); a restarted attempt of a job whose first attempt passed these
    checks here resumes whatever is there. Checked before the group forms, so nothing written after it
    (init.pt, checkpoints, metrics) can come from this run; so is the disk (:func:`check_run_space`: what this
    host's folder takes). Passing leaves the job's mark in the folder."""
    from stages.train.checkpoint import latest_checkpoint

    if force:
        raise G3InputError(
            "--force is not available under torchrun (the hosts cannot agree to replace their "
            "run folders): remove the run folder on every host, or give another -o",
            path=run_dir,
        )
    mark = run_dir / "logs" / f"torchrun-{os.environ.get('TORCHELASTIC_RUN_ID', 'none')}.started"
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) and mark.is_file():
        return  # a restart of this job: the loop resumes from the newest checkpoint every host has
    _check_torchrun_folder(run_dir, plan, cfg, latest_checkpoint)
    check_run_space(run_dir, meta, cfg, first_host=os.environ.get("GROUP_RANK", "0") == "0")
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.touch()


def _check_torchrun_folder(run_dir: Path, plan: Path, cfg: TrainConfig, latest_checkpoint) -> None:
    if cfg.resume:
        if (run_dir / "run.json").is_file():
            check_resume(run_dir, plan, cfg)
        elif latest_checkpoint(run_dir) is None:
            raise G3InputError(
                "--resume: this host's run folder has no checkpoint to resume from", path=run_dir
            )
        return
    earlier = [
        name for name in ("init.pt", "model.pt", "metrics.jsonl", "checkpoints") if (run_dir / name).exists()
    ]
    if earlier:
        raise G3InputError(
            f"holds an earlier run ({', '.join(earlier)}): give --resume to continue it, or remove "
            "it on every host first",
            path=run_dir,
        )


def _run_torchrun(plan: Path, run_dir: Path, cfg: TrainConfig, meta: dict, force: bool = False) -> dict:
    """One rank of a torchrun job. Every host keeps its own run folder (its ranks' logs, the checkpoints);
    rank 0's host also run.json, metrics.jsonl and model.pt. A restarted worker group (``--max-restarts``)
    resumes from the newest checkpoint every host has (``stages/train/loop.py``)."""
    from stages.train.loop import train_rank

    size = int(os.environ["WORLD_SIZE"])
    world = int(meta["num_workers"])
    if size != world:
        raise G3InputError(f"torchrun started {size} ranks but the plan is for {world} workers", path=plan)
    rank = torchrun_rank(meta, plan)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    check_torchrun_start(run_dir, plan, meta, cfg, force)
    run_dir.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        _write_run_json(run_dir, plan, meta, cfg, status="running", restart=restart)
    t0 = time.perf_counter()
    try:
        run_guarded(train_rank, rank, world, run_dir, "", "env://", str(plan), str(run_dir), cfg)
    except Exception as exc:
        if rank == 0:
            _write_run_json(run_dir, plan, meta, cfg, status="failed", error=str(exc))
        raise G3RuntimeError(f"rank {rank} failed: {exc}") from None
    info = {"rank": rank, "path": str(run_dir), "status": "completed"}
    if rank == 0:
        info = _write_run_json(run_dir, plan, meta, cfg, status="completed", seconds=time.perf_counter() - t0)
        info["rank"] = 0
    return info


def _write_run_json(
    run_dir: Path, plan: Path, meta: dict, cfg: TrainConfig, status: str, path: Path | None = None, **extra
) -> dict:
    """run.json in ``run_dir`` (``path``: where the run is published, when it is built elsewhere first)."""
    previous = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").is_file() else {}
    launcher = extra.pop("launcher", None) or previous.get("launcher")  # where the workers ran (launchers.py)
    info = {
        "schema": RUN_SCHEMA,
        "path": str(path or run_dir),
        "schema_version": RUN_VERSION,
        "plan": {
            **reference(plan, path or run_dir),
            "model": meta["config"],
            "num_workers": meta["num_workers"],
        },
        "strategy": meta["strategy"],
        "partition": meta["partition"],
        "store": meta["store"],
        "config": config_record(cfg),
        "status": status,
        "history": previous.get("history", [])
        + [{"status": status, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra}],
        **extra,
    }
    if launcher:
        info["launcher"] = launcher
    info["provenance"] = (
        previous.get("provenance") if status != "running" and previous.get("provenance") else provenance()
    )
    write_json_atomic(run_dir / "run.json", info, seal=True)
    return info


def _git_head(repo: Path) -> str | None:
    """The commit g3's checkout is at, read from its .git files (no git process: a worker under torchrun calls
    this, and a subprocess there costs more than the answer is worth); None outside a git checkout."""
    git = repo / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head  # a detached head is the commit itself
        ref = head[5:]
        if (git / ref).is_file():
            return (git / ref).read_text().strip()
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0]
    except OSError:
        return None
    return None


def provenance() -> dict:
    """What produced a run, for whoever reads it later: g3's version (and git commit when g3 runs from a
    checkout), the versions of the libraries that compute, the command line, the host and the time."""
    import platform
    import sys
    from importlib.metadata import PackageNotFoundError, version

    def package(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {
        "g3": package("g3"),
        "git_commit": _git_head(Path(__file__).resolve().parents[2]),
        "python": platform.python_version(),
        "torch": package("torch"),
        "numba": package("numba"),
        "numpy": package("numpy"),
        "command": sys.argv,
        "host": platform.node(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
