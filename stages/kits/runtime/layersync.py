"""Layer-synchronous, whole-partition training (the execution BNS-GCN and SANCUS share; G3 §7.2's baselines).

Each layer: the worker obtains its remote nodes' rows of the previous layer's output from their owners
(:meth:`LayerSyncStrategy.exchange_forward`: every boundary row, a sample of them, or a cached copy — the
strategy decides), then computes its whole partition at once — one block holding every owned node and all
its in-arcs, no bins, no overlap — keeping each layer's autograd graph for backward. Backward mirrors it in
reverse: the gradient of every layer's input rows splits into the owned rows' part and the remote rows' part,
which goes back to the owners (:meth:`exchange_backward`); what arrives is added in peer order, so the sum
is the same in every run.

The worker's plan folder holds the boundary tables (``stages/kits/plan/boundary.py``): ``boundary_send`` (owned
ids each peer needs) and ``boundary_recv`` (remote offsets each peer sends). Layer 0's inputs are the node
features, fetched once and, with ``--layer0-cache``, aggregated once (the block persists).
"""

from __future__ import annotations

import numpy as np
import torch

from stages.common.knobs import Layer0CacheKnobs
from stages.kits.runtime.block import Block
from stages.kits.runtime.inference import exchange_boundary_rows, per_peer_ids
from stages.kits.runtime.kernels import add_rows_at, take_rows_at
from stages.kits.runtime.strategy import WholePartitionStrategy, WorkerContext, labelled_rows, owned_splits


class LayerSyncStrategy(WholePartitionStrategy):
    knobs: Layer0CacheKnobs
    # dropout applied by the owner (in the layer); False: by the receiver (input_transform)
    owner_dropout = True

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        shard, cfg = ctx.shard, ctx.cfg
        dtype = cfg.torch_dtype
        self.n_own, self.n_rem = shard.num_owned, shard.num_remote
        self.num_layers = ctx.spec.num_blocks
        self.global_ids = torch.from_numpy(np.concatenate([shard.owned, shard.remote]).astype(np.int64))
        # resident: every layer's rows and gradients stay on the device (``home``); else each layer's outputs
        # and input gradients are copied out to host memory, where the exchanges run
        self.home = ctx.home
        self.features = torch.from_numpy(np.array(shard.load("features"))).to(dtype)
        self.labels = torch.from_numpy(np.asarray(shard.load("labels")).astype(np.int64)).to(self.home)
        self.splits = {s: rows.to(self.home) for s, rows in owned_splits(shard).items()}
        in_deg = torch.from_numpy(np.asarray(shard.load("in_degree"), dtype=np.float64)).to(dtype)
        out_deg = torch.from_numpy(np.asarray(shard.load("out_degree"), dtype=np.float64)).to(dtype)
        self.block = Block(
            n_dst=self.n_own,
            n_src=self.n_own + self.n_rem,
            indptr=torch.from_numpy(np.array(shard.indptr, dtype=np.int64)),
            indices=torch.from_numpy(np.array(shard.indices, dtype=np.int64)),
            src_out_degree=out_deg,
            dst_in_degree=in_deg[: self.n_own],
            dst_global=self.global_ids[: self.n_own],
        ).to(self.device)
        plan = ctx.plan
        self.send_table, self.recv_table = plan.table("boundary_send"), plan.table("boundary_recv")
        self.send_ids = per_peer_ids(self.send_table, ctx.world)  # owned ids each peer needs
        self.recv_ids = per_peer_ids(self.recv_table, ctx.world)  # remote offsets each peer sends
        self.static0 = (
            self.knobs.layer0_cache_enabled(cfg.device, ctx.resident)
            and model.static_input_rows(0) is not None
        )
        self.x0: torch.Tensor | None = None  # layer 0's input: owned + remote features, fetched once
        # per layer: (input leaf, output) of a training step
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.train_rows = labelled_rows(self.labels, self.splits["train"])
        self.global_train = ctx.all_reduce_int(len(self.train_rows))
        self.epoch = 0

    @property
    def num_owned(self) -> int:
        return self.n_own

    # --- exchanges (strategies override the forward one) -------------------------------------------------
    def exchange_forward(self, li: int, h: torch.Tensor, epoch: int, training: bool) -> torch.Tensor:
        """The remote rows ``[n_rem, width]`` of layer ``li``'s input, given this worker's rows ``h`` of it (the
        previous layer's owned outputs): by default every boundary row, one message per peer."""
        return self.exact_exchange(li, h, f"{'fwd' if training else 'eval'}{li - 1}")

    def exact_exchange(self, li: int, h: torch.Tensor, label: str) -> torch.Tensor:
        return exchange_boundary_rows(self.tr, self.rank, h, self.send_ids, self.recv_ids, self.n_rem, label)

    def exchange_backward(
        self, li: int, grad_remote: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Send the gradient of layer ``li``'s remote input rows to their owners; returns, in peer order, the
        (owned ids, gradient rows) that peers sent here."""
        parts = self.tr.all_to_all(
            [take_rows_at(grad_remote, ids) for ids in self.recv_ids],
            [len(s) for s in self.send_ids],
            f"bwd{li}",
        )
        return [(self.send_ids[q], rows) for q, rows in enumerate(parts) if q != self.rank and len(rows)]

    def input_transform(self, li: int, x: torch.Tensor, epoch: int, training: bool) -> torch.Tensor:
        """What layer ``li`` reads of its input rows (owned then remote); identity unless the strategy applies
        something at the receiver (SANCUS: the current epoch's dropout mask on cached rows)."""
        return x

    def _layer0_input(self) -> torch.Tensor:
        if self.x0 is None:
            remote = torch.zeros((self.n_rem, self.features.shape[1]), dtype=self.features.dtype)
            self.tr.exchange_table(self.send_table, self.recv_table, "features", 0, self.features, remote)
            self.x0 = torch.cat([self.features, remote]).to(self.device)
        return self.x0

    def _forward(self, epoch: int, training: bool) -> torch.Tensor:
        self.saved = []
        h = None
        dropout = self.cfg.dropout if self.owner_dropout else 0.0
        for li in range(self.num_layers):
            if li == 0:
                x_leaf = x = self._layer0_input()
            else:
                remote = self.exchange_forward(li, h, epoch, training).to(self.device)
                x_leaf = torch.cat([h.to(self.device), remote])
                if training:
                    x_leaf.requires_grad_(True)
                x = self.input_transform(li, x_leaf, epoch, training)
            b = self.block
            with (
                self.compute_span(
                    f"L{li}",
                    layer=li,
                    phase="fwd" if training else "eval",
                    nodes=b.n_dst,
                    arcs=b.nnz,
                    srcs=b.n_src,
                ),
                torch.set_grad_enabled(training),
            ):
                y = self.model.layer_forward(
                    li, b, x, epoch, dropout, self.cfg.seed, training, static_input=li == 0 and self.static0
                )
            if training:
                self.saved.append((x_leaf, y))
            h = y.detach().to(self.home)
        return h

    def backward(self, grad_logits: torch.Tensor) -> None:
        grad = grad_logits
        for li in reversed(range(self.num_layers)):
            x_leaf, y = self.saved[li]
            b = self.block
            with self.compute_span(
                f"L{li} bwd", layer=li, phase="bwd", nodes=b.n_dst, arcs=b.nnz, srcs=b.n_src
            ):
                torch.autograd.backward(y, grad.to(y.device, dtype=y.dtype))
            if li == 0:
                break
            g = x_leaf.grad.to(self.home)
            grad = g[: self.n_own].clone()
            for ids, rows in self.exchange_backward(li, self.clip_gradient(g[self.n_own :])):
                add_rows_at(grad, ids, rows)  # peer order: the same sum in every run
        self.saved = []

    def clip_gradient(self, grad_remote: torch.Tensor) -> torch.Tensor:
        """The remote rows' gradient as sent (SANCUS may clip it); unchanged by default."""
        return grad_remote
