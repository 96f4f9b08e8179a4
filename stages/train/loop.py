"""One rank's training: the epoch loop, evaluation, metrics and checkpoints, for any strategy.

The loop is strategy-agnostic. One optimizer step (:func:`optimizer_step`) is the strategy's micro-steps
(usually one): each forward gives the logits of its target nodes, the loss here is normalised by the *global*
number of targets of the whole optimizer step, and the strategy's backward accumulates local weight gradients;
then the replicated parameters' gradients are summed across ranks (sharded ones are already complete on their
rank) and every rank takes the same optimizer step — so K workers compute what one process would, wherever the
strategy is exact::

    zero_grad ─▶ ┌ forward(epoch, step, micro) ─▶ loss / N_global ─▶ backward ┐ × micro_steps ─▶ all-reduce
                 └─────────────────────────── accumulate local grads ◀──────────┘    (replicated) ─▶ Adam step
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from stages.common.errors import G3InputError
from stages.common.model_spec import ModelSpec
from stages.kits.runtime.device.op_counter import OpCounter
from stages.kits.runtime.device.path import device_kernels
from stages.kits.runtime.loss import cross_entropy_with_grad
from stages.kits.runtime.profile import samples_from_trace, write_profile
from stages.kits.runtime.strategy import collective_device
from stages.kits.runtime.trace import MOVING, hidden_share, now_us
from stages.kits.runtime.worker import accuracies, evaluate
from stages.strategies.registry import import_runtimes, open_plan_worker
from stages.train.checkpoint import (
    agreed_checkpoint,
    checkpoint_path,
    has_rank_state,
    load_checkpoint,
    save_checkpoint,
    save_weights,
)
from stages.train.config import TrainConfig
from stages.train.metrics import MetricsWriter, NicCounter, minor_page_faults, peak_memory_bytes

import_runtimes()  # preloaded by the fork server: its workers find every strategy imported
log = logging.getLogger("g3.train")


def train_rank(
    rank: int, world: int, init_method: str | None, plan_dir: str, run_dir: str, cfg: TrainConfig
) -> None:
    """Entry of one training process (spawned locally or started by torchrun), run by
    ``stages.kits.runtime.launch.processes.run_guarded``."""
    worker = open_plan_worker(rank, world, Path(plan_dir), cfg, init_method)
    with device_kernels(worker.ctx.resident, worker.ctx.device.type):
        _train(worker, Path(run_dir), cfg)


def _train(worker, run_dir: Path, cfg: TrainConfig) -> None:
    """The epochs of one rank, from its checkpoint when resuming, to the saved model."""
    strategy, model, ctx = worker.strategy, worker.model, worker.ctx
    rank, world = ctx.rank, ctx.world
    optimizer = make_optimizer(model, cfg, ctx.device)
    start_epoch = _resume(run_dir, cfg, ctx, model, optimizer, strategy)
    if start_epoch == 0:
        _save_full_weights(run_dir / "init.pt", strategy, rank)
    metrics = MetricsWriter(
        run_dir,
        rank,
        world,
        live=cfg.live and rank == 0,
        epochs=cfg.epochs,
        start=start_epoch,
        network=cfg.network,
        loggers=tuple(cfg.logger),
    )
    nic = NicCounter()
    sharded = set(strategy.sharded_parameters())
    replicated = [p for n, p in model.named_parameters() if n not in sharded]  # all-reduced every step
    tracer, transport = ctx.tracer, ctx.transport

    trace_epoch = min(cfg.epochs - 1, start_epoch + 1)  # skip the warm-up epoch when there is another
    # --profile: the last epoch, the warmest (with several workers the second still pays first-use costs)
    profile_epoch = cfg.epochs - 1
    counted = counted_step(start_epoch, cfg.epochs, strategy) if cfg.count_ops else None
    strategy.counted_step = counted
    for epoch in range(start_epoch, cfg.epochs):
        _maybe_inject_fault(rank, epoch)
        # --trace: every epoch from trace_epoch on is timed per span (the hidden share of one epoch is noisy on a
        # shared machine, so each gets its own and reports take the median); the timeline file is the last
        # epoch's, the warmest
        profiling = bool(cfg.profile) and epoch == profile_epoch
        tracing = epoch >= trace_epoch and (cfg.trace or profiling)
        if tracing:
            tracer.start()
        t0, faults0 = time.perf_counter(), minor_page_faults()
        strategy.reset_stats()
        transport.stats.reset()
        nic.reset()
        # every rank has reset before any rank starts the epoch: a peer's first sampling request, answered by this
        # rank's server thread, would otherwise be counted and then wiped by a late reset here
        dist.barrier()
        model.train()
        steps = _epoch_steps(strategy, ctx, optimizer, replicated, epoch, counted)
        epoch_seconds = time.perf_counter() - t0
        record = {"epoch": epoch, "loss": steps.loss, "epoch_seconds": epoch_seconds}
        if steps.steps > 1:
            record["steps"] = steps.steps
        if steps.micro_steps > strategy.steps(epoch):
            record["micro_steps"] = steps.micro_steps
        if tracing:
            tracer.stop()
            if cfg.trace:
                record.update(_trace_record(tracer, run_dir, world, write=epoch == cfg.epochs - 1))
            if profiling:  # PROFILE.json for `g3 simulate`
                _write_profile(cfg, ctx, epoch, epoch_seconds, steps.sync_seconds)
        if cfg.eval_every and ((epoch + 1) % cfg.eval_every == 0 or epoch == cfg.epochs - 1):
            counts, extra = evaluate(strategy, cfg.metric)
            record.update({f"{s}_acc": a for s, a in accuracies(counts).items()})
            record.update({f"{s}_rocauc": a for s, a in extra.get("rocauc", {}).items()})
        workers: list = [None] * world
        dist.all_gather_object(workers, _worker_record(strategy, ctx, cfg, steps, nic, faults0))
        metrics.epoch(record, workers)
        if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0:
            save_checkpoint(run_dir, epoch, model, optimizer, cfg, strategy, rank)
        dist.barrier()
    _save_full_weights(run_dir / "model.pt", strategy, rank)
    metrics.close()
    strategy.close()
    # leave together: a rank that tears its connections down while a peer is still writing can make that peer's
    # gloo transport see a closed socket
    dist.barrier()
    log.info("finished")


def _resume(run_dir: Path, cfg: TrainConfig, ctx, model, optimizer, strategy) -> int:
    """The epoch to start from: 0, or after the newest checkpoint every rank has (``--resume``, or a worker
    group torchrun restarted: no flag needed). Agreed by every rank: an agent restarted from outside (its host's
    agent killed, then started again) counts its restarts from 0 while its peers' agents count theirs, so a group
    where any rank was restarted resumes as a whole."""
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    if not ctx.all_reduce_int(int(cfg.resume or restart > 0), op="max"):
        return 0
    epoch = agreed_checkpoint(run_dir, ctx.rank, has_rank_state(strategy))
    if epoch < 0:
        if cfg.resume:
            raise ValueError(f"--resume: no checkpoint that every worker has in {run_dir}")
        return 0
    ckpt = checkpoint_path(run_dir, epoch)
    start = load_checkpoint(ckpt, model, optimizer, strategy, ctx.rank) + 1
    log.info("resumed from %s at epoch %d%s", ckpt, start, f" (restart {restart})" if restart else "")
    return start


@dataclass
class EpochSteps:
    """What an epoch's optimizer steps add up to on this rank (the loss: over every rank)."""

    loss: float
    steps: int
    micro_steps: int
    sync_seconds: float
    all_reduce_seconds: float
    ops: dict | None  # --count-ops: what the counted step dispatched (in its epoch)


def _epoch_steps(strategy, ctx, optimizer, replicated, epoch: int, counted) -> EpochSteps:
    """Every optimizer step of ``epoch``, then the strategy's trailing updates. The epoch's local losses stay
    where they were computed (no read-back per step): summed over the ranks once, after the epoch."""
    loss_sum, loss_steps, sync_seconds, reduce_seconds, micro_total, ops = None, 0, 0.0, 0.0, 0, None
    for step in range(strategy.steps(epoch)):
        if (epoch, step) == counted:  # --count-ops: what this one steady-state step dispatches
            with OpCounter(ctx.device) as counter:
                done = optimizer_step(strategy, ctx, optimizer, replicated, epoch, step)
            ops = counter.count.to_json()
        else:
            done = optimizer_step(strategy, ctx, optimizer, replicated, epoch, step)
        micro_total += done.micro_steps
        sync_seconds += done.sync_seconds
        reduce_seconds += done.all_reduce_seconds
        if done.loss is not None:
            loss_sum = done.loss if loss_sum is None else loss_sum + done.loss
            loss_steps += 1
    strategy.finish_updates(optimizer, replicated)  # every trailing update applied: the epoch's weights
    loss = summed_over_ranks(loss_sum, ctx.world) / max(loss_steps, 1)
    return EpochSteps(loss, loss_steps, micro_total, sync_seconds, reduce_seconds, ops)


def _worker_record(strategy, ctx, cfg: TrainConfig, steps: EpochSteps, nic, faults0: int) -> dict:
    """This rank's figures of the epoch, for metrics.jsonl."""
    stats = ctx.transport.stats
    return {
        "rank": ctx.rank,
        **strategy.stats(),  # compute_seconds; compute_cpu_seconds: CPU seconds of the compute thread in those
        # spans (the work itself when the worker runs one thread, unlike the wall-clock figure, which grows
        # when workers share cores); num_owned; anything the strategy adds
        "comm_wait_seconds": stats.wait_seconds,
        "sync_seconds": steps.sync_seconds,
        "all_reduce_seconds": steps.all_reduce_seconds,  # of sync_seconds: the gradient all-reduce (a rendezvous)
        "bytes_sent": stats.bytes_sent,
        "bytes_recv": stats.bytes_recv,
        "bytes_sent_per_phase": dict(stats.per_phase_sent),
        "peak_memory_bytes": peak_memory_bytes(cfg.device_for(ctx.rank)),
        "page_faults": minor_page_faults() - faults0,
        **nic.since_reset(),
        **(steps.ops or {}),  # --count-ops, in the counted epoch: operations and synchronisations of one step
    }


@dataclass
class StepDone:
    """What one optimizer step did: this rank's share of its loss (a float64 tensor where it was computed: read
    once per epoch; None: no target on any rank, no update), its micro-steps, and the seconds spent in the
    gradient all-reduce and update."""

    loss: torch.Tensor | None
    micro_steps: int
    sync_seconds: float = 0.0
    all_reduce_seconds: float = 0.0  # the part of sync_seconds in the gradient all-reduce itself


def optimizer_step(
    strategy, ctx, optimizer, replicated: list[torch.nn.Parameter], epoch: int, step: int
) -> StepDone:
    """One optimizer step: the strategy's micro-steps accumulate local gradients (each pass's loss normalised by
    the global target count of the whole step), then the replicated parameters' gradients are summed over ranks
    and every rank updates — unless the strategy's backward says no gradient is due (a pipeline filling)."""
    optimizer.zero_grad(set_to_none=False)
    n_micro = strategy.micro_steps(epoch, step)
    loss, due, n_targets = None, True, 0
    for micro in range(n_micro):
        out = strategy.forward(epoch, step, micro)
        t_loss = now_us()
        n_targets = out.global_targets
        if n_targets is None:
            if n_micro > 1:
                raise RuntimeError(
                    f"{strategy.name}: a step of {n_micro} micro-steps must give its global target "
                    "count in StepOutput.global_targets"
                )
            n_targets = ctx.all_reduce_int(len(out.targets))
        if n_targets == 0:
            if strategy.steps(epoch) == 1:
                raise ValueError("the store has no training nodes")
            continue  # a batch without a training node on any worker (ClusterGCN's clusters): no update at all
        loss_local, grad_logits = cross_entropy_with_grad(
            out.logits, out.labels, out.targets, n_targets, out.reuse_logits
        )
        # the loss is computation too: messages still in flight meanwhile are hidden under it
        ctx.tracer.span("compute", "loss", t_loss, now_us(), phase="loss")
        due = strategy.backward(grad_logits) is not False
        share = loss_local.detach().to(torch.float64)
        loss = share if loss is None else loss + share
    if n_targets == 0:
        return StepDone(None, n_micro)
    t_sync = time.perf_counter()
    # the all-reduce of the replicated gradients and the optimizer step (the strategy's: P3's pipeline lets the
    # replicated update trail its gradient by three steps)
    reduce_seconds = strategy.update(optimizer, replicated) if due else 0.0
    sync_seconds = time.perf_counter() - t_sync
    return StepDone(loss, n_micro, sync_seconds, reduce_seconds)


def make_optimizer(model, cfg: TrainConfig, device: torch.device) -> torch.optim.Adam:
    """Adam; on CUDA its fused kernel, one launch for every parameter's update instead of several per parameter
    (the step is dispatch-bound on a GPU), with its step counters on the device: no host wait in the update."""
    fused = device.type == "cuda" and all(p.device.type == "cuda" for p in model.parameters())
    return torch.optim.Adam(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, **({"fused": True} if fused else {})
    )


def counted_step(start_epoch: int, epochs: int, strategy) -> tuple[int, int]:
    """The step ``--count-ops`` counts: the first of the second epoch run (the first pays one-time costs:
    caches, transposes, the exchange of input features), else the second step of a single epoch that has one."""
    if start_epoch + 1 < epochs:
        return start_epoch + 1, 0
    return start_epoch, 1 if strategy.steps(start_epoch) > 1 else 0


def summed_over_ranks(local: torch.Tensor | None, world: int) -> float:
    """A loss share summed over every rank (collective: every rank calls it, also one with no share) and read
    on the host: the one read-back of an epoch's losses."""
    t = torch.zeros(1, dtype=torch.float64, device=collective_device())
    if local is not None:
        t += local.to(t.device)
    if world > 1:
        dist.all_reduce(t)
    return float(t.item())


def _save_full_weights(path: Path, strategy, rank: int) -> None:
    """The model as one process would hold it, written by rank 0 (collective where parameters are sharded)."""
    weights = strategy.full_state_dict()
    if rank == 0:
        save_weights(path, weights)


def _write_profile(cfg: TrainConfig, ctx, epoch: int, epoch_seconds: float, sync_seconds: float) -> None:
    """Every rank's samples to rank 0, which fits and writes PROFILE.json (collective)."""
    mine = samples_from_trace(
        ctx.tracer.events,
        ctx.rank,
        epoch_seconds,
        sync_seconds,
        ctx.transport.stats.wait_seconds,
        torch.get_num_threads(),
    )
    everyone = [None] * ctx.world
    dist.all_gather_object(everyone, mine)
    if ctx.rank != 0:
        return
    meta = {
        "epoch": int(epoch),
        "device": cfg.device,
        "workers": ctx.world,
        "threads": mine["threads"],
        "strategy": ctx.plan_meta["strategy"]["name"],
        "pipeline": cfg.knobs.get("pipeline"),
        "backward": cfg.knobs.get("backward"),
        "dtype": cfg.dtype,
        "plan": str(ctx.plan_dir.resolve()),
        "model": ctx.plan_meta["config"],
        "widths": ctx.spec.widths,
    }
    write_profile(cfg.profile, everyone, ModelSpec.from_plan(ctx.plan_meta).layer_shapes(), meta)


def _trace_record(tracer, run_dir: Path, world: int, write: bool) -> dict:
    """The hidden-communication share of this epoch, computed from every rank's spans (collective); with
    ``write`` each rank also writes its timeline and the record is marked ``traced``."""
    if write:
        tracer.write(run_dir / "trace" / f"rank-{tracer.rank:05d}.json")
    spans = [None] * world
    needed = [e for e in tracer.events if e["cat"] in ("compute", "wait", *MOVING)]  # what the shares read
    dist.all_gather_object(spans, {"events": needed, "messages": tracer.messages})
    share = hidden_share(spans)
    out = {
        "comm_hidden_share": share["overall"],
        "comm_hidden_share_per_rank": share["per_rank"],
        "comm_waited_share": share["waited"],
        "comm_moving_share": share["moving"],
        "comm_seconds_traced": share["comm_seconds"],
    }
    return {"traced": True, **out} if write else out


def _maybe_inject_fault(rank: int, epoch: int) -> None:
    """Test hook: G3_FAULT=RANK:EPOCH:kill|raise|stop|enospc|input|hog makes that rank die (SIGKILL), raise, stop
    (SIGSTOP), meet a full disk, take memory until the kernel's OOM killer ends it (hog: in a memory cgroup), or
    find bad input (a G3InputError only a worker could raise) at that epoch; G3_FAULT_ONCE=FILE makes it happen only while FILE does not exist (it is created then), so a
    restarted worker group runs through."""
    spec = os.environ.get("G3_FAULT")
    if not spec:
        return
    r, e, how = spec.split(":")
    if int(r) == rank and int(e) == epoch:
        once = os.environ.get("G3_FAULT_ONCE")
        if once:
            if Path(once).exists():
                return
            Path(once).touch()
        import signal

        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        if how == "hog":  # touched pages, 64 MiB at a time, up to a bound a test's cgroup is far below
            hog = [bytearray(b"\x01") * (64 << 20) for _ in range(64)]
            raise RuntimeError(f"the memory hog was not stopped ({len(hog) * 64} MiB taken)")
        if how == "input":
            raise G3InputError("a row of the shard is out of range (injected)", path="worker-00000/rows.npy")
        if how == "enospc":
            import errno

            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "checkpoints/epoch-00001.pt")
        raise RuntimeError(f"injected fault at epoch {epoch}")
