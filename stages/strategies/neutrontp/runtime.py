"""NeutronTP (002 §3–4): tensor parallelism on a feature split, naive or decoupled, chunk by chunk.

Every worker holds the whole topology (the plan's ``topology/``, memory-mapped: never the store, so a bundled
plan trains where the store is not) and a column slice of the input features (its ``feature`` shard). The
plan cuts the graph into chunks and interleaves row ownership across workers (``stages/strategies/neutrontp/plan.py``);
:mod:`..tensor_parallel` holds the chunks' aggregation and the exchanges.

* **Naive TP** (002 §3.1), per layer ``l``: split the layer's input rows into column slices (layer 0: the
  shard's slice, nothing to send), aggregate the slice over every chunk (no communication), gather the
  aggregated slices into whole rows of the owned nodes, run the dense update there (SAGE: with the nodes' own
  input rows, which the worker holds), ReLU and dropout (keyed by global id). Backward mirrors it: the dense
  backward on owned rows, a split of the aggregation's gradient, the transposed aggregation per chunk, a
  gather back to rows. Layer 0's aggregation of the fixed features is computed and gathered once
  (``--layer0-cache``, as g3's layer-0 cache). Exact: the same model as single-process training.
* **Decoupled TP** (002 §4.1.2): the dgcn model — its MLP on the owned rows, one split, ``L`` propagation
  rounds of ``Â`` on column slices, one gather, the loss; backward: one split, ``L`` transposed rounds, one
  gather, the MLP's backward. Four collectives per epoch whatever ``L``.
* **Inter-chunk pipeline** (002 §4.2.2, ``--pipeline`` other than ``none``): the split of chunk ``j + 1`` and
  the gather of chunk ``j - 1`` run on a communication thread while chunk ``j`` aggregates — collectives in
  one fixed order on every rank, values bitwise those of the bulk exchanges.
"""

from __future__ import annotations

import threading
from functools import partial

import numpy as np
import torch

from stages.common.errors import G3InputError
from stages.common.npy import load_checked
from stages.common.partition_artifact import load_partition_meta
from stages.common.plan_topology import read_csr
from stages.common.tensor_parallel import slice_widths
from stages.kits.runtime.kernels import add_rows_at
from stages.kits.runtime.strategy import WholePartitionStrategy, WorkerContext, labelled_rows
from stages.kits.runtime.threads import helper_executor
from stages.strategies.neutrontp.knobs import NeutronTPKnobs
from stages.strategies.neutrontp.tensor_parallel import ChunkAggregation, ChunkRouting, column_bounds

SPLIT_CODES = {"train": 1, "valid": 2, "test": 3}


def plan_topology(ctx: WorkerContext) -> tuple[np.ndarray, np.ndarray]:
    """The whole graph's in-edge CSR the planner copied from the store into the plan (plan version 4)."""
    info = ctx.plan_meta.get("topology")
    if info is None:
        raise G3InputError(
            "this neutrontp plan predates plans that carry the graph's topology (plan.json has no "
            "`topology`): re-run `g3 plan`",
            path=ctx.plan_dir,
        )
    return read_csr(ctx.plan_dir, info)


def load_chunks(plan_dir, plan_meta: dict, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plan's chunk bounds, owners' bounds and first uses, checked against the plan's checksums (when it
    has them) and their invariants: bounds from 0 to N, non-decreasing; [chunks, K + 1] owners' bounds inside
    each chunk; a first use per node."""
    root = plan_dir / "chunks"
    files = (plan_meta.get("chunks") or {}).get("files")
    bounds, ob, first = (
        np.asarray(load_checked(root, f"{n}.npy", files, mmap=False))
        for n in ("bounds", "owner_bounds", "first_use")
    )
    n = int(plan_meta["store"]["num_nodes"])
    if (
        bounds.ndim != 1
        or len(bounds) < 1
        or bounds[0] != 0
        or bounds[-1] != n
        or (np.diff(bounds) < 0).any()
    ):
        raise G3InputError(f"chunks/bounds.npy does not run from 0 to {n} without decreasing", path=plan_dir)
    c = len(bounds) - 1
    if ob.shape != (c, k + 1) or (
        c
        and (
            (ob[:, 0] != bounds[:-1]).any()
            or (ob[:, -1] != bounds[1:]).any()
            or (np.diff(ob, axis=1) < 0).any()
        )
    ):
        raise G3InputError(
            f"chunks/owner_bounds.npy is not [{c}, {k + 1}] owners' bounds inside each chunk", path=plan_dir
        )
    if first.shape != (n,) or (n and (first.min() < 0 or first.max() > c)):
        raise G3InputError(f"chunks/first_use.npy is not ({n},) chunk numbers in [0, {c}]", path=plan_dir)
    return bounds, ob, first


class NeutronTPStrategy(WholePartitionStrategy):
    knobs: NeutronTPKnobs
    name = "neutrontp"

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        shard, cfg, k = ctx.shard, ctx.cfg, ctx.world
        self.dtype = cfg.torch_dtype
        self.home = ctx.home  # resident: every slice and row block on the device; else in host memory
        self.tp = ctx.options["tp"]
        self.kind = ctx.spec.kind
        self.num_layers = ctx.spec.layers
        self.pipeline = self.knobs.pipeline != "none" and k > 1
        self.cache0 = self.knobs.layer0_cache != "off"
        manifest = shard.manifest
        if "in_degree.npy" not in manifest:
            raise G3InputError(
                "feature shard without in_degree/out_degree (schema version 1): re-run `g3 "
                "partition --method feature --force`",
                path=shard.path,
            )
        bounds, ob, first = load_chunks(ctx.plan_dir, ctx.plan_meta, k)
        part_meta = load_partition_meta(ctx.part)
        # the shards' contiguous ranges (labels and splits live there) and feature columns, from partition.json
        sizes = [int(p["nodes"]) for p in part_meta["partitions"]]
        self.shard_ranges = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        indptr, indices = plan_topology(ctx)
        in_deg = np.asarray(shard.load("in_degree"), dtype=np.int64)
        out_deg = np.asarray(shard.load("out_degree"), dtype=np.int64)
        op = "mean" if self.kind == "sage" else "gcn"
        self.chunks = ChunkAggregation(
            np.asarray(indptr, dtype=np.int64),
            np.asarray(indices),
            bounds,
            op,
            in_deg,
            out_deg,
            self.dtype,
            self.device,
        )
        self.route = ChunkRouting(ob, first, self.rank, k, self.tr)
        self.owned = self.route.owned
        self.owned_t = torch.from_numpy(self.owned).to(self.device)  # the dropout masks' node ids
        self.n = len(indptr) - 1
        # layer 0's columns: the shard's slice (padding dropped); hidden tensors: as even as possible
        cols = part_meta["feature_split"]["columns"]
        self.cols0 = column_bounds([c["stop"] - c["start"] for c in cols])
        self.c0 = self.cols0[self.rank + 1] - self.cols0[self.rank]
        self.features = shard.load("features")
        self.x0_slice: torch.Tensor | None = None  # [N, c0]
        self.x0_rows: torch.Tensor | None = None  # whole input rows of the owned nodes (SAGE, dgcn)
        self.agg0_rows: torch.Tensor | None = None  # naive: layer 0's aggregation, owned rows (the cache)
        self.labels: torch.Tensor | None = None
        self.splits: dict[str, torch.Tensor] = {}
        self.saved: list = []
        self.global_train = None
        self.epoch = 0
        self.comm = helper_executor("tp-comm") if self.pipeline else None

    @property
    def num_owned(self) -> int:
        return len(self.owned)

    def close(self) -> None:
        if self.comm is not None:
            self.comm.shutdown(wait=False)

    # --- inputs fetched once ------------------------------------------------------------------------------
    def _ensure_inputs(self) -> None:
        if self.labels is not None:
            return
        self.x0_slice = torch.from_numpy(np.array(self.features[:, : self.c0])).to(self.home, self.dtype)
        self._fetch_labels()
        if self.kind in ("sage", "dgcn"):
            self.x0_rows = torch.zeros((self.num_owned, self.cols0[-1]), dtype=self.dtype, device=self.home)
            self.route.slices_to_rows(self.x0_slice, self.route.rows, self.cols0, self.x0_rows, "features")
        self.train_rows = labelled_rows(self.labels, self.splits["train"])
        self.global_train = self.ctx.all_reduce_int(len(self.train_rows))

    def _fetch_labels(self) -> None:
        """Labels and split membership of the owned rows, from the shards that hold them (contiguous ranges)."""
        shard, k = self.ctx.shard, self.ctx.world
        lo = int(shard.owned[0]) if shard.num_owned else 0
        hi = lo + shard.num_owned
        code = np.zeros(shard.num_owned, dtype=np.int64)
        for s, c in SPLIT_CODES.items():
            code[np.asarray(shard.load(s), dtype=np.int64)] = c
        mine = np.stack([np.asarray(shard.load("labels"), dtype=np.int64), code], axis=1)
        ranges = list(zip(self.shard_ranges[:-1], self.shard_ranges[1:], strict=True))
        send = []
        for q in range(k):
            ids = self.route.rows[q]
            ids = ids[(ids >= lo) & (ids < hi)]
            send.append(torch.from_numpy(mine[ids - lo]))
        want = [int(((self.owned >= a) & (self.owned < b)).sum()) for a, b in ranges]
        parts = self.tr.all_to_all_v(send, [(n, 2) for n in want], "labels")
        got = torch.cat(parts) if parts else torch.zeros((0, 2), dtype=torch.int64)
        got = got.to(self.home)
        self.labels = got[:, 0].clone()
        self.splits = {s: torch.nonzero(got[:, 1] == c).flatten() for s, c in SPLIT_CODES.items()}

    # --- chunk passes ------------------------------------------------------------------------------------
    def _all(self) -> range:
        return range(self.route.n_chunks)

    def _run_chunks(self, order: list[int], compute, pre=None, post=None) -> None:
        """``compute(j)`` for every chunk of ``order``; ``pre(chunks)`` is the collective ``compute`` needs first,
        ``post(chunks)`` the one that needs ``compute`` done. Bulk (one collective each) without the pipeline;
        with it, one per chunk on the communication thread in the order pre(0), pre(1), post(0), pre(2),
        post(1), …: the same on every rank."""
        if self.comm is None or (pre is None and post is None):
            if pre is not None:
                pre(sorted(order))
            for j in order:
                compute(j)
            if post is not None:
                post(sorted(order))
            return
        ready = {j: threading.Event() for j in order}
        timeout = self.cfg.wait_seconds()

        def after(j):
            if not ready[j].wait(timeout):
                raise TimeoutError(f"chunk {j} was not computed within {timeout} s")
            post([j])

        pres, posts = {}, []
        if pre is not None:
            pres[order[0]] = self.comm.submit(pre, [order[0]])
        for i, j in enumerate(order):
            if pre is not None and i + 1 < len(order):
                pres[order[i + 1]] = self.comm.submit(pre, [order[i + 1]])
            if post is not None:
                posts.append(self.comm.submit(after, j))
        try:
            for j in order:
                if pre is not None:
                    pres[j].result()
                compute(j)
                ready[j].set()
        finally:
            for j in order:
                ready[j].set()  # a failed compute must not leave the thread waiting
        for f in posts:
            f.result()

    def _aggregate_pass(
        self, x_slice: torch.Tensor, out_slice: torch.Tensor, layer: str, pre=None, post=None
    ) -> None:
        """Forward aggregation of every chunk: ``out_slice[chunk rows] = agg(x_slice)``."""

        def forward(j: int, a: int, b: int) -> None:
            out_slice[a:b] = self.chunks.forward(j, x_slice)

        self._chunk_pass(list(self._all()), forward, f"{layer} chunk", "fwd", pre, post)

    def _transposed_pass(
        self, grad_dst: torch.Tensor, grad_src: torch.Tensor, layer: str, pre=None, post=None
    ) -> None:
        """Backward of :meth:`_aggregate_pass`, chunks in reverse order: ``grad_src += aggᵀ(grad_dst)``."""

        def backward(j: int, a: int, b: int) -> None:
            add_rows_at(grad_src, self.chunks.src_ids[j], self.chunks.backward(j, grad_dst[a:b]))

        self._chunk_pass(list(reversed(self._all())), backward, f"{layer} chunk", "bwd", pre, post)

    def _chunk_pass(self, order: list[int], body, label: str, phase: str, pre, post) -> None:
        """``body(j, first row, end row)`` for every chunk ``j`` of ``order``, each timed as a compute span."""

        def compute(j: int) -> None:
            a, b = self.chunks.span(j)
            name = f"{label} {j}" + (" bwd" if phase == "bwd" else "")
            with self.compute_span(name, phase=phase, nodes=b - a):
                body(j, a, b)

        self._run_chunks(order, compute, pre, post)

    def _split(
        self, rows: torch.Tensor, which: str, cols: list[int], out: torch.Tensor, label: str, chunks
    ) -> None:
        """Rows → slices for ``chunks``: ``which`` = ``new`` (nodes first read there) or ``dst`` (their rows)."""
        self.route.rows_to_slices(rows, self.route.ids(which, chunks), cols, out, label)

    def _gather(
        self, x_slice: torch.Tensor, which: str, cols: list[int], out: torch.Tensor, label: str, chunks
    ) -> None:
        """Slices → rows for ``chunks`` (``which`` as :meth:`_split`)."""
        self.route.slices_to_rows(x_slice, self.route.ids(which, chunks), cols, out, label)

    def _propagate(self, rows: torch.Tensor, passes: list[str], tag: str = "", backward: bool = False):
        """The owned ``rows`` split into every worker's column slice, one aggregation pass per name of ``passes``
        (transposed with ``backward``: the gradients' way), gathered back: the owned rows of the result. ``tag``
        ends the split's and the gather's span names."""
        cols = column_bounds(slice_widths(rows.shape[1], self.ctx.world))
        first, last, prefix = ("dst", "new", "bwd ") if backward else ("new", "dst", "")
        run = self._transposed_pass if backward else self._aggregate_pass
        out = torch.zeros_like(rows)
        width = cols[self.rank + 1] - cols[self.rank]  # this worker's slice
        current = torch.zeros((self.n, width), dtype=self.dtype, device=self.home)
        for i, name in enumerate(passes):
            nxt = torch.zeros_like(current)
            pre = partial(self._split, rows, first, cols, current, f"{prefix}split{tag}") if i == 0 else None
            end = i == len(passes) - 1
            post = partial(self._gather, nxt, last, cols, out, f"{prefix}gather{tag}") if end else None
            run(current, nxt, name, pre, post)
            current = nxt
        return out

    # --- the interface ----------------------------------------------------------------------------------
    def after_inference(self) -> None:
        self.saved = []

    def _forward(self, epoch: int, training: bool) -> torch.Tensor:
        self._ensure_inputs()
        self.saved = []
        if self.tp == "decoupled":
            return self._forward_decoupled(epoch, training)
        return self._forward_naive(epoch, training)

    def backward(self, grad_logits: torch.Tensor) -> None:
        if self.tp == "decoupled":
            self._backward_decoupled(grad_logits)
        else:
            self._backward_naive(grad_logits)
        self.saved = []

    # --- naive TP ----------------------------------------------------------------------------------------
    def _layer0_aggregation(self) -> torch.Tensor:
        if self.agg0_rows is not None:
            return self.agg0_rows
        out_slice = torch.zeros((self.n, self.c0), dtype=self.dtype, device=self.home)
        rows = torch.zeros((self.num_owned, self.cols0[-1]), dtype=self.dtype, device=self.home)
        self._aggregate_pass(
            self.x0_slice,
            out_slice,
            "L0",
            post=partial(self._gather, out_slice, "dst", self.cols0, rows, "gather L0"),
        )
        if self.cache0:
            self.agg0_rows = rows
        return rows

    def _forward_naive(self, epoch: int, training: bool) -> torch.Tensor:
        h: torch.Tensor | None = None  # the owned rows of the current layer's input
        for li in range(self.num_layers):
            if li == 0:
                agg, x = self._layer0_aggregation(), self.x0_rows
            else:
                agg = self._propagate(h, [f"L{li}"], f" L{li}")
                if training:
                    agg.requires_grad_(True)
                    x = h.detach().requires_grad_(self.kind == "sage")
                else:
                    x = h
            with (
                self.compute_span(
                    f"L{li} dense", layer=li, phase="fwd" if training else "eval", nodes=self.num_owned
                ),
                torch.set_grad_enabled(training),
            ):
                # the layer's update from the aggregation made here: the value of its layer_forward
                combined = self.model.layers[li].combine(
                    x.to(self.device) if x is not None else None, agg.to(self.device)
                )
                y = self.model.activate(
                    li, combined, self.owned_t, epoch, self.cfg.dropout, self.cfg.seed, training
                )
            if training:
                self.saved.append((x, agg, y))
            h = y.detach().to(self.home)
        return h

    def _backward_naive(self, grad_logits: torch.Tensor) -> None:
        grad = grad_logits
        for li in reversed(range(self.num_layers)):
            x, agg, y = self.saved[li]
            with self.compute_span(f"L{li} dense bwd", layer=li, phase="bwd", nodes=self.num_owned):
                torch.autograd.backward(y, grad.to(y.device, dtype=y.dtype))
            if li == 0:
                break
            grad = self._propagate(agg.grad, [f"L{li}"], f" L{li}", backward=True)
            if x.grad is not None:
                grad += x.grad.to(self.home)

    # --- decoupled TP ------------------------------------------------------------------------------------
    def _forward_decoupled(self, epoch: int, training: bool) -> torch.Tensor:
        mlp = self.model.layers[0]
        with (
            self.compute_span("MLP", phase="fwd" if training else "eval", nodes=self.num_owned),
            torch.set_grad_enabled(training),
        ):
            z = mlp.forward_rows(
                self.x0_rows.to(self.device), self.owned_t, epoch, self.cfg.dropout, self.cfg.seed, training
            )
        logits = self._propagate(z.detach().to(self.home), [f"P{r}" for r in range(1, self.num_layers + 1)])
        if training:
            self.saved = [z]
        return logits

    def _backward_decoupled(self, grad_logits: torch.Tensor) -> None:
        (z,) = self.saved
        labels = [f"P{r}" for r in range(self.num_layers, 0, -1)]
        grad_z = self._propagate(grad_logits.to(self.dtype), labels, backward=True)
        with self.compute_span("MLP bwd", phase="bwd", nodes=self.num_owned):
            torch.autograd.backward(z, grad_z.to(z.device, dtype=z.dtype))


STRATEGY = NeutronTPStrategy
