"""OGB node-property-prediction reader of `g3 ingest` (a folder as unpacked by OGB, e.g. ``products/``).

Two layouts are read:

* CSV (ogbn-arxiv, ogbn-products, ...)::

      raw/edge.csv.gz            "src,dst" per line, no header (each undirected edge once)
      raw/node-feat.csv.gz       N lines of F comma-separated floats (optional)
      raw/node-label.csv.gz      N lines of one value; NaN or empty = unlabelled
      raw/num-node-list.csv.gz   N
      raw/num-edge-list.csv.gz   E
      split/<name>/{train,valid,test}.csv.gz   one node id per line

* binary (ogbn-papers100M): ``raw/data.npz`` with ``edge_index`` [2, E], ``node_feat`` [N, F], ``num_nodes``
  [1] (and ``edge_feat``, ignored), ``raw/node-label.npz`` with ``node_label`` [N, 1] float (NaN =
  unlabelled); the splits as above.

CSV files are streamed with pyarrow (a gzip input stream through ``pyarrow.csv.open_csv`` with fixed column
types), so nothing is loaded whole except labels and splits; ``.npz`` members are memory-mapped when stored
uncompressed and decompressed as a stream otherwise. Plain ``.csv`` files are accepted where ``.csv.gz`` is
expected. Every problem is a :class:`G3InputError` naming the file and, for a bad line, the line: when
pyarrow rejects a block, the file is re-scanned from the first line of that block to find the culprit.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from stages.common.errors import G3InputError
from stages.ingest.edgelist import (
    NpzMember,
    _npz_member,
    _short,
    check_finite,
    edge_array_layout,
    feature_blocks_from_array,
    first_bad_arc,
    ids_in_range,
    iter_edge_array,
    labels_from_array,
    npz_keys,
    open_stream,
    reading,
    text_blocks,
)
from stages.ingest.source import GraphSource

EDGE_BLOCK_BYTES = 16 << 20  # pyarrow block size for edge.csv.gz (about 1M lines)
FEATURE_BLOCK_BYTES = 16 << 20  # pyarrow block size for node-feat.csv.gz
LABEL_NULLS = ["", "nan", "NaN", "NAN", "-nan", "-NaN", "NA", "N/A", "null", "NULL", "None"]
SPLIT_FILES = ("train", "valid", "test")

_INT = re.compile(rb"\s*-?\d+\s*")  # what pyarrow's int64 conversion accepts


# ------------------------------------------------------------------------------------------------------------
# Streaming CSV with line-accurate errors
# ------------------------------------------------------------------------------------------------------------


def _find(folder: Path, stem: str) -> Path | None:
    return next((p for p in (folder / f"{stem}.csv.gz", folder / f"{stem}.csv") if p.is_file()), None)


def _require(folder: Path, stem: str) -> Path:
    p = _find(folder, stem)
    if p is None:
        raise G3InputError(f"missing {stem}.csv.gz", path=folder)
    return p


def _first_line(path: Path) -> bytes | None:
    """The first line of a (compressed) text file, or None when it is empty."""
    buf = b""
    with open_stream(path) as f, reading(path):
        while b"\n" not in buf and (data := f.read(1 << 16)):
            buf += data
    return buf.split(b"\n", 1)[0].rstrip(b"\r") if buf else None


class _Csv:
    """A headerless CSV of ``ncols`` columns of one type, streamed as ``(first row, RecordBatch)`` pairs.

    Row ``r`` is line ``r + 1`` (empty lines are not skipped: they are errors, or nulls where allowed).
    """

    def __init__(
        self, path: Path, ncols: int, kind: str, block_size: int, null_values: list[str] | None = None
    ):
        self.path = path
        self.ncols = ncols
        self.kind = kind  # "int" or "float"
        self.null_values = list(null_values or [])
        names = [f"c{i}" for i in range(ncols)]
        typ = pa.int64() if kind == "int" else (pa.float64() if self.null_values else pa.float32())
        self.read_options = pacsv.ReadOptions(column_names=names, block_size=block_size, use_threads=True)
        self.parse_options = pacsv.ParseOptions(delimiter=",", quote_char=False, ignore_empty_lines=False)
        self.convert_options = pacsv.ConvertOptions(
            column_types={n: typ for n in names},
            null_values=self.null_values,
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        )

    def batches(self) -> Iterator[tuple[int, pa.RecordBatch]]:
        row = 0
        with open_stream(self.path) as stream, reading(self.path):
            try:
                reader = pacsv.open_csv(
                    stream,
                    read_options=self.read_options,
                    parse_options=self.parse_options,
                    convert_options=self.convert_options,
                )
            except pa.ArrowInvalid as exc:
                if "Empty CSV file" in str(exc):
                    return
                self._fail(0, exc)
            try:
                for batch in reader:
                    if batch.num_rows:
                        yield row, batch
                        row += batch.num_rows
            except pa.ArrowInvalid as exc:
                self._fail(row, exc)

    def _why(self, raw: bytes) -> str | None:
        """Why pyarrow rejects one line, or None when it looks fine."""
        s = raw.rstrip(b"\r")
        fields = s.split(b",")
        if len(fields) != self.ncols:
            if not s.strip() and self.ncols > 1:
                return f"empty line (expected {self.ncols} comma-separated values)"
            return f"expected {self.ncols} comma-separated value{'s' if self.ncols > 1 else ''}, got {len(fields)}"
        noun = "an integer" if self.kind == "int" else "a number"
        for f in fields:
            if self.kind == "int":
                ok = bool(_INT.fullmatch(f)) and -(2**63) <= int(f) < 2**63
            else:
                ok = f.decode("utf-8", "replace") in self.null_values or _is_float(f)
            if not ok:
                return f"empty line (expected {noun})" if not s.strip() else f"{_short(f)} is not {noun}"
        return None

    def _fail(self, first_row: int, exc: Exception):
        """Re-scan from line ``first_row + 1`` to name the line pyarrow rejected (error path only)."""
        first_line = first_row + 1
        for line0, chunk in text_blocks(self.path):
            if line0 + chunk.count(b"\n") < first_line:
                continue
            lines = chunk.split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            skip = max(0, first_line - line0)
            for line, raw in enumerate(lines[skip:], line0 + skip):
                why = self._why(raw)
                if why is not None:
                    raise G3InputError(f"malformed line: {why}", path=self.path, line=line) from None
        raise G3InputError(f"cannot parse (at or after line {first_line}): {exc}", path=self.path) from None


def _is_float(f: bytes) -> bool:
    try:
        float(f)
    except ValueError:
        return False
    return True


def _read_count(path: Path) -> int:
    """The single number of a ``num-*-list`` file."""
    lines = [ln for _, chunk in text_blocks(path) for ln in chunk.split(b"\n")]
    values = [(i + 1, ln.strip()) for i, ln in enumerate(lines) if ln.strip()]
    if not values:
        raise G3InputError("is empty (expected one number)", path=path)
    if len(values) > 1:
        raise G3InputError(
            f"holds {len(values)} numbers: graph-level (multi-graph) OGB datasets are unsupported",
            path=path,
            line=values[1][0],
        )
    line, text = values[0]
    if not _INT.fullmatch(text) or int(text) < 0:
        raise G3InputError(
            f"malformed line {_short(text)}: expected a non-negative integer", path=path, line=line
        )
    return int(text)


def _read_ids(path: Path, num_nodes: int, what: str) -> np.ndarray:
    """A one-column id file (split): int64 ids in ``[0, num_nodes)``."""
    parts = [
        ids_in_range(
            batch.column(0).to_numpy(), num_nodes, what, path, functools.partial(operator.add, row0 + 1)
        )
        for row0, batch in _Csv(path, 1, "int", 4 << 20).batches()
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


# ------------------------------------------------------------------------------------------------------------
# Splits
# ------------------------------------------------------------------------------------------------------------


def _split_folder(folder: Path, split_name: str | None) -> Path | None:
    root = folder / "split"
    if not root.is_dir():
        if split_name is not None:
            raise G3InputError(f"no split/ folder, so no split {split_name!r}", path=folder)
        return None
    choices = sorted(d.name for d in root.iterdir() if d.is_dir())
    if split_name is not None:
        if split_name not in choices:
            raise G3InputError(
                f"no split {split_name!r}; choose --split-name from: {', '.join(choices) or '(none)'}",
                path=root,
            )
        return root / split_name
    if len(choices) == 1:
        return root / choices[0]
    if not choices:
        raise G3InputError("split/ holds no split folder", path=root)
    raise G3InputError(
        f"holds several splits; choose one with --split-name ({', '.join(choices)})", path=root
    )


def _load_pt_split(path: Path, num_nodes: int, what: str) -> np.ndarray:
    try:
        import torch

        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a bad file
        raise G3InputError(f"cannot load: {exc}", path=path) from None
    if not hasattr(obj, "numpy"):
        raise G3InputError(f"holds a {type(obj).__name__}, expected a tensor of node ids", path=path)
    return ids_in_range(obj.numpy().reshape(-1).astype(np.int64), num_nodes, what, path)


def _read_splits(split_dir: Path, num_nodes: int) -> dict[str, np.ndarray]:
    splits = {}
    for name in SPLIT_FILES:
        p = _find(split_dir, name)
        if p is not None:
            splits[name] = _read_ids(p, num_nodes, name)
        elif (split_dir / f"{name}.pt").is_file():
            splits[name] = _load_pt_split(split_dir / f"{name}.pt", num_nodes, name)
        else:
            raise G3InputError(f"missing {name}.csv.gz", path=split_dir)
    return splits


# ------------------------------------------------------------------------------------------------------------
# The reader
# ------------------------------------------------------------------------------------------------------------


def read_ogb(folder, split_name: str | None = None) -> GraphSource:
    """Read an OGB node-property-prediction folder (CSV or ``data.npz`` layout); see the module docstring."""
    folder = Path(folder)
    if not folder.exists():
        raise G3InputError("no such folder", path=folder)
    if not folder.is_dir():
        raise G3InputError("not a folder: an OGB dataset is a folder with raw/ and split/", path=folder)
    raw = folder / "raw"
    if not raw.is_dir():
        raise G3InputError("not an OGB dataset folder (no raw/ inside)", path=folder)
    if _find(raw, "edge") is not None:
        src = _read_csv_layout(folder, raw)
    elif (raw / "data.npz").is_file():
        src = _read_npz_layout(folder, raw)
    elif (raw / "relations").is_dir() or (raw / "node-feat").is_dir():
        raise G3InputError("heterogeneous OGB datasets (e.g. ogbn-mag) are unsupported", path=raw)
    else:
        raise G3InputError("missing edge.csv.gz (or data.npz for the binary layout)", path=raw)
    split_dir = _split_folder(folder, split_name)
    if split_dir is not None:
        src.splits = _read_splits(split_dir, src.num_nodes)
        src.info["split_name"] = split_dir.name
    return src


def _labels_csv(path: Path, num_nodes: int, count_path: Path) -> tuple[np.ndarray, int]:
    first = _first_line(path)
    ncols = 1 if first is None else first.count(b",") + 1
    if ncols > 1:
        raise G3InputError(
            f"has {ncols} columns: multi-label node labels are unsupported (one class per node)",
            path=path,
            line=1,
        )
    csv = _Csv(path, 1, "float", 4 << 20, null_values=LABEL_NULLS)
    values = np.empty(num_nodes, dtype=np.float64)
    for row0, batch in _node_lines(csv, num_nodes, count_path, "label"):
        values[row0 : row0 + batch.num_rows] = batch.column(0).to_numpy(zero_copy_only=False)
    return labels_from_array(values, path, num_nodes, line_of_row=lambda r: r + 1)


def _features_csv(
    path: Path, num_nodes: int, count_path: Path
) -> tuple[int, Callable[[], Iterator[np.ndarray]]]:
    first = _first_line(path)
    if first is None:
        raise G3InputError("is empty", path=path)
    dim = first.count(b",") + 1
    csv = _Csv(path, dim, "float", FEATURE_BLOCK_BYTES)

    def blocks() -> Iterator[np.ndarray]:
        for row0, batch in _node_lines(csv, num_nodes, count_path, "feature"):
            block = np.column_stack([batch.column(i).to_numpy() for i in range(dim)])
            check_finite(block, path, row0, line_of_row=lambda r: r + 1)
            yield block

    return dim, blocks


def _node_lines(
    csv: _Csv, num_nodes: int, count_path: Path, what: str
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The batches of a file of one line per node, checked against the node count ``count_path`` gives."""
    rows = 0
    for row0, batch in csv.batches():
        if row0 + batch.num_rows > num_nodes:
            raise G3InputError(
                f"more {what} lines than the {num_nodes} nodes of {count_path.name}",
                path=csv.path,
                line=num_nodes + 1,
            )
        yield row0, batch
        rows = row0 + batch.num_rows
    if rows != num_nodes:
        raise G3InputError(f"{rows} {what} lines but {count_path.name} says {num_nodes} nodes", path=csv.path)


def _read_csv_layout(folder: Path, raw: Path) -> GraphSource:
    edge_path = _require(raw, "edge")
    nn_path = _require(raw, "num-node-list")
    ne_path = _require(raw, "num-edge-list")
    label_path = _require(raw, "node-label")
    feat_path = _find(raw, "node-feat")
    num_nodes = _read_count(nn_path)
    num_edges = _read_count(ne_path)

    edges = _Csv(edge_path, 2, "int", EDGE_BLOCK_BYTES)
    first = _first_line(edge_path)  # a wrong file fails now rather than when the builder reads the arcs
    why = None if first is None else edges._why(first)
    if why is not None:
        raise G3InputError(f"malformed line: {why}", path=edge_path, line=1)

    def arcs() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        total = 0
        for row0, batch in edges.batches():
            s = batch.column(0).to_numpy()
            d = batch.column(1).to_numpy()
            bad = first_bad_arc(s, d, num_nodes)
            if bad is not None:
                raise G3InputError(
                    f"node id {bad[1]} is out of range [0, {num_nodes}) (num-node-list)",
                    path=edge_path,
                    line=row0 + bad[0] + 1,
                )
            total += len(s)
            yield s, d
        if total != num_edges:
            raise G3InputError(
                f"{total} edge lines but {ne_path.name} says {num_edges} edges", path=edge_path
            )

    labels, num_classes = _labels_csv(label_path, num_nodes, nn_path)
    info: dict[str, Any] = {"format": "ogb-csv"}
    feat_dim, feature_blocks = 0, None
    if feat_path is not None:
        feat_dim, feature_blocks = _features_csv(feat_path, num_nodes, nn_path)
    else:
        info["features"] = "none in source"
    if _find(raw, "edge-feat") is not None:
        info["edge_feat"] = "ignored"
    return _dataset(folder, num_nodes, num_edges, arcs, feat_dim, feature_blocks, labels, num_classes, info)


def _read_npz_layout(folder: Path, raw: Path) -> GraphSource:
    data = raw / "data.npz"
    keys = npz_keys(data)
    for key in ("edge_index", "num_nodes"):
        if key not in keys:
            raise G3InputError(f"has no array {key!r} (it holds: {', '.join(keys) or 'nothing'})", path=data)
    nn = np.asarray(_npz_member(data, "num_nodes")).reshape(-1)
    if len(nn) != 1 or nn.dtype.kind not in "iu" or int(nn[0]) < 0:
        raise G3InputError(f"num_nodes must hold one non-negative integer, got {nn[:5].tolist()}", path=data)
    num_nodes = int(nn[0])
    nn_path = _find(raw, "num-node-list")
    if nn_path is not None and _read_count(nn_path) != num_nodes:
        raise G3InputError(
            f"says {_read_count(nn_path)} nodes but data.npz num_nodes is {num_nodes}", path=nn_path
        )

    edge_arr = _npz_member(data, "edge_index")
    num_edges, _planar = edge_array_layout(edge_arr, data)
    if isinstance(edge_arr, NpzMember):
        edge_arr.close()
    ne_path = _find(raw, "num-edge-list")
    if ne_path is not None and _read_count(ne_path) != num_edges:
        raise G3InputError(
            f"says {_read_count(ne_path)} edges but data.npz edge_index holds {num_edges}", path=ne_path
        )

    def arcs() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield from iter_edge_array(_npz_member(data, "edge_index"), data, num_nodes)

    info: dict[str, Any] = {"format": "ogb-npz"}
    feat_dim, feature_blocks = 0, None
    if "node_feat" in keys:
        feat = _npz_member(data, "node_feat")
        if feat.shape and feat.shape[0] != num_nodes:
            raise G3InputError(f"node_feat has {feat.shape[0]} rows but num_nodes is {num_nodes}", path=data)
        feat_dim, feature_blocks = feature_blocks_from_array(feat, f"{data}:node_feat", num_nodes)
    else:
        info["features"] = "none in source"
    if "edge_feat" in keys:
        info["edge_feat"] = "ignored"

    label_path = raw / "node-label.npz"
    label_csv = _find(raw, "node-label")
    if not label_path.is_file():
        if label_csv is None:
            raise G3InputError("missing node-label.npz", path=raw)
        labels, num_classes = _labels_csv(label_csv, num_nodes, data)
    else:
        key = "node_label" if "node_label" in npz_keys(label_path) else None
        arr = _npz_member(label_path, key, "labels")
        if arr.shape and arr.shape[0] != num_nodes:
            raise G3InputError(
                f"node_label has {arr.shape[0]} rows but num_nodes is {num_nodes}", path=label_path
            )
        labels, num_classes = labels_from_array(arr, label_path, num_nodes)
        if isinstance(arr, NpzMember):
            arr.close()
    return _dataset(folder, num_nodes, num_edges, arcs, feat_dim, feature_blocks, labels, num_classes, info)


def _dataset(
    folder: Path,
    num_nodes: int,
    num_edges: int,
    arcs,
    feat_dim: int,
    feature_blocks,
    labels,
    num_classes: int,
    info: dict,
) -> GraphSource:
    """An OGB dataset folder as a graph source: its arcs listed once per undirected edge (ingest adds the
    reverse), checked against the edge count its metadata gives."""
    return GraphSource(
        name=folder.resolve().name,
        num_nodes=num_nodes,
        arcs=arcs,
        path=str(folder),
        feat_dim=feat_dim,
        feature_blocks=feature_blocks,
        labels=labels,
        num_classes=num_classes,
        expected_arcs=num_edges,
        undirected_once=True,
        info=info,
    )
