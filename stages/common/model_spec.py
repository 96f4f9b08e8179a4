"""The model a plan trains, in one place: kind, depth and widths of every layer, and a layer's memory per node.

``g3 plan`` records a :class:`ModelSpec` in plan.json; the runtime builds its layers from the same spec
(``stages.runtime.models.build_model``), the planners size their bins with :func:`node_bytes`, and the
simulator reads the layer shapes back. Widths: ``feat_dim → hidden → … → num_classes``; GAT's hidden layers
concatenate their heads (``heads × hidden`` wide) and its last layer averages them.

``dgcn`` is the decoupled GCN of NeutronTP (002 §4.1.2): an MLP of ``layers`` linear layers
(``feat_dim → hidden → … → num_classes``), then ``layers`` propagation rounds of GCN's normalised adjacency
``Â`` (no weights, no activation). The runtime runs it as ``layers + 1`` blocks: block 0 is the MLP (``op =
"mlp"``: it reads only the destination rows), blocks 1..L are the propagations (``op = "propagate"``).
:attr:`ModelSpec.num_blocks` is the runtime's layer count for every kind.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

MODEL_KINDS = ("sage", "gcn", "gat", "dgcn")
ELEM_BYTES = 4  # float32 embeddings
INDEX_BYTES = 8


@dataclass(frozen=True)
class LayerShape:
    """Widths of one layer: input, output, and (GAT) heads and per-head width."""

    d_in: int
    d_out: int
    heads: int = 1
    attention: bool = False
    per_head: int = 0
    op: str = "conv"  # conv: a GNN layer; mlp: dgcn's MLP (no arcs read); propagate: dgcn's Â (no weights)

    @property
    def edge_width(self) -> int:
        """Width aggregated over edges: GAT messages are heads × per-head wide (averaged only afterwards);
        other models project before aggregating when that narrows the aggregation."""
        if self.attention:
            return self.heads * self.per_head
        if self.op == "mlp":
            return 0
        return min(self.d_in, self.d_out)


@dataclass(frozen=True)
class ModelSpec:
    """A GNN of ``layers`` layers of one ``kind`` over ``in_dim`` features and ``num_classes`` classes."""

    kind: str
    in_dim: int
    hidden: int
    num_classes: int
    layers: int
    heads: int = 8

    def check(self) -> None:
        """ValueError naming what is wrong (unknown kind, a non-positive size)."""
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"unknown model {self.kind!r} (choose from {', '.join(MODEL_KINDS)})")
        if self.layers < 1 or self.hidden < 1 or self.heads < 1:
            raise ValueError("the layer count, hidden width and heads must be >= 1 (--layers, --hidden, --heads)")
        if self.in_dim < 1 or self.num_classes < 1:
            raise ValueError("the store needs at least one feature column and one class")

    def layer_shapes(self) -> list[LayerShape]:
        if self.kind == "dgcn":
            return [LayerShape(self.in_dim, self.num_classes, op="mlp")] + [
                LayerShape(self.num_classes, self.num_classes, op="propagate") for _ in range(self.layers)]
        shapes, d_in = [], self.in_dim
        for li in range(self.layers):
            last = li == self.layers - 1
            if self.kind == "gat":
                per_head = self.num_classes if last else self.hidden
                d_out = per_head if last else per_head * self.heads
                shapes.append(LayerShape(d_in, d_out, heads=self.heads, attention=True, per_head=per_head))
            else:
                d_out = self.num_classes if last else self.hidden
                shapes.append(LayerShape(d_in, d_out))
            d_in = d_out
        return shapes

    @property
    def num_blocks(self) -> int:
        """Layers the runtime runs one block at a time: ``layers``, or ``layers + 1`` for dgcn (MLP first)."""
        return self.layers + 1 if self.kind == "dgcn" else self.layers

    @property
    def mlp_widths(self) -> list[int]:
        """dgcn: the MLP's widths, ``feat_dim → hidden → … → num_classes`` (``layers + 1`` entries)."""
        return [self.in_dim] + [self.hidden] * (self.layers - 1) + [self.num_classes]

    @property
    def widths(self) -> list[int]:
        """Input width of every block, then the output width (``num_blocks + 1`` entries)."""
        shapes = self.layer_shapes()
        return [shapes[0].d_in] + [s.d_out for s in shapes]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_plan(cls, plan_meta: dict) -> ModelSpec:
        """The spec a plan.json records (its ``config`` and ``store`` blocks)."""
        mc, st = plan_meta["config"], plan_meta["store"]
        return cls(kind=mc["model"], in_dim=int(st["feat_dim"]), hidden=int(mc["hidden"]),
                   num_classes=int(st["num_classes"]), layers=int(mc["layers"]), heads=int(mc["heads"]))


def node_bytes(in_degree: np.ndarray, shape: LayerShape) -> np.ndarray:
    """Estimated device bytes one destination node needs in a bin (training: values and gradients).

    Per node: its input and output rows; per in-edge: one gathered source row (an upper bound: sources are
    shared between nodes of a bin), its index, and for GAT the score, attention and message per head.
    The factor 2 keeps room for the gradients of the same tensors in backward.
    """
    per_node = (shape.d_in + shape.d_out) * ELEM_BYTES
    if shape.op == "mlp":  # reads no arcs
        return np.full(len(np.asarray(in_degree)), 2 * per_node, dtype=np.int64)
    per_edge = shape.d_in * ELEM_BYTES + INDEX_BYTES + shape.edge_width * ELEM_BYTES
    if shape.attention:
        per_edge += 3 * shape.heads * ELEM_BYTES
    return 2 * (per_node + np.asarray(in_degree, dtype=np.int64) * per_edge)
