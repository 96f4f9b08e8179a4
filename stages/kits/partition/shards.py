"""Per-worker shard folders: plain ``.npy`` files a worker on another machine can load with nothing else.

Shards of the ``rows`` layout (node partitions: ``g3``, ``metis``, ``random``, ``chunk``, ...) hold the owned
nodes, the remote nodes grouped by owner, the in-edge CSR of the owned nodes over local ids, degrees, features,
labels, splits and the send lists of the peer-to-peer exchange. Shards of the ``columns`` layout (``feature``)
hold a column slice of every node's features and the whole graph's degrees (a strategy that needs the whole
topology has its planner put it in the plan). Each folder has a ``shard.json`` listing its files with shapes and dtypes.
Everything is built with vectorised numpy or numba; features are streamed from the store in row blocks. Ids,
pointers and degrees are written int32 where their values fit (:func:`stages.common.npy.narrow`), int64 otherwise.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numba
import numpy as np

from stages.common.atomic import write_json_atomic
from stages.common.errors import G3InputError
from stages.common.npy import file_sha256, id_dtype, narrow, release_pages
from stages.common.store import SPLITS, GraphStore
from stages.kits.partition.feature import feature_columns

SHARD_SCHEMA = "g3.shard"
# 2: feature shards carry the whole graph's in_degree/out_degree (neutrontp's GCN normalisation); node shards
# are unchanged from version 1; 3: ids, pointers and degrees int32 where they fit
SHARD_VERSION = 3
FEATURE_BLOCK_ROWS = 1 << 16
LOCAL_IDS = "local id < num_owned -> owned[local]; otherwise remote[local - num_owned]"
CSR_ORDER = "row r lists the sources of arcs into owned[r], as local ids sorted ascending"


def shard_name(worker: int) -> str:
    return f"part-{worker:05d}"


def store_reference(store: GraphStore) -> dict:
    """What later stages need to find the store and detect that it changed."""
    checksums = store.meta.get("checksums", {})
    return {
        **store.summary(),
        "feature_dtype": str(store.feature_dtype),
        "checksums": {k: checksums.get(k) for k in ("indptr", "indices")},
    }


class ShardFolder:
    """One worker's folder: saves arrays and remembers their shapes for ``shard.json``."""

    def __init__(self, root: Path, worker: int):
        self.path = root / shard_name(worker)
        self.path.mkdir()
        self.worker = worker
        self.files: dict[str, dict] = {}

    def save(self, name: str, array: np.ndarray) -> None:
        np.save(self.path / f"{name}.npy", array)
        self.note(name, array.shape, array.dtype)

    def open_memmap(self, name: str, shape: tuple[int, ...], dtype) -> np.memmap:
        """A zero-filled ``.npy`` file to fill block by block."""
        self.note(name, shape, np.dtype(dtype))
        return np.lib.format.open_memmap(self.path / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)

    def note(self, name: str, shape, dtype) -> None:
        self.files[f"{name}.npy"] = {"shape": [int(s) for s in shape], "dtype": str(np.dtype(dtype))}

    def write_manifest(self, info: dict) -> None:
        """shard.json, every file with its shape and dtype (:func:`seal_shards` adds their sha256 once written)."""
        manifest = {
            "schema": SHARD_SCHEMA,
            "schema_version": SHARD_VERSION,
            "worker": self.worker,
            **info,
            "files": self.files,
        }
        write_json_atomic(self.path / "shard.json", manifest)


def seal_shards(root: Path) -> None:
    """Once every file of every shard below ``root`` is written: each shard.json gains its files' sha256 (the
    readers verify them) and its seal."""
    for manifest_file in sorted(Path(root).rglob("shard.json")):
        manifest = json.loads(manifest_file.read_text())
        manifest["files"] = {
            name: {**entry, "sha256": file_sha256(manifest_file.parent / name)}
            for name, entry in manifest["files"].items()
        }
        write_json_atomic(manifest_file, manifest, seal=True)


@numba.njit(cache=True, parallel=True)
def _local_csr(indptr, indices, owned, lookup, out_ptr, out_idx):
    """In-edge rows of the owned nodes with sources mapped to local ids and sorted ascending."""
    for r in numba.prange(len(owned)):
        v = owned[r]
        start = out_ptr[r]
        row = out_idx[start : out_ptr[r + 1]]
        for j in range(indptr[v + 1] - indptr[v]):
            row[j] = lookup[indices[indptr[v] + j]]
        row.sort()


def local_csr(indptr, indices, owned, lookup) -> tuple[np.ndarray, np.ndarray]:
    counts = indptr[1:][owned] - indptr[owned]  # owned + 1 could pass int32 for the last id
    out_ptr = np.zeros(len(owned) + 1, dtype=np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    out_idx = np.empty(int(out_ptr[-1]), dtype=np.int32)
    _local_csr(indptr, indices, owned, lookup, out_ptr, out_idx)
    return out_ptr, out_idx


def grouped_remote(mark_row: np.ndarray, part: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Remote nodes of one worker grouped by owner (ascending), ids ascending within a group (in the ids' type for
    ``len(part)`` nodes); and the group ptr."""
    ids = np.flatnonzero(mark_row)
    remote = ids[np.argsort(part[ids], kind="stable")].astype(id_dtype(len(part) - 1))
    ptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(np.bincount(part[remote], minlength=k), out=ptr[1:])
    return remote, ptr


class NodeShardBuilder:
    """Writes the shards of a node partition (every method except ``feature``)."""

    def __init__(self, root: Path, store: GraphStore, graphs, part: np.ndarray, k: int, mark: np.ndarray):
        self.root, self.store, self.graphs, self.part, self.k, self.mark = root, store, graphs, part, k, mark
        n = graphs.num_nodes
        # owned lists, ascending ids, back to back (in the type the shards hold them in)
        self.order = np.argsort(part, kind="stable").astype(id_dtype(n - 1))
        self.starts = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(np.bincount(part, minlength=k), out=self.starts[1:])
        self.position = np.empty(n, dtype=np.int64)  # index of a node in its owner's owned list
        self.position[self.order] = np.arange(n) - self.starts[part[self.order]]
        self.in_degree, self.out_degree = (narrow(d) for d in store.load_degrees())
        self.labels = np.asarray(store.load_labels(), dtype=np.int32)
        self.splits = {s: store.split_index(s) for s in SPLITS}
        self.lookup = np.full(n, -1, dtype=np.int32)  # global -> local ids of the worker being written
        self.folders: list[ShardFolder] = []

    def owned(self, i: int) -> np.ndarray:
        return self.order[self.starts[i] : self.starts[i + 1]]

    def write_worker(self, i: int, info: dict) -> ShardFolder:
        folder = ShardFolder(self.root, i)
        owned = self.owned(i)
        remote, remote_ptr = grouped_remote(self.mark[i], self.part, self.k)
        local_nodes = np.concatenate([owned, remote])
        self.lookup[local_nodes] = np.arange(len(local_nodes), dtype=np.int32)
        indptr, indices = local_csr(self.graphs.indptr, self.graphs.indices, owned, self.lookup)
        folder.save("owned", owned)
        folder.save("remote", remote)
        folder.save("remote_owner_ptr", narrow(remote_ptr))
        folder.save("indptr", narrow(indptr))
        folder.save("indices", indices)
        folder.save("in_degree", self.in_degree[local_nodes])
        folder.save("out_degree", self.out_degree[local_nodes])
        folder.save("labels", self.labels[owned])
        for split, ids in self.splits.items():
            mine = ids[self.part[ids] == i]
            folder.save(split, narrow(self.lookup[mine], len(owned) - 1))
        send_ptr, send = self.send_lists(owned)
        folder.save("send_ptr", narrow(send_ptr))
        folder.save("send", narrow(send, len(owned) - 1))
        self.lookup[local_nodes] = -1
        folder.note("features", (len(owned), self.store.feat_dim), self.store.feature_dtype)  # filled later
        folder.write_manifest(
            {
                **info,
                "num_owned": len(owned),
                "num_remote": len(remote),
                "local_ids": LOCAL_IDS,
                "csr_order": CSR_ORDER,
            }
        )
        self.folders.append(folder)
        return folder

    def send_lists(self, owned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each peer q, the local owned ids q receives from me, ascending by global id (= q's remote group)."""
        lists = [np.flatnonzero(self.mark[q][owned]) for q in range(self.k)]
        ptr = np.zeros(self.k + 1, dtype=np.int64)
        np.cumsum([len(x) for x in lists], out=ptr[1:])
        return ptr, np.concatenate(lists).astype(np.int64)

    def write_features(self, on_rows=None) -> None:
        """Stream the store's features in row blocks into every worker's ``features.npy`` (owned rows)."""
        dtype = self.store.feature_dtype
        maps = [
            f.open_memmap("features", (len(self.owned(f.worker)), self.store.feat_dim), dtype)
            for f in self.folders
        ]
        for start, block in feature_blocks(self.store):
            stop = start + len(block)
            owners = self.part[start:stop]
            for i, mm in enumerate(maps):
                rows = np.flatnonzero(owners == i)
                if len(rows):
                    mm[self.position[start + rows]] = block[rows]
            if on_rows is not None:
                on_rows(len(block))
            # written pages stay in the page cache (the kernel writes them back) but leave this process: its
            # resident set would otherwise grow by every worker's features file
            for mm in maps:
                release_pages(mm)
        for mm in maps:
            mm.flush()


def write_row_shards(
    root: Path, store: GraphStore, graphs, part: np.ndarray, k: int, info: dict, marks, progress
) -> None:
    """The ``rows`` layout: one node shard per worker (``marks``: the remote marks, computed when None)."""
    from stages.kits.partition.metrics import remote_marks

    if marks is None:
        marks = remote_marks(graphs.indptr, graphs.indices, part, k)
    rows = progress.add_task("copying features", total=store.num_nodes)
    builder = NodeShardBuilder(root, store, graphs, part, k, marks)
    task = progress.add_task("writing shards", total=k)
    for i in range(k):
        builder.write_worker(i, info)
        progress.update(task, advance=1)
    builder.write_features(on_rows=lambda r: progress.update(rows, advance=r))


def write_column_shards(
    root: Path, store: GraphStore, graphs, part: np.ndarray, k: int, info: dict, marks, progress
) -> None:
    """The ``columns`` layout: one column slice of every node's features per worker, rows owned by contiguous
    id ranges."""
    from stages.kits.partition.baselines import chunk_bounds

    rows = progress.add_task("copying features", total=store.num_nodes)
    write_feature_shards(
        root,
        store,
        k,
        chunk_bounds(store.num_nodes, k),
        info,
        on_rows=lambda r: progress.update(rows, advance=r),
    )


def feature_blocks(store: GraphStore):
    """(first row, rows) blocks of the store's features, a whole number of zarr chunks at a time; the stream is
    checked against the recorded checksum at its end (a mismatch is bad input, raised before the shards are
    published)."""
    h = hashlib.sha256()
    for start, block in store.blocks("features", FEATURE_BLOCK_ROWS):
        h.update(np.ascontiguousarray(block).tobytes())
        yield start, block
    expected = store.meta.get("checksums", {}).get("features")
    if expected and "sha256:" + h.hexdigest() != expected:
        raise G3InputError(
            "array features does not match its recorded checksum (the store was altered or "
            "damaged; re-run `g3 ingest`)",
            path=store.path,
        )


def write_feature_shards(
    root: Path, store: GraphStore, k: int, owned_bounds: np.ndarray, info: dict, on_rows=None
) -> list[ShardFolder]:
    """Shards of the ``feature`` split: owned id range, labels/splits of it, a padded column slice of all nodes
    and the whole graph's degrees."""
    n, f = store.num_nodes, store.feat_dim
    cols = feature_columns(f, k)
    labels = np.asarray(store.load_labels(), dtype=np.int32)
    in_degree, out_degree = (narrow(d) for d in store.load_degrees())
    splits = {s: store.split_index(s) for s in SPLITS}
    folders, maps = [], []
    for w in range(k):
        folder = ShardFolder(root, w)
        lo, hi = int(owned_bounds[w]), int(owned_bounds[w + 1])
        folder.save("owned", np.arange(lo, hi, dtype=id_dtype(n - 1)))
        folder.save("labels", labels[lo:hi])
        folder.save("in_degree", np.asarray(in_degree))
        folder.save("out_degree", np.asarray(out_degree))
        for split, ids in splits.items():
            folder.save(split, narrow(ids[(ids >= lo) & (ids < hi)] - lo, hi - lo - 1))
        maps.append(folder.open_memmap("features", (n, cols[w]["width"]), store.feature_dtype))
        folder.write_manifest(
            {
                **info,
                "num_owned": hi - lo,
                "feature_columns": cols[w],
                "topology": "whole graph: not in the shard (a planner that needs it writes it into the plan)",
                "local_ids": "owned[local] = owned range start + local",
            }
        )
        folders.append(folder)
    for start, block in feature_blocks(store):
        for w, mm in enumerate(maps):
            c = cols[w]
            mm[start : start + len(block), : c["stop"] - c["start"]] = block[:, c["start"] : c["stop"]]
            release_pages(mm)  # as NodeShardBuilder.write_features: written pages leave the process
        if on_rows is not None:
            on_rows(len(block))
    for mm in maps:
        mm.flush()
    return folders


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
