"""An independent single-process, full-graph reference for g3's models.

Written from the formulas, not from ``stages/train/models``: whole-graph adjacency matrices (``torch.sparse``
COO, duplicates summed) for SAGE and GCN, an edge list with ``scatter_reduce``/``index_add`` and plain torch
autograd for GAT (no custom ``autograd.Function``), and parameters read by name from a g3 ``state_dict``.
The only piece shared with g3 is :func:`stages.kits.runtime.dropout.dropout_mask`, which is part of the spec: mask
entry = hash(seed, epoch, layer, node id, column), applied after the ReLU of every layer but the last, with
``layer`` = the index of the layer that produced the activation and epochs counted from 0.

Graph convention: in-edge CSR — row ``v`` of ``indptr``/``indices`` lists the sources of the arcs into ``v``;
``in_degree``/``out_degree`` are the global degrees (self-loops of the models are added on top).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from stages.kits.runtime.dropout import dropout_mask

NEGATIVE_SLOPE = 0.2  # GAT's LeakyReLU slope (g3's default)


@dataclass
class RefGraph:
    indptr: torch.Tensor  # int64 [N+1]
    indices: torch.Tensor  # int64 [E]
    in_degree: torch.Tensor  # [N]
    out_degree: torch.Tensor  # [N]
    x: torch.Tensor  # [N, F]
    y: torch.Tensor  # int64 [N], -1 = unlabelled
    train_mask: torch.Tensor  # bool [N]

    @property
    def num_nodes(self) -> int:
        return self.indptr.numel() - 1

    def arcs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(src, dst) of every arc."""
        deg = self.indptr[1:] - self.indptr[:-1]
        dst = torch.repeat_interleave(torch.arange(self.num_nodes), deg)
        return self.indices.to(torch.int64), dst


def _gcn_adjacency(g: RefGraph, dtype: torch.dtype) -> torch.Tensor:
    """``D_in^-1/2 (A + I) D_out^-1/2`` (global degrees + 1) as a sparse matrix."""
    n = g.num_nodes
    src, dst = g.arcs()
    loop = torch.arange(n)
    src, dst = torch.cat([src, loop]), torch.cat([dst, loop])
    vals = 1.0 / torch.sqrt((g.out_degree.to(dtype) + 1.0)[src] * (g.in_degree.to(dtype) + 1.0)[dst])
    return torch.sparse_coo_tensor(torch.stack([dst, src]), vals, (n, n), check_invariants=True).coalesce()


def decoupled_forward(
    params: dict[str, torch.Tensor],
    graph: RefGraph,
    *,
    epoch: int = 0,
    dropout: float = 0.0,
    seed: int = 0,
    training: bool = False,
) -> torch.Tensor:
    """The decoupled GCN (NeutronTP 002 §4.1.2): ``Â^L MLP_L(X)`` with L = the MLP's linear count
    (``layers.0.lins.{i}``); dropout after hidden linear ``i`` keyed by layer ``i``."""
    count = len({k.split(".")[3] for k in params if k.startswith("layers.0.lins.")})
    h = graph.x.to(next(iter(params.values())).dtype)
    node_ids = torch.arange(graph.num_nodes)
    for i in range(count):
        h = h @ params[f"layers.0.lins.{i}.weight"].T + params[f"layers.0.lins.{i}.bias"]
        if i < count - 1:
            h = torch.relu(h)
            if training and dropout > 0.0:
                h = h * dropout_mask(seed, epoch, i, node_ids, h.shape[1], dropout, dtype=h.dtype)
    adj = _gcn_adjacency(graph, h.dtype)
    for _ in range(count):
        h = torch.sparse.mm(adj, h)
    return h


def _num_layers(params: dict[str, torch.Tensor]) -> int:
    ids = {int(m.group(1)) for k in params if (m := re.match(r"layers\.(\d+)\.", k))}
    if ids != set(range(len(ids))):
        raise ValueError(f"parameter names do not describe layers 0..L-1: {sorted(params)}")
    return len(ids)


def _sage(p: dict, pre: str, h: torch.Tensor, g: RefGraph) -> torch.Tensor:
    n = g.num_nodes
    src, dst = g.arcs()
    deg = torch.bincount(dst, minlength=n).to(h.dtype)
    vals = 1.0 / deg[dst]  # rows without arcs have no entries: their mean is 0
    mean_adj = torch.sparse_coo_tensor(
        torch.stack([dst, src]), vals, (n, n), check_invariants=True
    ).coalesce()
    neigh = torch.sparse.mm(mean_adj, h)
    return h @ p[pre + "lin_self.weight"].T + neigh @ p[pre + "lin_neigh.weight"].T + p[pre + "bias"]


def _gcn(p: dict, pre: str, h: torch.Tensor, g: RefGraph) -> torch.Tensor:
    n = g.num_nodes
    src, dst = g.arcs()
    loop = torch.arange(n)
    src, dst = torch.cat([src, loop]), torch.cat([dst, loop])
    dout = g.out_degree.to(h.dtype) + 1.0
    din = g.in_degree.to(h.dtype) + 1.0
    vals = 1.0 / torch.sqrt(dout[src] * din[dst])
    norm_adj = torch.sparse_coo_tensor(
        torch.stack([dst, src]), vals, (n, n), check_invariants=True
    ).coalesce()
    return torch.sparse.mm(norm_adj, h) @ p[pre + "lin.weight"].T + p[pre + "bias"]


def _gat(p: dict, pre: str, h: torch.Tensor, g: RefGraph, concat: bool) -> torch.Tensor:
    n = g.num_nodes
    att_src, att_dst = p[pre + "att_src"], p[pre + "att_dst"]
    heads, c = att_src.shape[1], att_src.shape[2]
    z = (h @ p[pre + "lin.weight"].T).reshape(n, heads, c)
    src, dst = g.arcs()
    loop = torch.arange(n)
    src, dst = torch.cat([src, loop]), torch.cat([dst, loop])  # every node attends to itself
    logits = F.leaky_relu((z[src] * att_src).sum(-1) + (z[dst] * att_dst).sum(-1), NEGATIVE_SLOPE)  # [E', H]
    idx = dst[:, None].expand(-1, heads)
    row_max = torch.full((n, heads), float("-inf"), dtype=h.dtype).scatter_reduce(
        0, idx, logits.detach(), reduce="amax"
    )
    ex = torch.exp(logits - row_max[dst])
    denom = torch.zeros((n, heads), dtype=h.dtype).index_add(0, dst, ex)
    alpha = ex / denom[dst]
    out = torch.zeros((n, heads, c), dtype=h.dtype).index_add(0, dst, alpha[..., None] * z[src])
    out = out.reshape(n, heads * c) if concat else out.mean(1)
    return out + p[pre + "bias"]


def reference_forward(
    kind: str,
    params: dict[str, torch.Tensor],
    graph: RefGraph,
    *,
    epoch: int = 0,
    dropout: float = 0.0,
    seed: int = 0,
    training: bool = False,
    heads: int | None = None,
) -> torch.Tensor:
    """Logits ``[N, C]`` of the whole graph for g3's parameters ``params`` (names as in g3's state_dict)."""
    if kind == "dgcn":
        return decoupled_forward(params, graph, epoch=epoch, dropout=dropout, seed=seed, training=training)
    num_layers = _num_layers(params)
    h = graph.x.to(next(iter(params.values())).dtype)
    node_ids = torch.arange(graph.num_nodes)
    for l in range(num_layers):
        pre = f"layers.{l}."
        last = l == num_layers - 1
        if kind == "sage":
            h = _sage(params, pre, h, graph)
        elif kind == "gcn":
            h = _gcn(params, pre, h, graph)
        elif kind == "gat":
            if heads is not None and params[pre + "att_src"].shape[1] != heads:
                raise ValueError(f"layer {l} has {params[pre + 'att_src'].shape[1]} heads, expected {heads}")
            h = _gat(params, pre, h, graph, concat=not last)
        else:
            raise ValueError(f"unknown model kind {kind!r}")
        if not last:
            h = torch.relu(h)
            if training and dropout > 0.0:
                h = h * dropout_mask(seed, epoch, l, node_ids, h.shape[1], dropout, dtype=h.dtype)
    return h


def reference_loss(logits: torch.Tensor, graph: RefGraph) -> torch.Tensor:
    """Sum of cross-entropy over the labelled training nodes / their number."""
    mask = graph.train_mask & (graph.y >= 0)
    n = int(mask.sum())
    return F.cross_entropy(logits[mask], graph.y[mask], reduction="sum") / max(n, 1)


def reference_train(
    kind: str,
    params_init: dict[str, torch.Tensor],
    graph: RefGraph,
    epochs: int,
    lr: float,
    weight_decay: float,
    dropout: float,
    seed: int,
    heads: int | None = None,
) -> dict[str, torch.Tensor]:
    """Full-graph training, one Adam step per epoch (epochs counted from 0); returns the final parameters."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in params_init.items()}
    opt = torch.optim.Adam(list(params.values()), lr=lr, weight_decay=weight_decay)
    for epoch in range(epochs):
        opt.zero_grad()
        logits = reference_forward(
            kind, params, graph, epoch=epoch, dropout=dropout, seed=seed, training=True, heads=heads
        )
        reference_loss(logits, graph).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in params.items()}
