"""Builds a g3 store from any :class:`GraphSource`: the shared half of every ingest.

Steps:

1. **Read and spill** — stream the source's arc chunks, check ids, optionally add reverse arcs, drop
   self-loops, count in-degrees, and keep the arcs in memory or spill them to run files on disk once the
   ``memory_limit`` budget is reached.
2. **Bucket** — when spilled, cut the destination-id range into buckets whose arcs fit the budget (from the
   in-degree counts), and scatter every run file into per-bucket files.
3. **Sort** — per bucket, sort by (destination, source), drop duplicates, and append to the in-edge CSR.

This is an external sort: peak memory is bounded by ``memory_limit`` plus O(N) counters, so graphs larger
than RAM can be ingested. Features, labels and splits are then written (random ones when the source has
none), with checks, and the metadata last; the caller renames the finished directory into place.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stages.common.atomic import atomic_dir, check_free_space
from stages.common.cost import check_memory_floor, disk_bytes, stage_cost
from stages.common.errors import G3InputError
from stages.common.progress import make_progress
from stages.common.settings import setting
from stages.common.store import SPLITS, StoreWriter, index_dtype
from stages.common.units import parse_size
from stages.common.version import VERSION
from stages.ingest.source import NODE_BYTES, GraphSource

BYTES_PER_ARC_SORT = 40  # key (8) + sort scratch (8) + src/dst int64 copies (16) + slack
DEFAULT_MEMORY_LIMIT = 4 << 30
RANDOM_FEAT_DIM = 128
RANDOM_CLASSES = 100
MIN_MEMORY_LIMIT = 64 << 20


def parse_ratios(text: str) -> tuple[float, float, float]:
    """``0.8,0.1,0.1`` → the train, valid and test ratios."""
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"expected three comma-separated ratios like 0.8,0.1,0.1, got {text!r}") from None
    if len(parts) != 3:
        raise ValueError(f"expected three ratios, got {len(parts)}")
    return parts


def parse_memory_limit(text: str) -> int | None:
    """A size (``4GiB``) of at least 64 MiB, or ``auto`` (None: :func:`auto_memory_limit`)."""
    if text == "auto":
        return None
    size = parse_size(text)
    if size < MIN_MEMORY_LIMIT:
        raise ValueError("must be at least 64MiB")
    return size


def auto_memory_limit() -> int:
    """The CSR build's default budget: 4 GiB, or half of the memory available to this process (MemAvailable or
    its memory cgroup's room) where that is less, at least 64 MiB."""
    from stages.common.cost import available_memory

    room, _ = available_memory()
    return (
        DEFAULT_MEMORY_LIMIT if room is None else max(MIN_MEMORY_LIMIT, min(DEFAULT_MEMORY_LIMIT, room // 2))
    )


@dataclass
class IngestOptions:
    """Options shared by every source format (see ``g3 ingest --help``)."""

    symmetrize: bool | None = setting(
        None,
        "Add the reverse of every arc. Default: on for sources that store undirected edges once (OGB, "
        "--undirected edge lists, synthetic), off otherwise (WebGraph).",
    )
    keep_duplicates: bool = setting(False, "Keep repeated arcs (removed and counted by default).")
    keep_self_loops: bool = setting(False, "Keep self-loops (removed and counted by default).")
    feature_dtype: str = setting("float32", "Storage type of node features.", choices=("float32", "float16"))
    feat_dim: int | None = setting(
        None,
        f"Width of the seeded random features given to graphs without features [default: {RANDOM_FEAT_DIM}]; "
        "for synthetic graphs, the feature width.",
    )
    num_classes: int | None = setting(
        None,
        f"Classes of the random labels given to graphs without labels [default: {RANDOM_CLASSES}]; for "
        "synthetic graphs, the number of classes.",
    )
    labeled_ratio: float = setting(1.0, "Share of nodes that get a random label when the source has none.")
    split: tuple[float, float, float] = setting(
        (0.8, 0.1, 0.1),
        "train,valid,test ratios of labelled nodes when the source has no split.",
        parse=parse_ratios,
        cli_default="0.8,0.1,0.1",
    )
    seed: int = setting(0, "Seed for random features, labels, splits and the synthetic generator.")
    memory_limit: int | None = setting(
        None,
        "Working-memory budget of the CSR build; beyond it arcs are sorted externally on disk. 'auto': 4GiB, "
        "or half of what this machine (or the memory cgroup the command runs in) has available where that is "
        "less.",
        parse=parse_memory_limit,
        cli_default="auto",
    )

    @property
    def memory_budget(self) -> int:
        """``memory_limit``, or where it is auto (None) :func:`auto_memory_limit`."""
        return auto_memory_limit() if self.memory_limit is None else self.memory_limit

    @property
    def random_feat_dim(self) -> int:
        """The width of the random features of a source without any."""
        return RANDOM_FEAT_DIM if self.feat_dim is None else self.feat_dim

    @property
    def random_classes(self) -> int:
        """The classes of the random labels of a source without any."""
        return RANDOM_CLASSES if self.num_classes is None else self.num_classes


@dataclass
class IngestReport:
    path: str
    num_nodes: int
    num_arcs: int
    arcs_read: int
    reverse_arcs_added: int
    self_loops_removed: int
    duplicates_removed: int
    spilled: bool
    buckets: int
    seconds: dict[str, float] = field(default_factory=dict)


def build_store(
    source: GraphSource, out: str | os.PathLike, options: IngestOptions, force: bool = False
) -> IngestReport:
    """Write ``source`` as a g3 store at ``out`` (atomically; refuses an existing ``out`` unless ``force``)."""
    out = Path(out)
    check_options(options)
    if source.num_nodes <= 0:
        raise G3InputError("graph has no nodes", path=source.path)
    symmetrize = source.undirected_once if options.symmetrize is None else options.symmetrize
    check_free_space(out, disk_estimate(source, options, symmetrize), "this ingest")
    check_memory_floor(
        {"--memory-limit": options.memory_budget, "row pointers and degrees": source.num_nodes * NODE_BYTES},
        "this ingest",
        "give a smaller --memory-limit, or ingest on a machine with more memory",
    )
    t0 = time.perf_counter()
    with atomic_dir(out, force=force, kind="store", inputs=(source.path,)) as tmp:
        writer = StoreWriter(tmp)
        spill_dir = Path(tempfile.mkdtemp(prefix="spill-", dir=tmp.parent))
        try:
            csr, degree, scratch_peak = _build_csr(source, writer, options, symmetrize, spill_dir)
        finally:
            shutil.rmtree(spill_dir, ignore_errors=True)
        t_csr = time.perf_counter()
        feat_info = _write_features(source, writer, options)
        t_feat = time.perf_counter()
        label_info = _write_labels_and_splits(source, writer, options)
        meta = {
            "name": source.name,
            "num_nodes": source.num_nodes,
            "num_arcs": csr["num_arcs"],
            "directed": not (symmetrize or source.undirected_once),
            "symmetrized": bool(symmetrize),
            "index_dtype": str(index_dtype(source.num_nodes)),
            "source": {"path": str(source.path), **source.info},
            "options": {
                **{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(options).items()},
                "memory_limit": options.memory_budget,  # auto resolved: the budget the build had
            },
            "removed": {"self_loops": csr["self_loops_removed"], "duplicates": csr["duplicates_removed"]},
            "arcs_read": csr["arcs_read"],
            "degree": degree,
            **feat_info,
            **label_info,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "g3_version": VERSION,
            "cost": stage_cost(t0, out=tmp, scratch_peak_bytes=scratch_peak),
        }
        writer.finish(meta)
        t_end = time.perf_counter()
    return IngestReport(
        path=str(out),
        num_nodes=source.num_nodes,
        **csr,
        seconds={
            "csr": t_csr - t0,
            "features": t_feat - t_csr,
            "labels": t_end - t_feat,
            "total": t_end - t0,
        },
    )


# the share of the store's arrays zstd leaves, a little under what it leaves of synthetic:small's (the estimate is
# a lower bound); a source's own features may compress far better, so they count 0
RANDOM_FEATURES_KEPT = 0.85
INDICES_KEPT = 0.5


def disk_estimate(source: GraphSource, o: IngestOptions, symmetrize: bool) -> dict[str, int]:
    """What ingest writes beside OUT at least, in bytes, before it reads anything: the spilled arcs (run files,
    raw, when the arcs do not fit ``--memory-limit``), the store's indices and the features it generates. An
    underestimate by design (duplicates removed, compression), so that a refusal is never wrong."""
    arcs = source.expected_arcs if source.expected_arcs is not None else (source.arcs_hint or 0)
    if symmetrize and source.undirected_once:
        arcs *= 2  # every edge also as its reverse arc
    id_bytes = np.dtype(index_dtype(source.num_nodes)).itemsize
    parts = {"indices": int(arcs * id_bytes * INDICES_KEPT)}
    if arcs * BYTES_PER_ARC_SORT > o.memory_budget:
        parts["spilled arcs"] = arcs * 2 * id_bytes
    # features g3 draws at random hardly compress
    if source.feature_blocks is None or source.info.get("format") == "synthetic":
        width = o.random_feat_dim if source.feature_blocks is None else source.feat_dim
        parts["features"] = int(
            source.num_nodes * width * np.dtype(o.feature_dtype).itemsize * RANDOM_FEATURES_KEPT
        )
    return parts


def check_options(o: IngestOptions) -> None:
    """Refuse nonsense options before a source is opened (one line each)."""
    if o.feature_dtype not in ("float32", "float16"):
        raise G3InputError(f"--feature-dtype must be float32 or float16, not {o.feature_dtype!r}")
    if (
        len(o.split) != 3
        or not all(math.isfinite(x) and x >= 0 for x in o.split)
        or abs(sum(o.split) - 1.0) > 1e-6
    ):
        raise G3InputError(
            f"--split needs three non-negative ratios summing to 1, got {','.join(map(str, o.split))}"
        )
    if not 0.0 < o.labeled_ratio <= 1.0:
        raise G3InputError(f"--labeled-ratio must be in (0, 1], got {o.labeled_ratio}")
    if o.random_feat_dim < 1 or o.random_classes < 2:
        raise G3InputError("--feat-dim must be >= 1 and --num-classes >= 2")
    if o.memory_limit is not None and o.memory_limit <= 0:
        raise G3InputError("--memory-limit must be positive")
    if not 0 <= o.seed < 2**63:
        raise G3InputError(f"--seed must be an integer in [0, 2^63), got {o.seed}")


# ------------------------------------------------------------------------------------------------------------
# CSR: read + spill, bucket, sort
# ------------------------------------------------------------------------------------------------------------


class _Runs:
    """Arc runs kept in memory until the budget is reached, then spilled to ``.npy`` files (dst, src pairs)."""

    def __init__(self, spill_dir: Path, budget_arcs: int, id_dtype: np.dtype):
        self.spill_dir = spill_dir
        self.budget_arcs = budget_arcs
        self.id_dtype = id_dtype
        self.pending: list[np.ndarray] = []  # each [2, n] (dst, src)
        self.pending_arcs = 0
        self.files: list[Path] = []

    def add(self, dst: np.ndarray, src: np.ndarray) -> None:
        if len(dst) == 0:
            return
        self.pending.append(np.stack([dst.astype(self.id_dtype), src.astype(self.id_dtype)]))
        self.pending_arcs += len(dst)
        if self.pending_arcs > self.budget_arcs // 2:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        path = self.spill_dir / f"run-{len(self.files):05d}.npy"
        np.save(path, np.concatenate(self.pending, axis=1))
        self.files.append(path)
        self.pending, self.pending_arcs = [], 0

    @property
    def spilled(self) -> bool:
        return bool(self.files)

    def in_memory(self) -> np.ndarray:
        if not self.pending:
            return np.zeros((2, 0), dtype=self.id_dtype)
        arr = np.concatenate(self.pending, axis=1) if len(self.pending) > 1 else self.pending[0]
        self.pending = []
        return arr


def _build_csr(
    source: GraphSource, writer: StoreWriter, o: IngestOptions, symmetrize: bool, spill_dir: Path
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The in-edge CSR of ``source``, written: (the counts of :class:`IngestReport`, degree statistics, the most
    bytes spilled at once)."""
    n = source.num_nodes
    id_dtype = index_dtype(n)
    budget_arcs = max(256, o.memory_budget // BYTES_PER_ARC_SORT)
    runs = _Runs(spill_dir, budget_arcs, id_dtype)
    in_count = np.zeros(n, dtype=np.int64)

    with make_progress() as progress:
        read_counts = _read_and_spill(source, o, symmetrize, runs, in_count, progress)
        # Buckets of consecutive destinations whose arcs fit the sort budget.
        chunks: list[Path] | None = None  # the buckets' files, when spilled
        bounds, scratch_peak = np.array([0, n], dtype=np.int64), 0
        if runs.spilled:
            runs.flush()
            bounds = _bucket_bounds(in_count, budget_arcs)
            chunks = _scatter_to_buckets(runs.files, bounds, spill_dir, id_dtype, progress)
            scratch_peak = disk_bytes(spill_dir)  # the runs and their buckets: the most spilled at once
        indptr, out_count, written, dups = _sort_buckets(runs, chunks, bounds, in_count, writer, o, progress)

    writer.write_array("indptr", indptr)
    in_degree = np.diff(indptr)
    writer.write_array("in_degree", in_degree.astype(np.int32))
    writer.write_array("out_degree", out_count.astype(np.int32))
    counts = {
        "num_arcs": written,
        **read_counts,
        "duplicates_removed": dups,
        "spilled": runs.spilled,
        "buckets": len(bounds) - 1,
    }
    return counts, {"in": _stats(in_degree), "out": _stats(out_count)}, scratch_peak


def _read_and_spill(
    source: GraphSource, o: IngestOptions, symmetrize: bool, runs: _Runs, in_count: np.ndarray, progress
) -> dict[str, int]:
    """Stream the source's arcs into ``runs`` and ``in_count``; return the read counts of :class:`IngestReport`."""
    n = source.num_nodes
    arcs_read = self_loops = reverse_added = 0
    task = progress.add_task("reading arcs", total=source.expected_arcs)
    for src, dst in source.arcs():
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if src.shape != dst.shape:
            raise G3InputError("source and destination arrays differ in length", path=source.path)
        arcs_read += len(src)
        progress.update(task, advance=len(src))
        if len(src):
            lo = min(int(src.min()), int(dst.min()))
            hi = max(int(src.max()), int(dst.max()))
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                raise G3InputError(f"node id {bad} out of range [0, {n})", path=source.path)
        if not o.keep_self_loops:
            keep = src != dst
            self_loops += len(src) - int(keep.sum())
            src, dst = src[keep], dst[keep]
        if symmetrize:
            reverse_added += len(src)
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        in_count += np.bincount(dst, minlength=n)
        runs.add(dst, src)
    progress.update(task, completed=arcs_read, total=arcs_read)
    if source.expected_arcs is not None and arcs_read != source.expected_arcs:
        raise G3InputError(
            f"the source declares {source.expected_arcs} arcs but {arcs_read} were read", path=source.path
        )
    return {"arcs_read": arcs_read, "reverse_arcs_added": reverse_added, "self_loops_removed": self_loops}


def _sort_buckets(
    runs: _Runs, chunks: list[Path] | None, bounds: np.ndarray, in_count: np.ndarray, writer, o, progress
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Sort each bucket's arcs into the indices: (row pointers, out-degrees, arcs written, duplicates dropped)."""
    n, nb, budget_arcs = len(in_count), len(bounds) - 1, runs.budget_arcs
    indices_w = writer.create("indices", (0,), runs.id_dtype)  # grown as buckets are sorted
    out_count, indptr = np.zeros(n, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)
    part_arcs = 0
    total_pre = int(in_count.sum())
    sort_task = progress.add_task("sorting arcs", total=total_pre)
    parts: list[np.ndarray] = []
    for b in range(nb):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        if chunks is None:
            pair = runs.in_memory()
        else:
            pair = np.fromfile(chunks[b], dtype=runs.id_dtype).reshape(-1, 2).T
            os.unlink(chunks[b])
        dst_sorted, src_sorted = _sort_dedup(pair[0], pair[1], lo, n, o.keep_duplicates)
        del pair
        progress.update(sort_task, advance=int(in_count[lo:hi].sum()))
        indptr[lo + 1 : hi + 1] = np.bincount(dst_sorted - lo, minlength=hi - lo)
        out_count += np.bincount(src_sorted, minlength=n)
        parts.append(src_sorted.astype(runs.id_dtype, copy=False))
        part_arcs += len(src_sorted)
        if part_arcs >= budget_arcs // 4 or b == nb - 1:
            _append_indices(indices_w, parts)
            parts, part_arcs = [], 0
    np.cumsum(indptr, out=indptr)
    written = int(indptr[-1])
    return indptr, out_count, written, total_pre - written


def _stats(d: np.ndarray) -> dict[str, float]:
    return {"min": int(d.min()), "mean": float(d.mean()), "max": int(d.max())} if len(d) else {}


def _append_indices(w, parts: list[np.ndarray]) -> None:
    """Grow the indices array and append ``parts`` (zarr arrays resize cheaply: metadata only)."""
    block = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if len(block) == 0:
        return
    w.array.resize((w.offset + len(block),))
    w.append(block)


def _bucket_bounds(in_count: np.ndarray, budget_arcs: int) -> np.ndarray:
    """Destination-range boundaries so each bucket holds at most ``budget_arcs`` arcs (or one node)."""
    cum = np.concatenate([[0], np.cumsum(in_count)])
    bounds = [0]
    n = len(in_count)
    while bounds[-1] < n:
        start = bounds[-1]
        limit = cum[start] + budget_arcs
        nxt = int(np.searchsorted(cum, limit, side="right")) - 1
        bounds.append(max(nxt, start + 1) if nxt < n else n)
    return np.asarray(bounds, dtype=np.int64)


def _scatter_to_buckets(
    files: list[Path], bounds: np.ndarray, spill_dir: Path, id_dtype: np.dtype, progress
) -> list[Path]:
    """Second pass: distribute each run file's arcs to per-bucket files (raw interleaved dst,src pairs)."""
    nb = len(bounds) - 1
    paths = [spill_dir / f"bucket-{b:05d}.bin" for b in range(nb)]
    handles = [open(p, "wb") for p in paths]  # noqa: SIM115 - closed below
    task = progress.add_task("bucketing runs", total=len(files))
    try:
        for f in files:
            run = np.load(f)
            dst, src = run[0], run[1]
            bucket = np.searchsorted(bounds, dst, side="right") - 1
            order = np.argsort(bucket, kind="stable")
            counts = np.bincount(bucket, minlength=nb)
            pairs = np.empty((len(dst), 2), dtype=id_dtype)
            pairs[:, 0] = dst[order]
            pairs[:, 1] = src[order]
            start = 0
            for b in np.flatnonzero(counts):
                end = start + int(counts[b])
                pairs[start:end].tofile(handles[b])
                start = end
            del run, pairs, order, bucket
            os.unlink(f)
            progress.advance(task)
    finally:
        for h in handles:
            h.close()
    return paths


def _sort_dedup(
    dst: np.ndarray, src: np.ndarray, lo: int, n: int, keep_duplicates: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Sort arcs by (dst, src) through one int64 key; drop repeated keys unless asked to keep them."""
    key = (dst.astype(np.int64) - lo) * n + src.astype(np.int64)
    key.sort()
    if not keep_duplicates and len(key) > 1:
        keep = np.empty(len(key), dtype=bool)
        keep[0] = True
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        key = key[keep]
    dst_sorted = key // n + lo
    src_sorted = key - (dst_sorted - lo) * n
    return dst_sorted, src_sorted


# ------------------------------------------------------------------------------------------------------------
# Features, labels, splits
# ------------------------------------------------------------------------------------------------------------


def _write_features(source: GraphSource, writer: StoreWriter, o: IngestOptions) -> dict[str, Any]:
    n = source.num_nodes
    dtype = np.dtype(o.feature_dtype)
    if source.feature_blocks is None:
        dim = o.random_feat_dim
        w = writer.create("features", (n, dim), dtype)
        rng = np.random.default_rng([o.seed, 0xFEA7])
        rows = w.array.chunks[0]
        with make_progress() as progress:
            task = progress.add_task("random features", total=n)
            for start in range(0, n, rows):
                m = min(rows, n - start)
                w.append(rng.standard_normal((m, dim), dtype=np.float32).astype(dtype))
                progress.advance(task, m)
        return {"feat_dim": dim, "feature_dtype": str(dtype), "features": "random normal (seeded)"}
    dim = source.feat_dim
    where = source.feature_path or source.path
    if dim < 1:
        raise G3InputError("features have no columns", path=where)
    w = writer.create("features", (n, dim), dtype)
    with make_progress() as progress:
        task = progress.add_task("features", total=n)
        for block in source.feature_blocks():
            block = np.asarray(block)
            if block.ndim != 2 or block.shape[1] != dim:
                raise G3InputError(f"feature block of shape {block.shape}, expected [*, {dim}]", path=where)
            if w.offset + len(block) > n:
                raise G3InputError(f"more than {n} feature rows", path=where)
            finite = np.isfinite(block)
            if not finite.all():
                bad = int(np.argwhere(~finite)[0][0]) + w.offset
                raise G3InputError(f"NaN or infinite feature value in row {bad} (node {bad})", path=where)
            with np.errstate(over="ignore"):  # an overflow is reported below, naming the value
                stored = block.astype(dtype, copy=False)
            if stored is not block and not np.isfinite(stored).all():  # finite in the source, too large here
                r, c = (int(x) for x in np.argwhere(~np.isfinite(stored))[0])
                raise G3InputError(
                    f"feature value {block[r, c]:.6g} in row {r + w.offset} (node {r + w.offset}), "
                    f"column {c} does not fit --feature-dtype {dtype} (largest "
                    f"{float(np.finfo(dtype).max):.6g})",
                    path=where,
                )
            w.append(stored)
            progress.advance(task, len(block))
    if w.offset != n:
        raise G3InputError(f"{w.offset} feature rows for {n} nodes", path=where)
    return {"feat_dim": dim, "feature_dtype": str(dtype), "features": "from source"}


def _write_labels_and_splits(source: GraphSource, writer: StoreWriter, o: IngestOptions) -> dict[str, Any]:
    n = source.num_nodes
    rng = np.random.default_rng([o.seed, 0x1AB])
    if source.labels is None:
        labels = rng.integers(0, o.random_classes, size=n).astype(np.int32)
        if o.labeled_ratio < 1.0:
            labels[rng.random(n) >= o.labeled_ratio] = -1
        num_classes = o.random_classes
        label_kind = "random (seeded)"
    else:
        labels = np.asarray(source.labels).astype(np.int64).reshape(-1)
        if len(labels) != n:
            raise G3InputError(f"{len(labels)} labels for {n} nodes", path=source.path)
        if (labels < -1).any():
            raise G3InputError("labels must be >= 0 (or -1 for unlabelled)", path=source.path)
        num_classes = int(source.num_classes or (labels.max() + 1 if len(labels) else 0))
        if labels.max(initial=-1) >= num_classes:
            raise G3InputError(
                f"label {int(labels.max())} >= number of classes {num_classes}", path=source.path
            )
        labels = labels.astype(np.int32)
        label_kind = "from source"
    writer.write_array("labels", labels)

    if source.splits is not None:
        splits = {}
        for name in SPLITS:
            ids = np.asarray(source.splits.get(name, np.zeros(0)), dtype=np.int64).reshape(-1)
            if len(ids) and (ids.min() < 0 or ids.max() >= n):
                raise G3InputError(f"{name} split has node id out of range [0, {n})", path=source.path)
            splits[name] = np.unique(ids)
        split_kind = "from source"
    else:
        labeled = np.flatnonzero(labels >= 0)
        perm = rng.permutation(labeled)
        a = int(round(o.split[0] * len(perm)))
        b = a + int(round(o.split[1] * len(perm)))
        splits = {"train": np.sort(perm[:a]), "valid": np.sort(perm[a:b]), "test": np.sort(perm[b:])}
        split_kind = f"random {o.split[0]:g}/{o.split[1]:g}/{o.split[2]:g} of labelled nodes (seeded)"
    for name, ids in splits.items():
        writer.write_array(f"split/{name}", ids)
    return {
        "num_classes": num_classes,
        "num_labeled": int((labels >= 0).sum()),
        "labels": label_kind,
        "split_kind": split_kind,
        "split_sizes": {k: int(len(v)) for k, v in splits.items()},
    }
