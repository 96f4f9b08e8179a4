"""A GNN model of g3: a stack of block layers (SAGE, GCN, GAT; one operator per module) run one layer and one bin at
a time.

The runtime never calls a whole-model ``forward`` on a graph: G3 computes layer ``l`` for every bin of every
worker before layer ``l + 1`` (G3 §5), so the model exposes :meth:`GNNModel.layer_forward` — one layer on one
block, followed (except for the last layer) by ReLU and the hash-based dropout of :mod:`..dropout`, whose mask
depends only on (seed, epoch, layer, global node id, column) and is therefore the same in every bin, on every
worker and in backward's recomputation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from stages.common.model_spec import ModelSpec
from stages.kits.runtime.block import Block
from stages.kits.runtime.kernels import relu_dropout, relu_dropout_grad
from stages.kits.runtime.models.decoupled import DecoupledMLP, Propagate
from stages.kits.runtime.models.gat import GATConv
from stages.kits.runtime.models.gcn import GCNConv
from stages.kits.runtime.models.sage import SAGEConv


class GNNModel(nn.Module):
    """``layers`` GNN layers of one kind; parameters are ``layers.{l}.<name>`` (see each layer's docstring).

    Attributes:
        layers: ``nn.ModuleList`` of the layers.
        widths: input width of each layer, then the output width (``len == num_layers + 1``).
        config: the arguments of :func:`build_model`, for checkpoints.
    """

    def __init__(self, layers: list[nn.Module], widths: list[int], config: dict):
        super().__init__()
        if len(widths) != len(layers) + 1:
            raise ValueError("widths must list every layer's input width and the final output width")
        self.layers = nn.ModuleList(layers)
        self.widths = list(widths)
        self.config = dict(config)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def static_input_rows(self, l: int) -> str | None:
        """What layer ``l`` reads of ``x_src`` with ``static_input=True`` once its block holds the cached
        aggregation: ``"dst"`` (the first ``n_dst`` rows), ``"none"``, or None when the layer has no static path."""
        return getattr(self.layers[l], "static_input_rows", None)

    def layer_forward(
        self,
        l: int,  # the layer index, as in the paper
        block: Block,
        x_src: torch.Tensor,
        epoch: int,
        dropout: float,
        seed: int,
        training: bool,
        static_input: bool = False,
    ) -> torch.Tensor:
        """Layer ``l`` (0-based) on ``block``: ``[n_src, widths[l]]`` → ``[n_dst, widths[l + 1]]``.

        Hidden layers are followed by ReLU and, when ``training`` and ``dropout > 0``, by the mask
        ``dropout_mask(seed, epoch, l, block.dst_global, width, dropout)``. The last layer returns logits.

        ``static_input=True`` is the caller's promise that ``x_src`` holds the same values every time this block
        object is passed and needs no gradient — true of layer 0 in a runtime that keeps its blocks (the input
        features). SAGE and GCN then aggregate the raw inputs once, keep the result on the block
        (``[n_dst, widths[l]]``, the size of the bin's features) and skip the aggregation in every later call,
        forward and backward (GAT ignores the flag).

        dgcn's MLP (block 0) reads only the destinations' rows ``x_src[:n_dst]``.
        """
        layer = self.layers[l]
        if isinstance(layer, DecoupledMLP):
            return layer.forward_rows(x_src[: block.n_dst], block.dst_global, epoch, dropout, seed, training)
        y = layer(block, x_src, static_input=static_input)
        return self.activate(l, y, block.dst_global, epoch, dropout, seed, training)

    def reads_rows(self, l: int) -> bool:
        """Layer ``l`` can read its sources from the layer's input rows itself (:meth:`layer_forward_rows`)."""
        return bool(getattr(self.layers[l], "reads_rows", lambda: False)())

    def layer_forward_rows(
        self,
        l: int,
        block: Block,
        h: torch.Tensor,
        src: torch.Tensor,
        x_dst: torch.Tensor,
        epoch: int,
        dropout: float,
        seed: int,
        training: bool,
    ) -> torch.Tensor:
        """:meth:`layer_forward` with ``x_src = h[src]`` read by the aggregation from ``h`` itself, no gathered
        copy; ``x_dst = h[dst]`` (``[n_dst, widths[l]]``). Forward only (no gradient reaches ``h``); the aggregation
        makes the same sums in the same order as on gathered rows. Only where :meth:`reads_rows` says so."""
        y = self.layers[l].forward_rows(block, h, src, x_dst)
        return self.activate(l, y, block.dst_global, epoch, dropout, seed, training)

    def layer_backward_rows(
        self,
        l: int,
        block: Block,
        h: torch.Tensor,
        src: torch.Tensor,
        x_dst: torch.Tensor,
        grad_out: torch.Tensor,
        epoch: int,
        dropout: float,
        seed: int,
        need_src_grad: bool = True,
    ) -> torch.Tensor | None:
        """Backward of :meth:`layer_forward` (recomputed, ``training=True``) for ``x_src = h[src]`` without
        gathering it: the aggregation reads ``h`` in place, the weights' gradients accumulate as autograd's
        would, and the gradient of ``x_src`` (``[n_src, widths[l]]``) is returned — bitwise the one
        ``layer_forward`` on the gathered rows gives (its two parts, through the aggregation and through the
        self term of the first ``n_dst`` rows, added once as autograd adds them). ``x_dst = h[dst]``;
        ``grad_out [n_dst, widths[l + 1]]``. Only where :meth:`reads_rows` says so."""
        layer = self.layers[l]
        agg = layer.aggregate_rows(block, h, src).requires_grad_(need_src_grad)
        x_dst = x_dst.detach().requires_grad_(need_src_grad)
        with torch.enable_grad():
            y = self.activate(l, layer.combine(x_dst, agg), block.dst_global, epoch, dropout, seed, True)
        torch.autograd.backward(y, grad_out)
        if not need_src_grad:
            return None
        grad_src = layer.aggregate_grad(block, agg.grad)
        grad_src[: block.n_dst] += x_dst.grad
        return grad_src

    def layer_backward_static(
        self,
        l: int,
        block: Block,
        x_src: torch.Tensor,
        y: torch.Tensor,
        grad_out: torch.Tensor,
        dropout: float,
    ) -> bool:
        """Backward of ``layer_forward(..., training=True, static_input=True)`` without running it again: ``y``
        is that call's output (``[n_dst, widths[l + 1]]``, activated: the next layer's input rows, which the
        runtime keeps), ``grad_out`` its gradient. The activation's backward needs only ``y`` (ReLU and the
        dropout mask zero exactly where ``y`` is 0), and the layer's products read inputs the block keeps, so
        the weight gradients accumulate as autograd would, bitwise. Returns False, doing nothing, where the
        layer has no such path (GAT) or the block holds no cached aggregation yet; the input gets no gradient."""
        layer = self.layers[l]
        if not hasattr(layer, "static_backward"):
            return False
        grad = (
            grad_out
            if l == self.num_layers - 1 or not getattr(layer, "activated", True)
            else relu_dropout_grad(y, grad_out, dropout)
        )
        return layer.static_backward(block, x_src, grad)

    def activate(
        self,
        l: int,
        h: torch.Tensor,
        node_ids: torch.Tensor,
        epoch: int,
        dropout: float,
        seed: int,
        training: bool,
    ) -> torch.Tensor:
        """What follows layer ``l``'s linear part: ReLU and the dropout of ``node_ids`` for a hidden layer,
        nothing for the last. A runtime that computes a layer's pre-activation itself (P3 sums partial
        products from every worker) applies it with this."""
        if l < self.num_layers - 1 and getattr(self.layers[l], "activated", True):
            if training and dropout > 0.0:  # one fused CPU pass (kernels.relu_dropout), bitwise equal
                return relu_dropout(h, seed, epoch, l, node_ids, dropout)
            h = F.relu(h)
        return h

    def forward(
        self,
        block: Block,
        x: torch.Tensor,
        epoch: int = 0,
        dropout: float = 0.0,
        seed: int = 0,
        training: bool = False,
    ) -> torch.Tensor:
        """All layers on one whole-graph block (every source is a destination: ``n_src == n_dst``)."""
        if block.n_src != block.n_dst:
            raise ValueError(
                "GNNModel.forward needs a block whose sources are all destinations; run bins per layer"
            )
        h = x
        for l in range(self.num_layers):
            h = self.layer_forward(l, block, h, epoch, dropout, seed, training)
        return h


def build_model(
    kind: str, in_dim: int, hidden: int, num_classes: int, layers: int, heads: int = 8
) -> GNNModel:
    """A ``layers``-layer model of ``kind`` (``"sage"``, ``"gcn"`` or ``"gat"``): :func:`model_from_spec` of
    that :class:`~stages.common.model_spec.ModelSpec`."""
    return model_from_spec(ModelSpec(kind, in_dim, hidden, num_classes, layers, heads))


def model_from_spec(spec: ModelSpec) -> GNNModel:
    """The layers of ``spec``, with the widths its layer shapes give (the one place they are computed).

    Initialisation (Glorot weights, zero biases) is deterministic given ``torch.manual_seed`` before the call.
    """
    spec.check()
    mods: list[nn.Module] = []
    for li, s in enumerate(spec.layer_shapes()):
        if s.op == "mlp":
            mods.append(DecoupledMLP(spec.mlp_widths))
        elif s.op == "propagate":
            mods.append(Propagate())
        elif spec.kind == "sage":
            mods.append(SAGEConv(s.d_in, s.d_out))
        elif spec.kind == "gcn":
            mods.append(GCNConv(s.d_in, s.d_out))
        else:
            mods.append(GATConv(s.d_in, s.per_head, heads=s.heads, concat=li < spec.layers - 1))
    config = {k: getattr(spec, k) for k in ("kind", "in_dim", "hidden", "num_classes", "layers", "heads")}
    return GNNModel(mods, spec.widths, config)
