"""Edge-list reader of `g3 ingest`: text (CSV or whitespace), ``.npy`` / ``.npz`` arrays, side arrays.

Text edge lists hold one arc ``src dst`` per line, separated by a comma or by spaces/tabs; lines starting with
``#`` or ``%`` are comments, blank lines are skipped, and an optional header line is recognised (the first
non-comment line, when it is not two integers). Extra columns (weights, timestamps) are ignored; a line with
fewer than two integer fields is an error naming the file and line. Files ending in ``.gz``, ``.bz2`` or
``.zst`` are decompressed on the fly.

Text is parsed in blocks of about 16 MiB: each block goes first through pyarrow's CSV parser (fast path);
a block it rejects (comment lines, runs of spaces, ragged columns) is normalised with regular expressions
and tried again, and only then parsed line by line in Python, which also finds the line to name in an error.

Arrays: ``.npy`` of shape ``[2, E]`` (an ``edge_index``) or ``[E, 2]`` (a ``(2, 2)`` array is read as
``[2, E]``), memory-mapped; ``.npz`` with the key ``edge_index`` or a single array, memory-mapped when the
archive is stored uncompressed and streamed otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from stages.common.errors import G3InputError
from stages.ingest.source import NODE_BYTES, GraphSource

TEXT_BLOCK_BYTES = 16 << 20  # bytes of text parsed at a time
ARROW_BLOCK_BYTES = 2 << 20  # pyarrow's block inside it (blocks are parsed in parallel)
ARRAY_ARC_CHUNK = 1 << 22  # arcs per chunk read from an edge array
FEATURE_BLOCK_BYTES = 16 << 20  # about this many bytes per feature row block
LABEL_BLOCK = 1 << 22  # labels converted per step
CACHE_ARCS_LIMIT = 1 << 24  # arcs kept in memory after the pass that finds the node count (256 MiB)

_H5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
_COMMENT_START = (b"#", b"%")
_INT_FIELD = re.compile(rb"\s*[+-]?\d+\s*")
_NUMBER_FIELD = re.compile(rb"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")
MAX_COMMENT_CUTS = 4096  # comment marks per block cut out by slicing; more: parse the block in Python


# ------------------------------------------------------------------------------------------------------------
# Array specs: .npy (memory-mapped), .npz members, HDF5 datasets
# ------------------------------------------------------------------------------------------------------------


class NpzMember:
    """One array of an ``.npz`` archive whose member is compressed, read lazily.

    ``arr[a:b]`` reads rows ``a..b`` (C order) by decompressing forward from the current position, so reading
    row blocks in order costs one pass over the member. Other indexing loads the whole array.
    """

    def __init__(
        self,
        path: Path,
        zf: zipfile.ZipFile,
        info: zipfile.ZipInfo,
        shape,
        fortran: bool,
        dtype,
        header_len: int,
    ):
        self.path = path
        self._zf = zf
        self._info = info
        self.shape = tuple(int(s) for s in shape)
        self.fortran = fortran
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)
        self._header_len = header_len
        self._handles: dict[int, Any] = {}

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def read_flat(self, start: int, count: int, stream: int = 0) -> np.ndarray:
        """Elements ``start .. start+count`` of the array's bytes (in file order), through reader ``stream``."""
        h = self._handles.get(stream)
        if h is None:
            h = self._handles[stream] = self._zf.open(self._info)
        pos = self._header_len + start * self.dtype.itemsize
        if h.tell() != pos:
            h.seek(pos)
        out = np.empty(count, dtype=self.dtype)
        view = memoryview(out).cast("B")
        got = 0
        while got < len(view):
            n = h.readinto(view[got:])
            if not n:
                raise G3InputError(f"array {self._info.filename!r} is truncated", path=self.path)
            got += n
        return out

    def load(self) -> np.ndarray:
        flat = self.read_flat(0, self.size, stream=-1)
        self._handles.pop(-1).close()
        return flat.reshape(self.shape, order="F" if self.fortran else "C")

    def __array__(self, dtype=None, copy=None):
        a = self.load()
        return a if dtype is None else a.astype(dtype)

    def __getitem__(self, key):
        if isinstance(key, slice) and (key.step in (None, 1)) and not self.fortran and self.ndim >= 1:
            a, b, _ = key.indices(self.shape[0])
            b = max(a, b)
            row = int(np.prod(self.shape[1:], dtype=np.int64))
            return self.read_flat(a * row, (b - a) * row).reshape((b - a, *self.shape[1:]))
        return self.load()[key]

    def close(self) -> None:
        for h in self._handles.values():
            h.close()
        self._handles.clear()


def max_node_count() -> int:
    """The most nodes whose per-node arrays (``NODE_BYTES`` each) fit this machine's memory: a node id beyond
    it is a numbering ingest cannot hold (ids must run 0 .. N-1), refused before anything is allocated."""
    import psutil

    return max(1, psutil.virtual_memory().total // NODE_BYTES)


def _too_many_nodes(value: int, limit: int) -> str:
    return (
        f"node id {value} would make the graph {value + 1:,} nodes, more than this machine's memory holds "
        f"({limit:,} at {NODE_BYTES} bytes each); node ids must be numbered 0 .. N-1: relabel them"
    )


def npz_keys(path: Path) -> list[str]:
    """Names of the arrays in an ``.npz`` archive."""
    try:
        with zipfile.ZipFile(path) as zf:
            return [n[:-4] for n in zf.namelist() if n.endswith(".npy")]
    except (OSError, zipfile.BadZipFile) as exc:
        raise G3InputError(f"cannot read as .npz: {exc}", path=path) from None


def _npz_member(path: Path, key: str | None, what: str = "array"):
    """A lazily read array of an ``.npz``: a ``np.memmap`` when stored, an :class:`NpzMember` when compressed."""
    names = npz_keys(path)
    if key is None:
        if len(names) != 1:
            raise G3InputError(
                f"holds {len(names)} arrays ({', '.join(names) or 'none'}); name the {what} as {path}:KEY",
                path=path,
            )
        key = names[0]
    if key not in names:
        raise G3InputError(f"has no array {key!r} (it holds: {', '.join(names) or 'nothing'})", path=path)
    zf = zipfile.ZipFile(path)
    info = zf.getinfo(key + ".npy")
    try:
        with zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            header_len = f.tell()
    except ValueError as exc:
        raise G3InputError(f"array {key!r} is not a valid .npy member: {exc}", path=path) from None
    if dtype.hasobject:
        raise G3InputError(
            f"array {key!r} holds Python objects; only numeric arrays are supported", path=path
        )
    if info.compress_type == zipfile.ZIP_STORED:
        with open(path, "rb") as fh:
            fh.seek(info.header_offset)
            fields = struct.unpack("<4s2B4HL2L2H", fh.read(30))
        data_start = info.header_offset + 30 + fields[10] + fields[11]
        zf.close()
        if int(np.prod(shape, dtype=np.int64)) == 0:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(
            path,
            dtype=dtype,
            mode="r",
            offset=data_start + header_len,
            shape=tuple(shape),
            order="F" if fortran else "C",
        )
    return NpzMember(path, zf, info, shape, fortran, dtype, header_len)


def _split_spec(spec) -> tuple[Path, str | None]:
    s = str(spec)
    p = Path(s)
    if p.exists():
        return p, None
    if ":" in s:
        file, key = s.rsplit(":", 1)
        if Path(file).exists():
            return Path(file), key
        if Path(file).suffix.lower() in (*_H5_SUFFIXES, ".npz", ".npy"):
            raise G3InputError("no such file", path=file)
    raise G3InputError("no such file", path=s)


def _csv_column(path: Path, column: str | None, what: str) -> np.ndarray:
    """Column ``column`` of a CSV with a header row, one value per node: rows placed by an ``id`` column when
    there is one (else in row order; nodes no row names get -1). Numbers are taken as they are; text (class
    names, e.g. MUSAE's ``page_type``) becomes class ids in the sorted order of the names."""
    if column is None:
        raise G3InputError(f"name the {what} column: {path}:COLUMN", path=path)
    try:
        table = pacsv.read_csv(
            path, parse_options=pacsv.ParseOptions(delimiter="\t" if path.suffix == ".tsv" else ",")
        )
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors name the line; one line for the user
        raise G3InputError(
            f"cannot read as CSV with a header row: {exc}".splitlines()[0], path=path
        ) from None
    if column not in table.column_names:
        raise G3InputError(f"has no column {column!r} (columns: {', '.join(table.column_names)})", path=path)
    values = table.column(column).to_numpy(zero_copy_only=False)
    if values.dtype.kind in "OUS":  # names: classes numbered in sorted order
        names, values = np.unique(values.astype(str), return_inverse=True)
    if "id" not in table.column_names or column == "id":
        return values
    ids = table.column("id").to_numpy(zero_copy_only=False)
    if ids.dtype.kind not in "iu" or (len(ids) and ids.min() < 0):
        raise G3InputError("its id column must hold node ids (integers >= 0)", path=path)
    out = np.full(
        int(ids.max()) + 1 if len(ids) else 0,
        -1,
        dtype=np.int64 if values.dtype.kind in "iub" else np.float64,
    )
    out[ids] = values
    return out


def _json_multi_hot(path: Path) -> np.ndarray:
    """A JSON object mapping node ids (as strings) to lists of feature ids (MUSAE's sparse features) as a
    multi-hot float32 matrix ``[max node id + 1, max feature id + 1]``; nodes it does not list get zero rows."""
    import json

    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise G3InputError(f"cannot read as JSON: {exc}", path=path) from None
    if not isinstance(obj, dict):
        raise G3InputError("expected an object mapping node ids to lists of feature ids", path=path)
    for node, ids in obj.items():  # a string is iterable and would read as its digits
        if not isinstance(ids, list) or not all(isinstance(f, int) and not isinstance(f, bool) for f in ids):
            raise G3InputError(
                f"node {node!r}: expected a list of integer feature ids, got {json.dumps(ids)[:60]}",
                path=path,
            )
    try:
        nodes = np.fromiter((int(k) for k in obj), dtype=np.int64, count=len(obj))
        lengths = np.fromiter((len(v) for v in obj.values()), dtype=np.int64, count=len(obj))
        feats = np.fromiter((f for v in obj.values() for f in v), dtype=np.int64, count=int(lengths.sum()))
    except (TypeError, ValueError, OverflowError) as exc:
        raise G3InputError(f"node ids and feature ids must be integers ({exc})", path=path) from None
    if len(nodes) and (nodes.min() < 0 or (len(feats) and feats.min() < 0)):
        raise G3InputError("node ids and feature ids must be >= 0", path=path)
    n = int(nodes.max()) + 1 if len(nodes) else 0
    width = int(feats.max()) + 1 if len(feats) else 1
    if n > max_node_count():
        raise G3InputError(_too_many_nodes(n - 1, max_node_count()), path=path)
    memory = max_node_count() * NODE_BYTES
    if n * width * 4 > memory // 2:  # the dense multi-hot matrix, float32
        node = int(np.repeat(nodes, lengths)[int(np.argmax(feats))])
        raise G3InputError(
            f"feature id {width - 1} (node {node}) makes a {n:,} x {width:,} feature matrix "
            f"({n * width * 4 / 2**30:,.1f} GiB), more than half this machine's memory; feature "
            f"ids must be numbered 0 .. F-1",
            path=path,
        )
    x = np.zeros((n, width), dtype=np.float32)
    x[np.repeat(nodes, lengths), feats] = 1.0
    return x


def open_array_spec(spec, what: str = "array"):
    """Open ``file.npy``, ``file.npz[:key]`` or ``file.h5:/dataset`` lazily; rows can be sliced (``a[i:j]``).

    Returns a ``np.memmap`` / ``np.ndarray``, an :class:`NpzMember` or an ``h5py.Dataset``. Raises
    :class:`G3InputError` for a missing file, a missing key or dataset, or an unreadable file.
    """
    path, key = _split_spec(spec)
    if path.is_dir():
        raise G3InputError(f"is a folder, not a {what} file", path=path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        if key is not None:
            raise G3InputError(f"a .npy file holds one array; drop ':{key}'", path=path)
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise G3InputError(f"cannot read as .npy: {exc}", path=path) from None
    if suffix == ".npz":
        return _npz_member(path, key, what)
    if suffix in (".csv", ".tsv"):
        return _csv_column(path, key, what)
    if suffix == ".json":
        if key is not None:
            raise G3InputError(f"a .json feature file holds one matrix; drop ':{key}'", path=path)
        return _json_multi_hot(path)
    import h5py

    if suffix in _H5_SUFFIXES or h5py.is_hdf5(path):
        try:
            f = h5py.File(path, "r")
        except OSError as exc:
            raise G3InputError(f"cannot open as HDF5: {exc}", path=path) from None
        found: list[str] = []
        f.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
        listed = ", ".join("/" + n for n in found[:10]) or "none"
        if key is None:
            if len(found) != 1:
                raise G3InputError(
                    f"holds {len(found)} datasets ({listed}); name one as {path}:/DATASET", path=path
                )
            key = found[0]
        obj = f.get(key)
        if obj is None or not isinstance(obj, h5py.Dataset):
            raise G3InputError(f"has no dataset {key!r} (datasets: {listed})", path=path)
        return obj
    raise G3InputError(
        f"unsupported {what} file type (use .npy, .npz[:key], .h5:/dataset, .csv:COLUMN or a .json "
        "of sparse features)",
        path=path,
    )


def feature_blocks_from_array(arr, path, num_nodes: int):
    """(feat_dim, feature_blocks) for a lazily readable ``[N, F]`` array; blocks are checked for NaN/inf."""
    shape = tuple(arr.shape)
    if len(shape) == 1:
        shape = (shape[0], 1)
    if len(shape) != 2:
        raise G3InputError(
            f"features must be a 2-D array [nodes, dims], got shape {tuple(arr.shape)}", path=path
        )
    if shape[0] != num_nodes:
        raise G3InputError(f"features have {shape[0]} rows but the graph has {num_nodes} nodes", path=path)
    kind = np.dtype(arr.dtype).kind
    if kind not in "fiub":
        raise G3InputError(f"features must be numeric, got dtype {arr.dtype}", path=path)
    dim = shape[1]
    rows = max(1, FEATURE_BLOCK_BYTES // max(1, dim * np.dtype(arr.dtype).itemsize))

    def blocks() -> Iterator[np.ndarray]:
        for start in range(0, num_nodes, rows):
            block = np.asarray(arr[start : start + rows]).reshape(-1, dim)
            if kind != "f":
                block = block.astype(np.float32)
            check_finite(block, path, start)
            yield block

    return dim, blocks


def check_finite(block: np.ndarray, path, first_row: int, line_of_row=None) -> None:
    """Raise naming the first row holding a NaN or infinite value (as a line when ``line_of_row`` is given)."""
    finite = np.isfinite(block)
    if finite.all():
        return
    r, c = (int(x) for x in np.argwhere(~finite)[0])
    row = first_row + r
    value = block[r, c] if block.ndim == 2 else block[r]
    if line_of_row is not None:
        raise G3InputError(
            f"feature value {value} in column {c + 1} is not finite", path=path, line=line_of_row(row)
        )
    raise G3InputError(
        f"feature value {value} in row {row} (node {row}), column {c} is not finite", path=path
    )


def labels_from_array(arr, path, num_nodes: int, line_of_row=None) -> tuple[np.ndarray, int]:
    """int32 labels ``[N]`` (-1 = unlabelled, from NaN or -1) and the class count, read in blocks."""
    shape = tuple(arr.shape)
    if len(shape) == 2 and shape[1] != 1:
        raise G3InputError(
            f"labels have {shape[1]} columns: multi-label node labels are unsupported (one class per node)",
            path=path,
        )
    if len(shape) not in (1, 2):
        raise G3InputError(f"labels must be a 1-D array [nodes], got shape {shape}", path=path)
    if shape[0] != num_nodes:
        raise G3InputError(f"labels have {shape[0]} rows but the graph has {num_nodes} nodes", path=path)
    kind = np.dtype(arr.dtype).kind
    if kind not in "fiub":
        raise G3InputError(f"labels must be numeric, got dtype {arr.dtype}", path=path)
    out = np.empty(num_nodes, dtype=np.int32)

    def refuse(row: int, why: str) -> G3InputError:
        value = block[row - start]
        if line_of_row is not None:
            return G3InputError(f"label {value} {why}", path=path, line=line_of_row(row))
        return G3InputError(f"label {value} at row {row} (node {row}) {why}", path=path)

    for start in range(0, num_nodes, LABEL_BLOCK):
        block = np.asarray(arr[start : start + LABEL_BLOCK]).reshape(-1)
        if kind == "f":
            nan = np.isnan(block)
            bad = ~nan & ((block != np.floor(block)) | ~np.isfinite(block))
            if bad.any():
                r = start + int(np.flatnonzero(bad)[0])
                raise refuse(r, "is not an integer class id")
            block = np.where(nan, -1, block)
        if len(block) and (block.min() < -1 or block.max() >= 2**31 - 1):
            r = start + int(np.flatnonzero((block < -1) | (block >= 2**31 - 1))[0])
            raise refuse(r, "is not a class id (>= 0, or -1/NaN for unlabelled)")
        out[start : start + len(block)] = block
    num_classes = int(out.max()) + 1 if num_nodes else 0
    return out, max(num_classes, 0)


# ------------------------------------------------------------------------------------------------------------
# Text edge lists
# ------------------------------------------------------------------------------------------------------------


def open_stream(path: Path):
    """A binary input stream, decompressing .gz/.bz2/.zst/.lz4 by extension."""
    try:
        return pa.input_stream(str(path), compression="detect", buffer_size=1 << 20)
    except (OSError, pa.ArrowException) as exc:
        raise G3InputError(f"cannot open: {exc}", path=path) from None


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """A read error (I/O, or a corrupt or truncated compressed stream) as one line naming the file."""
    try:
        yield
    except (OSError, pa.ArrowException) as exc:
        raise G3InputError(f"cannot read (corrupt or truncated?): {exc}", path=path) from None


def text_blocks(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(first line number, bytes)`` blocks of whole lines (the last one may lack its newline)."""
    line = 1
    carry = b""
    with open_stream(path) as f, reading(path):
        while data := f.read(TEXT_BLOCK_BYTES):
            buf = carry + data if carry else data
            if line == 1 and not carry and buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]  # a UTF-8 byte-order mark
            cut = buf.rfind(b"\n") + 1
            if cut == 0:
                carry = buf
                continue
            chunk, carry = buf[:cut], buf[cut:]
            yield line, chunk
            line += chunk.count(b"\n")
    if carry:
        yield line, carry


def _data_lines(line0: int, chunk: bytes) -> Iterator[tuple[int, bytes]]:
    """``(line number, stripped line)`` of the data lines of a block: neither blank nor comments."""
    for i, raw in enumerate(chunk.split(b"\n")):
        s = raw.strip()
        if s and s[:1] not in _COMMENT_START:
            yield line0 + i, s


def _drop_comment_lines(chunk: bytes) -> bytes | None:
    """``chunk`` without its comment lines, found with ``bytes.find``; None when there are too many marks."""
    cuts: list[tuple[int, int]] = []
    hits = 0
    for mark in _COMMENT_START:
        i = chunk.find(mark)
        while i >= 0:
            hits += 1
            if hits > MAX_COMMENT_CUTS:
                return None
            start = chunk.rfind(b"\n", 0, i) + 1
            if chunk[start:i].strip():
                i = chunk.find(mark, i + 1)
                continue
            end = chunk.find(b"\n", i)
            end = len(chunk) if end < 0 else end + 1
            cuts.append((start, end))
            i = chunk.find(mark, end)
    cuts.sort()
    keep = zip([0] + [end for _, end in cuts], [start for start, _ in cuts] + [len(chunk)], strict=True)
    return b"".join(chunk[a:b] for a, b in keep) if cuts else chunk


def _fields(s: bytes, comma: bool) -> list[bytes]:
    return s.split(b",") if comma else s.split()


def _short(s: bytes) -> str:
    text = s.decode("utf-8", "replace").rstrip("\r\n")
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _line_of_row(line0: int, chunk: bytes, row: int) -> int:
    """The line number of data row ``row`` of a block (error path only)."""
    return next(itertools.islice(_data_lines(line0, chunk), row, None), (line0, b""))[0]


def _bad_id(
    value, num_nodes: int | None, limit: int, at: str = "", prefix: str = "", **where
) -> G3InputError:
    """The error for node id ``value`` (``at`` its place) outside ``[0, num_nodes)``, or beyond ``limit`` (this
    machine's memory) when no node count is given."""
    if num_nodes is None and value >= 0:
        return G3InputError(prefix + _too_many_nodes(int(value), limit), **where)
    rng = f"[0, {num_nodes})" if num_nodes is not None else "(ids must be >= 0)"
    return G3InputError(f"node id {value}{at} is out of range {rng}", **where)


def first_bad_arc(s: np.ndarray, d: np.ndarray, limit: int) -> tuple[int, Any] | None:
    """(position, id) of the first arc with an id outside ``[0, limit)``, or None when every id is inside."""
    if not len(s) or (min(int(s.min()), int(d.min())) >= 0 and max(int(s.max()), int(d.max())) < limit):
        return None
    k = int(np.flatnonzero((s < 0) | (s >= limit) | (d < 0) | (d >= limit))[0])
    return k, s[k] if not 0 <= s[k] < limit else d[k]


class _TextEdges:
    """Parses a text edge list block by block (see the module docstring for the three parsing tiers)."""

    def __init__(self, path: Path):
        self.path = path
        self.skip_lines = 0  # lines up to and including the header
        self.comma = False
        self.ncols = 2
        self.header: str | None = None
        self._sniff()

    def _sniff(self) -> None:
        for line0, chunk in text_blocks(self.path):
            for line, s in _data_lines(line0, chunk):
                comma = b"," in s and bool(_INT_FIELD.fullmatch(s.split(b",", 1)[0]))
                fields = _fields(s, comma)
                ints = [bool(_INT_FIELD.fullmatch(f)) for f in fields[:2]]
                if len(fields) >= 2 and all(ints):
                    self.comma, self.ncols = comma, len(fields)
                    return
                if self.header is None and not all(_NUMBER_FIELD.fullmatch(f) for f in fields):
                    self.header = s.decode("utf-8", "replace")
                    self.skip_lines = line
                    continue
                raise G3InputError(
                    f"malformed line {_short(s)}: expected two integer node ids (src dst)",
                    path=self.path,
                    line=line,
                )
        # no data line: an empty graph (comments/header only)

    def blocks(self) -> Iterator[tuple[int, bytes]]:
        skip = self.skip_lines
        for line0, chunk in text_blocks(self.path):
            if skip >= line0:
                n = skip - line0 + 1  # the lines up to and including the header, dropped
                parts = chunk.split(b"\n", n)
                line0, chunk = skip + 1, parts[n] if len(parts) > n else b""
                if not chunk:
                    continue
            yield line0, chunk

    # --- parsing tiers --------------------------------------------------------------------------------------
    def _arrow(self, chunk: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        text, delimiter = (chunk, ",") if self.comma else (chunk.replace(b"\t", b" "), " ")
        got = _arrow_ints(text, self.ncols, 2, delimiter, ARROW_BLOCK_BYTES)
        return None if got is None else (got[0], got[1])

    def _normalise(self, chunk: bytes) -> bytes | None:
        """The block without comment lines and with single spaces between fields (None: too many comments)."""
        chunk = _drop_comment_lines(chunk)
        if chunk is None:
            return None
        chunk = chunk.replace(b"\t", b" ")
        while b"  " in chunk:
            chunk = chunk.replace(b"  ", b" ")
        chunk = chunk.replace(b"\n ", b"\n").replace(b" \n", b"\n").replace(b" \r", b"\r")
        return chunk[1:] if chunk.startswith(b" ") else chunk

    def _python(self, line0: int, chunk: bytes) -> tuple[np.ndarray, np.ndarray]:
        src: list[int] = []
        dst: list[int] = []
        for line, s in _data_lines(line0, chunk):
            fields = _fields(s, self.comma)
            if len(fields) < 2 or not (_INT_FIELD.fullmatch(fields[0]) and _INT_FIELD.fullmatch(fields[1])):
                raise G3InputError(
                    f"malformed line {_short(s)}: expected two integer node ids (src dst)",
                    path=self.path,
                    line=line,
                )
            a, b = int(fields[0]), int(fields[1])
            if not (-(2**63) <= a < 2**63 and -(2**63) <= b < 2**63):
                raise G3InputError(f"node id in {_short(s)} is too large", path=self.path, line=line)
            src.append(a)
            dst.append(b)
        return np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)

    def parse(self, line0: int, chunk: bytes) -> tuple[np.ndarray, np.ndarray]:
        got = self._arrow(chunk)
        if got is None:
            clean = self._normalise(chunk)
            got = None if clean is None else self._arrow(clean)
        if got is None:
            got = self._python(line0, chunk)
        return got

    def chunks(self) -> Iterator[tuple[int, bytes, np.ndarray, np.ndarray]]:
        for line0, chunk in self.blocks():
            s, d = self.parse(line0, chunk)
            yield line0, chunk, s, d

    def check_ids(
        self, line0: int, chunk: bytes, s: np.ndarray, d: np.ndarray, num_nodes: int | None
    ) -> None:
        limit = num_nodes if num_nodes is not None else max_node_count()
        bad = first_bad_arc(s, d, limit)
        if bad is not None:
            line = _line_of_row(line0, chunk, bad[0])
            raise _bad_id(bad[1], num_nodes, limit, path=self.path, line=line)


# ------------------------------------------------------------------------------------------------------------
# Edge arrays
# ------------------------------------------------------------------------------------------------------------


def edge_array_layout(arr, path) -> tuple[int, bool]:
    """(number of arcs, planar) for an ``[2, E]`` or ``[E, 2]`` integer array; planar = ``[2, E]``."""
    shape = tuple(arr.shape)
    if len(shape) != 2 or 2 not in shape:
        raise G3InputError(f"edge array must have shape [2, E] or [E, 2], got {shape}", path=path)
    if np.dtype(arr.dtype).kind not in "iu":
        raise G3InputError(f"edge array must hold integers, got dtype {arr.dtype}", path=path)
    if shape[0] == 2:
        return shape[1], True
    return shape[0], False


def iter_edge_array(arr, path, num_nodes: int | None):
    """Yield ``(src, dst)`` int64 chunks of an edge array, checking ids in ``[0, num_nodes)``."""
    e, planar = edge_array_layout(arr, path)
    member = isinstance(arr, NpzMember)
    limit = num_nodes if num_nodes is not None else max_node_count()
    # bytes interleaved (src, dst, src, dst...) or planar (all src, then all dst)
    interleaved = (not planar) != (member and arr.fortran)
    for start in range(0, e, ARRAY_ARC_CHUNK):
        n = min(ARRAY_ARC_CHUNK, e - start)
        if member:
            if interleaved:
                pair = arr.read_flat(2 * start, 2 * n).reshape(n, 2)
                s, d = pair[:, 0], pair[:, 1]
            else:
                s = arr.read_flat(start, n, stream=0)
                d = arr.read_flat(e + start, n, stream=1)
        elif planar:
            s, d = np.asarray(arr[0, start : start + n]), np.asarray(arr[1, start : start + n])
        else:
            pair = np.asarray(arr[start : start + n])
            s, d = pair[:, 0], pair[:, 1]
        s = s.astype(np.int64, copy=False)
        d = d.astype(np.int64, copy=False)
        bad = first_bad_arc(s, d, limit)
        if bad is not None:
            k, value = bad
            idx = f"edge_index[:, {start + k}]" if planar else f"edge_index[{start + k}]"
            raise _bad_id(value, num_nodes, limit, f" at {idx} (edge {start + k})", f"{idx}: ", path=path)
        yield s, d
    if member:
        arr.close()


# ------------------------------------------------------------------------------------------------------------
# Index files (splits)
# ------------------------------------------------------------------------------------------------------------


def read_index_file(spec, num_nodes: int, what: str) -> np.ndarray:
    """Node ids from a text file (one per line, ``#``/``%`` comments) or an array spec, checked in range."""
    s = str(spec)
    base = Path(s)
    if base.suffix.lower() in (".npy", ".npz", *_H5_SUFFIXES) or (not base.exists() and ":" in s):
        arr = open_array_spec(spec, what)
        ids = np.asarray(arr[:] if not isinstance(arr, np.ndarray) else arr)
        path = _split_spec(spec)[0]
        if ids.ndim == 2 and 1 in ids.shape:
            ids = ids.reshape(-1)
        if ids.ndim != 1:
            raise G3InputError(f"{what} ids must be a 1-D array, got shape {ids.shape}", path=path)
        if ids.dtype.kind not in "iu":
            raise G3InputError(f"{what} ids must be integers, got dtype {ids.dtype}", path=path)
        return ids_in_range(ids.astype(np.int64), num_nodes, what, path)
    if not base.exists():
        raise G3InputError(f"no such {what} file", path=base)
    parts: list[np.ndarray] = []
    for line0, chunk in text_blocks(base):
        arrow = _arrow_ints(chunk, 1, 1, ",", max(1 << 20, len(chunk) + 1))
        got = _ids_python(base, line0, chunk, what) if arrow is None else arrow[0]
        parts.append(ids_in_range(got, num_nodes, what, base, functools.partial(_line_of_row, line0, chunk)))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def ids_in_range(ids: np.ndarray, num_nodes: int, what: str, path, line_of_row=None) -> np.ndarray:
    """``ids``, refused naming the first outside ``[0, num_nodes)`` and its line (``line_of_row(k)``) or index."""
    if len(ids) and (ids.min() < 0 or ids.max() >= num_nodes):
        k = int(np.flatnonzero((ids < 0) | (ids >= num_nodes))[0])
        at, line = (f" at index {k}", None) if line_of_row is None else ("", line_of_row(k))
        raise G3InputError(
            f"{what} node id {ids[k]}{at} is out of range [0, {num_nodes})", path=path, line=line
        )
    return ids


def _arrow_ints(
    chunk: bytes, ncols: int, keep: int, delimiter: str, block_size: int
) -> list[np.ndarray] | None:
    """The first ``keep`` of the ``ncols`` columns of a text block as int64 arrays, parsed by pyarrow (None when
    pyarrow rejects the block: the caller tries slower ways, which name the bad line)."""
    names = [f"c{i}" for i in range(ncols)]
    try:
        table = pacsv.read_csv(
            pa.BufferReader(chunk),
            read_options=pacsv.ReadOptions(column_names=names, block_size=block_size),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char=False, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(names[:keep], pa.int64()),
                include_columns=names[:keep],
                null_values=[],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowException:
        return None
    return [table.column(i).to_numpy() if table.num_rows else np.zeros(0, np.int64) for i in range(keep)]


def _ids_python(path: Path, line0: int, chunk: bytes, what: str) -> np.ndarray:
    out: list[int] = []
    for line, s in _data_lines(line0, chunk):
        if not _INT_FIELD.fullmatch(s):
            raise G3InputError(
                f"malformed line {_short(s)}: expected one integer node id", path=path, line=line
            )
        out.append(int(s))
    try:
        return np.array(out, dtype=np.int64)
    except OverflowError:
        raise G3InputError(f"{what} node id too large", path=path) from None


# ------------------------------------------------------------------------------------------------------------
# The reader
# ------------------------------------------------------------------------------------------------------------


def _is_array_file(path: Path) -> bool:
    return path.suffix.lower() in (".npy", ".npz", *_H5_SUFFIXES)


@contextlib.contextmanager
def _naming_the_count(num_nodes: int, count_source: str | None):
    """An edge's node id beyond the node count is named with what set the count (the side files' rows or
    --num-nodes): the edge list alone cannot say which of the two inputs is wrong."""
    try:
        yield
    except G3InputError as exc:
        if count_source is None or "is out of range" not in str(exc):
            raise
        named = G3InputError(
            f"{exc}: the node count {num_nodes:,} is {count_source}; an edge names a node "
            "beyond them (give features and labels for every node, or a larger --num-nodes)"
        )
        named.path, named.line = exc.path, exc.line
        raise named from None


def read_edgelist(
    path,
    *,
    num_nodes: int | None = None,
    features=None,
    labels=None,
    train_idx=None,
    valid_idx=None,
    test_idx=None,
    undirected: bool = False,
) -> GraphSource:
    """Read an edge list (text, ``.npy``, ``.npz`` or ``file.h5:/dataset``) and optional side arrays.

    ``num_nodes``: when not given, the row count of ``features``/``labels`` if given, else the largest node id
    plus one (found by one pass over the arcs; the parsed arcs are kept in memory when they are few).
    ``features``/``labels``: array specs (see :func:`open_array_spec`); labels may be float with NaN for
    unlabelled nodes. ``train_idx``/``valid_idx``/``test_idx``: index files; when none is given the builder
    draws a ratio split. ``undirected``: each undirected edge is stored once (the builder symmetrises).
    """
    spec = str(path)
    p = Path(spec)
    _check_edge_path_and_count(p, spec, num_nodes)
    feat_arr = open_array_spec(features, "features") if features is not None else None
    label_arr = open_array_spec(labels, "labels") if labels is not None else None
    feat_path = _split_spec(features)[0] if features is not None else None
    label_path = _split_spec(labels)[0] if labels is not None else None
    num_nodes, count_source = _node_count(num_nodes, ((feat_path, feat_arr), (label_path, label_arr)))
    info: dict[str, Any] = {"format": "edgelist"}
    edges = _array_edges if not p.exists() or _is_array_file(p) else _text_edges
    arcs, num_nodes, expected_arcs, source_path = edges(p, spec, num_nodes, count_source, info)
    feat_dim, feature_blocks, label_values, num_classes = 0, None, None, None
    if feat_arr is not None:
        feat_dim, feature_blocks = feature_blocks_from_array(feat_arr, feat_path, num_nodes)
        info["features"] = str(features)
    if label_arr is not None:
        label_values, num_classes = labels_from_array(label_arr, label_path, num_nodes)
        info["labels"] = str(labels)
    splits = None
    given = {"train": train_idx, "valid": valid_idx, "test": test_idx}
    if any(v is not None for v in given.values()):
        splits = {
            name: np.zeros(0, dtype=np.int64) if sp is None else read_index_file(sp, num_nodes, f"{name}_idx")
            for name, sp in given.items()
        }

    return GraphSource(
        name=Path(source_path).name.split(".")[0] or "edgelist",
        num_nodes=int(num_nodes),
        arcs=arcs,
        path=source_path,
        feat_dim=feat_dim,
        feature_blocks=feature_blocks,
        feature_path=str(feat_path) if feat_path is not None else None,
        labels=label_values,
        num_classes=num_classes,
        splits=splits,
        expected_arcs=expected_arcs,
        undirected_once=bool(undirected),
        info=info,
    )


def _check_edge_path_and_count(p: Path, spec: str, num_nodes: int | None) -> None:
    """Refuse a missing edge file, a folder, and a ``--num-nodes`` below 0 or beyond this machine's memory."""
    if not p.exists() and ":" not in spec:
        raise G3InputError("no such file", path=p)
    if p.is_dir():
        raise G3InputError("is a folder; an edge list is a file (use --format ogb for OGB folders)", path=p)
    if num_nodes is not None and num_nodes < 0:
        raise G3InputError(f"--num-nodes must be >= 0, got {num_nodes}")
    if num_nodes is not None and num_nodes > max_node_count():
        raise G3InputError(
            f"--num-nodes {num_nodes:,} is more nodes than this machine's memory holds "
            f"({max_node_count():,} at {NODE_BYTES} bytes each)"
        )


def _node_count(num_nodes: int | None, side) -> tuple[int | None, str | None]:
    """The node count given, else the feature/label rows' (isolated trailing nodes included), and what set it."""
    if num_nodes is not None:
        return num_nodes, "--num-nodes"
    rows = {str(q): int(a.shape[0]) for q, a in side if a is not None}
    if len(set(rows.values())) > 1:
        raise G3InputError(
            "features and labels disagree on the number of nodes: "
            + ", ".join(f"{q} has {r} rows" for q, r in rows.items())
        )
    if not rows:
        return None, None
    return next(iter(rows.values())), f"the rows of {' and '.join(rows)}"


def _array_edges(p: Path, spec: str, num_nodes: int | None, count_source: str | None, info: dict[str, Any]):
    """An edge array's arcs, node count, arc count and path (its layout noted in ``info``)."""
    if p.suffix.lower() == ".npz" and p.is_file() and "edge_index" in npz_keys(p):
        spec = f"{p}:edge_index"
    arr = open_array_spec(spec, "edge array")
    arr_path = _split_spec(spec)[0]
    e, planar = edge_array_layout(arr, arr_path)
    info["layout"] = "[2, E]" if planar else "[E, 2]"
    if num_nodes is None:
        chunks = iter_edge_array(arr, arr_path, None)
        num_nodes = max((max(int(s.max()), int(d.max())) for s, d in chunks if len(s)), default=-1) + 1

    def arcs() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        with _naming_the_count(num_nodes, count_source):
            yield from iter_edge_array(open_array_spec(spec, "edge array"), arr_path, num_nodes)

    return arcs, num_nodes, e, str(arr_path)


def _text_edges(p: Path, spec: str, num_nodes: int | None, count_source: str | None, info: dict[str, Any]):
    """A text edge list's arcs, node count, arc count (when counted) and path (its format noted in ``info``)."""
    text = _TextEdges(p)
    if text.header is not None:
        info["header"] = text.header
    info["delimiter"] = "comma" if text.comma else "whitespace"
    cached: list[tuple[np.ndarray, np.ndarray]] | None = None
    expected_arcs: int | None = None
    if num_nodes is None:
        hi, total = -1, 0
        keep: list[tuple[np.ndarray, np.ndarray]] | None = []
        for line0, chunk, s, d in text.chunks():
            text.check_ids(line0, chunk, s, d, None)
            if len(s):
                hi = max(hi, int(s.max()), int(d.max()))
            total += len(s)
            if keep is not None:
                keep.append((s, d))
                if total > CACHE_ARCS_LIMIT:
                    keep = None
        num_nodes, cached, expected_arcs = hi + 1, keep, total

    def arcs() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if cached is not None:
            yield from cached
            return
        with _naming_the_count(num_nodes, count_source):
            for line0, chunk, s, d in text.chunks():
                text.check_ids(line0, chunk, s, d, num_nodes)
                yield s, d

    return arcs, num_nodes, expected_arcs, str(p)
