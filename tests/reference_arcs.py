"""Independent single-process references for the strategies that change what a *remote* in-neighbour
contributes at the hidden layers: BNS-GCN's boundary sampling and SANCUS's stale embeddings (checks E and A).

Full-graph training written per arc (an edge list with ``index_add`` and plain autograd; nothing shared with
``stages/runtime`` but the specs: ``dropout_mask`` and ``keep_nodes``, the counter-based hashes both ends of an
exchange evaluate). At layer ``l ≥ 1`` every arc ``u → v`` reads ``x[u]``, the activation of layer ``l − 1``
after ReLU and dropout, except the arcs whose ends lie in different partitions: they read what the strategy
substitutes (a sampled and rescaled row, or a cached one). Layer 0 reads the input features everywhere.

Graph convention as in ``reference.py``: in-edge CSR, global in/out degrees.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from reference import NEGATIVE_SLOPE, RefGraph, _num_layers, reference_loss

from stages.kits.runtime.dropout import dropout_mask
from stages.kits.runtime.sampling import keep_nodes


def _layer(
    kind: str,
    p: dict,
    pre: str,
    x: torch.Tensor,
    rows: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    g: RefGraph,
    last: bool,
) -> torch.Tensor:
    """One layer: ``x [N, W]`` the nodes' own inputs, ``rows [E, W]`` what each arc ``src[e] → dst[e]`` reads."""
    n = g.num_nodes
    if kind == "sage":
        deg = torch.bincount(dst, minlength=n).to(x.dtype).clamp(min=1)
        agg = torch.zeros((n, x.shape[1]), dtype=x.dtype).index_add(0, dst, rows) / deg[:, None]
        return x @ p[pre + "lin_self.weight"].T + agg @ p[pre + "lin_neigh.weight"].T + p[pre + "bias"]
    if kind == "gcn":
        dout, din = g.out_degree.to(x.dtype) + 1.0, g.in_degree.to(x.dtype) + 1.0
        norm = 1.0 / torch.sqrt(dout[src] * din[dst])
        agg = torch.zeros((n, x.shape[1]), dtype=x.dtype).index_add(0, dst, rows * norm[:, None])
        agg = agg + x / torch.sqrt(dout * din)[:, None]  # the self-loop
        return agg @ p[pre + "lin.weight"].T + p[pre + "bias"]
    att_src, att_dst = p[pre + "att_src"], p[pre + "att_dst"]
    heads, c = att_src.shape[1], att_src.shape[2]
    w = p[pre + "lin.weight"]
    z_self = (x @ w.T).reshape(n, heads, c)
    z_arc = torch.cat([(rows @ w.T).reshape(-1, heads, c), z_self])  # the arcs, then every node's self-loop
    a_dst = torch.cat([dst, torch.arange(n)])
    logits = F.leaky_relu((z_arc * att_src).sum(-1) + (z_self[a_dst] * att_dst).sum(-1), NEGATIVE_SLOPE)
    idx = a_dst[:, None].expand(-1, heads)
    row_max = torch.full((n, heads), float("-inf"), dtype=x.dtype).scatter_reduce(
        0, idx, logits.detach(), reduce="amax"
    )
    ex = torch.exp(logits - row_max[a_dst])
    alpha = ex / torch.zeros((n, heads), dtype=x.dtype).index_add(0, a_dst, ex)[a_dst]
    out = torch.zeros((n, heads, c), dtype=x.dtype).index_add(0, a_dst, alpha[..., None] * z_arc)
    return (out.mean(1) if last else out.reshape(n, heads * c)) + p[pre + "bias"]


def arc_forward(
    kind: str,
    params: dict,
    graph: RefGraph,
    part: torch.Tensor,
    substitute,
    *,
    epoch: int,
    dropout: float,
    seed: int,
    training: bool,
) -> torch.Tensor:
    """Logits ``[N, C]``. ``substitute(l, a, mask, src_r, dst_r)`` gives the rows the cross-partition arcs
    ``src_r → dst_r`` read at layer ``l ≥ 1``, from ``a`` (layer l−1's activation after ReLU, before dropout,
    ``[N, W]``) and ``mask`` (that layer's dropout mask, ``[N, W]``); None: they read ``x[src]`` like the rest."""
    src, dst = graph.arcs()
    cross = part[src] != part[dst]
    n_layers = _num_layers(params)
    nodes = torch.arange(graph.num_nodes)
    x = graph.x.to(next(iter(params.values())).dtype)
    z = None
    for li in range(n_layers):
        if li > 0:
            a = torch.relu(z)
            mask = (
                dropout_mask(seed, epoch, li - 1, nodes, a.shape[1], dropout, dtype=a.dtype)
                if training and dropout > 0
                else torch.ones_like(a)
            )
            x = a * mask
        rows = x[src]
        if li > 0 and substitute is not None:
            rows = rows.clone()
            rows[cross] = substitute(li, a, mask, src[cross], dst[cross])
        z = _layer(kind, params, f"layers.{li}.", x, rows, src, dst, graph, li == n_layers - 1)
    return z


def train_with(
    kind: str,
    params_init: dict,
    graph: RefGraph,
    part: torch.Tensor,
    epochs: int,
    lr: float,
    dropout: float,
    seed: int,
    substitute_for_epoch,
) -> dict:
    """Adam, one step per epoch; ``substitute_for_epoch(epoch)`` gives the epoch's ``substitute`` (or None)."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in params_init.items()}
    opt = torch.optim.Adam(list(params.values()), lr=lr)
    for epoch in range(epochs):
        opt.zero_grad()
        logits = arc_forward(
            kind,
            params,
            graph,
            part,
            substitute_for_epoch(epoch),
            epoch=epoch,
            dropout=dropout,
            seed=seed,
            training=True,
        )
        reference_loss(logits, graph).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in params.items()}


def bns_substitute(part: torch.Tensor, p: float, seed: int):
    """BNS-GCN: the receiver (partition of the arc's destination) keeps remote node u this epoch with
    probability p (``keep_nodes(seed, epoch, receiver, u, p)``); kept rows are scaled by 1/p, dropped ones are 0."""

    def for_epoch(epoch: int):
        def substitute(li, a, mask, src_r, dst_r):
            kept = torch.zeros(len(src_r), dtype=torch.bool)
            for receiver in part.unique().tolist():
                sel = part[dst_r] == receiver
                kept[sel] = keep_nodes(seed, epoch, int(receiver), src_r[sel], p)
            return (a * mask)[src_r] * (kept.to(a.dtype) / p)[:, None]

        return substitute

    return for_epoch


def sancus_substitute(part: torch.Tensor, bound: int, num_layers: int):
    """SANCUS, check E: owner j resends layer l's rows when the copy the others hold would be more than
    ``bound`` epochs old; otherwise the arcs from j's nodes read the cached rows (ReLU'd, before dropout) under
    the current epoch's mask, with the gradient going to j's current rows."""
    k = int(part.max()) + 1
    cache: dict[int, torch.Tensor] = {}
    version = {li: torch.full((k,), -1) for li in range(1, num_layers)}

    def for_epoch(epoch: int):
        def substitute(li, a, mask, src_r, dst_r):
            if li not in cache:
                cache[li] = torch.zeros_like(a.detach())
            fresh = (version[li] < 0) | (epoch - version[li] > bound)
            for j in torch.nonzero(fresh).flatten().tolist():
                cache[li][part == j] = a.detach()[part == j]
                version[li][j] = epoch
            stand_in = a + (cache[li] - a).detach()  # the cached value, the gradient to the current rows
            return (torch.relu(stand_in) * mask)[src_r]

        return substitute

    return for_epoch


def sancus_ask_substitute(part: torch.Tensor, bound: int, num_layers: int):
    """SANCUS, check A (001 Alg. 5, Fig. 14b), written from the receivers' side: every receiver r keeps its own
    copy of each owner j's rows and its own version ``Ver_r(j)``. After computing layer l at epoch e with that
    copy, r asks j when ``e − Ver_r(j) > bound``; j then sends, at epoch e + 1, to the receivers that asked.
    A receiver without a copy asks before its first use. Only receivers that read some arc from j ask. Arcs
    from j into r read r's copy (ReLU'd, before dropout) under the current mask, the gradient to j's rows."""
    k = int(part.max()) + 1
    copies: dict[int, dict[int, torch.Tensor]] = {li: {} for li in range(1, num_layers)}  # receiver -> [N, W]
    version = {li: torch.full((k, k), -1) for li in range(1, num_layers)}  # [receiver, owner]
    pending: dict[int, torch.Tensor] = {}  # layer -> bool [receiver, owner]: asks raised, served next epoch

    def for_epoch(epoch: int):
        def substitute(li, a, mask, src_r, dst_r):
            reads = torch.zeros((k, k), dtype=torch.bool)
            reads[part[dst_r], part[src_r]] = True
            asked = pending.get(li, reads)  # no copy yet: every reader asks
            for r, j in torch.nonzero(asked).tolist():  # owner j sends to receiver r
                copy = copies[li].setdefault(r, torch.zeros_like(a.detach()))
                copy[part == j] = a.detach()[part == j]
                version[li][r, j] = epoch
            rows = torch.empty((len(src_r), a.shape[1]), dtype=a.dtype)
            for r in range(k):
                arcs = part[dst_r] == r
                if arcs.any():
                    stand_in = a + (copies[li][r] - a).detach()  # r's copy, the gradient to the current rows
                    rows[arcs] = (torch.relu(stand_in) * mask)[src_r[arcs]]
            pending[li] = reads & (epoch - version[li] > bound)  # the asks r raises after this use
            return rows

        return substitute

    return for_epoch
