"""The layout of tensor parallelism on a feature split (NeutronTP, 002 §3–4), shared by the partitioner (the
feature columns), the planner (chunks, ownership, first use, collective sizes), the runtime (hidden slices)
and the simulator (other worker counts).

Chunks are contiguous destination ranges of the whole graph with all their in-arcs; chunk ``j``'s rows are
cut into K consecutive pieces, piece ``q`` owned by worker ``q``; a node's rows are split with the first chunk
that reads it as a source (``first_use``).
"""

from __future__ import annotations

from collections.abc import Iterator

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


def collective_schedule(
    spec: ModelSpec, k: int, layer0_columns: list[int]
) -> Iterator[tuple[str, int, list[int], bool, str, bool]]:
    """The collectives of one training epoch in order, each ``(name, width, every worker's columns, split,
    nodes, once)``: a split moves rows to slices, a gather (and the input features) slices to rows, of the
    owned destination rows (``nodes`` = ``"dst"``) or of the nodes the chunks read first (``"new"``);
    ``once``: the layer-0 ones a ``--layer0-cache`` run does only in its first epoch."""
    # whole input rows of the owned nodes (SAGE's self term, the MLP's input)
    if spec.kind in ("sage", "dgcn"):
        yield "features", spec.in_dim, layer0_columns, False, "dst", True
    if spec.kind == "dgcn":
        c = spec.num_classes
        cols = slice_widths(c, k)
        yield "split", c, cols, True, "new", False
        yield "gather", c, cols, False, "dst", False
        yield "bwd split", c, cols, True, "dst", False
        yield "bwd gather", c, cols, False, "new", False
        return
    for li, width in enumerate(spec.widths[: spec.layers]):
        cols = layer0_columns if li == 0 else slice_widths(width, k)
        if li > 0:
            yield f"split L{li}", width, cols, True, "new", False
        yield f"gather L{li}", width, cols, False, "dst", li == 0
    for li in reversed(range(1, spec.layers)):
        width = spec.widths[li]
        cols = slice_widths(width, k)
        yield f"bwd split L{li}", width, cols, True, "dst", False
        yield f"bwd gather L{li}", width, cols, False, "new", False


def collectives(
    spec: ModelSpec, owned: list[np.ndarray], needed: np.ndarray, layer0_columns: list[int], n: int
) -> list[dict]:
    """Every collective of :func:`collective_schedule` with the elements each worker sends
    (``elements_sent``) — the figures 002 §3.2 writes as 2(N−1)·V·D/N² per layer and worker: a split sends
    the other workers' columns of the worker's nodes, a gather its columns of everyone else's nodes."""
    k = len(owned)
    counts = {
        "dst": ([len(o) for o in owned], n),
        "new": ([int(needed[o].sum()) for o in owned], int(needed.sum())),
    }
    out = []
    for name, width, cols, split, nodes, once in collective_schedule(spec, k, layer0_columns):
        mine, total = counts[nodes]
        sent = [mine[w] * (width - cols[w]) if split else cols[w] * (total - mine[w]) for w in range(k)]
        out.append({"name": name, "width": int(width), "once": once, "elements_sent": [int(s) for s in sent]})
    return out
