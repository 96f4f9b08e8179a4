"""One rank of `g3 eval`: the plan's strategy with the evaluated weights, exact full-neighbour inference
(``Strategy.infer``), accuracy per split; rank 0 writes RUN/eval.json."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
import torch.distributed as dist

from stages.common.atomic import write_json_atomic
from stages.common.errors import G3InputError
from stages.kits.runtime.config import RuntimeConfig
from stages.kits.runtime.device.path import device_kernels
from stages.kits.runtime.worker import evaluate
from stages.strategies.registry import import_runtimes, open_plan_worker

import_runtimes()  # preloaded by the fork server: its workers find every strategy imported
log = logging.getLogger("g3.eval")
EVAL_SCHEMA = "g3.eval"
EVAL_VERSION = 1


def eval_rank(
    rank: int,
    world: int,
    init_method: str | None,
    plan_dir: str,
    run_dir: str,
    cfg: RuntimeConfig,
    weights: str,
    recorded_as: str | None = None,
) -> None:
    """``weights``: the file this rank reads (on an emulated host, its host's copy); ``recorded_as``: the path
    eval.json names (the user's file)."""
    worker = open_plan_worker(rank, world, Path(plan_dir), cfg, init_method)
    state = torch.load(weights, map_location="cpu", weights_only=True)
    if "model" in state and isinstance(state["model"], dict):  # a training checkpoint
        state = state["model"]
    try:
        worker.strategy.load_full_state_dict({k: v.to(cfg.torch_dtype) for k, v in state.items()})
    except RuntimeError as exc:
        raise G3InputError(f"{weights}: weights do not fit the plan's model: {exc}") from None
    t0 = time.perf_counter()
    with device_kernels(worker.ctx.resident, worker.ctx.device.type):
        counts, extra = evaluate(worker.strategy, cfg.metric)
    seconds = time.perf_counter() - t0
    if rank == 0:
        write_json_atomic(
            Path(run_dir) / "eval.json",
            {
                "schema": EVAL_SCHEMA,
                "schema_version": EVAL_VERSION,
                "weights": str(recorded_as or weights),
                "workers": world,
                "strategy": worker.ctx.plan_meta["strategy"]["name"],
                "metric": cfg.metric,  # accuracy is always given; rocauc adds "rocauc" per split
                "accuracy": {s: (c / n if n else None) for s, (c, n) in counts.items()},
                "correct": {s: c for s, (c, _) in counts.items()},
                "labelled": {s: n for s, (_, n) in counts.items()},
                "seconds": seconds,
                **extra,
            },
        )
    worker.strategy.close()
    dist.barrier()
    log.info("evaluated %s in %.2fs", weights, seconds)
