"""``p3``: P3 (Gandhi & Iyer, OSDI '21; paper 003 §3) — push-pull parallelism on independently partitioned
structure and features, optionally pipelined with bounded staleness.

Partitioning (``g3 partition --method p3``, §3.1): the structure is hash-partitioned by node, each arc stored
with its destination (the ``rows`` layout: it answers sampling and holds labels and splits); the features are
split by column (the ``columns`` layout: worker ``w`` holds columns ``c_w`` of *every* node). P3 never moves a
feature row.

One mini-batch (§3.2), the batches and samples being distdgl's (the same counter-based sampler, ``--fanouts``,
``--batch-size``, ``--batch-order``), so unpipelined P3 trains the same model as ``distdgl``:

1. the worker that trains a batch (its *owner*) samples the structure only (remote frontier nodes by their
   hash owners' sampling servers, as distdgl) and **pushes** the layer-1 block ``V⁰ → V¹`` to every worker
   (``structure``: sources, per-destination counts and arcs, as node ids);
2. **layer 1, model-parallel**: every worker computes, for every owner's block, the partial pre-activation of
   its column slice, ``W_self[:, c]·x_v[c] + W_neigh[:, c]·mean_u x_u[c]`` (SAGE) or ``W[:, c]·Â x[c]`` (GCN) —
   a ``|V¹| × H`` matrix — and the owner **pulls** the K − 1 others (``partials``) and sums them in rank order;
   then the bias once and the activation and dropout after the sum (the masks are keyed by node and column,
   so they are those of any K);
3. **layers 2…L, data-parallel** on the owner, their gradients all-reduced by the loop;
4. backward: the owner **pushes** ``∂L/∂z¹`` (``|V¹| × H``, ``gradients``) to every worker, and each computes
   the gradient of its own column slice of ``W₁`` — a *sharded* parameter (never all-reduced; the loss is
   normalised by the step's global target count like every other gradient).

Pipelining (``g3 train --pipeline p3``, §3.3): P3's staleness and weight stashing, so batch ``t`` runs
all four phases with one weight version, ``w_{t−3}``, and its gradient updates the current ones:
``w_{t+1} = w_t − α·∇f(w_{t−3})`` (Eq. 3; ``w_{<0} = w_0``). When batch ``t`` starts, the layer-1 weights of
batches ``t + 1 … t + 3`` (``w_{t−2} … w_t``) are known, so their model-parallel forwards run and their partials
travel while batch ``t``'s data-parallel phase computes: up to four batches in flight (``batches_in_flight_max``
per epoch, never across an epoch's end). The push of ``∂L/∂z¹`` is posted at the end of ``backward`` and completed
in ``before_update``, so it travels while the replicated gradients are all-reduced (pipelined or not). Pipelined,
that all-reduce trails its step (``update``): batch ``t``'s gradient is first needed by batch ``t + 4``, so its
all-reduce stays in flight and is applied once three newer ones trail it (``updates_trailing_max``). Where g3
departs from P3's static schedule: the forwards ahead run on the compute thread before batch ``t``'s own phase
(on one core a second thread would only share it), and the gradient push completes before the next batch (its
layer-1 update feeds the forward run ahead then). Unpipelined P3 (``--pipeline none``, the default) is exact;
pipelined P3 is tested against its own single-process delay-3 reference.

GAT is refused (the registry lists ``sage`` and ``gcn``): its attention logits are linear in ``W x`` and could be
summed per head before the softmax, but every head's scalars would then cross the network per arc endpoint,
which P3 does not describe; g3 does not build it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from stages.common.errors import G3InputError
from stages.common.partition_artifact import Shard, shard_dir
from stages.kits.runtime.block import Block
from stages.kits.runtime.kernels import block_transpose, csr_mean
from stages.kits.runtime.minibatch import PreparedStep, count_preparation, step_key
from stages.kits.runtime.models import GCNConv, GNNModel, SAGEConv, model_from_spec
from stages.kits.runtime.neighbor_sampler import SampledBlock
from stages.kits.runtime.strategy import (
    Inference,
    StepOutput,
    WorkerContext,
    flatten_gradients,
    step_only,
    unflatten_gradients,
)
from stages.kits.runtime.transport import PendingAllToAll
from stages.strategies.distdgl.runtime import DistDglStrategy
from stages.strategies.p3.knobs import P3Knobs

DELAY = 3  # P3's pipeline delay (Eq. 3): batch t computes with the weights of t − 3


@dataclass
class LayerOneBlock:
    """An owner's layer-1 block as every worker receives it: ``src`` (global ids, the ``n_dst`` destinations
    first), the in-arcs of each destination over positions in ``src``."""

    src: np.ndarray
    n_dst: int
    indptr: np.ndarray
    indices: np.ndarray

    @property
    def dst(self) -> np.ndarray:
        return self.src[: self.n_dst]


@dataclass
class P3Step(PreparedStep):
    layer1: list[LayerOneBlock] = field(default_factory=list)  # every owner's layer-1 block, rank order


@dataclass
class ModelParallelPass:
    """One batch's layer-1 forward on this worker's columns: the partials in flight to their owners, what the
    backward needs (per owner: the column-slice inputs the weight multiplied) and the weight version used."""

    exchange: PendingAllToAll
    inputs: list[tuple[torch.Tensor, ...]]
    version: int
    posted: float = 0.0  # when its partials were posted (perf_counter)


class P3Strategy(DistDglStrategy):
    knobs: P3Knobs
    name = "p3"

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        columns = Shard(shard_dir(ctx.part, ctx.rank, "columns"), ctx.rank, ctx.world)
        if not columns.path.is_dir():
            raise G3InputError(
                "p3 needs the features split by column: partition with g3 partition --method p3",
                path=ctx.part,
            )
        all_columns = ctx.plan_meta["feature_columns"]
        self.columns = [(int(c["start"]), int(c["stop"])) for c in all_columns]
        start, stop = self.columns[ctx.rank]
        dtype = ctx.cfg.torch_dtype
        self.x_cols = torch.from_numpy(np.array(columns.load("features")[:, : stop - start])).to(dtype)
        self.g_in_degree = torch.from_numpy(np.asarray(columns.load("in_degree"), dtype=np.float64))
        self.g_out_degree = torch.from_numpy(np.asarray(columns.load("out_degree"), dtype=np.float64))
        self.layer0 = model.layers[0]
        self.sharded = self._shard_first_layer(start, stop)
        self.hidden = int(ctx.spec.widths[1])
        self.pipelined = self.knobs.pipeline == "p3"
        # batch index -> the weights it starts with (layer 1's slices recorded when it starts, the replicated
        # ones when the update that made them is applied, which may be later: see update)
        self.history: dict[int, dict[str, torch.Tensor]] = {}
        # pipelined: the replicated updates still trailing their gradients, oldest first: (the summed gradient
        # as its all-reduce fills it, that all-reduce, the batch index) — (None, None, t) for a step without
        # an update, which still moves the version count on
        self._trailing: deque = deque()
        self._t: int | None = None  # the batch index of the step in progress, and whether it updated
        self._updated = True
        self._ahead: dict[int, tuple[P3Step, ModelParallelPass]] = {}
        self._full_model: GNNModel | None = None
        # the data-parallel phase in progress: (z¹ leaf, output, restore weights); the gradient push in flight:
        # (its model-parallel pass, the exchange)
        self._dp: tuple | None = None
        self._push: tuple | None = None
        self._mp: tuple | None = None  # its batch's prepared step and model-parallel pass, for the backward
        # partials travel on their own group: one batch's may be in flight while the loop all-reduces
        self.partial_tr = self.own_transport()

    def _shard_first_layer(self, start: int, stop: int) -> tuple[str, ...]:
        """Replace layer 1's weights by this worker's column slice (the model was initialised whole, identically
        on every rank, so the slices are those of the single-process model)."""
        layer = self.layer0
        if isinstance(layer, SAGEConv):
            linears = {"lin_self": layer.lin_self, "lin_neigh": layer.lin_neigh}
        elif isinstance(layer, GCNConv):
            linears = {"lin": layer.lin}
        else:
            raise G3InputError(f"p3 trains sage and gcn models, not {type(layer).__name__}")
        for lin in linears.values():
            lin.weight = nn.Parameter(lin.weight.detach()[:, start:stop].clone())
        return tuple(f"layers.0.{n}.weight" for n in linears)

    # --- the interface ----------------------------------------------------------------------------------
    def sharded_parameters(self) -> tuple[str, ...]:
        return self.sharded

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every worker's column slice of layer 1's weights put side by side (collective)."""
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        for name in self.sharded:
            state[name] = torch.cat(self.ctx.all_gather(state[name]), dim=1)
        return state

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        start, stop = self.columns[self.rank]
        mine = dict(state)
        for name in self.sharded:
            if name in mine:
                mine[name] = mine[name][:, start:stop]
        self.model.load_state_dict(mine)

    def state_dict(self) -> dict:
        """The weight versions batches still to come will start with (pipelined; empty otherwise)."""
        return {"history": {int(t): w for t, w in self.history.items()}} if self.pipelined else {}

    def load_state_dict(self, state: dict) -> None:
        if self.pipelined:
            if "history" not in state:
                raise ValueError(
                    "a pipelined p3 run resumes from a checkpoint of a pipelined run (weight versions)"
                )
            self.history = {int(t): w for t, w in state["history"].items()}
        elif state:
            raise ValueError(
                "an unpipelined p3 run cannot resume a pipelined run's checkpoint (--pipeline p3)"
            )

    # --- preparing a step: sample the structure, push layer 1 to every worker ---------------------------
    def prepare(self, epoch: int, step: int, batch=None, extra_seconds: float = 0.0) -> P3Step:
        sampled = self.sample_step(epoch, step, batch)
        first = sampled.blocks[0]
        if isinstance(first.src, torch.Tensor):  # sampled on the device: the pushed structure leaves it
            first = SampledBlock(
                *(a.cpu().numpy() for a in (first.dst, first.src, first.indptr, first.indices))
            )
        layer1 = self.push_structure(first)
        src = torch.from_numpy(first.src)
        degrees = (
            torch.stack([self.g_in_degree[src], self.g_out_degree[src]], dim=1)
            if self.needs_degrees
            else None
        )
        return cast(P3Step, sampled.step(None, degrees, extra_seconds, kind=P3Step, layer1=layer1))

    def push_structure(self, block: SampledBlock) -> list[LayerOneBlock]:
        """This batch's layer-1 block to every worker and every owner's block here (collective, on the
        sampler's group): one message of node ids per peer, ``[n_dst, n_src, arcs, src…, counts…, arcs…]``."""
        msg = np.concatenate(
            [
                [len(block.dst), len(block.src), len(block.indices)],
                block.src,
                np.diff(block.indptr),
                block.indices,
            ]
        ).astype(self.wire_ids)
        k = self.ctx.world
        if k == 1:
            return [_parse_block(msg)]
        tr = self.sampling_tr
        sizes = tr.all_to_all([torch.tensor([[len(msg)]], dtype=torch.int64)] * k, [1] * k, "structure-sizes")
        lengths = [int(s.reshape(-1)[0]) for s in sizes]
        got = tr.all_to_all_v([torch.from_numpy(msg)] * k, [(n,) for n in lengths], "structure")
        return [_parse_block(g.numpy()) for g in got]

    # --- one step ---------------------------------------------------------------------------------------
    def forward(self, epoch: int, step: int, micro: int = 0) -> StepOutput:
        self.epoch = epoch
        # the loop skipped the last backward (no target on any rank): put weights back
        if self._dp is not None:
            self._dp[2]()
            self._dp = None
        t = epoch * self.num_steps + step
        if self.pipelined:
            self._close_step()
            self._t, self._updated = t, False
            self._remember(t)
        prep, mp = self._ahead.pop(t, (None, None))
        if prep is None:
            prep = self._next(epoch, step)
            mp = self._model_parallel_forward(prep, t)
        self._count(prep)
        count_preparation(prep)
        if self.pipelined:
            # batches t+1 … t+3 compute layer 1 with w_{t−2} … w_t, all known now (Eq. 3): their model-parallel
            # forwards run and their partials travel while batch t's data-parallel phase computes — up to
            # DELAY + 1 batches in flight (never across an epoch's end)
            for ahead in range(t + 1, min(t + DELAY, epoch * self.num_steps + self.num_steps - 1) + 1):
                if ahead not in self._ahead:
                    nxt = self._next(epoch, ahead - epoch * self.num_steps)
                    self._ahead[ahead] = (nxt, self._model_parallel_forward(nxt, ahead))
            self.timers["batches_in_flight_max"] = max(
                self.timers["batches_in_flight_max"], 1 + len(self._ahead)
            )
        z = self._sum_partials(mp)
        self._mp = (prep, mp)
        out_nodes = prep.blocks[-1].dst
        labels = self.target_labels(out_nodes)
        restore = self._use_weights(mp.version)
        key = step_key(epoch, step)
        with self.compute_span("dp-fwd", phase="fwd", nodes=len(out_nodes)), torch.enable_grad():
            z = z.to(self.device).requires_grad_()
            x = self.model.activate(
                0,
                z + self.layer0.bias,
                torch.from_numpy(prep.layer1[self.rank].dst).to(self.device),
                key,
                self.cfg.dropout,
                self.cfg.seed,
                True,
            )
            for li, sb in enumerate(prep.blocks[1:], start=1):
                x = self.model.layer_forward(
                    li, self._block(sb, prep.degrees), x, key, self.cfg.dropout, self.cfg.seed, True
                )
        self._dp = (z, x, restore)
        return StepOutput(x.detach(), labels, torch.arange(len(out_nodes)), prep.global_targets)

    def backward(self, grad_logits: torch.Tensor) -> bool:
        z, out, restore = self._dp
        prep, mp = self._mp
        self._dp = self._mp = None
        if len(out):
            with self.compute_span("dp-bwd", phase="bwd"):
                torch.autograd.backward(out, grad_logits.to(out.device, dtype=out.dtype))
        restore()
        gz = z.grad if z.grad is not None else torch.zeros_like(z)
        # push ∂L/∂z¹ to every worker; each gets every owner's. Posted here and completed in before_update, so
        # it travels while the loop all-reduces the replicated gradients (on the partials' own group: posted in
        # the same order on every rank, matched first in, first out)
        shapes = [(b.n_dst, self.hidden) for b in prep.layer1]
        self._push = (
            mp,
            self.partial_tr.start_all_to_all_v([gz.detach().cpu()] * self.ctx.world, shapes, "gradients"),
        )
        self.timers["updates"] += 1
        return True

    def before_update(self) -> None:
        """This worker's column slices' gradients, once every owner's ∂L/∂z¹ has arrived."""
        if self._push is not None:
            mp, pending = self._push
            self._push = None
            self._model_parallel_backward(mp, pending.wait())

    def update(self, optimizer, replicated: list[torch.nn.Parameter]) -> float:
        """Pipelined (Eq. 3): batch t's data-parallel phase reads the replicated weights w_{t−3}, so the update
        from batch t's gradient is first needed by batch t + 4. Its all-reduce is posted here and left in flight
        while the next batches compute; it is completed and applied (in order, one optimizer step of the
        replicated parameters alone) once three newer ones trail it — at the latest when batch t + 3 updates.
        Layer 1's slices are updated at once: batch t + 4's model-parallel forward, run ahead during batch
        t + 1, reads them. Returns the seconds spent posting and completing all-reduces."""
        if not self.pipelined:
            return super().update(optimizer, replicated)
        t0 = time.perf_counter()
        if replicated:
            flat = flatten_gradients(replicated)
            self._trailing.append((flat, dist.all_reduce(flat, async_op=True), self._t))
        seconds = time.perf_counter() - t0
        self.before_update()
        params = dict(self.model.named_parameters())
        step_only(optimizer, [params[n] for n in self.sharded])
        self._updated = True
        t1 = time.perf_counter()
        while len(self._trailing) > DELAY:
            self._apply_oldest(optimizer, replicated)
        self.timers["updates_trailing_max"] = max(self.timers["updates_trailing_max"], len(self._trailing))
        return seconds + time.perf_counter() - t1

    def finish_updates(self, optimizer, replicated: list[torch.nn.Parameter]) -> None:
        """The epoch's trailing updates applied (its weights are those after its last step)."""
        if not self.pipelined:
            return
        self._close_step()
        self._t, self._updated = None, True
        t0 = time.perf_counter()
        while self._trailing:
            self._apply_oldest(optimizer, replicated)
        self.timers["drain_seconds"] += time.perf_counter() - t0

    def _close_step(self) -> None:
        """A step that ended without an update (no target on any rank) still counts: w_{t+1} = w_t."""
        if self._t is not None and not self._updated:
            self._trailing.append((None, None, self._t))
            self._updated = True

    def _apply_oldest(self, optimizer, replicated: list[torch.nn.Parameter]) -> None:
        """Complete the oldest trailing all-reduce, step the replicated parameters with it, and record the
        replicated weights it makes (version t + 1)."""
        flat, work, t = self._trailing.popleft()
        if work is not None:
            t0 = time.perf_counter()
            work.wait()
            self.timers["update_wait_seconds"] += time.perf_counter() - t0
            unflatten_gradients(flat, replicated)
            step_only(optimizer, replicated)
        version = self.history.setdefault(t + 1, {})
        for n, p in self.model.named_parameters():
            if n not in self.sharded:
                version[n] = p.detach().clone()

    # --- layer 1, model-parallel ------------------------------------------------------------------------
    def _slice_weights(self, version: int) -> list[torch.Tensor]:
        """This worker's column slices of layer 1's weights as batch ``version`` started with them."""
        if self.pipelined:
            return [self.history[version][n] for n in self.sharded]
        params = dict(self.model.named_parameters())
        return [params[n].detach() for n in self.sharded]

    def _model_parallel_forward(self, prep: P3Step, t: int) -> ModelParallelPass:
        """Every owner's partial pre-activation over this worker's columns, posted to the owners."""
        version = max(0, t - DELAY) if self.pipelined else t
        weights = self._slice_weights(version)
        partials: list[torch.Tensor] = []
        inputs: list[tuple[torch.Tensor, ...]] = []
        with self.compute_span("L0-partial", layer=0, phase="fwd"), torch.no_grad():
            for b in prep.layer1:
                x = self.x_cols[torch.from_numpy(b.src)].to(self.device)
                block = self._layer1_block(b)
                if isinstance(self.layer0, SAGEConv):
                    agg = csr_mean(block.indptr, block.indices, x, b.n_dst, block_transpose(block, x))
                    x_dst = x[: b.n_dst]
                    part = x_dst @ weights[0].T + agg @ weights[1].T
                    inputs.append((x_dst, agg))
                else:
                    agg = GCNConv.aggregate(block, x)
                    part = agg @ weights[0].T
                    inputs.append((agg,))
                partials.append(part.cpu())
        mine = prep.layer1[self.rank].n_dst
        exchange = self.partial_tr.start_all_to_all_v(
            partials, [(mine, self.hidden)] * self.ctx.world, "partials"
        )
        return ModelParallelPass(exchange, inputs, version, time.perf_counter())

    def _sum_partials(self, mp: ModelParallelPass) -> torch.Tensor:
        """The owner's pre-activation (without bias): the K partials added in rank order."""
        t0 = time.perf_counter()
        parts = mp.exchange.wait()
        now = time.perf_counter()
        # the partials' exchange: seconds it was in flight before it was needed, and seconds waited for it
        self.timers["partials_in_flight"] += now - mp.posted
        self.timers["partials_wait"] += now - t0
        with self.compute_span("L0-sum", layer=0, phase="fwd"):
            z = parts[0].clone()
            for p in parts[1:]:
                z += p
        return z

    def _model_parallel_backward(self, mp: ModelParallelPass, grads: list[torch.Tensor]) -> None:
        """This worker's column slices' gradients from every owner's ``∂L/∂z¹`` (owners in rank order)."""
        params = dict(self.model.named_parameters())
        with self.compute_span("L0-grad", layer=0, phase="bwd"):
            for i, name in enumerate(self.sharded):
                p = params[name]
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                for g, inputs in zip(grads, mp.inputs, strict=True):
                    p.grad += g.to(p.device, p.dtype).T @ inputs[i]

    def _layer1_block(self, b: LayerOneBlock) -> Block:
        src = torch.from_numpy(b.src)
        return Block(
            n_dst=b.n_dst,
            n_src=len(b.src),
            indptr=torch.from_numpy(b.indptr),
            indices=torch.from_numpy(b.indices),
            src_out_degree=self.g_out_degree[src],
            dst_in_degree=self.g_in_degree[src[: b.n_dst]],
            dst_global=src[: b.n_dst],
        ).to(self.device)

    # --- weight stashing (pipelined) --------------------------------------------------------------------
    def _remember(self, t: int) -> None:
        """The weights batch ``t`` starts with in the pipeline: layer 1's slices now; the replicated ones now only
        when no update trails (else the update that makes them records them); versions no batch will read are
        dropped."""
        version = self.history.setdefault(t, {})
        for n, p in self.model.named_parameters():
            if n not in version and (n in self.sharded or not self._trailing):
                version[n] = p.detach().clone()
        for old in [v for v in self.history if v < t - DELAY]:
            del self.history[old]

    def _use_weights(self, version: int):
        """Put weight version ``version`` into the replicated parameters for a batch's data-parallel phase;
        returns the function that puts the current weights back (nothing to do unpipelined)."""
        if not self.pipelined:
            return lambda: None
        live = {}
        for n, p in self.model.named_parameters():
            if n not in self.sharded:
                live[n] = p.data
                p.data = self.history[version][n]

        def restore() -> None:
            for n, p in self.model.named_parameters():
                if n in live:
                    p.data = live[n]

        return restore

    # --- bookkeeping ------------------------------------------------------------------------------------
    def replicated_values(self) -> int:
        """Values of the replicated parameters: what every step's gradient all-reduce carries."""
        return sum(p.numel() for n, p in self.model.named_parameters() if n not in self.sharded)

    def stats(self) -> dict:
        itemsize = torch.empty(0, dtype=self.cfg.torch_dtype).element_size()
        t = self.timers
        in_flight = t["partials_in_flight"]
        return {
            **super().stats(),
            "allreduce_bytes": int(t["updates"]) * self.replicated_values() * itemsize,
            # the most batches in flight at once (the one in its data-parallel phase and those whose partials
            # travel), and the share of the partials' time in flight that no one waited for
            "batches_in_flight_max": int(t["batches_in_flight_max"]) or 1,
            "partials_hidden_share": 1.0 - t["partials_wait"] / in_flight if in_flight > 0 else None,
            # pipelined: the most replicated updates trailing their gradients after a step (at most 3), the
            # seconds spent waiting for a trailing all-reduce to complete, and applying the epoch's last ones
            **(
                {
                    "updates_trailing_max": int(t["updates_trailing_max"]),
                    "update_wait_seconds": t["update_wait_seconds"],
                    "drain_seconds": t["drain_seconds"],
                }
                if self.pipelined
                else {}
            ),
        }

    def infer(self) -> Inference:
        """Exact full-neighbour inference (as every strategy's) with layer 1's slices put together (collective)."""
        full = self.full_state_dict()
        if self._full_model is None:
            self._full_model = model_from_spec(self.ctx.spec).to(self.cfg.torch_dtype).to(self.device)
        self._full_model.load_state_dict(full)
        if self._inference is None:
            self._inference, self._remote_x0 = self._layerwise_inference(self._full_model)
        logits = self._inference.logits(self.features, self._remote_x0)
        return Inference(logits, self.labels, self.splits)


def _parse_block(msg: np.ndarray) -> LayerOneBlock:
    vals = np.asarray(msg, dtype=np.int64)
    n_dst, n_src = int(vals[0]), int(vals[1])
    src = vals[3 : 3 + n_src]
    counts = vals[3 + n_src : 3 + n_src + n_dst]
    indices = vals[3 + n_src + n_dst :]
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return LayerOneBlock(src=src, n_dst=n_dst, indptr=indptr, indices=indices)


STRATEGY = P3Strategy
