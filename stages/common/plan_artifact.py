"""Reading a plan (``g3.plan`` v4): plan.json plus one folder per worker (docs/ARTIFACTS.md, "Plan").

plan.json records the strategy that executes the plan and its options (``strategy: {name, options}``). Version
2 plans predate strategies: they are read as ``g3`` plans, their bin options becoming the strategy's options.

P2P tables (G3 §6.2) are message lists: ``msgs[m] = (step, peer, count)``, and the ``count`` node ids of message
``m`` are the next slice of ``nodes``. For a send table, ``step`` is the bin after which the message is sent;
for a receive table, it is the sender's step, and messages from one peer arrive in its step order. Node ids
are owned-local ids for what a worker sends (forward) or adds to (backward), and remote offsets (local id −
n_owned) for what it receives (forward) or returns (backward).

Ids and pointers are written int32 where they fit (version 6; int64 in older plans, and where they do not): the
node- and bin-sized arrays (priority list, row and bin pointers, tables) are read into int64 once, at load; the
arcs-sized ``src`` and ``indices`` are handed over as stored, memory-mapped when streamed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from stages.common.artifact_json import load_artifact_json, read_json_file, resolve_reference
from stages.common.errors import G3InputError
from stages.common.npy import load_checked, release_pages

_CHECK_ARCS = 1 << 24  # arcs of indices.npy checked at a time

PLAN_SCHEMA = "g3.plan"
# 2: backward messages are numbered by the last bin (in plan order) that reads each node (version 1 plans
# numbered them for a reversed backward order); 3: plan.json names the strategy and its options; 4: neutrontp
# plans carry the graph's CSR (``topology/``: its runtime no longer reads the store; a version 3 neutrontp plan is
# refused by its runtime, every other version 3 plan reads as before); 5: every strategy takes --device-memory and
# every worker records its ``residency`` (older plans: a GPU worker runs resident)
PLAN_VERSION = 6
PLAN_READABLE = (2, 3, 4, 5, 6)


@dataclass
class Table:
    """A P2P table: ``nodes`` int64 ``[sum(count)]``, ``msgs`` int64 ``[M, 3]`` of (step, peer, count) (int32 on disk
    where they fit: :meth:`WorkerPlan.table` widens them)."""

    nodes: np.ndarray
    msgs: np.ndarray

    @classmethod
    def empty(cls) -> Table:
        return cls(np.zeros(0, dtype=np.int64), np.zeros((0, 3), dtype=np.int64))

    @property
    def total(self) -> int:
        return int(self.msgs[:, 2].sum()) if len(self.msgs) else 0

    def per_peer_total(self, num_peers: int) -> np.ndarray:
        return np.bincount(self.msgs[:, 1], weights=self.msgs[:, 2], minlength=num_peers).astype(np.int64)

    def message_slices(self) -> list[tuple[int, int, slice]]:
        """(step, peer, slice into nodes) of every message, in order."""
        ends = np.cumsum(self.msgs[:, 2])
        starts = ends - self.msgs[:, 2]
        return [
            (int(s), int(p), slice(int(a), int(b)))
            for (s, p, _), a, b in zip(self.msgs, starts, ends, strict=True)
        ]


# plans of version 2, written before strategies existed, were all this strategy's
V2_STRATEGY = "g3"


def load_plan_meta(plan: str | Path) -> dict:
    """plan.json, checked for schema and version, its partition's ``path`` resolved (relative to the plan first);
    a version 2 plan gains its implied ``g3`` strategy block. Its strategy's options are checked by the registry
    (``stages.strategies.load_plan``), which knows the strategy."""
    meta = load_artifact_json(plan, "plan.json", PLAN_SCHEMA, PLAN_READABLE, "plan", "g3 plan")
    # the partition relative to the plan first: a plan moved or copied with its partition still finds it
    meta["partition"] = {
        **meta["partition"],
        "path": str(resolve_reference(meta["partition"], plan, "partition.json")),
    }
    where = Path(plan) / "plan.json"
    if "strategy" not in meta and meta.get("schema_version") != 2:
        raise G3InputError("has no strategy field: the plan does not say which strategy runs it", path=where)
    if "strategy" not in meta:  # version 2: every plan was a g3 plan
        cfg = meta.get("config", {})
        meta["strategy"] = {
            "name": V2_STRATEGY,
            "options": {"bin_size": cfg.get("bin_size"), "device_memory": cfg.get("device_memory")},
        }
    k, workers = meta.get("num_workers"), meta.get("workers")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise G3InputError(f"num_workers is {k!r}, not a worker count >= 1", path=where)
    if isinstance(workers, list) and len(workers) != k:
        raise G3InputError(f"lists {len(workers)} workers for num_workers {k}", path=where)
    return meta


def plan_strategy(meta: dict) -> str:
    """The strategy a plan.json (as :func:`load_plan_meta` returns it) is executed by."""
    return str(meta["strategy"]["name"])


def _npy(worker: Path, name: str, manifest: dict | None, mmap: bool = False) -> np.ndarray:
    """``worker/name.npy`` (``name`` may be ``layer-0/src``), checked against worker.json's ``files``; ``mmap``:
    memory-mapped, read from disk as it is used."""
    return np.asarray(load_checked(worker, f"{name}.npy", manifest, mmap=mmap))


def _ids(worker: Path, name: str, manifest: dict | None) -> np.ndarray:
    """``worker/name.npy`` of ids or pointers (int32 or int64 on disk) in memory as int64: one copy from the mapped
    file, no other array on the way."""
    return np.array(load_checked(worker, f"{name}.npy", manifest, mmap=True), dtype=np.int64)


def _check_pointers(a: np.ndarray, end: int, name: str, where: Path, length: int | None = None) -> None:
    """``a`` runs from 0 to ``end`` without decreasing (and has ``length`` entries when given)."""
    if (
        a.ndim != 1
        or len(a) < 1
        or (length is not None and len(a) != length)
        or int(a[0]) != 0
        or int(a[-1]) != end
        or (np.diff(a) < 0).any()
    ):
        raise G3InputError(
            f"file {name}.npy is not pointers from 0 to {end} that never decrease"
            + (f" ({length} of them)" if length is not None else ""),
            path=where,
        )


class LayerPlan:
    """Bins and blocks of one layer (arrays over the worker's priority list), checked: bins cover the priority
    list in order, every bin's sources are a slice of ``src``, and every arc's source position lies in its
    bin's source list (``row_ptr``: the worker's in-edge row pointers in priority order, when given).
    ``mmap``: the arcs-sized arrays (``src``, ``indices``) memory-mapped, each bin's slice read as it is used."""

    def __init__(
        self,
        worker: Path,
        layer: int,
        manifest: dict | None = None,
        row_ptr: np.ndarray | None = None,
        mmap: bool = False,
        num_rows: int | None = None,
    ):
        self.path = worker / f"layer-{layer}"
        self.num_rows = num_rows  # the worker's local rows (owned + remote), which ``src`` indexes
        self.bin_ptr, self.src_ptr = (
            _ids(worker, f"layer-{layer}/{n}", manifest) for n in ("bin_ptr", "src_ptr")
        )
        self.src, self.indices = (
            _npy(worker, f"layer-{layer}/{n}", manifest, mmap) for n in ("src", "indices")
        )
        if row_ptr is not None:
            self._check(row_ptr)

    def _check(self, row_ptr: np.ndarray) -> None:
        where = self.path
        _check_pointers(self.bin_ptr, len(row_ptr) - 1, "bin_ptr", where)
        _check_pointers(self.src_ptr, len(self.src), "src_ptr", where, length=len(self.bin_ptr))
        if len(self.src) and int(self.src.min()) < 0:
            raise G3InputError("file src.npy holds a negative local id", path=where)
        if self.num_rows is not None and len(self.src) and int(self.src.max()) >= self.num_rows:
            raise G3InputError(
                f"file src.npy holds local id {int(self.src.max())}, outside the worker's {self.num_rows} rows "
                "(owned + remote)",
                path=where,
            )
        arcs = np.diff(row_ptr[self.bin_ptr])  # in-arcs of each bin
        if int(arcs.sum()) != len(self.indices):
            raise G3InputError(
                f"file indices.npy holds {len(self.indices)} arcs, the bins {int(arcs.sum())}", path=where
            )
        busy = np.flatnonzero(arcs > 0)
        starts = row_ptr[self.bin_ptr[:-1]]
        sources = np.diff(self.src_ptr)
        # each bin's largest source position against its source count, bins taken in runs of about
        # _CHECK_ARCS arcs whose pages are let go after: no arcs-sized array, in memory or mapped
        cuts = np.searchsorted(starts[busy], np.arange(0, len(self.indices) + _CHECK_ARCS, _CHECK_ARCS))
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            if lo == hi:
                continue
            bins = busy[lo:hi]
            a, b = int(starts[bins[0]]), int(row_ptr[self.bin_ptr[bins[-1] + 1]])
            part = self.indices[a:b]
            largest = np.maximum.reduceat(part, starts[bins] - a)
            bad = int(part.min()) < 0 or (largest >= sources[bins]).any()
            release_pages(self.indices)
            if bad:
                raise G3InputError(
                    "file indices.npy holds a source position outside its bin's sources", path=where
                )

    @property
    def num_bins(self) -> int:
        return len(self.bin_ptr) - 1


def arc_sources(row_ptr: np.ndarray, lp: LayerPlan) -> np.ndarray:
    """Local source id of every arc, rows in priority order, from one layer's bins (which store each arc's
    position in its bin's sources instead)."""
    out = np.empty(int(row_ptr[-1]), dtype=np.int64)
    for b in range(lp.num_bins):
        r0, r1 = int(lp.bin_ptr[b]), int(lp.bin_ptr[b + 1])
        e0, e1 = int(row_ptr[r0]), int(row_ptr[r1])
        s0 = int(lp.src_ptr[b])
        out[e0:e1] = lp.src[s0 + np.asarray(lp.indices[e0:e1], dtype=np.int64)]
    return out


class WorkerPlan:
    """One worker's plan folder: its worker.json, arrays and P2P tables (which ones depends on the strategy)."""

    def __init__(self, plan: str | Path, rank: int):
        self.root = Path(plan)
        self.rank = rank
        self.path = self.root / f"worker-{rank:05d}"
        if not self.path.is_dir():
            raise G3InputError(f"plan has no folder for worker {rank}", path=self.root)
        self.meta = read_json_file(self.path / "worker.json")

    @cached_property
    def plan_meta(self) -> dict:
        """plan.json of the whole plan (widths and layer shapes)."""
        return load_plan_meta(self.root)

    def array(self, name: str) -> np.ndarray:
        """``name.npy`` of this worker's folder, checked against worker.json's ``files``."""
        return _npy(self.path, name, self.meta.get("files"))

    @cached_property
    def priority(self) -> np.ndarray:
        """Owned-local ids in priority order: each owned node once."""
        p = _ids(self.path, "priority", self.meta.get("files"))
        if len(p) and (int(p.min()) < 0 or int(p.max()) >= len(p)):
            raise G3InputError(
                f"file priority.npy holds an id outside the worker's {len(p)} owned nodes", path=self.path
            )
        return p

    @cached_property
    def row_ptr(self) -> np.ndarray:
        row_ptr = _ids(self.path, "row_ptr", self.meta.get("files"))
        _check_pointers(
            row_ptr,
            int(row_ptr[-1]) if len(row_ptr) else 0,
            "row_ptr",
            self.path,
            length=len(self.priority) + 1,
        )
        return row_ptr

    def layer(self, li: int, mmap: bool = False) -> LayerPlan:
        rows = self.row_ptr if (self.path / "row_ptr.npy").is_file() else None
        owned, remote = self.meta.get("num_owned"), self.meta.get("num_remote")
        local = int(owned) + int(remote) if owned is not None and remote is not None else None
        return LayerPlan(self.path, li, self.meta.get("files"), rows, mmap, local)

    def table(self, name: str) -> Table:
        """A P2P table by name (``features_send``, ``fwd_recv_0``, ``bwd_send_1`` …); empty when absent."""
        if not (self.path / f"{name}_nodes.npy").is_file():
            return Table.empty()
        files = self.meta.get("files")
        table = Table(
            _ids(self.path, f"{name}_nodes", files), _ids(self.path, f"{name}_msgs", files).reshape(-1, 3)
        )
        k = int(self.plan_meta["num_workers"])
        if len(table.msgs) and (
            int(table.msgs[:, 1].min()) < 0
            or int(table.msgs[:, 1].max()) >= k
            or int(table.msgs[:, 2].min()) < 0
            or int(table.msgs[:, 0].min()) < 0
        ):
            raise G3InputError(
                f"table {name}: a message names a peer outside [0, {k}) or a negative step or count",
                path=self.path,
            )
        if table.total != len(table.nodes):
            raise G3InputError(
                f"table {name}: its messages count {table.total} nodes, the file holds {len(table.nodes)}",
                path=self.path,
            )
        if len(table.nodes) and int(table.nodes.min()) < 0:
            raise G3InputError(f"table {name}: a negative node id", path=self.path)
        return table
