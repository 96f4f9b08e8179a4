"""The registry of `g3 partition` methods and of the layouts their shards are written in.

A method is one entry of :data:`METHODS`: the function that assigns every node to a worker (``"module:function"``
under ``stages.partition``, called as ``assign(graphs, store, options, timing, progress)`` and returning the
int32 ``[N]`` assignment and a dict of method-specific extras), the :class:`~stages.partition.PartitionOptions`
fields it reads, and the layouts it writes. Adding a method is one entry here plus the module of its function:
`g3 partition`, its ``--method`` choices and every later stage read what they need from this registry and from
the layouts recorded in partition.json.

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

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from .errors import G3InputError


@dataclass(frozen=True)
class Layout:
    name: str
    description: str
    measure: str  # "module:function"(graphs, part, k, hidden, in_degree) -> (figures, remote marks or None)
    write: (
        str  # "module:function"(root, store, graphs, part, options, marks, progress): the shards under root
    )
    summary: str | None = None  # "module:function"(store, k) -> {key: value} added to partition.json


@dataclass(frozen=True)
class PartitionMethod:
    name: str
    summary: str  # one line: what it does, and whose partitioner it is
    assign: str  # "module:function" under stages.partition (see the module docstring)
    layouts: tuple[str, ...] = ("rows",)
    options: tuple[str, ...] = ("seed",)  # PartitionOptions fields it reads (a re-partition copies these)

    @property
    def primary_layout(self) -> str:
        return self.layouts[0]

    def assign_function(self) -> Callable:
        return _function(self.assign)


LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        Layout(
            "rows",
            "node-partitioned: owned nodes' in-edge CSR over local ids, remote nodes grouped by owner, "
            "send lists and the owned rows' features",
            measure="metrics:row_figures",
            write="shards:write_row_shards",
        ),
        Layout(
            "columns",
            "features split by column: a column slice of every node's features and the whole "
            "graph's degrees; rows owned by contiguous id ranges",
            measure="feature:column_figures",
            write="shards:write_column_shards",
            summary="feature:column_summary",
        ),
    )
}


METHODS: dict[str, PartitionMethod] = {
    m.name: m
    for m in (
        PartitionMethod(
            "g3",
            "multi-constraint METIS (feature size, degree) then Algorithm 1 swaps that balance the "
            "remote sets (G3 §4.2), refined when they stop short",
            assign="g3_method:assign",
            options=(
                "seed",
                "gamma",
                "balance_tol",
                "degree_tol",
                "hidden",
                "max_swaps",
                "refine_steps",
                "remote_budget",
            ),
        ),
        PartitionMethod("metis", "plain edge-cut METIS (DGL, BNS-GCN)", assign="metis:assign"),
        PartitionMethod("random", "hash of node id and seed", assign="baselines:assign_random"),
        PartitionMethod(
            "chunk",
            "contiguous id ranges of equal size (NeuGraph, ROC, NeutronStar)",
            assign="baselines:assign_chunk",
            options=(),
        ),
        PartitionMethod(
            "distdgl",
            "METIS with DistDGL's five balance constraints (nodes, train, valid, test, arcs)",
            assign="distdgl:assign",
        ),
        PartitionMethod(
            "bytegnn",
            "ByteGNN's K-hop blocks assigned greedily (seed paper 001 §4.2.3, Algorithm 2)",
            assign="bytegnn:assign",
            options=("seed", "balance_tol", "bytegnn_alpha", "bytegnn_beta", "bytegnn_gamma", "bytegnn_hops"),
        ),
        PartitionMethod(
            "p3",
            "P3's independent partitioning (P3 §3.1): the structure by a random hash of node id, each "
            "arc with its destination, and the features split by column, every worker a column "
            "slice of every node",
            assign="baselines:assign_random",
            layouts=("rows", "columns"),
        ),
        PartitionMethod(
            "feature",
            "the whole topology on every worker and ceil(F/K) feature columns each (NeutronTP)",
            assign="feature:assign",
            layouts=("columns",),
            options=("hidden",),
        ),
    )
}

DEFAULT_METHOD = next(iter(METHODS))


def _function(spec: str) -> Callable:
    module, name = spec.split(":")
    return getattr(importlib.import_module(f"stages.partition.{module}"), name)


def partition_method(name: str) -> PartitionMethod:
    """The registered method ``name``; an unknown name is bad input (one line naming the choices)."""
    if name not in METHODS:
        raise G3InputError(f"unknown method {name!r} (choose from {', '.join(METHODS)})")
    return METHODS[name]


def layout(name: str) -> Layout:
    return LAYOUTS[name]


def implied_layouts(method: str | None) -> tuple[str, ...]:
    """The layouts a partition of ``method`` was written in before partition.json recorded them (version 1):
    the method's registered layouts, and ``rows`` for a method this g3 does not know."""
    known = METHODS.get(method or "")
    return known.layouts if known else ("rows",)


def layout_function(name: str, role: str) -> Callable:
    """The ``role`` (``measure``, ``write`` or ``summary``) function of layout ``name``."""
    return _function(getattr(LAYOUTS[name], role))


__all__ = [
    "METHODS",
    "LAYOUTS",
    "DEFAULT_METHOD",
    "PartitionMethod",
    "Layout",
    "partition_method",
    "layout",
    "implied_layouts",
    "layout_function",
]
