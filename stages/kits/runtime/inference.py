"""Exact full-neighbour inference, layer by layer and batch by batch: the evaluation component of strategies
that never build their whole partition as one block (the mini-batch strategies).

Layer ``l`` runs over the worker's owned nodes in batches of at most ``batch_nodes`` destinations: each batch
is a block of those destinations and all their in-arcs (owned and remote sources), built from the shard's CSR
when the batch runs and dropped after it, so the working set is one batch's arcs and rows — never the whole
partition's block. Between layers the owners send the boundary rows of the layer's output (one message per peer,
the plan's ``boundary_send``/``boundary_recv`` tables), as DGL's layer-wise inference computes a whole layer
before the next. What stays resident is one layer's input and output rows of the owned and remote nodes.

Every destination sees all of its in-neighbours, so the logits are those of single-process full-graph
inference, whatever the strategy trains with.
"""

from __future__ import annotations

import numpy as np
import torch

from stages.kits.runtime.block import Block
from stages.kits.runtime.kernels import put_rows_at, take_rows_at


class LayerwiseInference:
    """Inference of one worker's owned nodes. ``indptr``/``indices``: the shard's in-arc CSR over owned rows,
    sources numbered owned-then-remote; ``in_degree``/``out_degree``: global degrees of owned+remote nodes;
    ``dst_global``: owned nodes' global ids; ``send_ids``/``recv_ids``: per peer, the owned ids it needs and the
    remote offsets it sends (the boundary tables)."""

    def __init__(
        self,
        ctx,
        model,
        indptr: np.ndarray,
        indices: np.ndarray,
        in_degree: torch.Tensor,
        out_degree: torch.Tensor,
        dst_global: torch.Tensor,
        send_ids: list[torch.Tensor],
        recv_ids: list[torch.Tensor],
        n_remote: int,
        batch_nodes: int = 4096,
    ):
        self.ctx, self.model = ctx, model
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.indices = np.asarray(indices, dtype=np.int64)
        self.n_own = len(self.indptr) - 1
        self.n_rem = n_remote
        self.in_degree, self.out_degree = in_degree, out_degree
        self.dst_global = dst_global
        self.send_ids, self.recv_ids = send_ids, recv_ids
        self.batch_nodes = max(1, int(batch_nodes))
        self.max_batch_arcs = 0  # the largest block built (arcs): what bounds the working set

    def logits(self, features: torch.Tensor, remote_features: torch.Tensor) -> torch.Tensor:
        """``[n_owned, classes]`` from the owned rows' input features and the remote rows' (fetched by the
        caller once: they do not change between evaluations)."""
        device = self.ctx.device
        h_in = torch.cat([features, remote_features]).to(device)
        h_out = h_in[: self.n_own]
        with torch.no_grad():
            for li in range(self.ctx.spec.num_blocks):
                if li > 0:  # this layer's input: the owned outputs of the last and the boundary rows of peers
                    h_in = torch.cat([h_out, self._remote_rows(li, h_out.cpu()).to(device)])
                h_out = self._layer(li, h_in)
        return h_out.cpu()

    def _layer(self, li: int, h_in: torch.Tensor) -> torch.Tensor:
        if self.n_own == 0:
            return h_in.new_zeros((0, self.ctx.spec.widths[li + 1]))
        return torch.cat(
            [
                self._batch(li, lo, min(lo + self.batch_nodes, self.n_own), h_in)
                for lo in range(0, self.n_own, self.batch_nodes)
            ]
        )

    def _batch(self, li: int, lo: int, hi: int, h_in: torch.Tensor) -> torch.Tensor:
        """Layer ``li`` for owned destinations ``lo..hi-1``: their block (destinations first, then the other
        sources in ascending local id), read from ``h_in`` (owned then remote rows)."""
        a, b = self.indptr[lo], self.indptr[hi]
        arcs = self.indices[a:b]
        inside = (arcs >= lo) & (arcs < hi)
        others = np.unique(arcs[~inside])
        local = np.where(inside, arcs - lo, (hi - lo) + np.searchsorted(others, arcs))
        src = torch.from_numpy(np.concatenate([np.arange(lo, hi, dtype=np.int64), others]))
        self.max_batch_arcs = max(self.max_batch_arcs, int(b - a))
        block = Block(
            n_dst=hi - lo,
            n_src=len(src),
            indptr=torch.from_numpy(self.indptr[lo : hi + 1] - a),
            indices=torch.from_numpy(local),
            src_out_degree=self.out_degree[src],
            dst_in_degree=self.in_degree[lo:hi],
            dst_global=self.dst_global[lo:hi],
        ).to(self.ctx.device)
        x = h_in[src.to(h_in.device)]
        return self.model.layer_forward(li, block, x, 0, 0.0, self.ctx.cfg.seed, False)

    def _remote_rows(self, li: int, h: torch.Tensor) -> torch.Tensor:
        """The remote rows of layer ``li``'s input from their owners (every boundary row, one message a peer)."""
        return exchange_boundary_rows(
            self.ctx.transport, self.ctx.rank, h, self.send_ids, self.recv_ids, self.n_rem, f"eval{li - 1}"
        )


def per_peer_ids(table, world: int) -> list[torch.Tensor]:
    """A boundary table's node ids per peer (one message per peer), empty for the others and for self."""
    out = [torch.zeros(0, dtype=torch.int64) for _ in range(world)]
    for _step, peer, sl in table.message_slices():
        out[peer] = torch.from_numpy(np.asarray(table.nodes[sl], dtype=np.int64))
    return out


def exchange_boundary_rows(
    tr,
    rank: int,
    h: torch.Tensor,
    send_ids: list[torch.Tensor],
    recv_ids: list[torch.Tensor],
    n_remote: int,
    label: str,
) -> torch.Tensor:
    """Every peer's boundary rows of ``h`` (this worker's owned rows): ``send_ids[q]`` go to peer q, and the rows
    peer q sends land at remote offsets ``recv_ids[q]`` of the returned ``[n_remote, width]``."""
    parts = tr.all_to_all([take_rows_at(h, ids) for ids in send_ids], [len(r) for r in recv_ids], label)
    remote = h.new_zeros((n_remote, h.shape[1]))
    for q, rows in enumerate(parts):
        if q != rank and len(rows):
            put_rows_at(remote, recv_ids[q], rows)
    return remote
