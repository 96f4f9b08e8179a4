"""The ``feature`` split (NeutronTP, P3): every worker keeps the whole topology and a slice of feature columns.

Worker *w* holds columns ``[w*W, min((w+1)*W, F))`` of every node with ``W = ceil(F / K)``; the last slices
are padded with zero columns up to ``W`` (a slice past ``F`` is all padding). Aggregation runs on the column
slice over the whole graph, so no node rows are fetched from peers (remote sets are empty); the per-layer
exchange is the all-to-all that turns column slices into row blocks for the dense update. Node ownership for
that dense work (and labels and splits) is by contiguous id ranges, as in ``chunk``.
"""

from __future__ import annotations

import numpy as np

from stages.common.tensor_parallel import feature_columns
from stages.kits.partition.baselines import chunk_bounds, chunk_partition
from stages.kits.partition.metrics import FLOAT32_BYTES, layout_figures


def assign(graphs, store, o, timing: dict, progress) -> tuple[np.ndarray, dict]:
    """The ``feature`` method's row ownership: contiguous id ranges, as ``chunk``."""
    return chunk_partition(graphs.num_nodes, o.workers), {}


def column_figures(graphs, part: np.ndarray, k: int, hidden: int, in_degree: np.ndarray) -> tuple[dict, None]:
    """The ``columns`` layout's figures (no remote sets: nothing to mark)."""
    return feature_figures(graphs, k, hidden, in_degree), None


def column_summary(store, k: int) -> dict:
    """partition.json's ``feature_split``: every worker's columns and how rows are owned."""
    return {"feature_split": {"columns": feature_columns(store.feat_dim, k), "owner": "contiguous id ranges"}}


def feature_figures(graphs, k: int, hidden: int, in_degree: np.ndarray) -> dict:
    """Per-worker figures of the feature split (same keys as ``metrics.partition_figures``)."""
    n = graphs.num_nodes
    part = chunk_partition(n, k)
    bounds = chunk_bounds(n, k)
    nodes = np.diff(bounds)
    arcs = np.bincount(part, weights=in_degree, minlength=k).astype(np.int64)
    degree_sum = np.bincount(part, weights=graphs.degree, minlength=k).astype(np.int64)
    slice_width = -(-hidden // k)
    # all-to-all per layer: worker i receives the other K-1 column slices of its own rows, and sends its
    # slice of everyone else's rows
    recv = nodes * (k - 1) * slice_width * FLOAT32_BYTES
    send = (n - nodes) * slice_width * FLOAT32_BYTES
    zeros = np.zeros(k, dtype=np.int64)
    return layout_figures(
        nodes, arcs, degree_sum, zeros, zeros, recv, send, np.zeros((k, k), dtype=np.int64), 0
    )
