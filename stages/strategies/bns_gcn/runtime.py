"""``bns-gcn``: BNS-GCN (Wan et al., MLSys 2022) as G3 §7.2 ran it — layer-synchronous boundary exchange, the
whole partition at once — with its random boundary-node sampling (``g3 plan --boundary-sample P``).

Each epoch every worker keeps a P-fraction of its boundary (remote) nodes: node u is kept by receiver i when
``keep_nodes(seed, epoch, stream=i, u, P)`` says so, a counter-based hash both ends evaluate without talking;
the same set serves every layer of the epoch, as BNS-GCN samples once per epoch. The owner sends only the kept
rows; the receiver scales them by 1/P (BNS-GCN's estimator: its feature buffer divides the sent rows by the
sampled ratio) and leaves dropped rows at 0, so the mean still divides by the full in-degree, as BNS-GCN's
GraphSAGE layer does. Backward returns the kept rows' gradients, scaled by 1/P the same way. Layer 0 reads the
input features, fetched once (BNS-GCN's code precomputes layer 0 with every neighbour): sampling applies to
the hidden layers, where communication happens. P = 1 is exact full-graph training. Evaluation is exact
(every boundary row, unscaled).

On a ``chunk`` partition this is also the NeutronStar configuration G3 compared against (§7.2): its hybrid
dependency caching (recomputing some remote dependencies locally) is not reproduced.
"""

from __future__ import annotations

import torch

from stages.kits.runtime.kernels import put_rows_at, take_rows_at
from stages.kits.runtime.layersync import LayerSyncStrategy
from stages.kits.runtime.sampling import keep_nodes
from stages.kits.runtime.strategy import WorkerContext


class BnsGcnStrategy(LayerSyncStrategy):
    name = "bns-gcn"

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        self.p = float(ctx.options.get("boundary_sample", 1.0))
        self._kept_epoch: int | None = None  # the epoch whose kept sets are below
        self.kept_send: list[torch.Tensor] = []  # per peer: bool over send_ids[q] (q keeps them this epoch)
        self.kept_recv: list[torch.Tensor] = []  # per peer: bool over recv_ids[q] (this worker keeps them)

    def _kept(self, epoch: int) -> None:
        if self._kept_epoch == epoch:
            return
        seed, me, gids = self.cfg.seed, self.rank, self.global_ids
        self.kept_send = [
            keep_nodes(seed, epoch, q, gids[ids], self.p) for q, ids in enumerate(self.send_ids)
        ]
        self.kept_recv = [
            keep_nodes(seed, epoch, me, gids[self.n_own + ids], self.p) for ids in self.recv_ids
        ]
        self._kept_epoch = epoch

    def exchange_forward(self, li: int, h: torch.Tensor, epoch: int, training: bool) -> torch.Tensor:
        if not training or self.p >= 1.0:
            return super().exchange_forward(li, h, epoch, training)
        self._kept(epoch)
        chunks = [take_rows_at(h, ids[k]) for ids, k in zip(self.send_ids, self.kept_send, strict=True)]
        parts = self.tr.all_to_all(chunks, [int(k.sum()) for k in self.kept_recv], f"fwd{li - 1}")
        remote = h.new_zeros((self.n_rem, h.shape[1]))
        for q, rows in enumerate(parts):
            if q != self.rank and len(rows):
                put_rows_at(remote, self.recv_ids[q][self.kept_recv[q]], rows / self.p)
        return remote

    def exchange_backward(
        self, li: int, grad_remote: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if self.p >= 1.0:
            return super().exchange_backward(li, grad_remote)
        chunks = [
            take_rows_at(grad_remote, ids[k]) / self.p
            for ids, k in zip(self.recv_ids, self.kept_recv, strict=True)
        ]
        parts = self.tr.all_to_all(chunks, [int(k.sum()) for k in self.kept_send], f"bwd{li}")
        return [
            (self.send_ids[q][self.kept_send[q]], rows)
            for q, rows in enumerate(parts)
            if q != self.rank and len(rows)
        ]


STRATEGY = BnsGcnStrategy
