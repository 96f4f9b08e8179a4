"""The neutral graph file the peers of `g3 bench` read: one uncompressed ``.npz`` any numpy opens.

Arrays (docs/ARTIFACTS.md, "Bench output"): ``indptr`` int64 [N+1] and ``indices`` [E] — the store's in-edge
CSR as stored (int32, or int64 for N ≥ 2³¹); ``features`` [N, F] in the store's dtype; ``labels`` int32 [N]
(-1 = unlabelled); ``train_idx``, ``valid_idx``, ``test_idx`` int64; ``num_classes`` int64 scalar; ``meta`` a
JSON string (store name, path and array checksums). Every array is the store's, bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from stages.common.atomic import atomic_file
from stages.common.errors import G3InputError
from stages.common.store import GraphStore

EXPORT_SCHEMA = "g3.bench-graph"
EXPORT_VERSION = 1


def export_graph(store_path: str | Path, out: str | Path) -> Path:
    """Write STORE's graph to ``out`` (.npz), unless an export of the same store (same checksums) is there."""
    store = GraphStore.open(store_path)
    out = Path(out)
    meta = {
        "schema": EXPORT_SCHEMA,
        "schema_version": EXPORT_VERSION,
        "name": store.name,
        "store": str(Path(store.path).resolve()),
        "num_nodes": store.num_nodes,
        "num_arcs": store.num_arcs,
        "checksums": store.meta.get("checksums", {}),
    }
    if out.is_file():
        try:
            old = read_graph(out)["meta"]
            if meta["checksums"] and all(old.get(k) == meta[k] for k in ("checksums", "num_arcs")):
                return out
        except (G3InputError, OSError, ValueError, KeyError):
            pass
    indptr, indices = store.load_csr()
    arrays = {
        "indptr": np.asarray(indptr, dtype=np.int64),
        "indices": np.asarray(indices),
        "features": store.read("features"),
        "labels": np.asarray(store.load_labels(), dtype=np.int32),
        "train_idx": np.asarray(store.split_index("train"), dtype=np.int64),
        "valid_idx": np.asarray(store.split_index("valid"), dtype=np.int64),
        "test_idx": np.asarray(store.split_index("test"), dtype=np.int64),
        "num_classes": np.asarray(store.num_classes, dtype=np.int64),
        "meta": np.asarray(json.dumps(meta)),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(out) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return out


def read_graph(path: str | Path) -> dict:
    """The arrays of a neutral graph file; ``meta`` decoded, ``num_classes`` an int."""
    path = Path(path)
    if not path.is_file():
        raise G3InputError("neutral graph file not found", path=path)
    with np.load(path, allow_pickle=False) as z:
        g = {k: z[k] for k in z.files}
    missing = {"indptr", "indices", "features", "labels", "train_idx", "num_classes", "meta"} - set(g)
    if missing:
        raise G3InputError(f"not a g3 bench graph file (missing {', '.join(sorted(missing))})", path=path)
    g["meta"] = json.loads(str(g["meta"]))
    g["num_classes"] = int(g["num_classes"])
    return g
