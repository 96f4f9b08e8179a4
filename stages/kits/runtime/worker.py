"""Setting up one worker process: process groups, threads, the plan's strategy with its model and transport.

Training (``stages/train/loop.py``) and evaluation (``stages/eval/runner.py``) both start a rank with
:func:`open_worker`, then drive the strategy through its interface. Accuracy is counted the same way for
both (:func:`split_counts`).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from stages.common.cost import usable_cores
from stages.common.errors import G3InputError
from stages.common.model_spec import ModelSpec
from stages.common.npy import verify_files
from stages.common.plan_artifact import load_plan_meta
from stages.kits.runtime.config import RuntimeConfig, local_workers
from stages.kits.runtime.heap import keep_freed_memory
from stages.kits.runtime.models import GNNModel, model_from_spec
from stages.kits.runtime.strategy import Inference, Strategy, WorkerContext, collective_device
from stages.kits.runtime.trace import Tracer
from stages.kits.runtime.transport import Transport

log = logging.getLogger("g3.runtime")


def init_distributed(rank: int, world: int, cfg: RuntimeConfig, init_method: str | None, wait_seconds: float):
    """The default group (nccl when every rank has a GPU of its own, else gloo: NCCL refuses two ranks on one
    device, so K workers sharing a GPU reduce through the host) and the P2P group (always gloo: embeddings move
    through host buffers); both wait ``wait_seconds`` for a peer (the strategy's ``peer_wait_seconds``)."""
    backend = "nccl" if cfg.device == "cuda" and local_workers(world) <= torch.cuda.device_count() else "gloo"
    timeout = datetime.timedelta(seconds=wait_seconds)
    if cfg.device == "cuda":
        torch.cuda.set_device(torch.device(cfg.device_for(rank)))
    store = (elastic_attempt_store(timeout) or torchrun_store(timeout)) if init_method == "env://" else None
    where = {"store": store} if store is not None else {"init_method": init_method}
    # NCCL bound to this rank's GPU up front: otherwise it guesses the device from the rank (and says so)
    bound = {"device_id": torch.device(cfg.device_for(rank))} if backend == "nccl" else {}
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, **where, **bound)
    return dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD


def elastic_attempt_store(timeout: datetime.timedelta) -> dist.Store | None:
    """Under a torchrun agent that hosts the store, a client of it with keys prefixed by the restart count.

    torchrun keeps one agent store across ``--max-restarts`` attempts, and the keys of the failed attempt's
    group (each rank's gloo address) are still in it: a restarted rank would read its peers' dead
    addresses and time out connecting. A prefix per attempt keeps the attempts apart.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"g3-attempt-{attempt}/", torchrun_store(timeout, is_master=False))


def torchrun_store(timeout: datetime.timedelta, is_master: bool | None = None) -> dist.Store:
    """Without the agent's store (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: a fresh store and port every
    attempt, which an agent restarted from outside needs), the group's store at MASTER_ADDR:MASTER_PORT, served
    by torchrun's rank 0 — the process on the host whose address torchrun published, which is not always g3's
    rank 0 (a node folder of a bundle picks its ranks itself). ``is_master=False``: a client of the store the
    agent serves there."""
    return dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        int(os.environ["WORLD_SIZE"]),
        is_master=int(os.environ["RANK"]) == 0 if is_master is None else is_master,
        timeout=timeout,
    )


def set_threads(cfg: RuntimeConfig, world: int) -> int:
    """Torch and numba threads of this worker: ``cfg.threads``, else the cores split over the local workers
    (numba's kernels use the same budget: oversubscribed pools spin and crawl)."""
    threads = cfg.threads or max(1, usable_cores() // local_workers(world))
    with contextlib.suppress(ImportError):  # numba is a dependency
        import numba

        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    # after numba: starting its OpenMP layer resets this thread's OpenMP count, which torch reads, to every core
    # (measured: 1 -> 2 on 2 cores); the kernels then ran numba on 2 spinning threads in every worker, ~28 ms of
    # CPU per pass whatever its size
    torch.set_num_threads(threads)
    return threads


@dataclass
class Worker:
    ctx: WorkerContext
    model: GNNModel
    strategy: Strategy


def build_model(spec: ModelSpec, cfg: RuntimeConfig, rank: int) -> GNNModel:
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    return model_from_spec(spec).to(dtype=cfg.torch_dtype, device=cfg.device_for(rank))


def open_worker(
    rank: int,
    world: int,
    plan_dir: Path,
    cfg: RuntimeConfig,
    init_method: str | None,
    runtime: type[Strategy],
    knobs: object,
) -> Worker:
    """Everything a rank needs, in order: the heap policy (before the data's allocations), threads, process
    groups, the plan, the model (seeded: identical on every rank) and the plan's strategy (``runtime``, run with
    its typed ``knobs``)."""
    heap_kept = cfg.heap == "keep" and keep_freed_memory()
    threads = set_threads(cfg, world)
    plan_meta = load_plan_meta(plan_dir)
    tracer = Tracer(rank)
    ctx = WorkerContext(
        rank=rank,
        world=world,
        cfg=cfg,
        knobs=knobs,
        plan_dir=Path(plan_dir),
        plan_meta=plan_meta,
        part=Path(plan_meta["partition"]["path"]),
        transport=None,  # once the process groups exist, which wait as long as the strategy says (below)
        tracer=tracer,
    )
    wait = runtime.peer_wait_seconds(ctx)
    p2p = init_distributed(rank, world, cfg, init_method, wait)
    ctx.transport = Transport(p2p, rank, world, tracer, wait)
    log.info(
        "started: world %d, %d threads, device %s, heap %s, waits %.0f s for a peer",
        world,
        threads,
        cfg.device_for(rank),
        "keeps freed memory" if heap_kept else "system defaults",
        wait,
    )
    # this rank's own files, whole, before any is used: what the launcher checked were their headers
    verify_files(ctx.shard.path, ctx.shard.manifest)
    verify_files(ctx.plan.path, ctx.plan.meta.get("files"))
    model = build_model(ctx.spec, cfg, rank)
    strategy = runtime(ctx, model)
    return Worker(ctx, model, strategy)


SPLITS = ("train", "valid", "test")


def split_counts(inference: Inference) -> dict[str, tuple[int, int]]:
    """(correct, labelled) per split over all ranks (collective), from a strategy's exact inference.

    Accuracy is multi-class accuracy as OGB's Evaluator computes it for ogbn-products/papers100M: the share of
    a split's labelled nodes whose argmax prediction equals the label."""
    pred = inference.logits.argmax(dim=1)
    labels = inference.labels
    counts = []
    for split in SPLITS:
        idx = inference.splits[split]
        idx = idx[labels[idx] >= 0]
        counts += [int((pred[idx] == labels[idx]).sum()), len(idx)]
    t = torch.tensor(counts, dtype=torch.float64, device=collective_device())
    if dist.is_initialized():
        dist.all_reduce(t)
    t = t.cpu()
    return {split: (int(t[2 * i]), int(t[2 * i + 1])) for i, split in enumerate(SPLITS)}


def accuracies(counts: dict[str, tuple[int, int]]) -> dict[str, float | None]:
    return {s: (c / n if n else None) for s, (c, n) in counts.items()}


def evaluate(strategy: Strategy, metric: str = "accuracy") -> tuple[dict[str, tuple[int, int]], dict]:
    """Exact inference with the model in eval mode (no dropout): (correct, labelled) per split, and with
    ``metric="rocauc"`` each split's ROC-AUC (collective)."""
    strategy.model.eval()
    try:
        with torch.no_grad():
            inference = strategy.infer()
    finally:
        strategy.model.train()
    extra = {"rocauc": split_rocauc(inference)} if metric == "rocauc" else {}
    return split_counts(inference), extra


def split_rocauc(inference: Inference) -> dict[str, float | None]:
    """ROC-AUC per split of a binary task over all ranks (collective): every rank's (score, label) pairs of the
    split's labelled nodes gathered, the score being the softmax probability of class 1; the area is the
    Mann-Whitney statistic (ties count one half). None where a split lacks one of the two classes."""
    from scipy.stats import rankdata

    if inference.logits.shape[1] != 2:
        raise G3InputError(
            f"--metric rocauc needs a binary task (2 classes), the model has {inference.logits.shape[1]}"
        )
    score = torch.softmax(inference.logits.double(), dim=1)[:, 1].cpu()
    labels = inference.labels.cpu()
    mine = {}
    for split in SPLITS:
        idx = inference.splits[split].cpu()
        idx = idx[labels[idx] >= 0]
        mine[split] = (score[idx].numpy(), labels[idx].numpy())
    everyone = [mine]
    if dist.is_initialized() and dist.get_world_size() > 1:
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    out = {}
    for split in SPLITS:
        s = np.concatenate([e[split][0] for e in everyone])
        y = np.concatenate([e[split][1] for e in everyone])
        pos, neg = int((y == 1).sum()), int((y == 0).sum())
        if pos == 0 or neg == 0:
            out[split] = None
            continue
        ranks = rankdata(s)  # average ranks for ties
        out[split] = float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))
    return out
