"""The interface every training strategy implements, for full-graph and mini-batch systems alike.

An epoch is :meth:`Strategy.steps` optimizer steps (a full-graph strategy has one; a mini-batch strategy one
per global batch; every rank runs the same number). An optimizer step is :meth:`Strategy.micro_steps`
micro-steps (1 unless the strategy accumulates several passes into one update: HopGNN's time steps, gradient
accumulation over micro-batches); a micro-step is :meth:`Strategy.forward` — the logits of its target nodes with
their labels (:class:`StepOutput`) — then :meth:`Strategy.backward` with the gradient of those logits, which
accumulates the *local* weight gradients. The training loop (``stages/train/loop.py``) owns everything else: the
loss (normalised by the global number of targets of the whole optimizer step), the gradient all-reduce of the
replicated parameters, the optimizer, evaluation, metrics and checkpoints. A strategy that owns a schedule of
several batches in flight (P3's pipeline, delayed gradients) returns ``False`` from :meth:`Strategy.backward`
while no gradient is due: the loop then takes no optimizer step. Parameters a strategy shards
(:meth:`Strategy.sharded_parameters`: each rank holds and updates its own slice) are left out of the all-reduce
and checkpointed per rank with their optimizer state; :meth:`Strategy.full_state_dict` assembles them for the
saved model. :meth:`Strategy.infer` is exact full-neighbour inference of
every owned node, whatever the strategy trains with, so every strategy's accuracy is measured the same way
(``g3 eval`` and the loop's ``--eval-every`` both use it). :meth:`Strategy.stats` reports compute time (the
transport counts bytes and waits), :meth:`Strategy.state_dict` what a checkpoint must keep besides the
weights (caches, a sampler's position).

A strategy is one module under this package exporting ``STRATEGY`` (its class), registered with its planner
in ``stages.strategies``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from stages.common.model_spec import ModelSpec
from stages.common.partition_artifact import Shard, open_shard
from stages.common.plan_artifact import WorkerPlan
from stages.kits.runtime.config import RuntimeConfig
from stages.kits.runtime.models import GNNModel
from stages.kits.runtime.trace import Tracer, now_us
from stages.kits.runtime.transport import Transport


@dataclass
class WorkerContext:
    """What one worker runs with: its rank among ``world``, device, settings, plan, transport and tracer."""

    rank: int
    world: int
    cfg: RuntimeConfig
    # the plan strategy's knobs, typed (an instance of its ``StrategySpec.knobs``)
    knobs: Any
    plan_dir: Path
    plan_meta: dict
    part: Path
    transport: Transport | None  # None only while the worker starts (stages.kits.runtime.worker.open_worker)
    tracer: Tracer
    spec: ModelSpec = field(init=False)
    # what a strategy decides once per worker and asks again later (g3: whether it streams its bins)
    memo: dict = field(init=False, default_factory=dict)

    def __post_init__(self):
        self.spec = ModelSpec.from_plan(self.plan_meta)

    @property
    def device(self) -> torch.device:
        return torch.device(self.cfg.device_for(self.rank))

    @cached_property
    def resident(self) -> bool:
        """Whether this worker runs the device path (:meth:`RuntimeConfig.resident`, from the plan's record)."""
        workers = self.plan_meta.get("workers") or []
        mine = workers[self.rank] if self.rank < len(workers) else {}
        return self.cfg.resident((mine.get("residency") or {}).get("mode"))

    @property
    def home(self) -> torch.device:
        """Where the worker's tables live: its partition's features, labels, every layer's rows and their
        gradients — the device when resident, else host memory."""
        return self.device if self.resident else torch.device("cpu")

    @property
    def options(self) -> dict:
        """The strategy's options as the plan recorded them."""
        return dict(self.plan_meta["strategy"].get("options") or {})

    @cached_property
    def shard(self) -> Shard:
        return open_shard(self.part, self.rank, self.world)

    @cached_property
    def plan(self) -> WorkerPlan:
        return WorkerPlan(self.plan_dir, self.rank)

    def all_reduce_int(self, x: int, op: str = "sum") -> int:
        """``x`` summed (or, with ``op="max"``, maximised) over the workers (collective)."""
        if not dist.is_initialized() or self.world == 1:
            return int(x)
        t = torch.tensor([x], dtype=torch.int64, device=collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return int(t.item())

    def all_gather(self, obj) -> list:
        """``obj`` of every worker, in rank order (collective)."""
        if not dist.is_initialized() or self.world == 1:
            return [obj]
        everyone = [None] * self.world
        dist.all_gather_object(everyone, obj)
        return everyone


def collective_device() -> str:
    """nccl reduces device tensors only; gloo host tensors."""
    return "cuda" if dist.is_initialized() and dist.get_backend() == "nccl" else "cpu"


@dataclass
class StepOutput:
    """A step's result: ``logits [n, C]`` of the nodes the step computed, their ``labels [n]``, and
    ``targets``, the rows of ``logits`` that carry the loss (labelled targets of the step), all three on one
    device (the worker's :attr:`WorkerContext.home`).
    ``global_targets``: the number of targets of the step over all ranks when the strategy knows it without
    communicating (else the loop all-reduces ``len(targets)``). ``reuse_logits``: the strategy has no further
    use for ``logits``, so the loss may write their gradient over them (one ``[n, C]`` array, not two)."""

    logits: torch.Tensor
    labels: torch.Tensor
    targets: torch.Tensor
    global_targets: int | None = None
    reuse_logits: bool = False

    def __post_init__(self):
        # the loss is computed where the logits are: labels and target rows made on the host go there (a copy
        # in, nothing on the CPU or for a resident worker's tables)
        self.labels = self.labels.to(self.logits.device)
        self.targets = self.targets.to(self.logits.device)


@dataclass
class Inference:
    """Exact full-neighbour inference of a worker's owned nodes: ``logits [n_owned, C]``, their ``labels``
    (−1 = unlabelled) and the rows of each split (``train``, ``valid``, ``test``)."""

    logits: torch.Tensor
    labels: torch.Tensor
    splits: dict[str, torch.Tensor]


class Strategy:
    """Base class: the context, the model, per-epoch compute timers and helpers shared by strategies."""

    name = "base"

    def __init__(self, ctx: WorkerContext, model: GNNModel):
        self.ctx = ctx
        self.model = model
        self.cfg = ctx.cfg
        self.knobs = ctx.knobs
        self.tr = ctx.transport
        self.tracer = ctx.tracer
        self.rank = ctx.rank
        self.device = ctx.device
        self.timers: dict[str, float] = defaultdict(float)
        # --count-ops: the (epoch, step) counted; work done for it on another thread is counted there
        self.counted_step: tuple[int, int] | None = None

    # --- the interface ----------------------------------------------------------------------------------
    def steps(self, epoch: int) -> int:
        """Steps of ``epoch``: the same on every rank."""
        return 1

    def micro_steps(self, epoch: int, step: int) -> int:
        """Forward/backward passes accumulated into optimizer step ``step`` (the same on every rank). With more
        than one, every pass's :attr:`StepOutput.global_targets` must give the whole optimizer step's global
        target count, which normalises the loss of each pass."""
        return 1

    def forward(self, epoch: int, step: int, micro: int = 0) -> StepOutput:
        raise NotImplementedError

    def backward(self, grad_logits: torch.Tensor) -> bool | None:
        """Accumulate local weight gradients from the gradient of the last :meth:`forward`'s logits. ``False``:
        no gradient is due at this optimizer step (a pipelined schedule still filling), so the loop skips the
        update; anything else: the accumulated gradients are this step's."""
        raise NotImplementedError

    def before_update(self) -> None:
        """Called by :meth:`update` after the replicated gradients' all-reduce and before the optimizer step: a
        strategy whose backward left a gradient still in flight (P3's pushed ∂L/∂z¹, overlapping the all-reduce)
        completes it here. Nothing by default."""

    def update(self, optimizer: torch.optim.Optimizer, replicated: list[torch.nn.Parameter]) -> float:
        """One step's update, called by the loop once the step's gradients are accumulated: by default the
        replicated gradients summed over ranks (one all-reduce), :meth:`before_update`, and the optimizer step
        of every parameter. Returns the seconds spent in the all-reduce. A strategy whose algorithm lets an
        update trail its gradient (P3's pipeline, Eq. 3) overrides this and :meth:`finish_updates`."""
        t0 = time.perf_counter()
        all_reduce_gradients(replicated)
        seconds = time.perf_counter() - t0
        self.before_update()
        optimizer.step()
        return seconds

    def finish_updates(self, optimizer: torch.optim.Optimizer, replicated: list[torch.nn.Parameter]) -> None:
        """Called by the loop at the end of every epoch, before evaluation and checkpoints: every update still
        trailing its gradient is applied, so the weights are those after the epoch's last step. Nothing by
        default (every update is applied in :meth:`update`)."""

    @classmethod
    def peer_wait_seconds(cls, ctx: WorkerContext) -> float:
        """How long this strategy's worker waits for a peer (asked before the process groups exist, so ``ctx``
        has no transport yet): ``--timeout``, else :meth:`RuntimeConfig.wait_seconds`'s default."""
        return ctx.cfg.wait_seconds()

    def sharded_parameters(self) -> tuple[str, ...]:
        """Names (as in ``model.named_parameters()``) of the parameters this strategy shards: each rank's copy
        holds its own slice, gets its own (already complete) gradient, is never all-reduced, and is checkpointed
        per rank with its optimizer state. Empty by default: every parameter is replicated."""
        return ()

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The model's weights as one process would hold them (collective when parameters are sharded: the
        strategy assembles its shards); the replicated weights by default."""
        return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load weights as one process holds them (``g3 eval`` of model.pt): the strategy takes its shards of the
        parameters it shards; the whole state by default. A mismatch raises RuntimeError."""
        self.model.load_state_dict(state)

    def infer(self) -> Inference:
        raise NotImplementedError

    @property
    def num_owned(self) -> int:
        raise NotImplementedError

    def stats(self) -> dict:
        """This epoch's figures besides the transport's: compute wall and CPU seconds, owned nodes."""
        return {
            "compute_seconds": self.timers["compute"],
            "compute_cpu_seconds": self.timers["compute_cpu"],
            "num_owned": self.num_owned,
        }

    def reset_stats(self) -> None:
        self.timers = defaultdict(float)

    def state_dict(self) -> dict:
        """What a checkpoint keeps for this rank besides the weights (empty: nothing)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(
                f"the {self.name} strategy keeps no state, but the checkpoint has {sorted(state)}"
            )

    def close(self) -> None:
        """Release what the strategy started (threads are daemons; nothing by default)."""

    # --- helpers ----------------------------------------------------------------------------------------
    @contextmanager
    def compute_span(self, name: str, **args):
        """Time a piece of computation: the compute timers and a ``compute`` trace span (with ``args``)."""
        t0, c0 = now_us(), time.thread_time()
        yield
        t1 = now_us()
        self.timers["compute"] += (t1 - t0) / 1e6
        self.timers["compute_cpu"] += time.thread_time() - c0
        self.tracer.span("compute", name, t0, t1, **args)


def labelled_rows(labels: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The rows whose label is known (unlabelled nodes carry no loss and no accuracy)."""
    return rows[labels[rows] >= 0]


def owned_splits(shard: Shard, new_id: np.ndarray | None = None) -> dict[str, torch.Tensor]:
    """A shard's split rows (``new_id`` renumbers owned-local ids), ascending."""
    out = {}
    for s in ("train", "valid", "test"):
        ids = np.asarray(shard.load(s), dtype=np.int64)
        out[s] = torch.from_numpy(np.sort(new_id[ids] if new_id is not None else ids))
    return out


def flatten_gradients(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The parameters' gradients (zeros where a gradient is missing) as one new flat tensor."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])


def unflatten_gradients(flat: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
    """Copy ``flat`` (as made by :func:`flatten_gradients`) back into the parameters' gradients."""
    offset = 0
    for p in params:
        n = p.numel()
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        p.grad.copy_(flat[offset : offset + n].view_as(p))
        offset += n


def all_reduce_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum the parameters' gradients over every rank (one all-reduce of the flattened gradients); nothing to do
    for one rank."""
    if not params or not dist.is_initialized() or dist.get_world_size() == 1:
        return
    flat = flatten_gradients(params)
    if flat.device.type != collective_device():  # device gradients, a gloo group (ranks sharing a GPU)
        host = flat.cpu()
        dist.all_reduce(host)
        flat.copy_(host)
    else:
        dist.all_reduce(flat)
    unflatten_gradients(flat, params)


def step_only(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> None:
    """An optimizer step of ``params`` alone: every other parameter's gradient is hidden for the step (torch's
    optimizers skip a parameter whose gradient is None, its state untouched), then put back."""
    chosen = {id(p) for p in params}
    hidden = [(p, p.grad) for group in optimizer.param_groups for p in group["params"] if id(p) not in chosen]
    for p, _ in hidden:
        p.grad = None
    try:
        optimizer.step()
    finally:
        for p, g in hidden:
            p.grad = g


class WholePartitionStrategy(Strategy):
    """A full-graph strategy whose one step computes every owned node at once: ``_forward(epoch, training)``
    returns the owned rows' logits, and the strategy keeps ``labels``, ``train_rows``, ``global_train`` and
    ``splits`` (the layer-synchronous strategies, neutrontp)."""

    labels: torch.Tensor
    train_rows: torch.Tensor
    global_train: int
    splits: dict[str, torch.Tensor]
    epoch: int

    def forward(self, epoch: int, step: int, micro: int = 0) -> StepOutput:
        self.epoch = epoch
        logits = self._forward(epoch, training=True)
        return StepOutput(logits, self.labels, self.train_rows, self.global_train)

    def infer(self) -> Inference:
        with torch.no_grad():
            logits = self._forward(self.epoch, training=False)
        self.after_inference()
        return Inference(logits, self.labels, self.splits)

    def after_inference(self) -> None:
        """Drop what an inference pass left behind (nothing by default)."""

    def _forward(self, epoch: int, training: bool) -> torch.Tensor:
        raise NotImplementedError
