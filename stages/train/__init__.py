"""`g3 train`: hybrid-parallel full-graph training on torch.distributed.

Entry point: :func:`run_train`. With ``--workers K`` it spawns K local processes (rendezvous on loopback);
under ``torchrun`` (RANK/WORLD_SIZE/MASTER_ADDR set) it runs the one rank of this process.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

from ..common.atomic import check_target, write_json_atomic
from ..common.errors import G3InputError, G3RuntimeError
from ..common.partition_artifact import load_partition_meta
from .config import PIPELINES, TrainConfig

RUN_SCHEMA = "g3.run"
RUN_VERSION = 1


def _free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def check_plan(plan: Path, cfg: TrainConfig) -> dict:
    """The plan's metadata, after checking it matches its partition and the requested worker count."""
    from ..plan import partition_digest
    from ..plan.artifact import load_plan_meta

    meta = load_plan_meta(plan)
    part = Path(meta["partition"]["path"])
    load_partition_meta(part)
    if partition_digest(part) != meta["partition"]["digest"]:
        raise G3InputError(
            f"the plan does not match its partition {part} (partition.json changed since `g3 plan`); re-run g3 plan",
            path=plan,
        )
    k = int(meta["num_workers"])
    if cfg.workers is not None and cfg.workers != k:
        raise G3InputError(f"the plan is for {k} workers, not {cfg.workers}; re-run g3 partition/plan", path=plan)
    if cfg.pipeline not in PIPELINES:
        raise G3InputError(f"--pipeline {cfg.pipeline} is not available (choose from {', '.join(PIPELINES)})")
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise G3InputError("--device cuda but CUDA is not available on this machine")
    if cfg.epochs < 1:
        raise G3InputError("--epochs must be >= 1")
    if not 0.0 <= cfg.dropout < 1.0:
        raise G3InputError("--dropout must be in [0, 1)")
    return meta


def run_train(plan: str | Path, cfg: TrainConfig, out: str | Path | None = None, force: bool = False) -> dict:
    """Entry point of `g3 train`; returns run.json."""
    plan = Path(plan)
    meta = check_plan(plan, cfg)
    world = int(meta["num_workers"])
    run_dir = Path(out) if out else plan.parent / f"{plan.name}.run"
    if under_torchrun():
        return _run_torchrun(plan, run_dir, cfg, meta, force)
    if cfg.resume:
        if not (run_dir / "run.json").is_file():
            raise G3InputError("--resume: no run to resume here (no run.json)", path=run_dir)
    else:
        check_target(run_dir, force)
        if run_dir.exists():
            import shutil

            shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    info = _write_run_json(run_dir, plan, meta, cfg, status="running")
    t0 = time.perf_counter()
    try:
        spawn_workers(world, plan, run_dir, cfg)
    except G3RuntimeError as exc:
        _write_run_json(run_dir, plan, meta, cfg, status="failed", error=str(exc))
        raise
    info = _write_run_json(run_dir, plan, meta, cfg, status="completed", seconds=time.perf_counter() - t0)
    return info


def _run_torchrun(plan: Path, run_dir: Path, cfg: TrainConfig, meta: dict, force: bool) -> dict:
    """One rank of a torchrun job; rank 0 keeps run.json (the run folder must be shared, or rank 0's)."""
    from .loop import run_rank

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    world = int(meta["num_workers"])
    if size != world:
        raise G3InputError(f"torchrun started {size} ranks but the plan is for {world} workers", path=plan)
    run_dir.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        _write_run_json(run_dir, plan, meta, cfg, status="running")
    t0 = time.perf_counter()
    try:
        run_rank(rank, world, str(plan), str(run_dir), cfg, "env://")
    except Exception as exc:
        if rank == 0:
            _write_run_json(run_dir, plan, meta, cfg, status="failed", error=str(exc))
        raise G3RuntimeError(f"rank {rank} failed: {exc}") from None
    info = {"rank": rank, "path": str(run_dir), "status": "completed"}
    if rank == 0:
        info = _write_run_json(run_dir, plan, meta, cfg, status="completed", seconds=time.perf_counter() - t0)
        info["rank"] = 0
    return info


def spawn_workers(world: int, plan: Path, run_dir: Path, cfg: TrainConfig) -> None:
    """Start ``world`` local processes; if any fails, the others are stopped and the failure is reported."""
    import torch.multiprocessing as mp

    port = cfg.master_port or _free_port(cfg.master_addr)
    init_method = f"tcp://{cfg.master_addr}:{port}"
    ctx = mp.start_processes(
        _spawn_entry, args=(world, str(plan), str(run_dir), cfg, init_method), nprocs=world, join=False,
        start_method="spawn",
    )
    try:
        while not ctx.join(timeout=1.0):
            pass
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
        rank = getattr(exc, "error_index", None)
        raise G3RuntimeError(_failure_message(run_dir, rank, exc, cfg.task)) from None
    except KeyboardInterrupt:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        raise


def _spawn_entry(rank: int, world: int, plan: str, run_dir: str, cfg: TrainConfig, init_method: str) -> None:
    from .loop import run_rank

    os.environ.setdefault("LOCAL_WORLD_SIZE", str(world))
    run_rank(rank, world, plan, run_dir, cfg, init_method)
    # The rank's work is done and written (model, metrics, logs; the process group destroyed). Leave without the
    # interpreter's teardown: there, native threads of torch's libraries are destroyed in no fixed order, and
    # about one worker process in a few hundred aborted ("terminate called without an active exception",
    # SIGABRT) after logging "finished", which failed a run whose every artifact was complete.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _failure_message(run_dir: Path, rank, exc, task: str = "train") -> str:
    """Name the rank that failed first (as torch's process context saw it) and its error."""
    if rank is None:
        return f"a worker failed: {exc}"
    prefix = "" if task == "train" else task + "-"
    err = run_dir / "logs" / f"{prefix}rank-{rank:05d}.error"
    log_path = run_dir / "logs" / f"{prefix}rank-{rank:05d}.log"
    if err.is_file() and err.read_text().strip():
        return f"worker {rank} failed: {err.read_text().strip().splitlines()[0]} (log: {log_path})"
    sig = getattr(exc, "signal_name", None)
    how = f"was killed by {sig}" if sig else f"exited with code {getattr(exc, 'exit_code', '?')}"
    return f"worker {rank} {how} (log: {log_path})"


def _write_run_json(run_dir: Path, plan: Path, meta: dict, cfg: TrainConfig, status: str, **extra) -> dict:
    path = run_dir / "run.json"
    previous = json.loads(path.read_text()) if path.is_file() else {}
    info = {
        "schema": RUN_SCHEMA,
        "path": str(run_dir),
        "schema_version": RUN_VERSION,
        "plan": {"path": str(plan.resolve()), "model": meta["config"], "num_workers": meta["num_workers"]},
        "partition": meta["partition"],
        "store": meta["store"],
        "config": cfg.to_dict(),
        "status": status,
        "history": previous.get("history", []) + [{"status": status, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra}],
        **extra,
    }
    write_json_atomic(path, info)
    return info


__all__ = ["run_train", "TrainConfig", "RUN_SCHEMA", "RUN_VERSION"]
