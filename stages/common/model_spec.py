"""The model a plan trains, in one place: kind, depth and widths of every layer, and a layer's memory per node.

``g3 plan`` records a :class:`ModelSpec` in plan.json; the runtime builds its layers from the same spec
(``stages.kits.runtime.models.build_model``), the planners size g3's bins with :func:`bin_cost` (what a bin holds on
the device, per destination, distinct source and in-arc), and the simulator reads the layer shapes back. Widths: ``feat_dim → hidden → … → num_classes``; GAT's hidden layers
concatenate their heads (``heads × hidden`` wide) and its last layer averages them.

``dgcn`` is the decoupled GCN of NeutronTP (002 §4.1.2): an MLP of ``layers`` linear layers
(``feat_dim → hidden → … → num_classes``), then ``layers`` propagation rounds of GCN's normalised adjacency
``Â`` (no weights, no activation). The runtime runs it as ``layers + 1`` blocks: block 0 is the MLP (``op =
"mlp"``: it reads only the destination rows), blocks 1..L are the propagations (``op = "propagate"``).
:attr:`ModelSpec.num_blocks` is the runtime's layer count for every kind.
"""

from __future__ import annotations

from dataclasses import dataclass

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
            raise ValueError(
                "the layer count, hidden width and heads must be >= 1 (--layers, --hidden, --heads)"
            )
        if self.in_dim < 1 or self.num_classes < 1:
            raise ValueError("the store needs at least one feature column and one class")

    def layer_shapes(self) -> list[LayerShape]:
        if self.kind == "dgcn":
            return [LayerShape(self.in_dim, self.num_classes, op="mlp")] + [
                LayerShape(self.num_classes, self.num_classes, op="propagate") for _ in range(self.layers)
            ]
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

    @classmethod
    def from_plan(cls, plan_meta: dict) -> ModelSpec:
        """The spec a plan.json records (its ``config`` and ``store`` blocks)."""
        mc, st = plan_meta["config"], plan_meta["store"]
        return cls(
            kind=mc["model"],
            in_dim=int(st["feat_dim"]),
            hidden=int(mc["hidden"]),
            num_classes=int(st["num_classes"]),
            layers=int(mc["layers"]),
            heads=int(mc["heads"]),
        )


ARC_INDEX_BYTES = (
    3 * INDEX_BYTES
)  # per arc: the block's index, and its row id or its transposed index + permutation
BIN_DEVICES = ("cpu", "cuda")  # the device kinds a plan's bins can be sized for (g3 plan --bins-for)


def bins_device(strategy_options: dict | None) -> str:
    """The device kind a plan's bins were sized for (its strategy option ``bins_for``, g3's ``--bins-for``);
    a plan made before the option read as ``cuda``, the model it was sized with."""
    kind = (strategy_options or {}).get("bins_for") or "cuda"
    if kind not in BIN_DEVICES:
        raise ValueError(f"bins sized for {kind!r}: expected one of {', '.join(BIN_DEVICES)}")
    return str(kind)


@dataclass(frozen=True)
class BinCost:
    """Device bytes of one bin of a layer, training (forward, then backward with the same bin's gradients):
    ``fixed + per_dst × destinations + per_src × distinct sources + per_arc × in-arcs``. See :func:`bin_cost`."""

    per_dst: int
    per_src: int
    per_arc: int
    fixed: int = 0

    def bytes(self, n_dst, n_src, arcs):
        """The bin's bytes (ints or int64 arrays of bins)."""
        return self.fixed + self.per_dst * n_dst + self.per_src * n_src + self.per_arc * arcs


def bin_cost(shape: LayerShape, mlp_widths: list[int] | None = None, device: str = "cuda") -> BinCost:
    """What one bin of a layer of ``shape`` holds on the device, by destination, distinct source and in-arc.

    Derived from what the runtime allocates for a bin (stages/strategies/g3/runtime.py, the layers of
    stages/kits/runtime/models and the kernels of stages/kits/runtime/kernels/), float32 rows and int64 indices:

    * **sources**: the bin's input is one gathered row per distinct source (``x_src [n_src, d_in]``: the bin's
      destinations, then their other in-neighbours), never one per arc; with it its gradient (autograd adds
      two partial ones: through the aggregation and through the destinations' own rows, so up to two more
      rows), the rows the kernel aggregates when they are not the input itself (a projected ``W x`` when the
      layer projects first, GCN's normalised copy; GAT's ``z`` and its partial gradients) and the per-source
      degree, normalisation and transposed-CSR row pointer;
    * **arcs**: the block's index, and the arc's row id (the index backend) or its transposed index and
      permutation (numba, sparse); per-arc feature rows only where a kernel makes them: the index backend
      (CUDA's) gathers one ``edge_width``-wide message per arc (``x_src.index_select``), or backward its
      gradient, then ``index_add_``s them; the numba CPU kernels are fused CSR sums and make none. ``device``
      is the kind the bins are sized for (the plan's ``--bins-for``): ``"cuda"`` counts the index backend's
      rows, ``"cpu"`` the numba backend's, none (a plan made on a CPU machine for a GPU cluster says
      ``cuda``). GAT's per-arc tensors are counted as its index backend holds them at once in backward (the
      message gradient, the weighted one, the gathered source and their product: 4 × edge_width; on the
      CPU its weighted sum and the weight gradient are fused too, so none) plus its scores, attention and
      their gradients (3 per head, on both: the CPU path makes them as tensors too), over the self-loop CSR
      it caches (one more index per arc, one self-loop arc per destination);
    * **destinations**: the block's row pointer, degree and global id; the aggregation's output, its
      gradient and the destinations' own input rows' gradient; and the output side at its widest moment:
      the hash dropout mask as the index backend builds it (two int64 ``[n_dst, d_out]`` temporaries) beside
      the pre-activation and the ReLU (24 bytes per output column);
    * **fixed**: one gradient per parameter of the layer (each bin's weight-gradient product, before autograd
      adds it into ``.grad``).

    Each group is charged at its largest moment, so the sum bounds the peak from above: measured with
    torch's memory profiler on random blocks, every kind, it is 1.0–3× the index backend's peak (``"cuda"``)
    and 1.1–3.7× the numba backend's (``"cpu"``) (tests/test_bin_memory.py). A bin's block stays on the device for the run (the runtime moves every
    bin's block there at start), which this cost of one bin does not add up over bins. dgcn's MLP (block 0,
    ``op = "mlp"``) reads only its destinations' rows but is given every source's gathered row; its hidden
    widths (``mlp_widths``, ``ModelSpec.mlp_widths``; by default none wider than its input and output) size
    its per-destination part.
    """
    if device not in BIN_DEVICES:
        raise ValueError(f"bins sized for {device!r}: expected one of {', '.join(BIN_DEVICES)}")
    a, b, w, heads = shape.d_in, shape.d_out, shape.edge_width, max(1, shape.heads)
    e, i = ELEM_BYTES, INDEX_BYTES
    msg = w if device == "cuda" else 0  # the per-arc message row's width: the index backend's only
    block_dst = 2 * i + e  # indptr, global id, in-degree
    out_side = 6 * e * b  # pre-activation, ReLU and two int64 dropout temporaries per output column
    if shape.op == "mlp":
        widths = list(mlp_widths) if mlp_widths else [a, b]
        hidden = max(widths[1:-1], default=0)
        params = sum(p * q + q for p, q in zip(widths[:-1], widths[1:], strict=True))
        return BinCost(
            per_dst=block_dst + 2 * e * sum(widths) + 6 * e * hidden,
            per_src=e * (a + 1),
            per_arc=i,
            fixed=e * params,
        )
    if shape.attention:
        per_arc = 4 * i + e * (4 * msg + 3 * heads)
        return BinCost(
            per_dst=block_dst + per_arc + e * (a + 3 * w + heads) + out_side,
            per_src=e + i + e * (2 * a + 4 * w + 2 * heads),
            per_arc=per_arc,
            fixed=e * (a * w + 2 * w + b),
        )
    # SAGE and GCN (their shapes are alike): x, the rows summed when they are not x (SAGE projecting first: W x;
    # GCN: its normalised copy), and the gradients of both
    per_src = 2 * e + i + e * (3 * a + 2 * w)
    per_arc = ARC_INDEX_BYTES + e * msg
    if shape.op == "propagate":  # dgcn's Â: no weights, no activation
        return BinCost(per_dst=block_dst + e * (a + 2 * w) + 4 * e * b, per_src=per_src, per_arc=per_arc)
    return BinCost(
        per_dst=block_dst + e * (a + 2 * w) + out_side,
        per_src=per_src,
        per_arc=per_arc,
        fixed=e * (2 * a * b + b),
    )  # SAGE's two weights and bias (GCN has one weight)


def bin_costs(spec: ModelSpec, device: str = "cuda") -> list[BinCost]:
    """:func:`bin_cost` of every block of ``spec``, for bins sized for ``device`` (``"cuda"`` or ``"cpu"``)."""
    widths = spec.mlp_widths if spec.kind == "dgcn" else None
    return [bin_cost(s, widths, device) for s in spec.layer_shapes()]


def node_bytes(in_degree: np.ndarray, shape: LayerShape) -> np.ndarray:
    """A per-node upper bound of a layer's device bytes (training: values and gradients), for packing whole
    graph ranges without counting their distinct sources (neutrontp's chunks, stages/common/tensor_parallel.py).

    Per node: its input and output rows; per in-edge: one gathered source row (an upper bound: sources are
    shared between nodes of a bin), its index, and for GAT the score, attention and message per head.
    The factor 2 keeps room for the gradients of the same tensors in backward. g3's bins count what they hold
    instead (:func:`bin_cost`).
    """
    per_node = (shape.d_in + shape.d_out) * ELEM_BYTES
    if shape.op == "mlp":  # reads no arcs
        return np.full(len(np.asarray(in_degree)), 2 * per_node, dtype=np.int64)
    per_edge = shape.d_in * ELEM_BYTES + INDEX_BYTES + shape.edge_width * ELEM_BYTES
    if shape.attention:
        per_edge += 3 * shape.heads * ELEM_BYTES
    return 2 * (per_node + np.asarray(in_degree, dtype=np.int64) * per_edge)
