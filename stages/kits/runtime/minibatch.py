"""What every mini-batch strategy shares: batches of target nodes, their sampled message-flow graphs, the remote
features they read, a background sampler, and exact full-neighbour inference.

An epoch is ``steps(epoch)`` steps, the same on every rank. A step's targets come from :meth:`batch` (the
strategy's batch order); its blocks from :func:`~stages.kits.runtime.neighbor_sampler.build_blocks` with the
strategy's :meth:`sample` (who holds a node's in-edges answers for it); the input features of the first
block's sources are the worker's own rows or fetched by global id through the transport (sizes, ids, rows).
Preparing a step — batch, sampling, fetch — never reads the weights, so a background thread
(``g3 train --prefetch N``: N steps ahead, ``off`` = in the step itself) changes nothing but the time.

Dropout is keyed by (epoch, step) (:func:`step_key`), sampling by (seed, epoch, step, hop), so a run is
reproducible and a resumed run (checkpoints are taken at epoch ends; the sampler keeps no state beyond the
epoch and step it is asked for) equals an uninterrupted one. Evaluation is exact full-neighbour inference of
every owned node by :class:`~stages.kits.runtime.inference.LayerwiseInference` (layer by layer, batch by batch, the
plan's boundary tables between layers), so every strategy's accuracy is measured the same way and no worker
ever builds its whole partition as one block.

``g3 train --micro-batches N`` splits each step's targets into N micro-batches whose gradients accumulate into
the step's one optimizer update (the loss of each normalised by the step's global target count): the sampler
keys its draws by node, so every target sees the same sampled tree as in the whole batch and the model is the
same — with about 1/N of the step's activations and blocks alive at once.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

import numba
import numpy as np
import torch
import torch.distributed as dist

from stages.common.knobs import SamplingKnobs
from stages.common.partition_artifact import Shard
from stages.kits.runtime.block import Block, cheaper_to_project
from stages.kits.runtime.device.op_counter import OpCount, OpCounter
from stages.kits.runtime.inference import LayerwiseInference, per_peer_ids
from stages.kits.runtime.kernels import backend
from stages.kits.runtime.models.sage import ROW_INDICES, SAGEConv
from stages.kits.runtime.neighbor_sampler import Ids, SampledBlock, _mix64, sample_key, signed64
from stages.kits.runtime.strategy import (
    Inference,
    StepOutput,
    Strategy,
    WorkerContext,
    labelled_rows,
    owned_splits,
)
from stages.kits.runtime.transport import PartitionBook, Transport

_M32 = (1 << 32) - 1


def step_key(epoch: int, step: int) -> int:
    """The dropout masks' "epoch" of a step: ``epoch`` itself at step 0 (so one batch of every training node is
    full-graph training, masks included), other steps spread by a multiplicative hash."""
    return (epoch ^ (step * 0x9E3779B1)) & _M32


@numba.njit(cache=True)
def _hash_ids(key, ids, out):
    k = np.uint64(key)
    for i in range(len(ids)):
        out[i] = _mix64(k ^ np.uint64(ids[i]))


def shuffled(ids: np.ndarray, seed: int, epoch: int, stream: int = 0) -> np.ndarray:
    """``ids`` in the order of a hash of (seed, epoch, stream, id): a permutation any worker computes alike."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    keys = np.empty(len(ids), dtype=np.uint64)
    _hash_ids(signed64(sample_key(seed, epoch, stream, 0x0BA7C4)), ids, keys.view(np.int64))
    return ids[np.lexsort((ids, keys))]


@dataclass
class PreparedStep:
    """A step's inputs, made by the sampler: targets (global ids), blocks (first layer first), the first
    block's source features and, for models that need them, the sources' global (in, out) degrees."""

    targets: Ids
    global_targets: int | None
    blocks: list[SampledBlock]
    x0: torch.Tensor
    degrees: torch.Tensor | None
    seconds: dict
    target_rows: Ids | None = None  # rows of the last block's destinations that carry the loss (None: all)
    fetched_rows: int = 0  # input rows fetched from other workers
    buffer: torch.Tensor | None = None  # the reused buffer ``x0`` is a view of (:class:`RowBuffers`), if any
    # set when the first layer reads its sources' rows in the feature table itself: the table's row of each arc
    # of the first block (int32), and ``x0`` holds only the first block's destinations' rows
    arc_rows: Ids | None = None
    ops: OpCount | None = None  # --count-ops: what preparing it dispatched on the sampler thread


def count_preparation(prep: PreparedStep) -> None:
    """Adds to ``--count-ops``'s counter what preparing ``prep`` dispatched on another thread, when the step it
    prepares is the counted one and is running now (call it where the step takes its prepared inputs)."""
    if prep.ops is not None and (counting := OpCounter.active()) is not None:
        counting.add(prep.ops)


@dataclass
class Sampled:
    """A step's targets and blocks as the sampler drew them, with when it started and finished."""

    targets: np.ndarray
    global_targets: int | None
    blocks: list[SampledBlock]
    started: float
    sampled: float

    def step(
        self, x0, degrees, extra_seconds: float = 0.0, kind: type = PreparedStep, **more
    ) -> PreparedStep:
        """The step's inputs (``kind``: PreparedStep or an extension of it), timed: sampling (plus
        ``extra_seconds`` spent on it elsewhere) and fetching the inputs until now."""
        seconds = {
            "sample": self.sampled - self.started + extra_seconds,
            "fetch": time.perf_counter() - self.sampled,
        }
        return kind(self.targets, self.global_targets, self.blocks, x0, degrees, seconds, **more)


class RowBuffers:
    """Input-row buffers reused from step to step, so that a step's gather writes into memory already mapped
    instead of a fresh tensor of tens of MB (the copy's pages faulted in and zeroed every step).

    :meth:`take` hands out a buffer of at least ``n`` rows (the first free one large enough, else a new one an
    eighth larger, so that the next steps' slightly different sizes fit it); :meth:`give` returns it once
    nothing reads it any more. The sampler thread takes, the compute thread gives: at most the prefetch depth
    plus two are in use at once."""

    def __init__(self, width: int, dtype: torch.dtype):
        self.width, self.dtype = width, dtype
        self._free: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self, n: int) -> torch.Tensor:
        with self._lock:
            for i, buf in enumerate(self._free):
                if buf.shape[0] >= n:
                    return self._free.pop(i)
        return torch.empty((n + n // 8 + 1, self.width), dtype=self.dtype)

    def give(self, buf: torch.Tensor | None) -> None:
        if buf is not None:
            with self._lock:
                self._free.append(buf)


class MiniBatchStrategy(Strategy):
    """Base of the mini-batch strategies; a subclass gives :meth:`steps`, :meth:`batch` and :meth:`sample`."""

    mini_batch = True
    knobs: SamplingKnobs

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        shard = ctx.shard
        self.n_own, self.n_rem = shard.num_owned, shard.num_remote
        self.global_ids = torch.from_numpy(np.concatenate([shard.owned, shard.remote]).astype(np.int64))
        self.features = torch.from_numpy(np.array(shard.load("features"))).to(ctx.cfg.torch_dtype)
        self.labels = torch.from_numpy(np.asarray(shard.load("labels")).astype(np.int64))
        self.splits = owned_splits(shard)
        self.train_rows = labelled_rows(self.labels, self.splits["train"])
        self.epoch = 0
        self.micro = max(1, int(self.knobs.micro_batches))
        self._inference: LayerwiseInference | None = None
        self._remote_x0: torch.Tensor | None = None
        self.book = PartitionBook.open(ctx.part, ctx.world)
        self.owned_global = self.global_ids[: self.n_own].numpy()  # ascending
        self.train_global = self.owned_global[self.train_rows.numpy()]
        self.needs_degrees = ctx.spec.kind == "gcn"
        self.in_degree = np.asarray(ctx.shard.load("in_degree"), dtype=np.int64)[: self.n_own]
        self.out_degree = np.asarray(ctx.shard.load("out_degree"), dtype=np.int64)[: self.n_own]
        self.num_nodes = int(ctx.plan_meta["store"]["num_nodes"])
        self._scratch = threading.local()
        self.depth = self.knobs.prefetch_depth()
        self.sampling_tr = self._sampling_transport()
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._out: torch.Tensor | None = None
        # input rows gathered into reused buffers (a subclass that keeps a step's inputs beyond its backward,
        # or computes them elsewhere, leaves this off: a buffer is given back when the next step is taken)
        self.reuse_inputs = False
        self.row_buffers = RowBuffers(self.features.shape[1], self.features.dtype)
        self._held: torch.Tensor | None = None  # the buffer of the step being computed
        # the first layer may aggregate its sources' rows where they lie in the feature table instead of a copy
        # of them (a subclass that reads x0 itself leaves this off; all rows must be this worker's, on the CPU)
        self.inputs_in_place = False

    def _sampling_transport(self) -> Transport:
        """The sampler's own gloo group (its collectives run on the sampler thread while the compute thread
        all-reduces gradients on the default group, which on the CPU is also the P2P one), counting into the
        same statistics and tracer as the strategy's transport."""
        return self.own_transport()

    def own_transport(self) -> Transport:
        """A transport on a new gloo group of all workers (collective: every rank creates its groups in the same
        order), counting into the strategy transport's statistics and tracer."""
        if self.ctx.world == 1 or not dist.is_initialized():
            return self.tr
        from datetime import timedelta

        group = dist.new_group(backend="gloo", timeout=timedelta(seconds=self.cfg.wait_seconds()))
        tr = Transport(group, self.rank, self.ctx.world, self.tracer, self.cfg.wait_seconds())
        tr.stats = self.tr.stats
        return tr

    def scratch(self) -> np.ndarray:
        """This thread's relabelling scratch (int32 [num_nodes], all −1 between uses; 4 bytes a node)."""
        a = getattr(self._scratch, "array", None)
        if a is None:
            a = self._scratch.array = np.full(self.num_nodes, -1, dtype=np.int32)
        return a

    # --- what a mini-batch strategy defines --------------------------------------------------------------
    def batch(self, epoch: int, step: int) -> tuple[np.ndarray, int | None]:
        """This rank's targets of the step (owned global ids) and the step's global target count (None: the
        loop adds the ranks' counts)."""
        raise NotImplementedError

    def blocks(self, epoch: int, step: int, targets: np.ndarray) -> list[SampledBlock]:
        raise NotImplementedError

    # --- preparing a step (sampler side: never reads the weights) ----------------------------------------
    def sample_step(self, epoch: int, step: int, batch=None) -> Sampled:
        """A step's targets (``batch``, else :meth:`batch`'s) and their blocks, timed."""
        t0 = time.perf_counter()
        targets, global_targets = batch if batch is not None else self.batch(epoch, step)
        blocks = self.blocks(epoch, step, targets)
        return Sampled(targets, global_targets, blocks, t0, time.perf_counter())

    def prepare(
        self,
        epoch: int,
        step: int,
        batch: tuple[np.ndarray, int | None] | None = None,
        extra_seconds: float = 0.0,
    ) -> PreparedStep:
        """The step's inputs; ``batch`` (targets, global count) replaces :meth:`batch` for a micro-batch."""
        sampled = self.sample_step(epoch, step, batch)
        blocks = sampled.blocks
        sources = blocks[0].src if blocks else sampled.targets
        arc_rows = None
        if blocks and self.reads_inputs_in_place(blocks[0]):
            # the aggregation reads every source's row in the table, by arc; only the destinations' own rows
            # (the self term, the first n_dst sources) are gathered
            local = self.book.local[sources]
            arc_rows = local[blocks[0].indices].astype(
                np.int32 if len(self.features) < 2**31 - 1 else np.int64
            )
            sources = sources[: len(blocks[0].dst)]
        buffer = self.row_buffers.take(len(sources)) if self.reuse_inputs else None
        x0, degrees, fetched = self.gather_inputs(sources, None if buffer is None else buffer[: len(sources)])
        return sampled.step(
            x0, degrees, extra_seconds, fetched_rows=fetched, buffer=buffer, arc_rows=arc_rows
        )

    def reads_inputs_in_place(self, first: SampledBlock) -> bool:
        """Whether the first layer aggregates ``first``'s source rows in the feature table itself (no gathered
        copy of them): where :attr:`inputs_in_place` allows, for a SAGE layer that aggregates before it
        projects on this block (:func:`~stages.kits.runtime.block.project_first`) — the same sums in the same
        order as over a gathered copy, bitwise."""
        if not self.inputs_in_place or backend(self.features) != "numba" or self.cfg.device != "cpu":
            return False
        layer = self.model.layers[0]
        return isinstance(layer, SAGEConv) and not cheaper_to_project(
            len(first.src), len(first.dst), len(first.indices), layer.in_dim, layer.out_dim
        )

    def gather_inputs(
        self, nodes: np.ndarray, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """Input features of ``nodes`` (global ids): own rows locally, the others fetched from their owners (one
        collective: every rank calls it once per step); with GCN also their global (in, out) degrees; and how
        many rows were fetched. ``out``: ``[len(nodes), width]`` to gather into (else a new tensor). Rows are
        copied by ``index_select`` (a row copy each; advanced indexing ``features[ids]`` goes element by
        element, 4–7× slower on 150,000 rows of 100 floats)."""
        if self.ctx.world == 1:  # every node is this worker's: one gather, no collective
            local = self.book.local[nodes]
            degrees = torch.from_numpy(self.own_degrees(local)) if self.needs_degrees else None
            return self.own_rows(torch.from_numpy(local), len(nodes), None, out), degrees, 0
        mine = self.book.owner[nodes] == self.rank
        local_ids = self.book.local[nodes[mine]]
        local = torch.from_numpy(local_ids)
        others = nodes[~mine]
        rows = self.sampling_tr.fetch(
            others,
            self.book,
            lambda ids: self.features.index_select(0, torch.from_numpy(ids)),
            self.features.shape[1],
            self.features.dtype,
            "features0",
        )
        own_at, other_at = torch.from_numpy(np.flatnonzero(mine)), torch.from_numpy(np.flatnonzero(~mine))
        x = self.own_rows(local, len(nodes), own_at if len(others) else None, out)
        if len(others):
            x.index_copy_(0, other_at, rows)
        degrees = None
        if self.needs_degrees:
            degrees = torch.empty((len(nodes), 2), dtype=torch.int64)
            degrees[own_at] = torch.from_numpy(self.own_degrees(local_ids))
            degrees[other_at] = self.sampling_tr.fetch(
                others,
                self.book,
                lambda ids: torch.from_numpy(self.own_degrees(ids)),
                2,
                torch.int64,
                "degrees0",
            )
        return x, degrees, len(others)

    def own_rows(
        self, local: torch.Tensor, n: int, at: torch.Tensor | None, out: torch.Tensor | None
    ) -> torch.Tensor:
        """``[n, width]`` input rows holding this worker's rows ``local`` (shard-local ids) at positions ``at``
        (the other rows left to the caller), or, ``at`` None, made of them alone in their order (one copy, not
        two). ``out``: where to write (else a new tensor)."""
        if at is None:
            if out is not None:
                return torch.index_select(self.features, 0, local, out=out)
            return self.features.index_select(0, local)
        x = out if out is not None else torch.empty((n, self.features.shape[1]), dtype=self.features.dtype)
        x.index_copy_(0, at, self.features.index_select(0, local))
        return x

    def own_degrees(self, local: np.ndarray | slice) -> np.ndarray:
        """The global (in, out) degrees of this worker's nodes ``local`` (shard-local ids; ``slice(None)``: all
        of them), ``[n, 2]`` int64."""
        return np.stack([self.in_degree[local], self.out_degree[local]], axis=1)

    def prepare_micro(self, epoch: int, step: int, micro: int) -> PreparedStep:
        """Micro-batch ``micro`` of the step: a contiguous share of its targets, sampled and fetched alone; its
        global target count is the whole step's (it normalises the loss of every micro-batch)."""
        if self.micro == 1:
            return self.prepare(epoch, step)
        if micro == 0:
            t0 = time.perf_counter()
            targets, global_targets = self.batch(epoch, step)
            # every rank's sampler runs this in step order: a collective is safe here
            if global_targets is None:
                global_targets = self.sampling_tr.all_reduce_sum(len(targets), "targets")
            self._step_targets = (
                np.array_split(targets, self.micro),
                global_targets,
                time.perf_counter() - t0,
            )
        shares, global_targets, batch_seconds = self._step_targets
        return self.prepare(
            epoch, step, (shares[micro], global_targets), extra_seconds=batch_seconds if micro == 0 else 0.0
        )

    def _next(self, epoch: int, step: int, micro: int = 0) -> PreparedStep:
        if self.depth == 0:
            return self.prepare_micro(epoch, step, micro)
        if step == 0 and micro == 0:
            self._start_sampler(epoch)
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        if step == self.steps(epoch) - 1 and micro == self.micro - 1:
            self._thread.join()
        return item

    def _start_sampler(self, epoch: int) -> None:
        """A thread preparing every step of ``epoch`` in order, at most ``depth`` ahead of the compute."""
        self._queue = q = queue.Queue(maxsize=self.depth)

        def run() -> None:
            try:
                for s in range(self.steps(epoch)):
                    for m in range(self.micro):
                        q.put(self._prepare_on_thread(epoch, s, m))
            except BaseException as exc:  # handed to the compute thread, which raises it
                q.put(exc)

        self._thread = threading.Thread(target=run, daemon=True, name="sampler")
        self._thread.start()

    def _prepare_on_thread(self, epoch: int, step: int, micro: int) -> PreparedStep:
        """:meth:`prepare_micro` on the sampler thread; the step ``--count-ops`` counts is counted here, and the
        compute thread's counter adds it when the step runs."""
        if (epoch, step) != self.counted_step:
            return self.prepare_micro(epoch, step, micro)
        with OpCounter(self.device) as counter:
            prep = self.prepare_micro(epoch, step, micro)
        prep.ops = counter.count
        return prep

    # --- the interface ----------------------------------------------------------------------------------
    def micro_steps(self, epoch: int, step: int) -> int:
        return self.micro

    def forward(self, epoch: int, step: int, micro: int = 0) -> StepOutput:
        self.epoch = epoch
        # the step before this one is done (its backward ran): its input buffer may be written again
        self.row_buffers.give(self._held)
        prep = self._next(epoch, step, micro)
        count_preparation(prep)
        self._held = prep.buffer
        self._count(prep)
        out_nodes = prep.blocks[-1].dst if prep.blocks else prep.targets
        labels = self.target_labels(out_nodes)
        rows = (
            torch.as_tensor(prep.target_rows)
            if prep.target_rows is not None
            else torch.arange(len(out_nodes), device=self.device)
        )
        return self.step_output(epoch, step, prep, labels, rows)

    def step_output(
        self, epoch: int, step: int, prep: PreparedStep, labels: torch.Tensor, rows: torch.Tensor
    ) -> StepOutput:
        """The prepared step through the model (kept for backward) with its targets' ``labels`` and ``rows``; a
        step without targets (out of batches, in local order) computes nothing: a zero gradient."""
        if len(prep.targets) == 0:
            self._out = None
            empty = torch.zeros((0, self.ctx.spec.widths[-1]), dtype=self.features.dtype)
            return StepOutput(empty, labels[:0], torch.arange(0), prep.global_targets)
        self._out = self.run_blocks(epoch, step, prep)
        return StepOutput(self._out.detach(), labels, rows, prep.global_targets)

    def _count(self, prep: PreparedStep) -> None:
        """A step's preparation in the epoch's counters: sampling and fetch seconds, sampled arcs, source rows
        (the targets where there is no block) and rows fetched from other workers."""
        t = self.timers
        t["sample"] += prep.seconds["sample"]
        t["fetch"] += prep.seconds["fetch"]
        t["sampled_arcs"] += sum(len(b.indices) for b in prep.blocks)
        t["source_rows"] += len(prep.blocks[0].src if prep.blocks else prep.targets)
        t["fetched_rows"] += prep.fetched_rows

    def run_blocks(self, epoch: int, step: int, prep: PreparedStep) -> torch.Tensor:
        """The model's forward over a prepared step's blocks (autograd kept for backward): the logits of the last
        block's destinations."""
        key = step_key(epoch, step)
        x = prep.x0.to(self.device)
        for li, sb in enumerate(prep.blocks):
            block = self._block(sb, prep.degrees)
            with (
                self.compute_span(
                    f"L{li}", layer=li, phase="fwd", nodes=block.n_dst, arcs=block.nnz, srcs=block.n_src
                ),
                torch.enable_grad(),
            ):
                if li == 0 and prep.arc_rows is not None:  # sources read in the feature table, x = their rows
                    block.cached(ROW_INDICES, lambda: torch.from_numpy(prep.arc_rows))
                    x = self.model.layer_forward_rows(
                        0, block, self.features, None, x, key, self.cfg.dropout, self.cfg.seed, True
                    )
                else:
                    x = self.model.layer_forward(li, block, x, key, self.cfg.dropout, self.cfg.seed, True)
        return x

    def target_labels(self, nodes: np.ndarray) -> torch.Tensor:
        """Labels of a step's output nodes (global ids; this worker's own unless the strategy says otherwise)."""
        return self.labels[torch.from_numpy(self.book.local[nodes])]

    def _block(self, sb: SampledBlock, degrees: torch.Tensor | None) -> Block:
        n_dst, n_src = len(sb.dst), len(sb.src)
        if degrees is None:  # SAGE and GAT read no degrees: made where they are used, not copied there
            in_deg, out_deg = torch.zeros(n_dst, device=self.device), torch.zeros(n_src, device=self.device)
        else:  # every block's sources are a prefix of the first block's (destinations first, hop by hop)
            in_deg, out_deg = degrees[:n_dst, 0].double(), degrees[:n_src, 1].double()
        # a sampled block has many more sources than destinations: its layers order projection and aggregation
        # by the block's sizes (aggregating first where projecting every source costs more)
        return Block(
            n_dst=n_dst,
            n_src=n_src,
            indptr=torch.as_tensor(sb.indptr),
            indices=torch.as_tensor(sb.indices),
            src_out_degree=out_deg,
            dst_in_degree=in_deg,
            dst_global=torch.as_tensor(sb.dst),
            order_by_cost=True,
        ).to(self.device)

    def backward(self, grad_logits: torch.Tensor) -> bool | None:
        if self._out is not None and self._out.requires_grad:
            with self.compute_span("bwd", phase="bwd"):
                torch.autograd.backward(self._out, grad_logits.to(self._out.device, dtype=self._out.dtype))
        self._out = None

    @property
    def num_owned(self) -> int:
        return self.n_own

    def infer(self) -> Inference:
        """Exact full-neighbour inference of every owned node, layer by layer (:class:`LayerwiseInference`)."""
        if self._inference is None:
            self._inference, self._remote_x0 = self._layerwise_inference()
        logits = self._inference.logits(self.features, self._remote_x0)
        return Inference(logits, self.labels, self.splits)

    def _layerwise_inference(self, model=None) -> tuple[LayerwiseInference, torch.Tensor]:
        """The inference component over this worker's shard running ``model`` (the strategy's by default), and
        the remote nodes' input features (fetched once through the plan's boundary tables)."""
        shard: Shard = self.ctx.shard
        send_table, recv_table = self.ctx.plan.table("boundary_send"), self.ctx.plan.table("boundary_recv")
        remote = torch.zeros((self.n_rem, self.features.shape[1]), dtype=self.features.dtype)
        # labelled eval-1 (the rows of "layer -1's output", the input; eval{l}: layer l's output rows), so
        # evaluation's one fetch is never counted as training's features0
        self.tr.exchange_table(send_table, recv_table, "eval", -1, self.features, remote)
        dtype = self.features.dtype
        in_deg = torch.from_numpy(np.asarray(shard.load("in_degree"), dtype=np.float64)).to(dtype)
        out_deg = torch.from_numpy(np.asarray(shard.load("out_degree"), dtype=np.float64)).to(dtype)
        component = LayerwiseInference(
            self.ctx,
            model if model is not None else self.model,
            np.asarray(shard.indptr),
            np.asarray(shard.indices),
            in_deg,
            out_deg,
            self.global_ids[: self.n_own],
            per_peer_ids(send_table, self.ctx.world),
            per_peer_ids(recv_table, self.ctx.world),
            self.n_rem,
            batch_nodes=self.inference_batch_nodes,
        )
        return component, remote

    inference_batch_nodes = 4096  # destinations per inference block

    def stats(self) -> dict:
        source, fetched = int(self.timers["source_rows"]), int(self.timers["fetched_rows"])
        return {
            **super().stats(),
            "sample_seconds": self.timers["sample"],
            "fetch_seconds": self.timers["fetch"],
            "sampled_arcs": int(self.timers["sampled_arcs"]),
            "fetched_rows": fetched,
            "source_rows": source,
            # the share of input rows read that another worker held (HopGNN's "miss rate", 004 §2)
            "feature_miss_rate": fetched / source if source else 0.0,
        }

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=1.0)


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
