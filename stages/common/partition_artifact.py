"""Reading a partition artifact (``g3.partition`` v3, written by ``g3 partition``): metadata + per-worker shards.

partition.json's ``layouts`` names how the shards hold the graph (``rows``, ``columns``; the first is the
primary layout, whose shards are ``PART/part-RRRRR``). Version 1 partitions predate the field: they are read
with the layouts their method implies (stages/kits/partition/methods.py).

A shard folder holds plain ``.npy`` files (see docs/ARTIFACTS.md). Arrays are memory-mapped, so opening a
shard costs nothing until an array is used. Ids, pointers and degrees are int32 where they fit (version 3; int64 in
older shards, and where they do not): they are handed over as stored, and every user converts what it keeps
once, at load; the ``[K+1]`` pointers are read as int64.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from stages.common.artifact_json import load_artifact_json, read_json_file, resolve_reference
from stages.common.errors import G3InputError
from stages.common.npy import load_checked
from stages.common.store import check_csr

PARTITION_SCHEMA = "g3.partition"
# 2: partition.json records the layouts its shards are written in (``layouts``)
PARTITION_VERSION = 3
PARTITION_READABLE = (1, 2, 3)


def shard_dir(part: Path, rank: int, layout: str | None = None) -> Path:
    """Rank ``rank``'s shard of the primary layout (``layout`` None), or of the further layout ``layout``."""
    root = Path(part) if layout is None else Path(part) / layout
    return root / f"part-{rank:05d}"


def partition_layouts(meta: dict) -> tuple[str, ...]:
    """The layouts of a partition.json as :func:`load_partition_meta` returns it."""
    return tuple(meta["layouts"])


# the layouts a version 1 partition (which did not record them) was written in, by its method
V1_LAYOUTS = {"p3": ("rows", "columns"), "feature": ("columns",)}


def partition_digest(part: str | Path) -> str:
    """sha256 of a partition's partition.json: plans record it, training refuses a plan whose partition changed."""
    import hashlib

    return "sha256:" + hashlib.sha256((Path(part) / "partition.json").read_bytes()).hexdigest()


def load_partition_meta(part: str | Path) -> dict:
    """partition.json, checked for schema and version, its store's ``path`` resolved (relative first); a version 1
    partition gains the ``layouts`` its method implies."""
    meta = load_artifact_json(
        part, "partition.json", PARTITION_SCHEMA, PARTITION_READABLE, "partition", "g3 partition"
    )
    if "layouts" not in meta:
        meta["layouts"] = list(V1_LAYOUTS.get(str(meta.get("method")), ("rows",)))
    if isinstance(meta.get("store"), dict):  # the store relative to the partition first (moved together)
        meta["store"] = {**meta["store"], "path": str(resolve_reference(meta["store"], part, "zarr.json"))}
    return meta


def load_assignment(part: str | Path, meta: dict | None = None) -> np.ndarray | None:
    """``assignment.npy`` (global node id -> owner), checked against partition.json's ``files`` (shape, dtype,
    sha256; a partition written before it listed the file: header only) and its owners in [0, K); None when the
    partition has none."""
    part = Path(part)
    meta = meta if meta is not None else load_partition_meta(part)
    if not (part / "assignment.npy").exists() and "assignment.npy" not in (meta.get("files") or {}):
        return None
    owner = np.asarray(load_checked(part, "assignment.npy", meta.get("files") or {}, mmap=True))
    k = int(meta["num_partitions"])
    if owner.ndim != 1 or (len(owner) and (int(owner.min()) < 0 or int(owner.max()) >= k)):
        raise G3InputError(f"file assignment.npy holds owners outside [0, {k})", path=part)
    return owner


def _shard_array(name: str) -> cached_property:
    """A shard's ``name.npy``, loaded (checked) on first use and kept."""
    return cached_property(lambda self: np.asarray(self.load(name)))


class Shard:
    """One worker's shard: owned nodes, local in-edge CSR (owned first, then remote), P2P raw material."""

    def __init__(
        self,
        path: Path,
        rank: int,
        num_parts: int,
        num_nodes: int | None = None,
        num_classes: int | None = None,
    ):
        self.path = Path(path)
        self.rank = rank
        self.num_parts = num_parts
        self.num_nodes = num_nodes  # the graph's, when known: global ids are checked against it
        self.num_classes = num_classes  # the graph's, when known: labels are checked against it
        if not self.path.is_dir():
            raise G3InputError("shard folder missing", path=self.path)

    @cached_property
    def info(self) -> dict:
        """shard.json, its seal and required keys checked (:func:`read_json_file`)."""
        return read_json_file(self.path / "shard.json")

    @cached_property
    def manifest(self) -> dict:
        """shard.json's ``files`` (shape, dtype and sha256 of every array)."""
        return dict(self.info["files"])

    def load(self, name: str, mmap: bool = True) -> np.ndarray:
        """``name.npy`` of the shard, checked against shard.json's shape and dtype, and its ids against what
        they index (a shard sealed by another tool or a buggy version is refused here, not in a worker)."""
        a = load_checked(self.path, f"{name}.npy", self.manifest, mmap)
        self._check_ids(name, a)
        return a

    def _check_ids(self, name: str, a: np.ndarray) -> None:
        low, noun = 0, "id"
        if name in ("owned", "remote"):
            limit, what = self.num_nodes, "the graph's node ids"
        elif name in ("send", "train", "valid", "test"):
            limit, what = self.num_owned, "the owned-local ids"
        elif name == "labels":  # a class id indexes the loss's logits; -1: unlabelled
            limit, what, low, noun = self.num_classes, "the classes (-1: unlabelled)", -1, "class"
        elif name in ("send_ptr", "remote_owner_ptr"):
            end = len(self.send) if name == "send_ptr" else self.num_remote
            if (
                a.shape != (self.num_parts + 1,)
                or (len(a) and (a[0] != 0 or a[-1] != end))
                or (np.diff(a) < 0).any()
            ):
                raise G3InputError(
                    f"file {name}.npy is not {self.num_parts + 1} pointers from 0 to {end} that "
                    "never decrease",
                    path=self.path,
                )
            return
        else:
            return
        if limit is None or not a.size:
            return
        lo, hi = int(a.min()), int(a.max())
        if lo < low or hi >= limit:
            bad = hi if hi >= limit else lo
            raise G3InputError(
                f"file {name}.npy holds {noun} {bad}, outside {what} [{low}, {limit})", path=self.path
            )

    @cached_property
    def owned(self) -> np.ndarray:
        return np.asarray(self.load("owned"))

    @property
    def num_owned(self) -> int:
        return len(self.owned)

    remote = _shard_array("remote")
    # the [K+1] pointers as int64 (stored int32 where they fit): read once
    remote_owner_ptr = cached_property(lambda self: np.asarray(self.load("remote_owner_ptr"), dtype=np.int64))
    send_ptr = cached_property(lambda self: np.asarray(self.load("send_ptr"), dtype=np.int64))
    send = _shard_array("send")
    indptr = _shard_array("indptr")

    @cached_property
    def indices(self) -> np.ndarray:
        """Local source ids of the owned nodes' in-arcs, checked to lie in [0, owned + remote)."""
        indices = np.asarray(self.load("indices"))
        check_csr(
            self.indptr, indices, self.num_owned, self.path, num_sources=self.num_owned + self.num_remote
        )
        return indices

    @property
    def num_remote(self) -> int:
        return len(self.remote)

    def send_to(self, peer: int) -> np.ndarray:
        """Owned-local ids this worker sends to ``peer`` (ascending global id)."""
        return self.send[self.send_ptr[peer] : self.send_ptr[peer + 1]]

    def recv_from(self, peer: int) -> np.ndarray:
        """Remote-section offsets (local id - num_owned) of the nodes owned by ``peer``."""
        return np.arange(self.remote_owner_ptr[peer], self.remote_owner_ptr[peer + 1], dtype=np.int64)


def open_shard(part: str | Path, rank: int, num_parts: int) -> Shard:
    store = load_partition_meta(part).get("store") or {}
    num_nodes, num_classes = store.get("num_nodes"), store.get("num_classes")
    return Shard(
        shard_dir(Path(part), rank),
        rank,
        num_parts,
        int(num_nodes) if num_nodes is not None else None,
        int(num_classes) if num_classes is not None else None,
    )
