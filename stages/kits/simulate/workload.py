"""The exact work of one epoch, read from a plan: per worker and layer the bins (nodes, arcs, source rows), the
node-level structure the eager schedules need, and the peer-to-peer message tables with their sizes.

A :class:`Workload` is plain arrays, read from a plan folder (:func:`load_workload`) or built by hand (tests).
Message sizes are rows × width × 4 bytes (float32), where the width is the layer's output width for forward
messages and its input width for backward (gradient) messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stages.common.model_spec import LayerShape, ModelSpec, bins_device
from stages.common.plan_artifact import Table, arc_sources

ELEM_BYTES = 4


@dataclass
class LayerBins:
    """Plan bins of one layer on one worker: rows ``bin_ptr[b]:bin_ptr[b+1]`` of the priority list."""

    bin_ptr: np.ndarray  # int64 [B+1]
    bin_arcs: np.ndarray  # int64 [B]
    bin_srcs: np.ndarray  # int64 [B]: source rows gathered for the bin (destinations included)

    @property
    def num_bins(self) -> int:
        return len(self.bin_ptr) - 1

    @property
    def bin_nodes(self) -> np.ndarray:
        return np.diff(self.bin_ptr)


@dataclass
class WorkerLoad:
    """One worker's share of the epoch."""

    rank: int
    num_owned: int
    num_remote: int
    row_ptr: np.ndarray  # int64 [n_owned+1]: in-arcs of the rows, in priority order
    edge_src: np.ndarray  # int64 [arcs]: local source id of every arc (rows in priority order)
    priority: np.ndarray  # int64 [n_owned]: owned-local id of every row
    layers: list[LayerBins]
    tables: dict[str, Table] = field(default_factory=dict)  # {fwd,bwd}_{send,recv}_<layer>
    bin_limit_nodes: list[int] = field(default_factory=list)  # per layer, for dynamic (eager) bins
    bin_limit_bytes: list[int | None] = field(default_factory=list)  # per layer; None = node count limit

    def table(self, name: str) -> Table:
        return self.tables.get(name) or Table.empty()

    @property
    def num_arcs(self) -> int:
        return int(self.row_ptr[-1])


@dataclass
class Workload:
    """Every worker's load plus the model's shape: what one simulated epoch runs."""

    workers: list[WorkerLoad]
    shapes: list[LayerShape]
    num_params: int  # weights all-reduced each epoch
    num_nodes: int
    source: str = "hand-made"
    store_path: str | None = None
    config: dict = field(default_factory=dict)
    bins_for: str = "cuda"  # the device kind the plan's bins were sized for (g3 plan --bins-for)

    @property
    def k(self) -> int:
        return len(self.workers)

    @property
    def num_layers(self) -> int:
        return len(self.shapes)

    def fwd_bytes(self, layer: int, rows: int) -> int:
        """Bytes of ``rows`` outputs of ``layer`` (forward message)."""
        return int(rows) * self.shapes[layer].d_out * ELEM_BYTES

    def bwd_bytes(self, layer: int, rows: int) -> int:
        """Bytes of ``rows`` gradients of ``layer``'s inputs (backward message)."""
        return int(rows) * self.shapes[layer].d_in * ELEM_BYTES


def count_params(shapes: list[LayerShape], model: str, mlp_widths: list[int] | None = None) -> int:
    """Weights of g3's models (stages/kits/runtime/models): SAGE 2·in·out + out, GCN in·out + out, GAT per layer
    in·H·C (projection) + 2·H·C (attention) + bias (H·C when heads concatenate, else C); dgcn its MLP's
    in·out + out per linear layer (``mlp_widths``, :attr:`ModelSpec.mlp_widths`; default one layer), the
    propagation has none."""
    if model == "dgcn":
        w = list(mlp_widths or [shapes[0].d_in, shapes[0].d_out])
        return int(sum(a * b + b for a, b in zip(w[:-1], w[1:], strict=True)))
    total = 0
    for s in shapes:
        if model == "sage":
            total += 2 * s.d_in * s.d_out + s.d_out
        elif model == "gcn":
            total += s.d_in * s.d_out + s.d_out
        else:
            hc = s.heads * s.per_head
            total += s.d_in * hc + 2 * hc + s.d_out
    return total


def load_workload(plan: str | Path) -> Workload:
    """Read every worker's bins and message tables from a plan folder (``g3.plan`` v1)."""
    from stages.common.plan_artifact import WorkerPlan, load_plan_meta

    plan = Path(plan)
    meta = load_plan_meta(plan)
    shapes = [LayerShape(**s) for s in meta["layers"]]
    k = int(meta["num_workers"])
    workers = []
    for r in range(k):
        wp = WorkerPlan(plan, r)
        row_ptr = np.asarray(wp.row_ptr, dtype=np.int64)
        layers, edge_src = [], None
        for li in range(len(shapes)):
            lp = wp.layer(li)
            bin_ptr = np.asarray(lp.bin_ptr, dtype=np.int64)
            arcs = row_ptr[bin_ptr[1:]] - row_ptr[bin_ptr[:-1]]
            layers.append(LayerBins(bin_ptr, arcs.astype(np.int64), np.diff(lp.src_ptr).astype(np.int64)))
            if edge_src is None:
                edge_src = arc_sources(row_ptr, lp)
        tables = {}
        for li in range(len(shapes)):
            for name in (f"fwd_send_{li}", f"fwd_recv_{li}", f"bwd_send_{li}", f"bwd_recv_{li}"):
                t = wp.table(name)
                if len(t.msgs):
                    tables[name] = t
        assert edge_src is not None, "a plan has at least one layer"
        limits_n, limits_b = [], []
        for layer in wp.meta["layers"]:
            fixed = layer.get("bin_limit_bytes") is None
            limits_n.append(int(layer["bin_limit_nodes"]) if fixed else int(wp.meta["num_owned"]))
            limits_b.append(None if fixed else int(layer["bin_limit_bytes"]))
        workers.append(
            WorkerLoad(
                rank=r,
                num_owned=int(wp.meta["num_owned"]),
                num_remote=int(wp.meta["num_remote"]),
                row_ptr=row_ptr,
                edge_src=edge_src,
                priority=np.asarray(wp.priority, dtype=np.int64),
                layers=layers,
                tables=tables,
                bin_limit_nodes=limits_n,
                bin_limit_bytes=limits_b,
            )
        )
    model = meta["config"]["model"]
    mlp = ModelSpec.from_plan(meta).mlp_widths if model == "dgcn" else None
    return Workload(
        workers=workers,
        shapes=shapes,
        num_params=count_params(shapes, model, mlp),
        num_nodes=int(meta["store"]["num_nodes"]),
        source=str(plan.resolve()),
        store_path=meta["store"].get("path"),
        config=dict(meta["config"]),
        bins_for=bins_device(meta["strategy"].get("options")),
    )
