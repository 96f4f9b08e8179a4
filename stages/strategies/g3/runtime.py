"""The G3 hybrid-parallel strategy: bins, peer-to-peer sharing of layer outputs and gradients, and the
multi-level pipeline of G3 §5 (``--pipeline none|intra|inter|multi``).

Forward. Every receive of the forward is posted up front (under the background schedules, backward's too). A
bin's outputs that peers need are sent the moment the last node of a plan message is computed (non-blocking;
``none`` waits for each send). The schedules are data (:mod:`.pipeline`): ``intra`` gathers the next bin's
inputs (on CUDA copies them in on a side stream) while the current bin computes; ``inter`` runs a bin of layer
k+1 once all its nodes' inputs are present (local ones computed, remote ones received), before layer k's last
bins finish, over bins of consecutive node ids packed once for the run; ``multi`` is both over the plan's bins.
Every schedule only reorders work: each bin still sees all in-edges of its nodes, so the result is the same.

Backward, per layer in reverse: the plan's bins in plan order (with ``--backward keep``, the forward's own bins
with their saved activations, in the order they ran) — not reversed, so that the bins that read remote inputs
(first in the priority list) return those inputs' gradients to their owners first. Remote input gradients go
to their owners once the last bin that reads them is done; weight gradients accumulate locally, and the loop
all-reduces them. ``--backward recompute`` recomputes a bin's forward, so its memory stays within the bin limit
(with ``intra`` and ``multi`` the next bin's inputs are gathered meanwhile). ``auto`` keeps where a worker's
every layer is one bin and those bins fit the device together (twice the bin limit: each alone may take the
whole limit), which saves a forward, and recomputes otherwise.
"""

from __future__ import annotations

import logging
import mmap
import tempfile
import threading
import time
import weakref
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import torch

from stages.common.bin_memory import NO_LIMIT, pack_bins
from stages.common.errors import G3InputError
from stages.common.model_spec import bin_costs, bins_device
from stages.common.npy import MappedReader
from stages.common.partition_artifact import Shard
from stages.common.plan_artifact import Table, WorkerPlan, arc_sources
from stages.kits.runtime.block import Block
from stages.kits.runtime.config import local_workers
from stages.kits.runtime.dataflow import bin_dependencies, build_block_arrays, lowest_runnable_bin
from stages.kits.runtime.kernels import add_rows_at, backend, put_rows_at, take_rows_at, take_stored_rows
from stages.kits.runtime.strategy import Inference, StepOutput, Strategy, WorkerContext, labelled_rows
from stages.kits.runtime.threads import helper_executor
from stages.kits.runtime.trace import now_us
from stages.kits.runtime.transport import TableReceiver, TableSender
from stages.strategies.g3.knobs import G3Knobs
from stages.strategies.g3.pipeline import SCHEDULES
from stages.strategies.g3.remote_features import RemoteFeatures, fetches_per_bin

log = logging.getLogger("g3.runtime")

LAYER0_ROWS = "g3_layer0_input_rows"  # block cache key: the layer-0 input rows a static layer still reads
SRC_RANGE, DST_RANGE = "g3_src_range", "g3_dst_range"  # block cache keys: the ids as a slice, when contiguous
READ_ROWS = object()  # a bin input that is not gathered: the layer reads h[src] itself (GNNModel.reads_rows)
REMOTE_USES = "g3_remote_uses"  # block cache key: (remote offsets read by the block, arcs reading each)
SRC_IDS, DST_IDS = "g3_src_ids", "g3_dst_ids"  # block cache keys: the ids where the worker's tables live


def id_range(ids: torch.Tensor) -> slice | None:
    """``slice(a, a + n)`` when ``ids`` is exactly ``a, a + 1, ..., a + n - 1``, else None."""
    n = len(ids)
    if n == 0:
        return slice(0, 0)
    a = int(ids[0])
    if int(ids[-1]) != a + n - 1 or not bool(torch.equal(ids, torch.arange(a, a + n, dtype=ids.dtype))):
        return None
    return slice(a, a + n)


def take_rows(h: torch.Tensor, ids: torch.Tensor, rng: slice | None) -> torch.Tensor:
    """``h[ids]``: a view when the ids are a range (callers must not write to it), else a gathered copy."""
    return h[rng] if rng is not None else take_rows_at(h, ids)


def put_rows(h: torch.Tensor, ids: torch.Tensor, rng: slice | None, rows: torch.Tensor) -> None:
    if rng is not None:
        h[rng].copy_(rows)
    else:
        put_rows_at(h, ids, rows)


def add_rows(h: torch.Tensor, ids: torch.Tensor, rng: slice | None, rows: torch.Tensor) -> None:
    """``h[ids] += rows`` for distinct ids (a bin's sources, a message's nodes)."""
    if rng is not None:
        h[rng].add_(rows)
    else:
        add_rows_at(h, ids, rows)


class WorkerData:
    """Everything one worker reads from disk: its shard (partition) and its plan folder.

    Owned nodes are renumbered into the plan's priority order on load (owned-local id ``i`` here is
    ``plan.priority[i]`` in the shard; remote nodes keep their ids). Every plan bin then owns a contiguous
    range of rows, so writing a bin's outputs, reading a one-bin layer's inputs or a bin's output gradients are
    slices instead of scattered row copies. Everything this class hands out (features, labels, splits,
    degrees, global ids, bins, tables) uses the new numbering; ``order`` maps back to the shard's.
    """

    # P2P tables whose node lists are owned-local ids (the others hold remote offsets)
    OWNED_ID_TABLES = ("features_send", "fwd_send_", "bwd_recv_")

    def __init__(
        self,
        shard: Shard,
        plan: WorkerPlan,
        num_layers: int,
        dtype: torch.dtype,
        home: torch.device | str = "cpu",
        stream: bool = False,
    ):
        self.rank = shard.rank
        self.stream = stream  # features and bins read from disk as they are used (:meth:`feature_rows`)
        self.dtype = dtype
        self.shard = shard
        self.plan = plan
        self.num_owned = shard.num_owned
        self.num_remote = shard.num_remote
        n_own = self.num_owned
        self.order = np.asarray(plan.priority, dtype=np.int64)  # shard owned-local id of each owned node here
        if len(self.order) != n_own:
            raise ValueError(f"plan priority list has {len(self.order)} nodes, the shard owns {n_own}")
        self.new_id = np.empty(n_own, dtype=np.int64)  # shard owned-local id -> id here
        self.new_id[self.order] = np.arange(n_own, dtype=np.int64)
        local_order = np.concatenate([self.order, np.arange(n_own, n_own + self.num_remote, dtype=np.int64)])
        self.global_ids = torch.from_numpy(
            np.concatenate([shard.owned, shard.remote]).astype(np.int64)[local_order]
        )
        # one copy each: fancy indexing reads the memory-mapped shard straight into the reordered array
        # what the loss and the first layer read live where the worker's tables do (``home``)
        self.feature_width = int(shard.manifest["features.npy"]["shape"][1])
        # memory-mapped, read per bin
        self.stored_features = MappedReader(shard.load("features")) if stream else None
        self.features = (
            None
            if stream
            else torch.from_numpy(np.asarray(shard.load("features"))[self.order]).to(home, dtype)
        )
        self.labels = torch.from_numpy(np.asarray(shard.load("labels"))[self.order].astype(np.int64)).to(home)
        self.in_degree, self.out_degree = (
            torch.from_numpy(np.asarray(shard.load(name), dtype=np.float64)[local_order]).to(dtype)
            for name in ("in_degree", "out_degree")
        )
        self.splits = {
            s: torch.from_numpy(np.sort(self.new_id[np.asarray(shard.load(s), dtype=np.int64)])).to(home)
            for s in ("train", "valid", "test")
        }
        self.priority = np.arange(n_own, dtype=np.int64)
        self.row_ptr = plan.row_ptr
        # streamed: the arcs-sized arrays stay on disk and each bin's sources are renumbered as it is read
        self.layers = [
            plan.layer(li, mmap=True) if stream else self._renumber_layer(plan.layer(li, mmap=True))
            for li in range(num_layers)
        ]
        self._tables: dict[str, Table] = {}
        if stream:
            self._src_file = [MappedReader(lp.src) for lp in self.layers]
            self._indices_file = [MappedReader(lp.indices) for lp in self.layers]

    def bin_arrays(self, li: int, b: int) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
        """Bin ``b`` of layer ``li``: its rows ``[r0, r1)``, its sources (local ids here), its in-edge pointers
        from 0 and each arc's source position; read from disk (and its pages let go of) when streamed."""
        lp, row_ptr = self.layers[li], self.row_ptr
        r0, r1 = int(lp.bin_ptr[b]), int(lp.bin_ptr[b + 1])
        e0, e1 = int(row_ptr[r0]), int(row_ptr[r1])
        s0, s1 = int(lp.src_ptr[b]), int(lp.src_ptr[b + 1])
        if self.stream:
            src, indices = self._owned_to_new(self._src_file[li][s0:s1]), self._indices_file[li][e0:e1]
        else:
            src, indices = lp.src[s0:s1], lp.indices[e0:e1]
        return r0, r1, src, row_ptr[r0 : r1 + 1] - row_ptr[r0], indices

    def feature_rows(self, ids: np.ndarray) -> torch.Tensor:
        """Input features of owned nodes (ids here), read from the shard on disk (streamed workers)."""
        rows = self.stored_features.rows(self.order[ids], take_stored_rows)
        return torch.from_numpy(rows).to(self.dtype)

    def rows_by_shard_id(self, ids: np.ndarray) -> np.ndarray:
        """Input features of owned nodes by their shard-local ids (what peers ask for), as stored."""
        if self.stream:
            return self.stored_features.rows(ids, take_stored_rows)
        return self.features[torch.from_numpy(self.new_id[ids])].cpu().numpy()

    def _owned_to_new(self, ids: np.ndarray) -> np.ndarray:
        """Local ids (owned ones renumbered, remote ones kept), int64 whatever the plan stores them in: one copy."""
        out = np.array(ids, dtype=np.int64)
        owned = out < self.num_owned
        out[owned] = self.new_id[out[owned]]
        return out

    def _renumber_layer(self, lp):
        """A layer held in memory, read from its mapped files: ``src`` renumbered into int64 in one copy (whatever
        the plan stores it in), ``indices`` copied as it is."""
        lp.src, lp.indices = self._owned_to_new(lp.src), np.array(lp.indices)
        return lp

    def table(self, name: str) -> Table:
        if name not in self._tables:
            t = self.plan.table(name)
            if name.startswith(self.OWNED_ID_TABLES) and len(t.nodes):
                t = Table(self.new_id[np.asarray(t.nodes, dtype=np.int64)], t.msgs)
            self._tables[name] = t
        return self._tables[name]


class StoredRows:
    """Layer 0's input of a streamed worker: owned rows stay in the shard on disk, remote ones come from
    ``remote_rows(offsets)`` (the rows exchanged once and kept, or fetched from their owners per bin);
    :meth:`rows` reads a bin's."""

    def __init__(self, data: WorkerData, remote_rows):
        self.data, self.remote_rows = data, remote_rows
        self.dtype = data.dtype
        self.shape = (data.num_owned + data.num_remote, data.feature_width)

    def rows(self, ids: np.ndarray) -> torch.Tensor:
        """``h0[ids]`` for local ids (owned first, then remote offsets + num_owned)."""
        n_own = self.data.num_owned
        owned = ids < n_own
        k = int(owned.sum())
        if owned[:k].all():  # the plan lists a bin's owned sources first: two slices, no masks
            if k == len(ids):
                return self.data.feature_rows(ids)
            return torch.cat([self.data.feature_rows(ids[:k]), self.remote_rows(ids[k:] - n_own)])
        out = torch.empty((len(ids), self.shape[1]), dtype=self.dtype)
        out[torch.from_numpy(owned)] = self.data.feature_rows(ids[owned])
        out[torch.from_numpy(~owned)] = self.remote_rows(ids[~owned] - n_own)
        return out


class StreamedBins:
    """The plan bins of one layer of a streamed worker, each ``(block, src, dst)`` built from disk when asked
    for and dropped after use: only the bins running (and the one read ahead) are in memory."""

    def __init__(self, strategy: G3Strategy, li: int):
        self.strategy, self.li = strategy, li

    def __len__(self) -> int:
        return self.strategy.data.layers[self.li].num_bins

    def __getitem__(self, b: int):
        if not 0 <= b < len(self):
            raise IndexError(b)
        return self.strategy.plan_block(self.li, b)


FEATURE_PIECE_BYTES = 8 << 20  # a streamed worker's input-feature messages are cut into pieces of this size


def message_rounds(send: Table, recv: Table, piece: int) -> list[tuple[Table, Table]]:
    """A send and a receive table cut into rounds: round ``j`` holds piece ``j`` (rows ``j * piece`` up to
    ``piece`` more) of every message that long, both ways, so an exchange round by round holds at most one piece
    per message. Both ends cut a message the same way (its count is in both tables), so rounds match; a worker
    runs as many rounds as its longest message needs, its peers' included."""

    def pieces(table: Table) -> list[Table]:
        if not len(table.msgs):
            return []
        counts = table.msgs[:, 2]
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        out = []
        for j in range(int(-(-counts.max() // piece))):
            lo = np.minimum(counts, j * piece)
            take = np.minimum(counts, (j + 1) * piece) - lo
            live = take > 0
            msgs = table.msgs[live].copy()
            msgs[:, 2] = take[live]
            nodes = [table.nodes[a : a + n] for a, n in zip(starts[live] + lo[live], take[live], strict=True)]
            out.append(Table(np.concatenate(nodes).astype(np.int64), msgs))
        return out

    sends, recvs = pieces(send), pieces(recv)
    rounds = max(len(sends), len(recvs))
    sends += [Table.empty()] * (rounds - len(sends))
    recvs += [Table.empty()] * (rounds - len(recvs))
    return list(zip(sends, recvs, strict=True))


def spill_bytes(data: WorkerData, widths: list[int], features: bool = True) -> dict[str, int]:
    """What a streamed worker writes into ``TMPDIR`` (:func:`spilled_zeros`), by kind (:func:`spilled_parts`);
    ``features``: with the remote input features (exchanged once, not fetched per bin)."""
    parts = spilled_parts(
        data.num_owned,
        data.num_remote,
        data.feature_width,
        lambda name: len(data.table(name).nodes),
        widths,
        torch.empty(0, dtype=data.dtype).element_size(),
    )
    if not features:
        del parts["remote input features"]
    return parts


def spilled_parts(
    num_owned: int, num_remote: int, feature_width: int, table_rows, widths: list[int], item: int
) -> dict[str, int]:
    """The most a streamed worker with these rows and P2P tables (``table_rows(name)``: the rows of a table) holds
    in ``TMPDIR`` at once, by kind: every hidden layer's rows (owned and remote), the logits (owned), the remote
    input features, backward's receives (posted with the forward) and, whichever is larger, the forward's
    messages (every layer's sends and receives, ``G3Strategy.message_alloc``) or, at backward's start, the top
    hidden layer's gradients and sends. Lower layers' gradients come once backward has released the rows and
    gradients above them (:func:`release_rows`). ``item``: bytes per value."""
    local = num_owned + num_remote
    hidden = range(1, len(widths) - 1)  # the layers whose outputs peers read
    rows = table_rows
    bwd_recv = sum(rows(f"bwd_recv_{li}") * widths[li] for li in hidden)
    forward = sum((rows(f"fwd_send_{li - 1}") + rows(f"fwd_recv_{li - 1}")) * widths[li] for li in hidden)
    top = len(widths) - 2  # the top hidden layer: its gradients and sends are backward's first
    grad_top = local * widths[top] if top >= 1 else 0
    backward = grad_top + (rows(f"bwd_send_{top}") * widths[top] if top >= 1 else 0)
    return {
        "layer rows and gradients": (sum(local * w for w in widths[1:-1]) + grad_top) * item,
        "logits": num_owned * widths[-1] * item,
        "remote input features": num_remote * feature_width * item,
        "messages": (bwd_recv + max(forward, backward) - grad_top) * item,
    }


def check_spill_space(parts: dict[str, int], workers: int) -> None:
    """Refuse, before any work, a ``TMPDIR`` whose disk cannot take what this machine's streamed workers spill
    (``parts``: one worker's, by kind; a page the disk cannot hold would kill a worker with SIGBUS hours in): one
    line with the figures."""
    from stages.common.atomic import check_free_space

    parts = {name: n * workers for name, n in parts.items()}
    where = Path(tempfile.gettempdir()) / "g3-rows"
    check_free_space(where, parts, f"--stream-bins ({workers} streamed workers, TMPDIR)")


# What a streamed worker holds that the kernel cannot page, at least: the interpreter, torch and numba, and its
# node-sized bookkeeping (ids, degrees, labels, split rows, P2P tables), measured on the billion-arc graph at
# K = 8: 1.1 GB per worker once loaded, 16.8 M local rows (docs/BENCHMARKS.md "Training a partition larger than
# memory"); the bins and the feature exchange's pieces come on top
STREAM_BASE_BYTES = 250 << 20
STREAM_BYTES_PER_ROW = 48


def check_stream_memory(data: WorkerData, workers: int) -> None:
    """Refuse, before any work, streamed workers whose floor (:data:`STREAM_BYTES_PER_ROW`) exceeds all the memory
    this machine or its memory cgroup has: they could only be killed. One line naming the floor."""
    from stages.common.cost import check_memory_floor

    rows = data.num_owned + data.num_remote
    check_memory_floor(
        {
            "interpreter, torch and numba": STREAM_BASE_BYTES * workers,
            f"{STREAM_BYTES_PER_ROW} bytes per owned or remote row": rows * STREAM_BYTES_PER_ROW * workers,
        },
        f"--stream-bins: {workers} streamed workers on this machine ({rows:,} local rows each)",
        "partition for more workers over more machines (g3 partition --workers, g3 train --hosts)",
    )


class SpillMeter:
    """The bytes of this process's spilled arrays alive now (:func:`spilled_zeros`: their files' sizes, less the
    pages :func:`release_rows` gave back) and the most at once: what a streamed worker held in ``TMPDIR`` at its
    peak (pages never written take less)."""

    def __init__(self) -> None:
        self.live = self.peak = 0
        self._lock = threading.Lock()
        # base address -> [mapping, size, released pages, bytes released]
        self._files: dict[int, list] = {}

    def add(self, n: int, base: int | None = None, mapping=None) -> None:
        with self._lock:
            self.live += n
            self.peak = max(self.peak, self.live)
            if base is not None:
                pages = -(-n // mmap.PAGESIZE)
                self._files[base] = [mapping, n, np.zeros(pages, dtype=np.bool_), 0]

    def remove(self, n: int, base: int | None = None) -> None:
        with self._lock:
            rec = self._files.pop(base, None) if base is not None else None
            self.live -= n - (rec[3] if rec is not None else 0)

    def release(self, base: int, start: int, nbytes: int) -> None:
        """Punch the whole pages of bytes ``[start, start + nbytes)`` of the file mapped at ``base`` (offsets from
        ``base``) out of it, once each: their disk blocks go back to the file system, and they read as zeros."""
        with self._lock:
            rec = self._files.get(base)
            if rec is None:
                return
            mapping, size, released, _ = rec
            page, pages = mmap.PAGESIZE, len(released)
            a = -(-start // page)
            b = pages if start + nbytes >= size else (start + nbytes) // page
            if b <= a or released[a:b].all():
                return
            try:
                mapping.madvise(mmap.MADV_REMOVE, a * page, (b - a) * page)
            except (AttributeError, OSError, ValueError):
                return  # no hole punching here: the pages stay until the file goes
            fresh = (b - a) - int(np.count_nonzero(released[a:b]))
            freed = fresh * page - (pages * page - size if b == pages and not released[-1] else 0)
            released[a:b] = True
            rec[3] += freed
            self.live -= freed


SPILLED = SpillMeter()


def spilled_zeros(rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """A zeroed ``[rows, width]`` CPU tensor in a shared mapping of an unnamed temporary file (in ``TMPDIR``):
    memory like any other to the kernels, but pages the operating system may write back and evict under
    pressure instead of failing; the file goes with the tensor (it has no name from the start)."""
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    size = rows * width * np_dtype.itemsize
    with tempfile.TemporaryFile(prefix="g3-rows-") as f:
        f.truncate(size)  # a sparse file: reads as zeros, no disk until written
        rows_map = np.memmap(f, dtype=np_dtype, mode="r+", shape=(rows, width))
    base = rows_map.ctypes.data
    SPILLED.add(size, base, getattr(rows_map, "_mmap", None))
    # the tensor's storage holds the map: it goes, and its file with it, when the last view of the rows does
    weakref.finalize(rows_map, SPILLED.remove, size, base)
    return torch.from_numpy(rows_map)


def release_rows(t: torch.Tensor | None, lo: int = 0, hi: int | None = None) -> None:
    """Rows ``[lo, hi)`` of a spilled array (:func:`spilled_zeros`, or a view of its rows) that nothing reads again:
    their disk pages go back to the file system now, not when the array goes (they read as zeros after). Pages
    the rows only partly cover stay; an array that is not spilled is left as it is."""
    if t is None or not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.dim() != 2:
        return
    hi = t.shape[0] if hi is None else hi
    if hi <= lo or t.stride(1) != 1 or t.stride(0) != t.shape[1]:
        return
    base = t.untyped_storage().data_ptr()
    row = t.stride(0) * t.element_size()
    SPILLED.release(base, t.data_ptr() - base + lo * row, (hi - lo) * row)


# What a worker holds when it keeps its partition in memory, fitted on in-memory runs of `synthetic` at K = 8
# (400 K and 2 M nodes, degrees 8 and 25: each worker's peak within 10 % of the model; `products` at K = 1, +15 %):
# the interpreter, torch and numba; per arc the plan's arrays, every layer's blocks and transposes; per local row
# (owned and remote) its input features and every layer's rows, gradients and tables (docs/BENCHMARKS.md "What
# each stage costs per arc")
IN_MEMORY_BASE_BYTES = 350 << 20
IN_MEMORY_BYTES_PER_ARC = 100
IN_MEMORY_BYTES_PER_ROW = 1150


def in_memory_bytes(manifest: dict) -> int:
    """What one worker would hold with its shard's partition in memory (see the constants above)."""

    def rows(name: str) -> int:
        return int(manifest[name]["shape"][0]) if name in manifest else 0

    feats = manifest["features.npy"]
    row_features = int(np.prod(feats["shape"][1:])) * np.dtype(feats["dtype"]).itemsize
    local_rows = rows("owned.npy") + rows("remote.npy")
    return (
        IN_MEMORY_BASE_BYTES
        + rows("indices.npy") * IN_MEMORY_BYTES_PER_ARC
        + local_rows * (IN_MEMORY_BYTES_PER_ROW + row_features)
    )


def streams_bins(ctx: WorkerContext) -> bool:
    """``--stream-bins``: on, off, or (auto) on where the local workers' partitions held in memory would not fit
    what this machine has available (MemAvailable, or a memory cgroup's room). Decided once per worker: how long it
    waits for its peers (before the process groups exist) and its constructor must agree, and what is available
    changes as the workers load."""
    from stages.common.cost import available_memory

    if "stream_bins" in ctx.memo:
        return ctx.memo["stream_bins"]
    mode = ctx.knobs.stream_bins
    if mode == "on" and ctx.resident:
        raise G3InputError(
            "--stream-bins on: this worker's partition is resident on the device (the plan says it fits); "
            "give --device-memory to g3 plan to size bins that stream, or --stream-bins auto"
        )
    if mode != "auto" or ctx.resident:  # auto: a partition resident on the device fits it
        streamed = mode == "on"
    else:
        room, _ = available_memory()
        streamed = room is not None and in_memory_bytes(ctx.shard.manifest) * local_workers(ctx.world) > room
    ctx.memo["stream_bins"] = streamed
    return streamed


class G3Strategy(Strategy):
    knobs: G3Knobs
    name = "g3"

    @classmethod
    def peer_wait_seconds(cls, ctx: WorkerContext) -> float:
        """A streamed worker's layer can take minutes (it reads its bins from disk): it waits longer for its
        peers unless --timeout says otherwise."""
        return ctx.cfg.wait_seconds(streamed=streams_bins(ctx))

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        cfg = ctx.cfg
        # resident: the partition, every layer's rows and their gradients live on the device for the run;
        # otherwise in host memory, each bin copied in (on CUDA on a copy stream) and its outputs copied out
        self.resident, self.home = ctx.resident, ctx.home
        self.stream = streams_bins(ctx)
        # a streamed worker's messages of node rows live in files too: the receives are all posted at the
        # forward's start and the sends held until the layer ends (3 × 4 × hidden bytes per remote row at once)
        self.message_alloc = spilled_zeros if self.stream else None
        self.data = data = WorkerData(
            ctx.shard, ctx.plan, ctx.spec.num_blocks, cfg.torch_dtype, self.home, stream=self.stream
        )
        # streamed bins are built as they run, so the eager schedules' bins fixed for the run do not exist
        pipeline = "intra" if self.stream and SCHEDULES[self.knobs.pipeline].eager else self.knobs.pipeline
        self.schedule = SCHEDULES[pipeline]
        if self.stream:
            check_stream_memory(data, local_workers(ctx.world))
        self.per_bin = fetches_per_bin(
            self.knobs.remote_features,
            self.stream,
            data.num_remote,
            sum(spill_bytes(data, self.model.widths).values()) if self.stream else 0,
            local_workers(ctx.world),
        )
        # every worker serves its rows where any fetches per bin (starting the service is collective)
        self.fetcher = (
            RemoteFeatures(ctx, ctx.shard, data.rows_by_shard_id, data.dtype, self.peer_wait_seconds(ctx))
            if ctx.world > 1 and ctx.all_reduce_int(int(self.per_bin), op="max")
            else None
        )
        if self.stream:
            log.info(
                "bins streamed from disk (--stream-bins %s), pipeline %s, remote input features %s",
                self.knobs.stream_bins,
                pipeline,
                "fetched per bin" if self.per_bin else "exchanged once",
            )
            spill = spill_bytes(data, self.model.widths, features=not self.per_bin)
            check_spill_space(spill, local_workers(ctx.world))
            self.spill_estimate = sum(spill.values())
        self.num_layers = len(data.layers)
        self.phase = "fwd"  # the pass running now: "fwd", "eval" or "bwd" (gather spans carry it)
        self.blocks = [
            StreamedBins(self, li)
            if self.stream
            else [self.plan_block(li, b) for b in range(data.layers[li].num_bins)]
            for li in range(self.num_layers)
        ]
        self.remote_features: torch.Tensor | None = None
        # auto: a worker whose every layer is one bin (its whole partition fits the bin limit) keeps the forward's
        # activations instead of paying a second forward per epoch, where they fit (:meth:`_kept_layers_fit`);
        # a streamed worker keeps nothing of a bin once it has run
        self.keep = not self.stream and (
            self.knobs.backward == "keep"
            or (
                self.knobs.backward == "auto"
                and all(len(b) == 1 for b in self.blocks)
                and self._kept_layers_fit()
            )
        )
        self.saved: list[list] = [[] for _ in range(self.num_layers)]
        self.inputs: list[torch.Tensor | None] = [None] * self.num_layers
        # backward's receives, posted early by a training forward
        self.bwd_recvs: dict[int, TableReceiver] = {}
        self.pool = self._gather_pool(cfg)
        self.copy_stream = torch.cuda.Stream(self.device) if self.device != self.home else None
        # layer 0 reads the fixed input features: SAGE/GCN aggregate them once per block and keep the result
        # (--layer0-cache); from then on the bin's input is only the rows the layer still reads, kept too
        self.layer0_rows = (
            self.model.static_input_rows(0)
            if self.knobs.layer0_cache_enabled(cfg.device, self.resident) and not self.stream
            else None
        )
        self.send_structure: dict[int, tuple] = {}  # id(table) → (table, slices, nodes, msg_ptr, msg_ids)
        # eager schedules: per layer, the forward's bins (built on first use)
        self._fwd_bins: list | None = None
        self._bin_deps: list | None = None  # eager schedules: per layer, what each of those bins waits for
        self._init_dataflow()
        self.train_rows = labelled_rows(data.labels, data.splits["train"])  # unlabelled nodes carry no loss
        self.global_train = ctx.all_reduce_int(len(self.train_rows))
        self.epoch = 0

    @property
    def num_owned(self) -> int:
        return self.data.num_owned

    def _kept_layers_fit(self) -> bool:
        """Whether every layer's one bin fits the device at once, as keeping their activations needs: the
        layers' bins together (each :func:`bin_cost`, the forward and backward of its layer, recorded by the plan
        as ``max_bin_bytes``) within the device memory the plan sized its bins by (twice the bin limit). A plan
        of fixed bin sizes (``--bin-size``) promises no memory: its one-bin layers are kept."""
        layers = self.data.plan.meta["layers"]
        limits = [layer.get("bin_limit_bytes") for layer in layers]
        if any(lim is None for lim in limits) or any(layer.get("max_bin_bytes") is None for layer in layers):
            return True
        return sum(int(layer["max_bin_bytes"]) for layer in layers) <= 2 * min(int(lim) for lim in limits)

    def _gather_pool(self, cfg):
        """The prefetch thread of ``intra``/``multi`` (see ``G3Knobs.prefetch_enabled``); its own torch
        ops run on one thread, so a gather never spreads over the cores the compute kernels use."""
        # a streamed worker reads ahead whatever the cores: the thread mostly waits for the disk
        read_ahead = self.stream and self.knobs.prefetch != "off"
        if not (
            self.schedule.prefetch
            and (
                read_ahead
                or self.knobs.prefetch_enabled(
                    cfg.device, torch.get_num_threads(), local_workers(self.ctx.world), self.resident
                )
            )
        ):
            return None
        return helper_executor("g3-gather")

    # --- static structure ----------------------------------------------------------------------------------
    def _block(self, src_t: torch.Tensor, dst_t: torch.Tensor, indptr: np.ndarray, indices: np.ndarray):
        d = self.data
        block = Block(
            n_dst=len(dst_t),
            n_src=len(src_t),
            indptr=torch.from_numpy(np.asarray(indptr, dtype=np.int64)),
            indices=torch.from_numpy(np.asarray(indices, dtype=np.int64)),
            src_out_degree=d.out_degree[src_t],
            dst_in_degree=d.in_degree[dst_t],
            dst_global=d.global_ids[dst_t],
        )
        block = block.to(self.device)
        # bins of consecutive rows (all plan bins): slices, no gathers
        block._cache[SRC_RANGE] = id_range(src_t)
        block._cache[DST_RANGE] = id_range(dst_t)
        return block, src_t, dst_t

    def plan_block(self, li: int, b: int) -> tuple[Block, torch.Tensor, torch.Tensor]:
        """(block, source local ids, destination local ids) of plan bin ``b`` of layer ``li``."""
        r0, r1, src, indptr, indices = self.data.bin_arrays(li, b)
        src_t = torch.from_numpy(np.ascontiguousarray(src, dtype=np.int64))
        dst_t = torch.from_numpy(np.ascontiguousarray(self.data.priority[r0:r1], dtype=np.int64))
        return self._block(src_t, dst_t, indptr, indices)

    def _init_dataflow(self) -> None:
        """How many arcs read each remote row (backward's message completion), from every arc's source (kept for
        the eager schedules) or, streamed, bin by bin."""
        d = self.data
        n_own, n_local = d.num_owned, d.num_owned + d.num_remote
        self.row_ptr = np.asarray(d.row_ptr, dtype=np.int64)
        if self.stream:
            self.uses = np.zeros(d.num_remote, dtype=np.int64)
            for b in range(d.layers[0].num_bins):
                _, _, src, _, indices = d.bin_arrays(0, b)
                read = src[indices]
                read = read[read >= n_own] - n_own
                np.add.at(self.uses, *np.unique(read, return_counts=True))
            return
        self.edge_src = arc_sources(d.row_ptr, d.layers[0])
        self.uses = np.bincount(self.edge_src, minlength=n_local).astype(np.int64)[n_own:]

    # --- helpers -------------------------------------------------------------------------------------------
    def _static(self, li: int) -> bool:
        return li == 0 and self.layer0_rows is not None

    def _needs_gather(self, layer: int, block) -> bool:
        """False where the bin's inputs already live with its block (cached layer-0 rows)."""
        return not (self._static(layer) and block.has_cached(LAYER0_ROWS))

    def _gather(
        self, h: torch.Tensor | StoredRows, src: torch.Tensor, layer: int, b: int, block, view_ok: bool
    ):
        """The bin's input rows. ``view_ok``: the caller only reads them before ``h`` changes again (no autograd
        graph keeps them: a forward without kept activations, or backward's recomputation), so contiguous
        sources may be a view of ``h`` instead of a copy, or the layer may read ``h[src]`` itself (``READ_ROWS``,
        see ``GNNModel.reads_rows`` and ``layer_backward_rows``) instead of gathering a copy."""
        if not self._needs_gather(layer, block):
            return block.cached(LAYER0_ROWS, None)  # no gather, no copy: the rows live with the block
        stored = isinstance(h, StoredRows)  # a streamed layer 0: the rows read from disk
        rng = block.cached(SRC_RANGE, lambda: None) if view_ok and not stored else None
        if view_ok and rng is None and self._reads_rows(layer, h):
            return READ_ROWS  # no gather: the layer's aggregation reads h[src] itself
        t0 = now_us()
        ids = self._ids(block, SRC_IDS, src)
        x = h.rows(ids.numpy()) if isinstance(h, StoredRows) else take_rows(h, ids, rng).detach()
        t1 = now_us()
        self.tracer.span(
            "gather",
            f"L{layer} bin {b}",
            t0,
            t1,
            layer=layer,
            bin=b,
            phase=self.phase,
            rows=len(src),
            prefetched=threading.current_thread() is not threading.main_thread(),
            view=rng is not None,
            stored=stored,
        )  # a view: contiguous sources, nothing copied
        if self.copy_stream is None:  # the rows are where the layer runs
            return x
        return self._copy_in(x, layer, b, t1)

    def _copy_in(self, x: torch.Tensor, layer: int, b: int, t1: int):
        """CUDA: the bin's host rows copied to the device on the copy stream, with the event to wait for."""
        with torch.cuda.stream(self.copy_stream):
            x_dev = x.pin_memory().to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.copy_stream)
        self.tracer.span("copy_in", f"L{layer} bin {b}", t1, now_us(), layer=layer, bin=b)
        return (x_dev, event)

    def _ids(self, block, key: str, ids: torch.Tensor) -> torch.Tensor:
        """A bin's source or destination ids (host) where the worker's tables live, copied there once."""
        return block.cached(key, lambda: ids.to(self.home))

    def _reads_rows(self, layer: int, h: torch.Tensor) -> bool:
        """The CPU layer can read its sources from ``h`` itself: in a forward without gradient
        (``layer_forward_rows``) and in backward's recomputation (``layer_backward_rows``)."""
        return (
            self.device.type == "cpu"
            and isinstance(h, torch.Tensor)
            and backend(h) == "numba"
            and not self._static(layer)
            and self.model.reads_rows(layer)
        )

    def _ready_input(self, x):
        if isinstance(x, tuple):  # CUDA: wait for the side-stream copy on the compute stream
            x_dev, event = x
            torch.cuda.current_stream(self.device).wait_event(event)
            return x_dev
        return x

    def _input_features(self) -> torch.Tensor | StoredRows:
        """Layer-0 input rows for owned + remote nodes; remote features are fetched once and cached. Streamed:
        the rows stay on disk (:class:`StoredRows`), the remote ones fetched into a spilled array, or per bin
        from their owners (``--remote-features bin``)."""
        d = self.data
        if self.per_bin:
            return StoredRows(d, self.fetcher.rows)
        if self.remote_features is None or not self.knobs.feature_cache:
            self.layer0_input = None
            buf = self._node_rows(d.num_remote, d.feature_width, d.dtype)
            send, recv = d.table("features_send"), d.table("features_recv")
            if self.stream:  # in rounds of bounded messages, the rows peers need read from the shard
                piece = max(1, FEATURE_PIECE_BYTES // (d.feature_width * buf.element_size()))
                for send_part, recv_part in message_rounds(send, recv, piece):
                    rows = d.feature_rows(np.asarray(send_part.nodes, dtype=np.int64))
                    send_part = Table(np.arange(len(send_part.nodes), dtype=np.int64), send_part.msgs)
                    self.tr.exchange_table(send_part, recv_part, "features", 0, rows, buf)
            else:
                self.tr.exchange_table(send, recv, "features", 0, d.features, buf)
            self.remote_features = buf.to(self.home)
        if self.stream:
            remote = self.remote_features
            return StoredRows(d, lambda offsets: take_rows_at(remote, torch.from_numpy(offsets)))
        if getattr(self, "layer0_input", None) is None:  # built once while the cache holds: it is read-only
            self.layer0_input = torch.cat([d.features, self.remote_features]) if d.num_remote else d.features
        return self.layer0_input

    def _node_rows(self, rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        """A zeroed ``[rows, width]`` array of node rows (a layer's outputs or their gradients, remote input
        features) where the worker's tables live; a streamed worker's is backed by a file (:func:`spilled_zeros`),
        so that the kernel can write it back to disk and drop it rather than run out of memory."""
        if self.stream and rows * width > 0:
            return spilled_zeros(rows, width, dtype)
        return torch.zeros((rows, width), dtype=dtype, device=self.home)

    # --- the interface -------------------------------------------------------------------------------------
    def forward(self, epoch: int, step: int, micro: int = 0) -> StepOutput:
        """The whole graph's forward (one step per epoch): logits of every owned node, the training rows as
        targets."""
        self.epoch = epoch
        logits = self._forward(epoch, training=True)
        # the logits are a view of the last layer's rows, which nothing reads after the loss
        return StepOutput(logits, self.data.labels, self.train_rows, self.global_train, reuse_logits=True)

    def backward(self, grad_logits: torch.Tensor) -> None:
        self._backward(grad_logits, self.epoch)

    def stats(self) -> dict:
        """The base figures and, streamed, the most this worker has held in ``TMPDIR`` at once so far."""
        if not self.stream:
            return super().stats()
        # the estimate the TMPDIR check used, beside what was held
        return {
            **super().stats(),
            "scratch_peak_bytes": SPILLED.peak,
            "scratch_estimate_bytes": self.spill_estimate,
        }

    def close(self) -> None:
        super().close()
        if self.fetcher is not None:
            self.fetcher.close()

    def infer(self) -> Inference:
        with torch.no_grad():
            logits = self._forward(self.epoch, training=False)
        return Inference(logits, self.data.labels, self.data.splits)

    # --- forward -------------------------------------------------------------------------------------------
    def _forward(self, epoch: int, training: bool) -> torch.Tensor:
        d = self.data
        L = self.num_layers
        kind = "fwd" if training else "eval"
        self.phase = kind  # for the gather spans (the prefetch thread reads it too)
        h0 = self._input_features()
        hs = [h0]
        for li in range(L):
            rows = d.num_owned + (0 if li == L - 1 else d.num_remote)
            hs.append(self._node_rows(rows, self.model.widths[li + 1], h0.dtype))  # owned rows: all computed
        sends = [self._sender(f"fwd_send_{li}", kind, li, d.num_owned) for li in range(L - 1)]
        recvs = [
            self.tr.receiver(
                d.table(f"fwd_recv_{li}"),
                kind,
                li,
                self.model.widths[li + 1],
                h0.dtype,
                # background copies: the receiving thread copies a message's rows in as it arrives
                unpack=self._put_remote_rows(hs[li + 1]) if self.schedule.background_copies else None,
                alloc=self.message_alloc,
            )
            for li in range(L - 1)
        ]
        # backward's receives are posted with the forward's: gloo moves a message only once its receive is
        # posted, so a peer that reaches backward first delivers its gradients while this worker still runs its
        # forward and loss, instead of after (`none` keeps each phase's communication in the phase)
        self.bwd_recvs = (
            {li: self._bwd_receives(li, h0.dtype) for li in range(1, L)}
            if training and self.schedule.async_send
            else {}
        )
        self.inputs = hs[:L]
        self.saved = [[] for _ in range(L)]
        run = self._forward_eager if self.schedule.eager else self._forward_layerwise
        run(epoch, training, hs, sends, recvs)
        for s in sends:
            s.wait()
        return hs[L][: d.num_owned]

    def _put_remote_rows(self, h: torch.Tensor):
        n_own = self.data.num_owned
        return lambda nodes, rows: put_rows_at(h, nodes + n_own, rows)

    def _place_arrived(self, recv: TableReceiver, h: torch.Tensor):
        """``consume(nodes, rows, m)`` for a forward message on the compute thread: copies its rows into ``h``
        unless the receiving thread already did."""
        put = self._put_remote_rows(h) if recv.unpack is None else lambda nodes, rows: None
        return lambda nodes, rows, _m: put(nodes, rows)

    def _sender(self, table: str, kind: str, li: int, rows: int) -> TableSender:
        """The sender of the plan's send table ``table`` (``rows``: the local rows its ids index), on the schedule's
        terms (blocking or not, copies in the background or not)."""
        return self.tr.sender(
            self.data.table(table),
            kind,
            li,
            rows,
            blocking=not self.schedule.async_send,
            background=self.schedule.background_copies,
            structure=self.send_structure,
            alloc=self.message_alloc,
        )

    def _bwd_receives(self, li: int, dtype: torch.dtype) -> TableReceiver:
        """The gradients peers send for this worker's remote inputs of layer ``li`` (width: that layer's input)."""
        return self.tr.receiver(
            self.data.table(f"bwd_recv_{li}"),
            "bwd",
            li,
            self.model.widths[li],
            dtype,
            alloc=self.message_alloc,
        )

    def _compute(self, li: int, block, x, src, dst, hs, epoch, training, b):
        """One bin: layer forward, outputs into h[li+1] (and kept for backward when asked); its compute span and
        timers."""
        keep = self.keep and training
        t0, c0 = now_us(), time.thread_time()
        dst_rng = block.cached(DST_RANGE, lambda: None)
        if x is READ_ROWS:  # forward only: the aggregation reads h[src] in place of a gathered copy
            x_dst = take_rows(hs[li], dst, dst_rng)
            with torch.no_grad():
                y = self.model.layer_forward_rows(
                    li, block, hs[li], src, x_dst, epoch, self.cfg.dropout, self.cfg.seed, training
                )
        else:
            x_src, y = self._run_layer(li, block, x, epoch, training, keep)
            if keep:
                self.saved[li].append((block, src, dst, x_src, y))
        t1 = now_us()
        out = y.detach().to(hs[li + 1].device, hs[li + 1].dtype)  # streamed bins: copied out
        put_rows(hs[li + 1], self._ids(block, DST_IDS, dst), dst_rng, out)
        self._bin_computed(block, li, b, t0, c0, t1, phase="fwd" if training else "eval")

    def _run_layer(self, li: int, block, x, epoch: int, training: bool, grad: bool):
        """``(x_src, y)``: layer ``li``'s forward on a bin's inputs, recorded for autograd when ``grad`` (the
        inputs then need gradients above layer 0). A static layer 0 keeps its block's rows on the first call,
        forward or (``inter`` computes layer 0 forward in its own node-id bins) backward's recomputation: else
        every epoch gathers them again."""
        x_src = self._ready_input(x)
        if grad:
            x_src.requires_grad_(li > 0)
        static = self._static(li)
        with torch.set_grad_enabled(grad):
            y = self.model.layer_forward(
                li, block, x_src, epoch, self.cfg.dropout, self.cfg.seed, training, static_input=static
            )
        if static and not block.has_cached(LAYER0_ROWS):
            self._keep_layer0_rows(block, x_src)
        return x_src, y

    def _bin_computed(self, block, li: int, b: int, t0: int, c0: float, end: int, **args) -> None:
        """A bin's compute, from ``t0`` (and thread CPU time ``c0``) until now, into the timers, and its span (to
        ``end``) into the trace."""
        self.timers["compute"] += (now_us() - t0) / 1e6
        self.timers["compute_cpu"] += time.thread_time() - c0
        self.tracer.span(
            "compute",
            f"L{li} bin {b}",
            t0,
            end,
            layer=li,
            bin=b,
            nodes=int(block.n_dst),
            arcs=int(block.nnz),
            srcs=int(block.n_src),
            **args,
        )

    def _keep_layer0_rows(self, block, x_src: torch.Tensor) -> None:
        """After a block's first static layer-0 call: keep only the input rows the layer will still read."""
        if self.layer0_rows == "dst":
            rows = x_src[: block.n_dst]
            # a gathered or copied-in input (or one rebuilt every epoch): keep only these rows
            if (
                block.cached(SRC_RANGE, lambda: None) is None
                or not self.knobs.feature_cache
                or x_src.device != self.home
            ):
                rows = rows.clone()
            # else: a view of the layer-0 input, which stays as it is while the feature cache holds it
        else:
            rows = x_src.new_empty((0, x_src.shape[1]))
        block.cached(LAYER0_ROWS, lambda: rows)

    def _forward_layerwise(self, epoch, training, hs, sends, recvs) -> None:
        L = self.num_layers
        for li in range(L):
            # kept activations must not alias h (receives write into it)
            view_ok = not (self.keep and training)
            for b, block, src, dst, x in self._bins_read_ahead(li, hs[li], view_ok):
                self._compute(li, block, x, src, dst, hs, epoch, training, b)
                if li < L - 1:
                    sends[li].produced(dst.numpy(), hs[li + 1])
            if li < L - 1:
                recvs[li].poll(self._place_arrived(recvs[li], hs[li + 1]), block=True)

    def _bins_read_ahead(self, li: int, h, view_ok: bool):
        """The plan's bins of layer ``li`` in order, each as ``(b, block, src, dst, inputs)``: under
        ``intra``/``multi`` the next bin's inputs (streamed: its structure too, read from disk) are prepared on
        the prefetch thread while the caller computes this one. Inputs as :meth:`_gather` gives them."""
        bins = self.blocks[li]

        def prepare(b):
            block, src, dst = bins[b]
            return block, src, dst, self._gather(h, src, li, b, block, view_ok)

        def submit(b):
            return self.pool.submit(prepare, b) if self.pool is not None else prepare(b)

        nxt = submit(0) if len(bins) else None
        for b in range(len(bins)):
            ready = nxt.result() if self.pool is not None else nxt
            if b + 1 < len(bins):
                nxt = submit(b + 1)
            yield (b, *ready)

    def _forward_eager(self, epoch, training, hs, sends, recvs) -> None:
        """``multi`` and ``inter``: the forward's bins (:meth:`_forward_bins`), each as soon as every input of
        its rows is present, lowest layer first; under ``multi`` the next runnable bin's inputs are gathered (on
        CUDA copied in) meanwhile.

        Readiness is counted per bin (:meth:`_bin_dependencies`): a bin of layer l waits for the layer-(l-1)
        bins computing its rows' local inputs and for the messages carrying their remote inputs; finishing
        a bin or receiving a message decrements the counts of the bins that read it — no walk over arcs or
        rows. The bins are fixed for the run, so their blocks, transposes and caches are built once."""
        L = self.num_layers
        bins = self._forward_bins()
        deps = self._bin_dependencies()
        wait = [np.zeros(len(bins[0]), dtype=np.int64)] + [deps[li].wait.copy() for li in range(1, L)]
        ran = [np.zeros(len(bins[li]), dtype=np.bool_) for li in range(L)]
        left = [len(bins[li]) for li in range(L)]

        def next_bin():
            return lowest_runnable_bin(wait, ran, left)

        def arrived(li):  # message m of layer li's outputs: remote inputs of layer li+1
            dep, place = deps[li + 1], self._place_arrived(recvs[li], hs[li + 1])

            def consume(nodes, rows, m):
                place(nodes, rows, m)
                wait[li + 1][dep.dependents(dep.n_bins_before + m)] -= 1

            return consume

        view_ok = not (self.keep and training)
        prefetched: dict[tuple[int, int], Future] = {}  # (layer, plan bin) → its inputs, gathered meanwhile
        while any(left):
            for li in range(L - 1):
                if not recvs[li].finished:
                    recvs[li].poll(arrived(li))
            li, b = next_bin()
            if li is None:  # nothing is ready: block until the lowest layer still expecting messages gets one
                pending = [k for k, r in enumerate(recvs) if not r.finished]
                if not pending:
                    raise RuntimeError("eager schedule stalled: no ready rows and no message to wait for")
                recvs[pending[0]].take_one(arrived(pending[0]))
                continue
            _, block, src, dst = bins[li][b]
            ran[li][b] = True
            left[li] -= 1
            x = prefetched.pop((li, b), None)
            x = x.result() if x is not None else self._gather(hs[li], src, li, b, block, view_ok)
            if self.pool is not None and not prefetched:  # gather the next runnable bin meanwhile
                nl, nb = next_bin()
                if nl is not None and self._needs_gather(nl, bins[nl][nb][1]):
                    _, nblock, nsrc, _ = bins[nl][nb]
                    prefetched[(nl, nb)] = self.pool.submit(
                        self._gather, hs[nl], nsrc, nl, nb, nblock, view_ok
                    )
            self._compute(li, block, x, src, dst, hs, epoch, training, b)
            if li < L - 1:
                # first: peers get the rows before the bookkeeping
                sends[li].produced(dst.numpy(), hs[li + 1])
                wait[li + 1][deps[li + 1].dependents(b)] -= 1

    def _bin_dependencies(self) -> list:
        """Per layer l ≥ 1 (index 0: None), what each forward bin of layer l (:meth:`_forward_bins`) waits
        for (:func:`..dataflow.bin_dependencies`); computed once."""
        if self._bin_deps is None:
            d, bins = self.data, self._forward_bins()
            self._bin_deps = [None] + [
                bin_dependencies(
                    [b[0] for b in bins[li - 1]],
                    [b[0] for b in bins[li]],
                    self.row_ptr,
                    self.edge_src,
                    d.table(f"fwd_recv_{li - 1}"),
                    d.num_owned,
                    d.num_remote,
                )
                for li in range(1, self.num_layers)
            ]
        return self._bin_deps

    def _forward_bins(self) -> list[list[tuple[np.ndarray, Block, torch.Tensor, torch.Tensor]]]:
        """The bins the eager schedules run forward, per layer, as (rows, block, src, dst) with ``rows`` the
        bin's row positions, ascending: ``multi`` runs the plan's bins (runs of the priority list, shared with
        backward); ``inter`` bins of consecutive node ids, packed up to the plan's limit of each layer (a node
        count, or bytes for the layer's per-node cost). Fixed for the run: built on first use, with their blocks."""
        if self._fwd_bins is None:
            if self.schedule.order == "id":
                self._fwd_bins = [self._id_order_bins(li) for li in range(self.num_layers)]
            else:
                self._fwd_bins = [
                    [
                        (np.arange(int(lp.bin_ptr[b]), int(lp.bin_ptr[b + 1]), dtype=np.int64), *blk)
                        for b, blk in enumerate(self.blocks[li])
                    ]
                    for li, lp in enumerate(self.data.layers)
                ]
        return self._fwd_bins

    def _id_order_bins(self, li: int) -> list[tuple[np.ndarray, Block, torch.Tensor, torch.Tensor]]:
        """``inter``'s bins of layer ``li``: owned nodes in node-id order (the shard numbers them by ascending
        global id; ``WorkerData.new_id`` gives each one's row here), cut where the plan's limit is reached."""
        d = self.data
        n_own, n_local = d.num_owned, d.num_owned + d.num_remote
        layer = d.plan.meta["layers"][li]
        fixed = layer["bin_limit_bytes"] is None
        limit = int(layer["bin_limit_nodes"]) if fixed else n_own
        limit_bytes = NO_LIMIT if fixed else int(layer["bin_limit_bytes"])
        prio, order = d.priority, d.new_id  # order: the rows in node-id order
        # what each bin holds on the device, its distinct sources counted as it grows (the plan's rule, for the
        # device kind the plan's bins were sized for)
        cost = bin_costs(self.ctx.spec, bins_device(self.ctx.options))[li]
        packed = pack_bins(
            cost, self.row_ptr, self.edge_src, prio, n_local, limit_bytes, order=order, max_rows=limit
        )
        mark = np.full(n_local, -1, dtype=np.int64)
        out = []
        # rows ascending inside a bin: the block keeps the BFS locality
        for b in range(packed.num_bins):
            rows = np.sort(order[packed.bounds[b] : packed.bounds[b + 1]])
            src, indptr, indices = build_block_arrays(rows, self.row_ptr, self.edge_src, prio, mark)
            out.append(
                (rows, *self._block(torch.from_numpy(src), torch.from_numpy(prio[rows]), indptr, indices))
            )
        return out

    # --- backward ------------------------------------------------------------------------------------------
    def _backward(self, grad_out: torch.Tensor, epoch: int) -> None:
        d = self.data
        self.phase = "bwd"
        for li in reversed(range(self.num_layers)):
            h = self.inputs[li]
            need_input_grad = li > 0
            grad_in = self._node_rows(h.shape[0], h.shape[1], h.dtype) if need_input_grad else None
            if need_input_grad:
                sends = self._sender(f"bwd_send_{li}", "bwd", li, d.num_remote)
                recvs = self.bwd_recvs.pop(li) if li in self.bwd_recvs else self._bwd_receives(li, h.dtype)
            else:
                sends = recvs = None
            uses = self.uses.copy()
            # bins in plan order, not reversed: the priority list puts first the nodes peers need, which on a
            # symmetric graph are the nodes that read remote inputs, so the gradients peers wait for go out first;
            # recompute: the next bin's inputs are gathered (on CUDA copied in) while this one computes; a layer
            # that reads its rows in place (READ_ROWS) gathers nothing
            bins = (
                ((step, blk, s, t, xs, ys, None) for step, (blk, s, t, xs, ys) in enumerate(self.saved[li]))
                if self.saved[li]
                else (
                    (step, blk, s, t, None, None, x)
                    for step, blk, s, t, x in self._bins_read_ahead(li, h, True)
                )
            )
            for step, block, src, dst, x_saved, y_saved, x in bins:
                t0, c0 = now_us(), time.thread_time()
                dst_rng = block.cached(DST_RANGE, lambda: None)
                dst_ids = self._ids(block, DST_IDS, dst)
                grad_rows = take_rows(grad_out, dst_ids, dst_rng)
                if (
                    x is not READ_ROWS
                    and y_saved is None
                    and self._kept_output_suffices(li, block, need_input_grad)
                ):
                    # a cached layer 0: the weight gradients come from its kept output and cached aggregation,
                    # with no forward run again (bitwise what the recomputation below gives)
                    done = self.model.layer_backward_static(
                        li,
                        block,
                        self._ready_input(x),
                        take_rows(self.inputs[li + 1], dst_ids, dst_rng),
                        grad_rows.to(dtype=h.dtype),
                        self.cfg.dropout,
                    )
                    if not done:
                        raise RuntimeError(f"layer {li}: the block's cached aggregation is missing")
                    grad_src, recomputed = None, False
                elif x is READ_ROWS:  # the aggregation reads h itself, forward and backward: no gathered copy
                    recomputed = True
                    grad_src = self.model.layer_backward_rows(
                        li,
                        block,
                        h,
                        src,
                        take_rows(h, dst, dst_rng),
                        grad_rows.to(dtype=h.dtype),
                        epoch,
                        self.cfg.dropout,
                        self.cfg.seed,
                        need_input_grad,
                    )
                else:
                    recomputed = y_saved is None
                    x_src, y = (
                        self._run_layer(li, block, x, epoch, True, True) if recomputed else (x_saved, y_saved)
                    )
                    torch.autograd.backward(y, grad_rows.to(y.device, dtype=y.dtype))
                    grad_src = x_src.grad.to(h.device, h.dtype) if need_input_grad else None
                if need_input_grad:
                    add_rows(
                        grad_in,
                        self._ids(block, SRC_IDS, src),
                        block.cached(SRC_RANGE, lambda: None),
                        grad_src,
                    )
                self._bin_computed(block, li, step, t0, c0, now_us(), phase="bwd", recomputed=recomputed)
                if need_input_grad:
                    finished = self._remote_grads_final(src.numpy(), block, uses)
                    if len(finished):
                        sends.produced(finished, grad_in, index_offset=d.num_owned)
                if self.stream and dst_rng is not None:  # its output gradients: no other bin reads them
                    release_rows(grad_out, dst_rng.start, dst_rng.stop)
            if self.stream:  # what this layer alone read: its output gradients and its input rows
                release_rows(grad_out)
                release_rows(h if li > 0 else None)
            if need_input_grad:
                # peers' contributions added in table order, not arrival order: bitwise the same run at any K
                recvs.finish_in_order(lambda nodes, rows, _m, g=grad_in: add_rows(g, nodes, None, rows))
                sends.wait()
                grad_out = grad_in[: d.num_owned]
                if self.stream:  # the remote rows' gradients and their messages: sent
                    release_rows(grad_in, d.num_owned)
                    release_rows(sends.packed)
                sends = recvs = None  # their buffers go before the next layer's gradients are made
            if li + 1 < self.num_layers:
                self.inputs[li + 1] = None  # kept until now: a cached layer li reads its outputs in backward
            self.saved[li] = []
        self.inputs[0] = None

    def _kept_output_suffices(self, li: int, block, need_input_grad: bool) -> bool:
        """Layer ``li``'s backward can skip the recomputation: its inputs are fixed and their aggregation is
        cached on the block (``--layer0-cache``), no input gradient is needed, and its output rows are kept as
        the next layer's input (SAGE, GCN; :meth:`GNNModel.layer_backward_static`)."""
        return (
            not need_input_grad
            and li + 1 < self.num_layers
            and self._static(li)
            and block.has_cached(LAYER0_ROWS)
        )

    def _remote_grads_final(self, src: np.ndarray, block, uses: np.ndarray) -> np.ndarray:
        """Remote sources whose every reading arc has now been backpropagated (remote offsets)."""
        cand, arcs = block.cached(REMOTE_USES, lambda: self._remote_uses(src, block))
        if len(cand) == 0:
            return cand
        uses[cand] -= arcs
        return cand[uses[cand] == 0]

    def _remote_uses(self, src: np.ndarray, block) -> tuple[np.ndarray, np.ndarray]:
        """The remote offsets a block reads and how many of its arcs read each (fixed: computed once)."""
        n_own = self.data.num_owned
        if not (src >= n_own).any():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        remote_arcs = src[block.indices.cpu().numpy()]
        return np.unique(remote_arcs[remote_arcs >= n_own] - n_own, return_counts=True)


STRATEGY = G3Strategy
