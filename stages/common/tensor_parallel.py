"""The layout of tensor parallelism on a feature split (NeutronTP, 002 §3–4), shared by the partitioner (the
feature columns), the planner (chunks, ownership, first use, collective sizes), the runtime (hidden slices)
and the simulator (other worker counts).

Chunks are contiguous destination ranges of the whole graph with all their in-arcs; chunk ``j``'s rows are
cut into K consecutive pieces, piece ``q`` owned by worker ``q``; a node's rows are split with the first chunk
that reads it as a source (``first_use``).
"""

from __future__ import annotations

import numpy as np

from stages.common.errors import G3InputError
from stages.common.model_spec import LayerShape, ModelSpec, node_bytes
from stages.common.packing import pack_by_bytes, pack_by_count


def feature_columns(feat_dim: int, k: int) -> list[dict]:
    """Column range, width and zero padding of each worker's slice."""
    width = -(-feat_dim // k)
    cols = []
    for w in range(k):
        start = min(w * width, feat_dim)
        stop = min(start + width, feat_dim)
        cols.append({"start": start, "stop": stop, "width": width, "padding": width - (stop - start)})
    return cols


def slice_widths(width: int, k: int) -> list[int]:
    """Columns of each worker's slice of a ``width``-wide hidden tensor: as even as possible, worker order."""
    return [width // k + (1 if w < width % k else 0) for w in range(k)]


def aggregated_widths(spec: ModelSpec) -> list[int]:
    """Full width of what is aggregated over the graph, per aggregation: every layer's input (naive), or the
    class width once per propagation round (decoupled)."""
    if spec.kind == "dgcn":
        return [spec.num_classes] * spec.layers
    return spec.widths[: spec.layers]


def chunk_bounds(
    in_degree: np.ndarray, spec: ModelSpec, k: int, chunk_size: int | None, budget: int
) -> np.ndarray:
    """Destination ranges: ``chunk_size`` nodes each, or packed while a chunk's bytes stay within half the
    budget (per node and in-arc, the widest aggregation's slice: :func:`node_bytes`)."""
    n = len(in_degree)
    if chunk_size:
        return pack_by_count(n, chunk_size)
    cost = np.zeros(n, dtype=np.int64)
    for width in set(aggregated_widths(spec)):
        w = -(-width // k)
        cost = np.maximum(cost, node_bytes(in_degree, LayerShape(w, w)))
    try:
        return pack_by_bytes(cost, budget // 2)
    except G3InputError as exc:
        raise G3InputError(str(exc).replace("--bin-size", "--chunk-size")) from None


def owner_bounds(bounds: np.ndarray, k: int) -> np.ndarray:
    """``[n_chunks, K + 1]``: chunk ``j``'s range cut into K consecutive, nearly equal pieces."""
    starts, sizes = bounds[:-1], np.diff(bounds)
    pieces = (sizes[:, None] * np.arange(k + 1)[None, :]) // k
    return starts[:, None] + pieces


def first_use(indptr: np.ndarray, indices: np.ndarray, bounds: np.ndarray, self_loops: bool) -> np.ndarray:
    """The first chunk that reads each node as a source (an in-arc's source, or with ``self_loops`` the node
    itself); ``n_chunks`` for a node no chunk reads."""
    n, n_chunks = len(indptr) - 1, len(bounds) - 1
    first = np.full(n, n_chunks, dtype=np.int32)
    arc_chunk = np.searchsorted(bounds, np.arange(n), side="right").astype(np.int32) - 1  # chunk of each node
    dst_chunk = np.repeat(arc_chunk, np.diff(indptr))
    np.minimum.at(first, np.asarray(indices, dtype=np.int64), dst_chunk)
    if self_loops:
        np.minimum(first, arc_chunk, out=first)
    return first


def collectives(
    spec: ModelSpec, owned: list[np.ndarray], needed: np.ndarray, layer0_columns: list[int], n: int
) -> list[dict]:
    """Every collective of one training epoch with the elements each worker sends (``elements_sent``) —
    the figures 002 §3.2 writes as 2(N−1)·V·D/N² per layer and worker. ``once``: the layer-0 ones a
    ``--layer0-cache`` run does only in its first epoch."""
    k = len(owned)
    own = np.array([len(o) for o in owned], dtype=np.int64)
    own_needed = np.array([int(needed[o].sum()) for o in owned], dtype=np.int64)
    n_needed = int(needed.sum())
    out = []

    def add(name, width, sent, once=False):
        out.append({"name": name, "width": int(width), "once": once, "elements_sent": [int(s) for s in sent]})

    if spec.kind in (
        "sage",
        "dgcn",
    ):  # whole input rows of the owned nodes (SAGE's self term, the MLP's input)
        add("features", spec.in_dim, [layer0_columns[w] * (n - own[w]) for w in range(k)], once=True)
    if spec.kind == "dgcn":
        c = spec.num_classes
        cols = slice_widths(c, k)
        add("split", c, [own_needed[w] * (c - cols[w]) for w in range(k)])
        add("gather", c, [cols[w] * (n - own[w]) for w in range(k)])
        add("bwd split", c, [own[w] * (c - cols[w]) for w in range(k)])
        add("bwd gather", c, [cols[w] * (n_needed - own_needed[w]) for w in range(k)])
        return out
    for li, width in enumerate(spec.widths[: spec.layers]):
        cols = layer0_columns if li == 0 else slice_widths(width, k)
        if li > 0:
            add(f"split L{li}", width, [own_needed[w] * (width - cols[w]) for w in range(k)])
        add(f"gather L{li}", width, [cols[w] * (n - own[w]) for w in range(k)], once=li == 0)
    for li in reversed(range(1, spec.layers)):
        width = spec.widths[li]
        cols = slice_widths(width, k)
        add(f"bwd split L{li}", width, [own[w] * (width - cols[w]) for w in range(k)])
        add(f"bwd gather L{li}", width, [cols[w] * (n_needed - own_needed[w]) for w in range(k)])
    return out
