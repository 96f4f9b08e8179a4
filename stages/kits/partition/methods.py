"""What a `g3 partition` method is (:class:`PartitionMethod`), the layouts shards are written in (:class:`Layout`),
and the methods no strategy owns (``metis``, ``random``, ``chunk``).

A method assigns every node to a worker: ``assign(graphs, store, options, timing, progress)`` returns the int32
``[N]`` assignment and a dict of method-specific extras. A strategy with a partitioner of its own declares it in
its spec (``StrategySpec.partition_methods``: g3's Algorithm 1, ByteGNN's K-hop blocks, P3's hash); the registry
(``stages.strategies``) lists every method, these first after g3's.

A layout is how the shards hold the graph (docs/ARTIFACTS.md, "Partition"):

* ``rows``: node-partitioned; shard ``i`` holds its owned nodes' in-edge CSR over local ids, its remote nodes
  grouped by owner, the send lists of the peer-to-peer exchange and the owned rows' features;
* ``columns``: the features split by column; shard ``w`` holds a column slice of every node's features and the
  whole graph's degrees, row ownership (labels, splits, dense work) by contiguous id ranges.

A method's first layout is its primary one: it fixes the partition's figures, and its shards are
``PART/part-RRRRR``. Each further layout ``L`` writes its own shards under ``PART/L/part-RRRRR`` (a method that
needs hash-partitioned structure and column-split features at once, as P3, declares ``("rows", "columns")``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stages.kits.partition import baselines, feature, metis, metrics, shards


@dataclass(frozen=True)
class Layout:
    name: str
    description: str
    # (graphs, part, k, hidden, in_degree) -> (figures, remote marks or None)
    measure: Callable
    # (root, store, graphs, part, k, info, marks, progress): the shards under root
    write: Callable
    # (store, k) -> {key: value} added to partition.json
    summary: Callable | None = None


@dataclass(frozen=True)
class PartitionMethod:
    name: str
    summary: str  # one line: what it does, and whose partitioner it is
    assign: Callable  # (graphs, store, options, timing, progress) -> (assignment, extras)
    layouts: tuple[str, ...] = ("rows",)
    options: tuple[str, ...] = ("seed",)  # PartitionOptions fields it reads (a re-partition copies these)

    @property
    def primary_layout(self) -> str:
        return self.layouts[0]


LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        Layout(
            "rows",
            "node-partitioned: owned nodes' in-edge CSR over local ids, remote nodes grouped by owner, "
            "send lists and the owned rows' features",
            measure=metrics.row_figures,
            write=shards.write_row_shards,
        ),
        Layout(
            "columns",
            "features split by column: a column slice of every node's features and the whole "
            "graph's degrees; rows owned by contiguous id ranges",
            measure=feature.column_figures,
            write=shards.write_column_shards,
            summary=feature.column_summary,
        ),
    )
}

KIT_METHODS: tuple[PartitionMethod, ...] = (
    PartitionMethod("metis", "plain edge-cut METIS (DGL, BNS-GCN)", assign=metis.assign),
    PartitionMethod("random", "hash of node id and seed", assign=baselines.assign_random),
    PartitionMethod(
        "chunk",
        "contiguous id ranges of equal size (NeuGraph, ROC, NeutronStar)",
        assign=baselines.assign_chunk,
        options=(),
    ),
)
