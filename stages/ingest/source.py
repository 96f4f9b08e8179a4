"""What every ingest reader produces: a :class:`GraphSource`, consumed by :func:`stages.ingest.build.build_store`.

Readers (OGB, WebGraph, edge lists, synthetic) only parse; the builder does the shared work (symmetrising,
removing duplicates and self-loops, external sort into an in-edge CSR, checks, metadata), so every format
gets the same guarantees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ArcChunks = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]
FeatureBlocks = Callable[[], Iterator[np.ndarray]]
# what ingest holds per node beyond --memory-limit, at least: in-degree counts and row pointers (int64)
NODE_BYTES = 16


@dataclass
class GraphSource:
    """A parsed input graph, streamed.

    ``arcs()`` yields ``(src, dst)`` int64 array pairs (arc src -> dst) in any order; it may be called more
    than once. ``feature_blocks()`` yields float row blocks ``[rows, feat_dim]`` in node order, covering all
    ``num_nodes`` rows; ``None`` means the source has no features (random ones are generated).
    ``labels``: int array ``[num_nodes]`` with -1 for unlabelled nodes, or ``None``.
    ``splits``: ``{"train": ids, "valid": ids, "test": ids}`` or ``None`` (a ratio split is drawn).
    ``expected_arcs``: the arc count the source claims (checked against what was read), or ``None``.
    ``undirected_once``: the source stores each undirected edge once (``--symmetrize`` defaults on).
    ``path``: the file to name in messages about the source as a whole; ``feature_path``: the features' file.
    """

    name: str
    num_nodes: int
    arcs: ArcChunks
    path: str
    feat_dim: int = 0
    feature_blocks: FeatureBlocks | None = None
    labels: np.ndarray | None = None
    num_classes: int | None = None
    splits: dict[str, np.ndarray] | None = None
    expected_arcs: int | None = None
    undirected_once: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    feature_path: str | None = None  # the file the features come from, when not ``path`` (messages name it)
    arcs_hint: int | None = None  # about how many arcs ``arcs()`` yields, when known before reading
