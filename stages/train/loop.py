"""One rank's training: set-up, the epoch loop, evaluation, metrics and checkpoints.

The loop is strategy-agnostic: a strategy produces the owned nodes' logits and accumulates local weight
gradients; here the loss is normalised by the *global* number of training nodes, gradients are summed
across ranks, and every rank takes the same optimizer step — so K workers compute what one process would.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from ..common.partition_artifact import open_shard
from ..plan.artifact import WorkerPlan, load_plan_meta
from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, save_weights
from .comm import Exchanger
from .config import TrainConfig, local_workers
from .heap import keep_freed_memory
from .loss import cross_entropy_with_grad
from .metrics import MetricsWriter, minor_page_faults, peak_memory_bytes
from .strategies.base import WorkerData, strategy_class
from .trace import now_us

log = logging.getLogger("g3.train")


def setup_logging(run_dir: Path, rank: int, task: str = "train") -> None:
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(logs / f"{'' if task == 'train' else task + '-'}rank-{rank:05d}.log")
    handler.setFormatter(logging.Formatter(f"%(asctime)s rank {rank} %(levelname)s %(message)s"))
    root = logging.getLogger("g3")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def init_distributed(rank: int, world: int, cfg: TrainConfig, init_method: str | None):
    """The default group (nccl when every rank has a GPU, else gloo) and the P2P group (always gloo:
    embeddings move through host buffers)."""
    backend = "nccl" if cfg.device == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=cfg.timeout)
    if cfg.device == "cuda":
        torch.cuda.set_device(torch.device(cfg.device_for(rank)))
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, timeout=timeout)
    p2p = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD
    return p2p


def build_worker_model(plan_meta: dict, cfg: TrainConfig):
    from .models import build_model

    mc = plan_meta["config"]
    store = plan_meta["store"]
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    model = build_model(mc["model"], int(store["feat_dim"]), int(mc["hidden"]), int(store["num_classes"]),
                        int(mc["layers"]), heads=int(mc["heads"]))
    return model.to(dtype=cfg.torch_dtype, device=cfg.device_for(dist.get_rank()))


def run_rank(rank: int, world: int, plan_dir: str, run_dir: str, cfg: TrainConfig, init_method: str | None) -> None:
    """Entry of one training process (spawned locally or started by torchrun)."""
    run_dir = Path(run_dir)
    setup_logging(run_dir, rank, cfg.task)
    try:
        _run(rank, world, Path(plan_dir), run_dir, cfg, init_method)
    except BaseException as exc:
        log.error("failed: %s\n%s", exc, traceback.format_exc())
        prefix = "" if cfg.task == "train" else cfg.task + "-"
        (run_dir / "logs" / f"{prefix}rank-{rank:05d}.error").write_text(f"{type(exc).__name__}: {exc}\n")
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run(rank: int, world: int, plan_dir: Path, run_dir: Path, cfg: TrainConfig, init_method: str | None) -> None:
    heap_kept = cfg.heap == "keep" and keep_freed_memory()  # first: before the data's allocations
    threads = cfg.threads or max(1, (os.cpu_count() or 1) // local_workers(world))
    torch.set_num_threads(threads)
    _set_numba_threads(threads)
    p2p = init_distributed(rank, world, cfg, init_method)
    log.info("started: world %d, %d threads, device %s, heap %s", world, threads, cfg.device_for(rank),
             "keeps freed memory" if heap_kept else "system defaults")

    plan_meta = load_plan_meta(plan_dir)
    part = Path(plan_meta["partition"]["path"])
    shard = open_shard(part, rank, world)
    data = WorkerData(shard, WorkerPlan(plan_dir, rank), len(plan_meta["layers"]), cfg.torch_dtype)
    model = build_worker_model(plan_meta, cfg)
    if cfg.task == "eval":
        _eval_only(run_dir, data, model, Exchanger(p2p, rank, world), cfg, world)
        return
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start_epoch = 0
    if cfg.resume and (ckpt := latest_checkpoint(run_dir)) is not None:
        start_epoch = load_checkpoint(ckpt, model, optimizer) + 1
        log.info("resumed from %s at epoch %d", ckpt, start_epoch)
    elif rank == 0:
        save_weights(run_dir / "init.pt", model)

    exchanger = Exchanger(p2p, rank, world)
    strategy = strategy_class(cfg.strategy)(data, model, exchanger, cfg)
    train_idx = data.splits["train"][data.labels[data.splits["train"]] >= 0]  # unlabelled nodes carry no loss
    n_train = _all_reduce_int(len(train_idx))
    if n_train == 0:
        raise ValueError("the store has no training nodes")
    metrics = MetricsWriter(run_dir, rank, world, live=cfg.live and rank == 0, epochs=cfg.epochs, start=start_epoch)
    params = [p for p in model.parameters()]

    trace_epoch = min(cfg.epochs - 1, start_epoch + 1)  # skip the warm-up epoch when there is another
    # --profile: the last epoch, the warmest (with several workers the second still pays first-use costs: on
    # `small`, two workers, 0.10-0.15 s against 0.09-0.10 s for the later ones, which inflated the rates)
    profile_epoch = cfg.epochs - 1
    for epoch in range(start_epoch, cfg.epochs):
        _maybe_inject_fault(rank, epoch)
        # --trace: every epoch from trace_epoch on is timed per span (the hidden share of one epoch is noisy on a
        # shared machine, so each gets its own and reports take the median); the timeline file is the last
        # epoch's, the warmest (the second still pays first-use costs: a worker's heap growing, ~0.1 s)
        can_trace = hasattr(strategy, "tracer") and epoch >= trace_epoch
        tracing = can_trace and (cfg.trace or (cfg.profile and epoch == profile_epoch))
        if tracing:
            strategy.tracer.start()
            profiler = _start_profile(strategy) if cfg.profile and epoch == profile_epoch else None
        t0, faults0 = time.perf_counter(), minor_page_faults()
        strategy.reset_timers()
        exchanger.stats.reset()
        optimizer.zero_grad(set_to_none=False)
        model.train()
        logits = strategy.forward(epoch, training=True)
        t_loss = now_us()
        loss_local, grad_logits = cross_entropy_with_grad(logits, data.labels, train_idx, n_train)
        if tracing:  # the loss is computation too: messages still in flight meanwhile are hidden under it
            strategy.tracer.span("compute", "loss", t_loss, now_us(), phase="loss")
        strategy.backward(grad_logits, epoch)
        t_sync = time.perf_counter()
        _all_reduce_grads(params)
        optimizer.step()
        sync_seconds = time.perf_counter() - t_sync
        loss = _all_reduce_float(float(loss_local.detach()))
        epoch_seconds = time.perf_counter() - t0
        record = {"epoch": epoch, "loss": loss, "epoch_seconds": epoch_seconds}
        if tracing:
            strategy.tracer.stop()
            if cfg.trace:
                record.update(_trace_record(strategy.tracer, run_dir, world, write=epoch == cfg.epochs - 1))
            if profiler is not None:  # PROFILE.json for `g3 simulate` (stages/simulate/profile.py)
                profiler.finish(cfg.profile, epoch, epoch_seconds, sync_seconds)
        if cfg.eval_every and ((epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1):
            record.update(evaluate(strategy, data, epoch))
        worker = {
            "rank": rank,
            "compute_seconds": strategy.timers["compute"],
            # CPU seconds of the compute thread in those spans: the work itself when the worker runs one thread,
            # unlike the wall-clock figure, which grows when workers share cores
            "compute_cpu_seconds": strategy.timers["compute_cpu"],
            "comm_wait_seconds": exchanger.stats.wait_seconds,
            "sync_seconds": sync_seconds,
            "bytes_sent": exchanger.stats.bytes_sent,
            "bytes_recv": exchanger.stats.bytes_recv,
            "bytes_sent_per_phase": dict(exchanger.stats.per_layer_sent),
            "peak_memory_bytes": peak_memory_bytes(cfg.device_for(rank)),
            "page_faults": minor_page_faults() - faults0,
        }
        workers = [None] * world
        dist.all_gather_object(workers, worker)
        metrics.epoch(record, workers)
        if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0 and rank == 0:
            save_checkpoint(run_dir, epoch, model, optimizer, cfg)
        dist.barrier()
    if rank == 0:
        save_weights(run_dir / "model.pt", model)
    metrics.close()
    # leave together: a rank that tears its connections down while a peer is still writing can make that peer's
    # gloo transport see a closed socket
    dist.barrier()
    log.info("finished")


def _set_numba_threads(threads: int) -> None:
    """The numba kernels use the same thread budget as torch (oversubscribed pools spin and crawl)."""
    try:
        import numba

        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    except ImportError:
        pass


def _start_profile(strategy):
    from ..simulate.profile import start_profile

    return start_profile(strategy)


def _trace_record(tracer, run_dir: Path, world: int, write: bool) -> dict:
    """The hidden-communication share of this epoch, computed from every rank's spans (collective); with
    ``write`` each rank also writes its timeline and the record is marked ``traced``."""
    from .trace import MOVING, hidden_share

    if write:
        tracer.write(run_dir / "trace" / f"rank-{tracer.rank:05d}.json")
    spans = [None] * world
    needed = [e for e in tracer.events if e["cat"] in ("compute", "wait", *MOVING)]  # what the shares read
    dist.all_gather_object(spans, {"events": needed, "messages": tracer.messages})
    share = hidden_share(spans)
    out = {"comm_hidden_share": share["overall"], "comm_hidden_share_per_rank": share["per_rank"],
           "comm_waited_share": share["waited"], "comm_moving_share": share["moving"],
           "comm_seconds_traced": share["comm_seconds"]}
    return {"traced": True, **out} if write else out


def _maybe_inject_fault(rank: int, epoch: int) -> None:
    """Test hook: G3_FAULT=RANK:EPOCH:kill|raise makes that rank die (SIGKILL) or raise at that epoch."""
    spec = os.environ.get("G3_FAULT")
    if not spec:
        return
    r, e, how = spec.split(":")
    if int(r) == rank and int(e) == epoch:
        if how == "kill":
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"injected fault at epoch {epoch}")


def split_counts(strategy, data: WorkerData, epoch: int) -> dict[str, tuple[int, int]]:
    """(correct, labelled) per split over all ranks, from a forward-only full-graph pass (no dropout).

    Accuracy is multi-class accuracy as OGB's Evaluator computes it for ogbn-products/papers100M:
    the share of a split's labelled nodes whose argmax prediction equals the label.
    """
    strategy.model.eval()
    with torch.no_grad():
        logits = strategy.forward(epoch, training=False)
    strategy.model.train()
    pred = logits.argmax(dim=1)
    counts = []
    for split in ("train", "valid", "test"):
        idx = data.splits[split]
        idx = idx[data.labels[idx] >= 0]
        counts += [int((pred[idx] == data.labels[idx]).sum()), len(idx)]
    t = torch.tensor(counts, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t)
    t = t.cpu()
    return {split: (int(t[2 * i]), int(t[2 * i + 1])) for i, split in enumerate(("train", "valid", "test"))}


def evaluate(strategy, data: WorkerData, epoch: int) -> dict[str, float]:
    """Accuracy per split (None for an empty split)."""
    counts = split_counts(strategy, data, epoch)
    return {f"{s}_acc": (c / n if n else None) for s, (c, n) in counts.items()}


def _eval_only(run_dir: Path, data: WorkerData, model, exchanger: Exchanger, cfg: TrainConfig, world: int) -> None:
    """`g3 eval`: load weights, one forward-only pass with the training runtime, write RUN/eval.json."""
    from ..common.atomic import write_json_atomic
    from .checkpoint import load_weights

    state = load_weights(Path(cfg.weights))
    if "model" in state and isinstance(state["model"], dict):  # a training checkpoint
        state = state["model"]
    try:
        model.load_state_dict({k: v.to(cfg.torch_dtype) for k, v in state.items()})
    except RuntimeError as exc:
        raise ValueError(f"{cfg.weights}: weights do not fit the plan's model: {exc}") from None
    strategy = strategy_class(cfg.strategy)(data, model, exchanger, cfg)
    t0 = time.perf_counter()
    counts = split_counts(strategy, data, epoch=0)
    seconds = time.perf_counter() - t0
    if dist.get_rank() == 0:
        result = {
            "schema": "g3.eval",
            "schema_version": 1,
            "weights": str(cfg.weights),
            "workers": world,
            "metric": "accuracy",
            "accuracy": {s: (c / n if n else None) for s, (c, n) in counts.items()},
            "correct": {s: c for s, (c, _) in counts.items()},
            "labelled": {s: n for s, (_, n) in counts.items()},
            "seconds": seconds,
        }
        write_json_atomic(run_dir / "eval.json", result)
    log.info("evaluated %s in %.2fs", cfg.weights, seconds)


def _all_reduce_grads(params: list[torch.nn.Parameter]) -> None:
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        n = p.numel()
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        p.grad.copy_(flat[offset : offset + n].view_as(p))
        offset += n


def _collective_device() -> str:
    """nccl reduces device tensors only; gloo host tensors."""
    return "cuda" if dist.get_backend() == "nccl" else "cpu"


def _all_reduce_int(x: int) -> int:
    t = torch.tensor([x], dtype=torch.int64, device=_collective_device())
    dist.all_reduce(t)
    return int(t.item())


def _all_reduce_float(x: float) -> float:
    t = torch.tensor([x], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t)
    return float(t.item())
