"""The g3 graph store: a zarr v3 directory written by ``g3 ingest`` and read by every later stage.

Layout (documented in docs/ARTIFACTS.md, schema ``g3.store`` version 1)::

    STORE/zarr.json          group; attributes["g3"] holds the metadata below
    STORE/indptr             int64 [N+1]   in-edge CSR row pointers (row v = arcs whose destination is v)
    STORE/indices            int32|int64 [E] source of each arc, sorted within a row
    STORE/in_degree          int32 [N]
    STORE/out_degree         int32 [N]
    STORE/features           float32|float16 [N, F], chunked by rows
    STORE/labels             int32 [N]      class id, -1 for unlabelled nodes
    STORE/split/train        int64 [n_train] node ids (and valid, test)

Readers open arrays lazily: nothing loads the whole graph unless a caller asks for it. What a reader takes
from a store is checked: on open, every array's presence, shape and dtype against the metadata (cheap); on a
whole-array read (:meth:`GraphStore.read`), that it decodes and its sha256 against the checksum ``g3 ingest``
recorded (zarr hands back zeros for a missing chunk file); the CSR's index ranges before any kernel or METIS
sees them. A store that fails is bad input: one line naming the array.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from stages.common.artifact_json import REQUIRED, check_json, sealed
from stages.common.atomic import json_default
from stages.common.errors import G3InputError

STORE_SCHEMA = "g3.store"
STORE_VERSION = 1
SPLITS = ("train", "valid", "test")
FEATURE_CHUNK_BYTES = 16 << 20  # rows per feature chunk are chosen so one chunk is about 16 MiB
ARC_CHUNK = 1 << 22  # elements per chunk of the 1-D arrays


def index_dtype(num_nodes: int) -> np.dtype:
    """int32 when node ids fit, else int64."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


class ArrayWriter:
    """Writes one zarr array sequentially by slabs along axis 0, hashing the bytes as they go."""

    def __init__(self, array: zarr.Array):
        self.array = array
        self.offset = 0
        self._hash = hashlib.sha256()

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.array.dtype)
        n = block.shape[0]
        if self.offset + n > self.array.shape[0]:
            raise ValueError(
                f"{self.array.name}: writing past the end ({self.offset + n} > {self.array.shape[0]})"
            )
        if n:
            self.array[self.offset : self.offset + n] = block
            self._hash.update(block.tobytes())
        self.offset += n

    def checksum(self) -> str:
        if self.offset != self.array.shape[0]:
            raise ValueError(f"{self.array.name}: {self.offset} of {self.array.shape[0]} rows written")
        return "sha256:" + self._hash.hexdigest()


class StoreWriter:
    """Creates the arrays of a store inside a (temporary) directory; ``finish`` writes the metadata last."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.group = zarr.open_group(str(self.path), mode="w", zarr_format=3)
        self.checksums: dict[str, str] = {}
        self._writers: dict[str, ArrayWriter] = {}

    def create(self, name: str, shape: tuple[int, ...], dtype, chunk_rows: int | None = None) -> ArrayWriter:
        dtype = np.dtype(dtype)
        if chunk_rows is None:
            if len(shape) == 1:
                chunk_rows = ARC_CHUNK
            else:
                row_bytes = max(1, int(np.prod(shape[1:])) * dtype.itemsize)
                chunk_rows = max(1024, FEATURE_CHUNK_BYTES // row_bytes)
        if shape[0] > 0:  # an array created empty (to be grown) keeps the full chunk size
            chunk_rows = max(1, min(chunk_rows, shape[0]))
        chunks = (chunk_rows, *shape[1:])
        array = self.group.create_array(name, shape=shape, dtype=dtype, chunks=chunks, fill_value=0)
        writer = ArrayWriter(array)
        self._writers[name] = writer
        return writer

    def write_array(self, name: str, data: np.ndarray, chunk_rows: int | None = None) -> None:
        """Create and fill an array that fits in memory."""
        w = self.create(name, data.shape, data.dtype, chunk_rows)
        w.append(data)

    def finish(self, meta: dict[str, Any]) -> None:
        for name, w in self._writers.items():
            self.checksums[name] = w.checksum()
        meta = dict(meta)
        meta["schema"] = STORE_SCHEMA
        meta["schema_version"] = STORE_VERSION
        meta["checksums"] = self.checksums
        meta["metadata_sha256"] = _metadata_digests(self.path)
        self.group.attrs["g3"] = sealed(json.loads(json.dumps(meta, default=json_default)))


def _metadata_digests(root: Path) -> dict[str, str]:
    """sha256 of every array's and subgroup's ``zarr.json`` (the root's holds this record itself): a damaged
    shape, dtype or codec is refused when the store is opened, before zarr decodes anything with it."""
    return {
        str(f.relative_to(root)): "sha256:" + hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(Path(root).rglob("zarr.json"))
        if f.parent != Path(root)
    }


def _lazy_array(name: str) -> property:
    """A store's zarr array ``name``, opened (not read) on each use."""
    return property(lambda self: self.array(name), doc=f"The store's {name} array (zarr, read lazily).")


def _meta_count(key: str) -> property:
    """A store's count kept in its metadata (zarr.json's ``key``), as an int."""
    return property(lambda self: int(self.meta[key]), doc=f"The store's {key.replace('_', ' ')}.")


class GraphStore:
    """Lazy reader of a g3 store. Arrays are zarr arrays; ``load_*`` methods read them whole."""

    def __init__(self, path: Path, group: zarr.Group, meta: dict[str, Any]):
        self.path = path
        self.group = group
        self.meta = meta

    @classmethod
    def open(cls, path: str | Path) -> GraphStore:
        path = Path(path)
        if not path.exists():
            raise G3InputError("no such store", path=path)
        if not (path / "zarr.json").is_file():
            raise G3InputError("not a g3 store (no zarr.json; run `g3 ingest` first)", path=path)
        try:
            group = zarr.open_group(str(path), mode="r")
        except Exception as exc:  # zarr raises several types for a broken group
            raise G3InputError(f"cannot open as a zarr group: {exc}", path=path) from None
        meta = group.attrs.get("g3") or {}
        if not isinstance(meta, dict):
            raise G3InputError("not a g3 store (its g3 metadata in zarr.json is not an object)", path=path)
        meta = dict(meta)
        if meta.get("schema") != STORE_SCHEMA:
            raise G3InputError("not a g3 store (no g3 metadata in zarr.json)", path=path)
        if meta.get("schema_version") != STORE_VERSION:
            raise G3InputError(
                f"store schema version {meta.get('schema_version')} is not supported "
                f"(this g3 reads version {STORE_VERSION}); re-run `g3 ingest`",
                path=path,
            )
        meta = check_json(
            meta, path / "zarr.json", REQUIRED["store"]
        )  # its seal, once the version says it is ours
        for rel, digest in (meta.get("metadata_sha256") or {}).items():
            f = path / rel
            if not f.is_file():
                raise G3InputError(f"{rel} is missing (the store was damaged; re-run `g3 ingest`)", path=path)
            if "sha256:" + hashlib.sha256(f.read_bytes()).hexdigest() != digest:
                raise G3InputError(f"{rel} was altered or damaged after `g3 ingest` wrote it", path=path)
        store = cls(path, group, meta)
        store.check_layout()
        return store

    def check_layout(self) -> None:
        """Every array the metadata implies is there with its shape and dtype (no data read)."""
        try:
            n, e, f = int(self.meta["num_nodes"]), int(self.meta["num_arcs"]), int(self.meta["feat_dim"])
        except (KeyError, TypeError, ValueError) as exc:
            raise G3InputError(f"store metadata is incomplete or malformed ({exc})", path=self.path) from None
        expected = {
            "indptr": ((n + 1,), "int64"),
            "indices": ((e,), None),
            "in_degree": ((n,), None),
            "out_degree": ((n,), None),
            "labels": ((n,), None),
            "features": ((n, f), self.meta.get("feature_dtype")),
        }
        for name, (shape, dtype) in expected.items():
            arr = self.array(name)
            if tuple(arr.shape) != shape:
                raise G3InputError(
                    f"array {name} has shape {tuple(arr.shape)}, the metadata says {shape} "
                    "(num_nodes, num_arcs or feat_dim altered?)",
                    path=self.path,
                )
            if dtype is not None and str(arr.dtype) != str(np.dtype(dtype)):
                raise G3InputError(
                    f"array {name} has dtype {arr.dtype}, the metadata says {dtype}", path=self.path
                )

    # --- counts -------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.meta.get("name", self.path.name)

    num_nodes = _meta_count("num_nodes")
    num_arcs = _meta_count("num_arcs")
    feat_dim = _meta_count("feat_dim")
    num_classes = _meta_count("num_classes")

    def summary(self) -> dict:
        """What an artifact made from the store records of it: where it is and its counts."""
        return {
            "path": str(Path(self.path).resolve()),
            "name": self.name,
            **{k: getattr(self, k) for k in ("num_nodes", "num_arcs", "feat_dim", "num_classes")},
        }

    @property
    def feature_dtype(self) -> np.dtype:
        return np.dtype(self.meta["feature_dtype"])

    # --- lazy arrays --------------------------------------------------------------------------------------
    def array(self, name: str) -> zarr.Array:
        try:
            return self.group[name]  # type: ignore[return-value]  # a store's members are arrays
        except KeyError:
            raise G3InputError(f"store has no array {name!r}", path=self.path) from None
        except Exception as exc:  # its zarr.json damaged: zarr raises several types
            raise G3InputError(
                f"array {name} cannot be opened: {type(exc).__name__}: {exc}", path=self.path / name
            ) from None

    indptr = _lazy_array("indptr")

    indices = _lazy_array("indices")

    features = _lazy_array("features")

    labels = _lazy_array("labels")

    # --- eager, verified loads ----------------------------------------------------------------------------
    def read(self, name: str, verify: bool = True) -> np.ndarray:
        """The whole array ``name``, its sha256 checked against the recorded checksum: zarr reads a missing chunk
        as the fill value, so a deleted chunk shows only there (chunks equal to the fill value are not written
        at all, so their absence alone proves nothing)."""
        try:
            data = np.asarray(self.array(name)[:])
        except G3InputError:
            raise
        except Exception as exc:  # a chunk that does not decode: zarr and its codecs raise various types
            raise G3InputError(
                f"array {name} cannot be read: {type(exc).__name__}: {exc}", path=self.path
            ) from None
        expected = self.meta.get("checksums", {}).get(name)
        if verify and expected and checksum(data) != expected:
            raise G3InputError(
                f"array {name} does not match its recorded checksum (the store was altered or "
                "damaged; re-run `g3 ingest`)",
                path=self.path,
            )
        return data

    def load_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole in-edge CSR, verified (chunks, checksums, then its structure: ``indptr`` from 0 to E and
        non-decreasing, every source id in [0, N)): (indptr int64 [N+1], indices [E])."""
        indptr, indices = self.read("indptr"), self.read("indices")
        check_csr(indptr, indices, self.num_nodes, self.path)
        return indptr, indices

    def load_degrees(self) -> tuple[np.ndarray, np.ndarray]:
        """(in_degree, out_degree) as int64 arrays."""
        return (
            np.asarray(self.read("in_degree"), dtype=np.int64),
            np.asarray(self.read("out_degree"), dtype=np.int64),
        )

    def load_labels(self) -> np.ndarray:
        labels = self.read("labels")
        if len(labels) and (int(labels.max()) >= self.num_classes or int(labels.min()) < -1):
            raise G3InputError(f"array labels holds ids outside [-1, {self.num_classes})", path=self.path)
        return labels

    def split_index(self, split: str) -> np.ndarray:
        """Node ids of a split (train/valid/test) as int64, sorted."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}")
        key = f"split/{split}"
        try:
            self.group[key]
        except KeyError:
            if key in (self.meta.get("checksums") or {}):  # ingest wrote it: it was deleted since
                raise G3InputError(
                    f"array {key} is missing (the store was damaged; re-run `g3 ingest`)", path=self.path
                ) from None
            return np.zeros(0, dtype=np.int64)
        except Exception as exc:  # its zarr.json damaged
            raise G3InputError(
                f"array {key} cannot be opened: {type(exc).__name__}: {exc}", path=self.path
            ) from None
        ids = np.asarray(self.read(key), dtype=np.int64)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
            raise G3InputError(f"array {key} holds node ids outside [0, {self.num_nodes})", path=self.path)
        return ids

    def split_mask(self, split: str) -> np.ndarray:
        mask = np.zeros(self.num_nodes, dtype=bool)
        mask[self.split_index(split)] = True
        return mask

    def size_on_disk(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def verify(self) -> list[str]:
        """Recompute every array's checksum; returns the names whose checksum differs."""
        bad = []
        for name, expected in self.meta.get("checksums", {}).items():
            h = hashlib.sha256()
            for _start, block in self.blocks(name):
                h.update(np.ascontiguousarray(block).tobytes())
            if "sha256:" + h.hexdigest() != expected:
                bad.append(name)
        return bad

    def blocks(self, name: str, rows: int = 0):
        """``(first row, rows)`` blocks of an array, a whole number of chunks (at least ``rows``) at a time; a
        chunk that does not decode is bad input."""
        arr = self.array(name)
        step = max(arr.chunks[0], (rows // arr.chunks[0]) * arr.chunks[0]) if arr.chunks[0] else 1
        for start in range(0, arr.shape[0], step):
            try:
                yield start, np.asarray(arr[start : start + step])
            except Exception as exc:
                raise G3InputError(
                    f"array {name} cannot be read near row {start}: {type(exc).__name__}: {exc}",
                    path=self.path,
                ) from None


def checksum(data: np.ndarray) -> str:
    """``sha256:`` of an array's raw C-order bytes, as ``g3 ingest`` records it."""
    return "sha256:" + hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()


def check_csr(
    indptr: np.ndarray, indices: np.ndarray, num_nodes: int, where: object, num_sources: int | None = None
) -> None:
    """An in-edge CSR of ``num_nodes`` rows is well formed: ``indptr`` [N+1] from 0 to len(indices),
    non-decreasing, every index in [0, num_sources) (default N) — vectorised, before METIS or a kernel indexes
    with it."""
    limit = num_nodes if num_sources is None else num_sources
    if len(indptr) != num_nodes + 1 or (
        len(indptr) and (int(indptr[0]) != 0 or int(indptr[-1]) != len(indices))
    ):
        raise G3InputError("indptr does not run from 0 to the number of arcs over N + 1 entries", path=where)
    if len(indptr) > 1 and bool((np.diff(indptr) < 0).any()):
        raise G3InputError("indptr decreases somewhere: not a CSR row pointer", path=where)
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= limit):
        bad = int(np.flatnonzero((indices < 0) | (indices >= limit))[0])
        raise G3InputError(
            f"indices[{bad}] = {int(indices[bad])} is not a node id in [0, {limit})", path=where
        )
