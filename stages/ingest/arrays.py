"""In-memory graphs as an ingest source (``g3.ingest`` from Python): arrays, a PyG ``Data``, a scipy matrix.

Every reader here returns a :class:`~stages.ingest.source.GraphSource`, so the store is built by the same
builder (and checked the same way) as a file's. Conventions, as PyG's:

* ``edge_index`` ``[2, E]`` (or ``[E, 2]``): row 0 the sources, row 1 the targets; an arc ``u → v`` makes ``u`` an
  in-neighbour of ``v``. Edges are taken as given (a PyG dataset usually stores both directions already); ask
  for ``symmetrize`` to add the reverses.
* a scipy sparse adjacency ``A``: ``A[u, v] ≠ 0`` is an arc ``u → v``.
* ``x`` ``[N, F]`` numeric features; ``y`` ``[N]`` integer classes (``-1`` unlabelled); splits as boolean masks
  ``[N]`` or node-id arrays (``train``/``valid``/``test``; a PyG ``Data``'s ``train_mask``/``val_mask``/
  ``test_mask``); masks ``[N, S]`` (several splits, as the heterophilous benchmarks store them) need
  ``split_index``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from stages.common.errors import G3InputError
from stages.ingest.edgelist import feature_blocks_from_array, iter_edge_array, labels_from_array
from stages.ingest.source import GraphSource

ARC_CHUNK = 1 << 22


def _numpy(value: Any, what: str, where: str) -> np.ndarray:
    """A numpy view of an array-like (numpy, torch tensor on any device, list)."""
    if value is None:
        return None
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - anything that is not an array is the user's input error
        raise G3InputError(f"{what} is not an array ({type(value).__name__}: {exc})", path=where) from None


def _split_ids(value, num_nodes: int, what: str, where: str, split_index: int | None) -> np.ndarray | None:
    """Node ids of one split from a boolean mask ``[N]`` (or ``[N, S]`` with ``split_index``) or an id array."""
    arr = _numpy(value, what, where)
    if arr is None:
        return None
    if arr.dtype == np.bool_:
        if arr.ndim == 2:
            if arr.shape[0] == num_nodes and arr.shape[1] != num_nodes:
                arr = arr.T  # [N, S] (PyG's multi-split masks) as [S, N] (the heterophilous benchmarks')
            if split_index is None:
                raise G3InputError(
                    f"{what} holds {arr.shape[0]} splits (shape {tuple(arr.shape)}); choose one "
                    "with split_index (--split-index)",
                    path=where,
                )
            if not 0 <= split_index < arr.shape[0]:
                raise G3InputError(
                    f"split index {split_index} is out of range: {what} holds {arr.shape[0]} splits",
                    path=where,
                )
            arr = arr[split_index]
        if arr.ndim != 1 or len(arr) != num_nodes:
            raise G3InputError(
                f"{what} is a mask of shape {arr.shape}, not [{num_nodes}] (one flag per node)", path=where
            )
        return np.flatnonzero(arr).astype(np.int64)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise G3InputError(
            f"{what} must be a boolean mask [nodes] or a 1-D array of node ids, got {arr.dtype} of "
            f"shape {arr.shape}",
            path=where,
        )
    ids = arr.astype(np.int64)
    if len(ids) and (ids.min() < 0 or ids.max() >= num_nodes):
        bad = ids[(ids < 0) | (ids >= num_nodes)][0]
        raise G3InputError(f"{what} holds node id {bad}, out of range [0, {num_nodes})", path=where)
    return ids


def arrays_source(
    edge_index,
    num_nodes: int | None = None,
    x=None,
    y=None,
    train=None,
    valid=None,
    test=None,
    name: str = "arrays",
    split_index: int | None = None,
    where: str = "<arrays>",
    undirected: bool = False,
) -> GraphSource:
    """A graph given as arrays (see the module's conventions). ``num_nodes`` defaults to ``x``'s rows, else
    the largest node id + 1. ``where`` names the input in error messages; ``undirected``: each edge is listed
    once (ingest then adds the reverses unless told not to)."""
    edges = _numpy(edge_index, "edge_index", where)
    if edges is None or edges.ndim != 2 or 2 not in edges.shape:
        raise G3InputError(
            f"edge_index must be a [2, E] (or [E, 2]) array, got shape "
            f"{None if edges is None else edges.shape}",
            path=where,
        )
    if edges.dtype.kind not in "iu":
        raise G3InputError(f"edge_index must hold integer node ids, got {edges.dtype}", path=where)
    if edges.shape[0] != 2:
        edges = edges.T
    edges = np.ascontiguousarray(edges, dtype=np.int64)
    feats = _numpy(x, "x", where)
    if num_nodes is None:
        num_nodes = int(feats.shape[0]) if feats is not None else int(edges.max(initial=-1)) + 1
    # ids checked against num_nodes once, here, so a bad one is named with its position
    for _ in iter_edge_array(edges, where, num_nodes):
        pass

    def arcs() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for start in range(0, edges.shape[1], ARC_CHUNK):
            yield edges[0, start : start + ARC_CHUNK], edges[1, start : start + ARC_CHUNK]

    feat_dim, blocks = (0, None)
    if feats is not None:
        feat_dim, blocks = feature_blocks_from_array(feats, where + " (x)", num_nodes)
    labels, num_classes = (None, None)
    if y is not None:
        labels, num_classes = labels_from_array(_numpy(y, "y", where), where + " (y)", num_nodes)
    splits = {
        s: _split_ids(v, num_nodes, f"the {s} split", where, split_index)
        for s, v in (("train", train), ("valid", valid), ("test", test))
    }
    given = {s: ids for s, ids in splits.items() if ids is not None}
    if given and len(given) < 3:
        missing = ", ".join(s for s in splits if s not in given)
        raise G3InputError(
            f"splits given for {', '.join(given)} but not {missing}: give all three or none (a "
            "ratio split is drawn then)",
            path=where,
        )
    return GraphSource(
        name=name,
        num_nodes=num_nodes,
        arcs=arcs,
        path=where,
        feat_dim=feat_dim,
        feature_blocks=blocks,
        labels=labels,
        num_classes=num_classes,
        splits=given or None,
        expected_arcs=int(edges.shape[1]),
        undirected_once=undirected,
    )


def pyg_source(
    data, name: str = "pyg-data", split_index: int | None = None, where: str | None = None
) -> GraphSource:
    """A PyG ``Data`` (or anything with its attributes): ``edge_index``, ``num_nodes``, ``x``, ``y`` and
    ``train_mask``/``val_mask``/``test_mask`` (or ``train_idx``/``val_idx``/``test_idx``)."""

    def attr(*names):
        return next((getattr(data, n) for n in names if getattr(data, n, None) is not None), None)

    if attr("edge_index") is None:
        raise G3InputError("the object has no edge_index (a PyG Data is expected)", path=where or name)
    num_nodes = getattr(data, "num_nodes", None)
    return arrays_source(
        attr("edge_index"),
        num_nodes=int(num_nodes) if num_nodes is not None else None,
        x=attr("x"),
        y=attr("y"),
        train=attr("train_mask", "train_idx"),
        valid=attr("val_mask", "valid_mask", "val_idx", "valid_idx"),
        test=attr("test_mask", "test_idx"),
        name=name,
        split_index=split_index,
        where=where or name,
    )


def scipy_source(
    matrix, name: str = "scipy-matrix", split_index: int | None = None, **node_data
) -> GraphSource:
    """A square scipy sparse adjacency (``A[u, v] ≠ 0``: an arc ``u → v``) with optional node data (``x``,
    ``y``, ``train``, ``valid``, ``test``: as :func:`arrays_source` takes them)."""
    if not hasattr(matrix, "tocoo") or len(matrix.shape) != 2 or matrix.shape[0] != matrix.shape[1]:
        raise G3InputError(
            f"the adjacency must be a square scipy sparse matrix, got {type(matrix).__name__} of "
            f"shape {getattr(matrix, 'shape', None)}",
            path=name,
        )
    coo = matrix.tocoo()
    keep = coo.data != 0
    edges = np.stack([coo.row[keep].astype(np.int64), coo.col[keep].astype(np.int64)])
    return arrays_source(
        edges, num_nodes=int(matrix.shape[0]), name=name, split_index=split_index, where=name, **node_data
    )


def source_of(
    obj, name: str | None = None, split_index: int | None = None, where: str | None = None, **node_data
) -> GraphSource:
    """The source of an in-memory graph: a PyG ``Data``, a scipy sparse matrix, or a dict of arrays
    (``edge_index`` and optionally ``num_nodes``, ``x``, ``y``, ``train``/``valid``/``test``). ``where``: what
    error messages name (the file the object came from; default: the object's kind)."""
    if isinstance(obj, dict):
        unknown = set(obj) - {"edge_index", "num_nodes", "x", "y", "train", "valid", "test"}
        if unknown:
            raise G3InputError(
                f"unknown keys {sorted(unknown)} (expected edge_index, num_nodes, x, y, train, valid, test)",
                path=where or name or "<arrays>",
            )
        return arrays_source(
            **{"name": name or "arrays", "split_index": split_index, "where": where or "<arrays>", **obj}
        )
    if hasattr(obj, "edge_index"):
        if node_data:
            raise G3InputError("a PyG Data carries its own x, y and masks", path=name or "pyg-data")
        return pyg_source(obj, name=name or "pyg-data", split_index=split_index, where=where)
    if hasattr(obj, "tocoo"):
        return scipy_source(obj, name=name or "scipy-matrix", split_index=split_index, **node_data)
    raise G3InputError(
        f"cannot ingest a {type(obj).__name__}: give a path, a PyG Data, a scipy sparse matrix or a "
        "dict of arrays",
        path=name or "<input>",
    )


HETEROPHILOUS_KEYS = {"edges", "node_features", "node_labels", "train_masks", "val_masks", "test_masks"}


def heterophilous_source(path, split_index: int | None) -> GraphSource:
    """The ``.npz`` of the heterophilous-graph benchmarks (Platonov et al., ICLR 2023: roman-empire, amazon-ratings,
    minesweeper, tolokers, questions): ``edges [E, 2]`` listed once per undirected edge (the authors' loader adds
    the reverses, as ingest does by default here), ``node_features``, ``node_labels``, and ``train_masks`` /
    ``val_masks`` / ``test_masks`` ``[S, N]`` (S fixed splits: ``split_index`` picks one). Node ids are row
    positions."""
    path = Path(path)
    try:
        with np.load(path) as z:
            arrays = {k: z[k] for k in HETEROPHILOUS_KEYS}
    except (OSError, ValueError, KeyError) as exc:
        raise G3InputError(
            f"cannot read the heterophilous-benchmark arrays ({type(exc).__name__}: {exc})", path=path
        ) from None
    return arrays_source(
        arrays["edges"],
        num_nodes=len(arrays["node_labels"]),
        x=arrays["node_features"],
        y=arrays["node_labels"],
        train=arrays["train_masks"],
        valid=arrays["val_masks"],
        test=arrays["test_masks"],
        name=path.stem,
        split_index=split_index,
        where=str(path),
        undirected=True,
    )


def torch_file_source(path, split_index: int | None) -> GraphSource:
    """A graph saved with ``torch.save``: a PyG ``Data`` (unpickling it needs torch_geometric, and runs the
    file's pickled code: only load files you trust) or a dict of tensors (``edge_index``, ``x``, ``y``, masks
    ``train_mask``/``val_mask``/``test_mask`` or ``train``/``valid``/``test``; read without running code)."""
    import torch

    path = Path(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - not plain tensors: a pickled object such as a PyG Data
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except ModuleNotFoundError as exc:
            raise G3InputError(
                f"the file holds a {exc.name} object: install it to read the file (a PyG Data "
                "needs torch_geometric: make peers)",
                path=path,
            ) from None
        except Exception as exc:  # noqa: BLE001 - anything unreadable is the user's input error
            raise G3InputError(
                f"cannot read with torch.load ({type(exc).__name__}: {exc})", path=path
            ) from None
    if isinstance(obj, dict) and "edge_index" in obj:
        rename = {"train_mask": "train", "val_mask": "valid", "valid_mask": "valid", "test_mask": "test"}
        given = {rename.get(k, k): v for k, v in obj.items()}
        return source_of(given, name=path.stem, split_index=split_index, where=str(path))
    if hasattr(obj, "edge_index"):
        return pyg_source(obj, name=path.stem, split_index=split_index, where=str(path))
    raise G3InputError(
        f"holds a {type(obj).__name__}, not a PyG Data or a dict with an edge_index", path=path
    )
