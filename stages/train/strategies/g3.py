"""The G3 hybrid-parallel strategy: bins, peer-to-peer sharing of layer outputs and gradients, and the
multi-level pipeline of G3 §5 (``--pipeline none|intra|inter|multi``).

Forward. Every receive of the forward is posted up front (under the background schedules, backward's too). A
bin's outputs that peers need are sent the moment the last node of a plan message is computed (non-blocking;
``none`` waits for each send). The schedules:

* ``none``  — layer by layer, the plan's bins in priority order, sends waited one by one;
* ``intra`` — layer by layer (each layer waits for all its inputs), the plan's bins in priority order, the
  next bin's inputs gathered (and on CUDA copied in on a side stream) while the current bin computes;
* ``inter`` — eager inter-layer computation: a node of layer k+1 is *ready* once all its inputs are present
  (local ones computed, remote ones received), and a bin runs as soon as all its nodes are, before layer k's
  last bins finish; bins of consecutive node ids, packed up to the plan's bin limit once for the run, no
  prefetching;
* ``multi`` — both: eager inter-layer computation over the plan's bins (priority order), with the
  intra-layer prefetch.

Every schedule only reorders work: each bin still sees all in-edges of its nodes, so the result is the same.

Backward, per layer in reverse: the plan's bins in plan order (or, with ``--backward keep``, the forward's
own bins with their saved activations, in the order they ran) — not reversed, so that the bins that read
remote inputs (first in the priority list) return those inputs' gradients to their owners first; each bin's input gradients are scattered (owned rows stay, remote
rows are returned to their owners as soon as the last bin that reads them is done), weight gradients
accumulate locally, and the loop all-reduces them. With ``--backward recompute`` (default) a bin's forward
is recomputed, so its memory stays within the bin limit in backward too; with ``intra`` and ``multi`` the
next bin's inputs are gathered (on CUDA copied in) while one bin recomputes and backpropagates, as in forward.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from ...plan.bins import LayerShape, node_bytes
from ..block import Block
from ..comm import TAG_SHIFT, Exchanger, phase_tag
from ..config import local_workers
from ..dataflow import (
    bin_dependency_pairs,
    bins_in_order,
    build_block_arrays,
    complete_messages,
    lowest_runnable_bin,
    node_messages,
)
from ..kernels import add_rows_at, backend, put_rows_at, take_rows_at, use_serial_kernels_in_this_thread
from ..trace import Tracer, now_us
from .base import Strategy, WorkerData

LAYER0_ROWS = "g3_layer0_input_rows"  # block cache key: the layer-0 input rows a static layer still reads
SRC_RANGE, DST_RANGE = "g3_src_range", "g3_dst_range"  # block cache keys: the ids as a slice, when contiguous
READ_ROWS = object()  # a bin input that is not gathered: the layer reads h[src] itself (GNNModel.reads_rows)
REMOTE_USES = "g3_remote_uses"  # block cache key: (remote offsets read by the block, arcs reading each)


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


def _rows_csr(bins) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, rows) of a layer's bins given as (rows, ...) tuples: bin b's rows are ``rows[ptr[b]:ptr[b+1]]``."""
    ptr = np.zeros(len(bins) + 1, dtype=np.int64)
    np.cumsum([len(b[0]) for b in bins], out=ptr[1:])
    rows = np.concatenate([b[0] for b in bins]) if bins else np.zeros(0, dtype=np.int64)
    return ptr, rows.astype(np.int64, copy=False)


def _row_bin(bins, n_rows: int) -> np.ndarray:
    """The bin of every row, for a layer's bins given as (rows, ...) tuples (each row in exactly one bin)."""
    out = np.full(n_rows, -1, dtype=np.int64)
    for b, entry in enumerate(bins):
        out[entry[0]] = b
    if (out < 0).any():
        raise RuntimeError("forward bins do not cover every owned row")
    return out


def _helper_thread_init() -> None:
    """A helper thread (prefetch, sender, receiving) runs its torch and numba kernels on one thread, off the
    cores the compute kernels use: its numba row copies as plain loops (``use_serial_kernels_in_this_thread``),
    its torch ops with one thread — with OpenMP the setting is the calling thread's own; elsewhere it would set
    the whole process's, so it is left alone there. Call :func:`_keep_caller_threads` in the thread that
    starts helpers first."""
    use_serial_kernels_in_this_thread()
    if torch.backends.openmp.is_available():
        torch.set_num_threads(1)


def _keep_caller_threads() -> None:
    """Fix the calling (compute) thread's torch thread count before any helper thread sets its own: a thread
    takes the process-wide count at its first parallel op, and a helper's ``set_num_threads(1)`` changes
    that count, so a compute thread that had not run one yet would go on with a single thread."""
    torch.get_num_threads()


class _DaemonThreads:
    """A fixed set of helper threads, started once, that run submitted jobs; daemons, so that a worker whose
    peer died can still exit while a thread waits on that peer (a ``ThreadPoolExecutor`` joins its threads at
    exit)."""

    def __init__(self, size: int, name: str):
        _keep_caller_threads()
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(size):
            threading.Thread(target=self._run, daemon=True, name=f"{name}-{i}").start()

    def _run(self) -> None:
        _helper_thread_init()
        while True:
            fn, args = self.jobs.get()
            fn(*args)

    def submit(self, fn, *args) -> None:
        self.jobs.put((fn, args))


@dataclass(frozen=True)
class Schedule:
    eager: bool  # inter-layer: start next-layer nodes as soon as their inputs are present
    order: str  # "priority" (BFS, peer-needed first) or "id" (consecutive node ids)
    prefetch: bool  # intra-layer: gather/copy the next bin while this one computes
    async_send: bool  # sends progress in the background (False: each send is waited for)
    # intra-layer, the outputs' side: messages are packed and posted by a sender thread, and the forward's
    # arrived rows copied into place by the receiving threads, while the compute thread goes on
    background_copies: bool


SCHEDULES = {
    "none": Schedule(eager=False, order="priority", prefetch=False, async_send=False, background_copies=False),
    "intra": Schedule(eager=False, order="priority", prefetch=True, async_send=True, background_copies=True),
    "inter": Schedule(eager=True, order="id", prefetch=False, async_send=True, background_copies=False),
    "multi": Schedule(eager=True, order="priority", prefetch=True, async_send=True, background_copies=True),
}


@dataclass
class BinDependencies:
    """What the forward bins of one layer wait for (``multi``, ``inter``): dependency ``i`` is bin ``i`` of the layer
    before (``i < n_bins_before``) or message ``i - n_bins_before`` of that layer's ``fwd_recv`` table; the bins
    waiting for it are ``bins[ptr[i]:ptr[i + 1]]``; ``wait[b]``: how many dependencies bin ``b`` has."""

    ptr: np.ndarray
    bins: np.ndarray
    n_bins_before: int
    wait: np.ndarray

    def dependents(self, i: int) -> np.ndarray:
        return self.bins[self.ptr[i] : self.ptr[i + 1]]


class _Sends:
    """One layer's outgoing messages: each is sent when its last node has been produced."""

    def __init__(self, table, n_nodes: int, phase: int, strategy: G3Strategy, label: str, blocking: bool):
        # the table's static structure, built once per table (an epoch makes a _Sends per layer and phase); the
        # entry holds the table too, so its id cannot be reused while the entry lives
        cache = strategy.send_structure
        if id(table) not in cache:
            cache[id(table)] = (table, table.message_slices(), torch.from_numpy(table.nodes),
                                *node_messages(table.nodes, table.msgs[:, 2], n_nodes))
        _, self.slices, self.nodes, self.msg_ptr, self.msg_ids = cache[id(table)]
        self.remaining = table.msgs[:, 2].copy()
        self.phase, self.s, self.label, self.blocking = phase, strategy, label, blocking
        self.pending: list[tuple] = []
        self.queued: list = []  # the sender thread's jobs (futures) for this table

    def produced(self, nodes: np.ndarray, rows: torch.Tensor, index_offset: int = 0) -> None:
        """``rows[nodes + index_offset]`` are final: send every message they complete — on the sender thread
        when there is one (``rows`` must then not change at those positions, which holds: a bin's outputs and
        a finished remote gradient are written once)."""
        if len(self.slices) == 0:
            return
        if self.s.sender is None or self.blocking:
            self._produce(nodes, rows, index_offset, now_us())
        else:
            self.queued.append(self.s.sender.submit(self._produce, nodes, rows, index_offset, now_us()))

    def _produce(self, nodes: np.ndarray, rows: torch.Tensor, index_offset: int, t_ready: float) -> None:
        for m in complete_messages(nodes, self.msg_ptr, self.msg_ids, self.remaining):
            self._send(int(m), rows, index_offset, t_ready)

    def _send(self, m: int, rows: torch.Tensor, index_offset: int, t_ready: float) -> None:
        # the message is in flight from t_ready, when its rows were final, not from when it was packed: time
        # spent queued for the sender thread counts as communication
        step, peer, sl = self.slices[m]
        t0, t_pack = t_ready, now_us()
        payload = take_rows_at(rows, self.nodes[sl] + index_offset)
        work = dist.isend(payload, dst=peer, group=self.s.ex.group, tag=(self.phase << TAG_SHIFT) + step)
        self.s.tracer.span("pack", f"{self.label} → {peer}", t_pack, now_us(), step=step, peer=peer,
                           thread=threading.current_thread().name)
        key = (self.phase, self.s.rank, peer, step)
        stats = self.s.ex.stats
        nbytes = payload.numel() * payload.element_size()
        stats.bytes_sent += nbytes
        stats.messages += 1
        stats.per_layer_sent[self.label] = stats.per_layer_sent.get(self.label, 0) + nbytes
        if self.blocking:
            self.s.wait_for(work)
            self.s.tracer.message(key, "send", t0, now_us())
            self.s.tracer.span("send", f"{self.label} → {peer}", t0, now_us(), step=step, peer=peer)
        else:
            self.pending.append((work, payload, key, t0, peer, step))

    def wait(self) -> None:
        for job in self.queued:
            job.result()  # raises what the sender thread raised
        self.queued.clear()
        for work, _payload, key, t0, peer, step in self.pending:
            self.s.wait_for(work)
            self.s.tracer.message(key, "send", t0, now_us())
            self.s.tracer.span("send", f"{self.label} → {peer}", t0, now_us(), step=step, peer=peer)
        self.pending.clear()
        if (self.remaining > 0).any():
            raise RuntimeError(f"{self.label}: {int((self.remaining > 0).sum())} messages never completed")


class _Receives:
    """One layer's incoming messages, all posted at once.

    gloo's point-to-point works cannot be polled (``is_completed`` only turns true inside ``wait``), so one
    receiving thread per sending peer (from the strategy's pool, kept across layers and epochs: starting
    threads anew each layer cost up to ~20 ms of a busy machine at the epoch start) waits for that peer's
    messages in step order and queues them; the compute thread takes them from the queue between bins
    (``poll``) or blocks on it when it has nothing else to do. ``unpack(nodes, rows)``, when given, runs on
    that thread for each arrived message before it is queued (the forward's row copies under the
    background-copy schedules; the rows it writes are read only once the compute thread has taken the
    message).
    """

    def __init__(self, table, phase: int, width: int, dtype, strategy: G3Strategy, label: str, unpack=None):
        self.s, self.label, self.phase, self.unpack = strategy, label, phase, unpack
        self.queue: queue.Queue = queue.Queue()
        self.outstanding = 0
        by_peer: dict[int, list] = {}
        nodes = torch.from_numpy(table.nodes)
        for m, (step, peer, sl) in enumerate(table.message_slices()):
            buf = torch.empty((sl.stop - sl.start, width), dtype=dtype)
            work = dist.irecv(buf, src=peer, group=strategy.ex.group, tag=(phase << TAG_SHIFT) + step)
            by_peer.setdefault(peer, []).append((work, buf, nodes[sl], (phase, peer, strategy.rank, step), m, now_us()))
            self.outstanding += 1
        for items in by_peer.values():
            strategy.receivers.submit(self._wait_all, items)

    def _wait_all(self, items) -> None:
        for work, buf, nodes, key, m, t_post in items:
            try:
                work.wait()  # exactly once: a second wait on a gloo recv waits for another message
                t_done = now_us()
                if self.unpack is not None:
                    self.unpack(nodes, buf)
                    self.s.tracer.span("unpack", f"{self.label} ← {key[1]}", t_done, now_us(), step=key[3],
                                       peer=key[1], thread=threading.current_thread().name)
            except Exception as exc:  # surfaced in the compute thread
                self.queue.put(exc)
                return
            self.queue.put((buf, nodes, key, m, t_post, t_done))

    def _consume(self, item, consume) -> None:
        """``consume(nodes, rows, m)`` for an arrived message (``m``: its index in the table's message order)."""
        if isinstance(item, Exception):
            raise item
        buf, nodes, key, m, t_post, t_done = item
        self.outstanding -= 1
        self.s.ex.stats.bytes_recv += buf.numel() * buf.element_size()
        self.s.tracer.message(key, "recv", t_post, t_done)
        self.s.tracer.span("recv", f"{self.label} ← {key[1]}", t_post, t_done, step=key[3], peer=key[1])
        t0 = now_us()
        consume(nodes, buf, m)
        self.s.tracer.span("unpack", f"{self.label} ← {key[1]}", t0, now_us(), step=key[3], peer=key[1],
                           thread=threading.current_thread().name)

    def poll(self, consume, block: bool = False) -> int:
        """Hand every arrived message to ``consume(nodes, rows, m)``; with ``block``, wait for all of them."""
        done = 0
        while self.outstanding:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                if not block:
                    break
                item = self.wait_one()
            self._consume(item, consume)
            done += 1
        return done

    def wait_one(self):
        """Block until the next message of this table arrives (counted as waiting time)."""
        t0 = now_us()
        try:
            item = self.queue.get(timeout=self.s.cfg.timeout)
        except queue.Empty:
            raise RuntimeError(f"{self.label}: no message from a peer for {self.s.cfg.timeout:.0f} s") from None
        t1 = now_us()
        self.s.ex.stats.wait_seconds += (t1 - t0) / 1e6
        self.s.tracer.span("wait", f"wait {self.label}", t0, t1)
        return item

    @property
    def finished(self) -> bool:
        return self.outstanding == 0


class G3Strategy(Strategy):
    name = "g3"

    def __init__(self, data: WorkerData, model, exchanger: Exchanger, cfg):
        super().__init__(data, model, exchanger, cfg)
        self.rank = data.rank
        self.schedule = SCHEDULES[cfg.pipeline]
        self.num_layers = len(data.layers)
        self.tracer = Tracer(self.rank)
        self.phase = "fwd"  # the pass running now: "fwd", "eval" or "bwd" (gather spans carry it)
        self.blocks = [self._plan_blocks(li) for li in range(self.num_layers)]
        self.remote_features: torch.Tensor | None = None
        self.keep = cfg.backward == "keep"
        self.saved: list[list] = [[] for _ in range(self.num_layers)]
        self.inputs: list[torch.Tensor | None] = [None] * self.num_layers
        self.bwd_recvs: dict[int, _Receives] = {}  # backward's receives, posted early by a training forward
        _keep_caller_threads()  # before the helper threads below start
        self.pool = self._gather_pool(cfg)
        # intra/multi: messages are packed and posted on this thread while the compute thread goes on (the CPU
        # side of the copy-out overlap); one thread, so a table's messages go out in the order they complete
        self.sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="g3-send", initializer=_helper_thread_init) \
            if self.schedule.background_copies else None
        # the receiving threads: as many as there can be (table, peer) pairs open at once — every forward and
        # backward table of a training epoch (fewer could leave a table's messages unreceived behind another's)
        world = dist.get_world_size() if dist.is_initialized() else 1
        self.receivers = _DaemonThreads(2 * max(1, self.num_layers - 1) * (world - 1), "g3-recv")
        self.copy_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        # layer 0 reads the fixed input features: SAGE/GCN aggregate them once per block and keep the result
        # (--layer0-cache); from then on the bin's input is only the rows the layer still reads, kept too
        self.layer0_rows = self.model.static_input_rows(0) if cfg.layer0_cache_enabled() else None
        self.send_structure: dict[int, tuple] = {}  # id(table) → (table, slices, nodes, msg_ptr, msg_ids)
        self._fwd_bins: list | None = None  # eager schedules: per layer, the forward's bins (built on first use)
        self._bin_deps: list | None = None  # eager schedules: per layer, what each of those bins waits for
        self._init_dataflow()

    def _gather_pool(self, cfg) -> ThreadPoolExecutor | None:
        """The prefetch thread of ``intra``/``multi`` (see ``TrainConfig.prefetch_enabled``); its own torch ops
        run on one thread, so a gather never spreads over the cores the compute kernels use."""
        local = local_workers(dist.get_world_size() if dist.is_initialized() else 1)
        if not (self.schedule.prefetch and cfg.prefetch_enabled(torch.get_num_threads(), local)):
            return None
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="g3-gather", initializer=_helper_thread_init)

    # --- static structure ----------------------------------------------------------------------------------
    def _make_block(self, rows_lo: int, rows_hi: int, src: np.ndarray, indptr: np.ndarray, indices: np.ndarray):
        d = self.data
        src_t = torch.from_numpy(np.ascontiguousarray(src, dtype=np.int64))
        dst_t = torch.from_numpy(np.ascontiguousarray(d.priority[rows_lo:rows_hi], dtype=np.int64))
        return self._block(src_t, dst_t, indptr, indices)

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
        block._cache[SRC_RANGE] = id_range(src_t)  # bins of consecutive rows (all plan bins): slices, no gathers
        block._cache[DST_RANGE] = id_range(dst_t)
        return block, src_t, dst_t

    def _plan_blocks(self, li: int) -> list[tuple[Block, torch.Tensor, torch.Tensor]]:
        """(block, source local ids, destination local ids) of every plan bin of layer ``li``."""
        d, lp = self.data, self.data.layers[li]
        row_ptr = d.row_ptr
        out = []
        for b in range(lp.num_bins):
            r0, r1 = int(lp.bin_ptr[b]), int(lp.bin_ptr[b + 1])
            e0, e1 = int(row_ptr[r0]), int(row_ptr[r1])
            s0, s1 = int(lp.src_ptr[b]), int(lp.src_ptr[b + 1])
            block, src, dst = self._make_block(r0, r1, lp.src[s0:s1], row_ptr[r0 : r1 + 1] - row_ptr[r0],
                                               lp.indices[e0:e1])
            out.append((block, src, dst))
        return out

    def _init_dataflow(self) -> None:
        """Every arc's source and how many arcs read each remote row (backward's message completion)."""
        d = self.data
        n_own, n_local = d.num_owned, d.num_owned + d.num_remote
        self.edge_src = self._edge_sources()
        self.row_ptr = np.asarray(d.row_ptr, dtype=np.int64)
        self.uses = np.bincount(self.edge_src, minlength=n_local).astype(np.int64)[n_own:]

    def _edge_sources(self) -> np.ndarray:
        """Local source id of every arc, rows in priority order (the plan stores positions per bin instead)."""
        d = self.data
        lp = d.layers[0]
        out = np.empty(int(d.row_ptr[-1]), dtype=np.int64)
        for b in range(lp.num_bins):
            r0, r1 = int(lp.bin_ptr[b]), int(lp.bin_ptr[b + 1])
            e0, e1 = int(d.row_ptr[r0]), int(d.row_ptr[r1])
            s0 = int(lp.src_ptr[b])
            out[e0:e1] = lp.src[s0 + np.asarray(lp.indices[e0:e1], dtype=np.int64)]
        return out

    # --- helpers -------------------------------------------------------------------------------------------
    def wait_for(self, work) -> None:
        t0 = now_us()
        work.wait()
        t1 = now_us()
        self.ex.stats.wait_seconds += (t1 - t0) / 1e6
        self.tracer.span("wait", "wait", t0, t1)

    def _static(self, li: int) -> bool:
        return li == 0 and self.layer0_rows is not None

    def _needs_gather(self, layer: int, block) -> bool:
        """False where the bin's inputs already live with its block (cached layer-0 rows)."""
        return not (self._static(layer) and block.has_cached(LAYER0_ROWS))

    def _gather(self, h: torch.Tensor, src: torch.Tensor, layer: int, b: int, block=None,
                view_ok: bool = False, read_rows: bool = False) -> torch.Tensor:
        """The bin's input rows. ``view_ok``: the caller only reads them before ``h`` changes again (no
        autograd graph keeps them), so contiguous sources may be a view of ``h`` instead of a copy.
        ``read_rows``: a forward without gradient, or backward's recomputation, which can let the layer read
        ``h[src]`` itself (``READ_ROWS``, see ``GNNModel.reads_rows`` and ``layer_backward_rows``) instead of
        gathering a copy."""
        if block is not None and not self._needs_gather(layer, block):
            return block.cached(LAYER0_ROWS, None)  # no gather, no copy: the rows live with the block
        rng = block.cached(SRC_RANGE, lambda: None) if (view_ok and block is not None) else None
        if read_rows and rng is None and self._reads_rows(layer, h):
            return READ_ROWS  # no gather: the layer's aggregation reads h[src] itself
        t0 = now_us()
        x = take_rows(h, src, rng).detach() if rng is not None else take_rows_at(h, src)
        t1 = now_us()
        self.tracer.span("gather", f"L{layer} bin {b}", t0, t1, layer=layer, bin=b, phase=self.phase,
                         prefetched=threading.current_thread() is not threading.main_thread(),
                         view=rng is not None)  # a view: contiguous sources, nothing copied
        if self.device.type != "cuda":
            return x
        with torch.cuda.stream(self.copy_stream):
            x_dev = x.pin_memory().to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.copy_stream)
        self.tracer.span("copy_in", f"L{layer} bin {b}", t1, now_us(), layer=layer, bin=b)
        return (x_dev, event)

    def _reads_rows(self, layer: int, h: torch.Tensor) -> bool:
        """The CPU layer can read its sources from ``h`` itself: in a forward without gradient
        (``layer_forward_rows``) and in backward's recomputation (``layer_backward_rows``)."""
        return (self.device.type == "cpu" and backend(h) == "numba" and not self._static(layer)
                and self.model.reads_rows(layer))

    def _ready_input(self, x):
        if isinstance(x, tuple):  # CUDA: wait for the side-stream copy on the compute stream
            x_dev, event = x
            torch.cuda.current_stream(self.device).wait_event(event)
            return x_dev
        return x

    def _input_features(self) -> torch.Tensor:
        """Layer-0 input rows for owned + remote nodes; remote features are fetched once and cached."""
        d = self.data
        if self.remote_features is None or not self.cfg.feature_cache:
            self.layer0_input = None
            buf = torch.zeros((d.num_remote, d.features.shape[1]), dtype=d.features.dtype)
            out = self.ex.outgoing(d.table("features_send"), "features", 0)
            inc = self.ex.incoming(d.table("features_recv"), "features", 0, d.features.shape[1], d.features.dtype)
            out.send_step(0, d.features)
            inc.finish(lambda nodes, rows: put_rows_at(buf, nodes, rows))
            out.wait()
            self.remote_features = buf
        if getattr(self, "layer0_input", None) is None:  # built once while the cache holds: it is read-only
            self.layer0_input = torch.cat([d.features, self.remote_features]) if d.num_remote else d.features
        return self.layer0_input

    # --- forward -------------------------------------------------------------------------------------------
    def forward(self, epoch: int, training: bool) -> torch.Tensor:
        d = self.data
        L = self.num_layers
        kind = "fwd" if training else "eval"
        self.phase = kind  # for the gather spans (the prefetch thread reads it too)
        h0 = self._input_features()
        hs = [h0]
        for li in range(L):
            rows = d.num_owned + (0 if li == L - 1 else d.num_remote)
            h = torch.empty((rows, self.model.widths[li + 1]), dtype=h0.dtype)  # owned rows: all computed
            h[d.num_owned :].zero_()
            hs.append(h)
        sends = [_Sends(d.table(f"fwd_send_{li}"), d.num_owned, phase_tag(kind, li), self, f"{kind}{li}",
                        blocking=not self.schedule.async_send) for li in range(L - 1)]
        recvs = [_Receives(d.table(f"fwd_recv_{li}"), phase_tag(kind, li), self.model.widths[li + 1], h0.dtype,
                           self, f"{kind}{li}",
                           # background copies: the receiving thread copies a message's rows in as it arrives
                           unpack=self._put_remote_rows(hs[li + 1]) if self.schedule.background_copies else None)
                 for li in range(L - 1)]
        # backward's receives are posted with the forward's: gloo moves a message only once its receive is
        # posted, so a peer that reaches backward first delivers its gradients while this worker still runs its
        # forward and loss, instead of after (`none` keeps each phase's communication in the phase)
        self.bwd_recvs = {li: self._bwd_receives(li, h0.dtype) for li in range(1, L)} \
            if training and self.schedule.async_send else {}
        self.inputs = hs[:L]
        self.saved = [[] for _ in range(L)]
        if not self.schedule.eager:
            run = self._forward_layerwise
        else:
            run = self._forward_eager
        run(epoch, training, hs, sends, recvs)
        for s in sends:
            s.wait()
        return hs[L][: d.num_owned]

    def _put_remote_rows(self, h: torch.Tensor):
        n_own = self.data.num_owned
        return lambda nodes, rows: put_rows_at(h, nodes + n_own, rows)

    def _place_arrived(self, recv: _Receives, h: torch.Tensor):
        """``consume(nodes, rows, m)`` for a forward message on the compute thread: copies its rows into ``h``
        unless the receiving thread already did."""
        put = self._put_remote_rows(h) if recv.unpack is None else None

        def consume(nodes, rows, _m):
            if put is not None:
                put(nodes, rows)
        return consume

    def _bwd_receives(self, li: int, dtype: torch.dtype) -> _Receives:
        """The gradients peers send for this worker's remote inputs of layer ``li`` (width: that layer's input)."""
        return _Receives(self.data.table(f"bwd_recv_{li}"), phase_tag("bwd", li), self.model.widths[li], dtype,
                         self, f"bwd{li}")

    def _compute(self, li: int, block, x, src, dst, hs, epoch, training, b):
        """One bin: layer forward, outputs into h[li+1] (and kept for backward when asked)."""
        keep = self.keep and training
        t0, c0 = now_us(), time.thread_time()
        if x is READ_ROWS:  # forward only: the aggregation reads h[src] in place of a gathered copy
            x_dst = take_rows(hs[li], dst, block.cached(DST_RANGE, lambda: None))
            with torch.no_grad():
                y = self.model.layer_forward_rows(li, block, hs[li], src, x_dst, epoch, self.cfg.dropout,
                                                  self.cfg.seed, training)
            self._finish_bin(li, block, y, dst, hs, t0, c0, b, training)
            return
        x_src = self._ready_input(x)
        if keep:
            x_src.requires_grad_(li > 0)
        static = self._static(li)
        with torch.set_grad_enabled(keep):
            y = self.model.layer_forward(li, block, x_src, epoch, self.cfg.dropout, self.cfg.seed, training,
                                         static_input=static)
        if static and not block.has_cached(LAYER0_ROWS):
            self._keep_layer0_rows(block, x_src)
        if keep:
            self.saved[li].append((block, src, dst, x_src, y))
        self._finish_bin(li, block, y, dst, hs, t0, c0, b, training)

    def _finish_bin(self, li, block, y, dst, hs, t0, c0, b, training) -> None:
        """A bin's outputs into ``h[li + 1]``; its compute span and timers."""
        t1 = now_us()
        out = y.detach()
        if out.device.type == "cuda":
            out = out.to("cpu", non_blocking=False)
        put_rows(hs[li + 1], dst, block.cached(DST_RANGE, lambda: None), out.to(hs[li + 1].dtype))
        self.timers["compute"] += (now_us() - t0) / 1e6
        self.timers["compute_cpu"] += time.thread_time() - c0
        self.tracer.span("compute", f"L{li} bin {b}", t0, t1, layer=li, bin=b, nodes=int(block.n_dst),
                         phase="fwd" if training else "eval")

    def _keep_layer0_rows(self, block, x_src: torch.Tensor) -> None:
        """After a block's first static layer-0 call: keep only the input rows the layer will still read."""
        if self.layer0_rows == "dst":
            rows = x_src[: block.n_dst]
            if block.cached(SRC_RANGE, lambda: None) is None or not self.cfg.feature_cache or x_src.device.type != "cpu":
                rows = rows.clone()  # a gathered input (or one rebuilt every epoch): keep only these rows
            # else: a view of the layer-0 input, which stays as it is while the feature cache holds it
        else:
            rows = x_src.new_empty((0, x_src.shape[1]))
        block.cached(LAYER0_ROWS, lambda: rows)

    def _forward_layerwise(self, epoch, training, hs, sends, recvs) -> None:
        L = self.num_layers
        for li in range(L):
            bins = self.blocks[li]
            view_ok = not (self.keep and training)  # kept activations must not alias h (receives write into it)
            nxt = self._submit_gather(hs[li], bins[0][1], li, 0, bins[0][0], view_ok, view_ok) if bins else None
            for b, (block, src, dst) in enumerate(bins):
                x = nxt.result() if hasattr(nxt, "result") else nxt
                if b + 1 < len(bins):
                    nxt = self._submit_gather(hs[li], bins[b + 1][1], li, b + 1, bins[b + 1][0], view_ok, view_ok)
                self._compute(li, block, x, src, dst, hs, epoch, training, b)
                if li < L - 1:
                    sends[li].produced(dst.numpy(), hs[li + 1])
            if li < L - 1:
                recvs[li].poll(self._place_arrived(recvs[li], hs[li + 1]), block=True)

    def _submit_gather(self, h, src, li, b, block, view_ok: bool, read_rows: bool = False):
        """The bin's inputs (see :meth:`_gather`), gathered now or (``intra``/``multi``) on the prefetch thread."""
        if self.pool is not None:
            return self.pool.submit(self._gather, h, src, li, b, block, view_ok, read_rows)
        return self._gather(h, src, li, b, block, view_ok, read_rows)

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
        prefetched: dict[tuple[int, int], object] = {}  # (layer, plan bin) → its inputs, gathered meanwhile
        while any(left):
            for li in range(L - 1):
                if not recvs[li].finished:
                    recvs[li].poll(arrived(li))
            li, b = next_bin()
            if li is None:
                self._idle_until_message(recvs, arrived)
                continue
            _, block, src, dst = bins[li][b]
            ran[li][b] = True
            left[li] -= 1
            x = prefetched.pop((li, b), None)
            x = x.result() if x is not None else self._gather(hs[li], src, li, b, block, view_ok, view_ok)
            if self.pool is not None and not prefetched:  # gather the next runnable bin meanwhile
                nl, nb = next_bin()
                if nl is not None and self._needs_gather(nl, bins[nl][nb][1]):
                    _, nblock, nsrc, _ = bins[nl][nb]
                    prefetched[(nl, nb)] = self.pool.submit(self._gather, hs[nl], nsrc, nl, nb, nblock, view_ok,
                                                            view_ok)
            self._compute(li, block, x, src, dst, hs, epoch, training, b)
            if li < L - 1:
                sends[li].produced(dst.numpy(), hs[li + 1])  # first: peers get the rows before the bookkeeping
                wait[li + 1][deps[li + 1].dependents(b)] -= 1

    def _bin_dependencies(self) -> list:
        """Per layer l ≥ 1 (index 0: None), what each forward bin of layer l (:meth:`_forward_bins`) waits
        for — the layer-(l-1) bins that compute its rows' own nodes and owned in-neighbours, and the
        ``fwd_recv_{l-1}`` messages that carry its remote in-neighbours — as :class:`BinDependencies`. Computed
        once (numba, one pass over the arcs, memory of the order of the bins' dependencies, not of the arcs)."""
        if self._bin_deps is None:
            d = self.data
            n_own = d.num_owned
            bins = self._forward_bins()
            self._bin_deps = [None]
            for li in range(1, self.num_layers):
                n_prev, n_bins = len(bins[li - 1]), len(bins[li])
                table = d.table(f"fwd_recv_{li - 1}")
                slices = table.message_slices()
                msg_of = np.full(d.num_remote, -1, dtype=np.int64)  # remote offset → its message
                for m, (_, _, sl) in enumerate(slices):
                    msg_of[np.asarray(table.nodes[sl], dtype=np.int64)] = m
                if (msg_of < 0).any():
                    raise RuntimeError(f"plan: fwd_recv_{li - 1} does not carry every remote input of layer {li}")
                n_deps = n_prev + len(slices)
                bin_ptr, bin_rows = _rows_csr(bins[li])
                waiting, on = bin_dependency_pairs(bin_ptr, bin_rows, self.row_ptr, self.edge_src,
                                                   _row_bin(bins[li - 1], n_own), msg_of, n_own, n_prev, n_deps)
                order = np.argsort(on, kind="stable")
                ptr = np.zeros(n_deps + 1, dtype=np.int64)
                np.cumsum(np.bincount(on, minlength=n_deps), out=ptr[1:])
                self._bin_deps.append(BinDependencies(ptr, waiting[order], n_prev,
                                                      np.bincount(waiting, minlength=n_bins).astype(np.int64)))
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
                    [(np.arange(int(lp.bin_ptr[b]), int(lp.bin_ptr[b + 1]), dtype=np.int64), *blk)
                     for b, blk in enumerate(self.blocks[li])]
                    for li, lp in enumerate(self.data.layers)]
        return self._fwd_bins

    def _id_order_bins(self, li: int) -> list[tuple[np.ndarray, Block, torch.Tensor, torch.Tensor]]:
        """``inter``'s bins of layer ``li``: owned nodes in node-id order (the shard numbers them by ascending
        global id; ``WorkerData.new_id`` gives each one's row here), cut where the plan's limit is reached."""
        d = self.data
        n_own, n_local = d.num_owned, d.num_owned + d.num_remote
        layer = d.plan.meta["layers"][li]
        fixed = layer["bin_limit_bytes"] is None
        limit = int(layer["bin_limit_nodes"]) if fixed else n_own
        limit_bytes = np.iinfo(np.int64).max if fixed else int(layer["bin_limit_bytes"])
        cost = node_bytes(np.diff(d.row_ptr).astype(np.int64), LayerShape(**d.plan.plan_meta["layers"][li]))
        prio = np.asarray(d.priority, dtype=np.int64)
        mark = np.full(n_local, -1, dtype=np.int64)
        out = []
        # rows ascending inside a bin: the block keeps the BFS locality
        for rows in bins_in_order(np.asarray(d.new_id, dtype=np.int64), limit, cost, limit_bytes):
            src, indptr, indices = build_block_arrays(rows, self.row_ptr, self.edge_src, prio, mark)
            out.append((rows, *self._block(torch.from_numpy(src), torch.from_numpy(prio[rows]), indptr, indices)))
        return out

    def _idle_until_message(self, recvs, arrived) -> None:
        """Nothing is ready: block until the lowest layer still expecting messages gets one."""
        pending = [li for li, r in enumerate(recvs) if not r.finished]
        if not pending:
            raise RuntimeError("eager schedule stalled: no ready rows and no message to wait for")
        li = pending[0]
        recvs[li]._consume(recvs[li].wait_one(), arrived(li))

    # --- backward ------------------------------------------------------------------------------------------
    def backward(self, grad_out: torch.Tensor, epoch: int) -> None:
        d = self.data
        self.phase = "bwd"
        for li in reversed(range(self.num_layers)):
            h = self.inputs[li]
            need_input_grad = li > 0
            grad_in = torch.zeros_like(h) if need_input_grad else None
            phase = phase_tag("bwd", li)
            sends = _Sends(d.table(f"bwd_send_{li}"), d.num_remote, phase, self, f"bwd{li}",
                           blocking=not self.schedule.async_send) if need_input_grad else None
            if not need_input_grad:
                recvs = None
            else:
                recvs = self.bwd_recvs.pop(li) if li in self.bwd_recvs else self._bwd_receives(li, h.dtype)
            uses = self.uses.copy()
            # bins in plan order, not reversed: the priority list puts first the nodes peers need, which on a
            # symmetric graph are the nodes that read remote inputs, so the gradients peers wait for go out first
            bins = self.saved[li] if self.saved[li] else [(blk, s, t, None, None) for blk, s, t in self.blocks[li]]
            # recompute: the next bin's inputs are gathered (on CUDA copied in) while this one computes; a layer
            # that reads its rows in place (READ_ROWS) gathers nothing
            nxt = self._submit_gather(h, bins[0][1], li, 0, bins[0][0], True, True) \
                if bins and bins[0][4] is None else None
            for step, (block, src, dst, x_saved, y_saved) in enumerate(bins):
                t0, c0 = now_us(), time.thread_time()
                dst_rng = block.cached(DST_RANGE, lambda: None)
                grad_rows = take_rows(grad_out, dst, dst_rng)
                x = None
                if y_saved is not None:
                    x_src, y = x_saved, y_saved
                else:  # recompute the bin's forward with its inputs as leaves
                    x = nxt.result() if hasattr(nxt, "result") else nxt
                    if step + 1 < len(bins):
                        nxt = self._submit_gather(h, bins[step + 1][1], li, step + 1, bins[step + 1][0], True, True)
                if x is not READ_ROWS and y_saved is None and self._kept_output_suffices(li, block, need_input_grad):
                    # a cached layer 0: the weight gradients come from its kept output and cached aggregation,
                    # with no forward run again (bitwise what the recomputation below gives)
                    done = self.model.layer_backward_static(li, block, self._ready_input(x),
                                                            take_rows(self.inputs[li + 1], dst, dst_rng),
                                                            grad_rows.to(dtype=h.dtype), self.cfg.dropout)
                    if not done:
                        raise RuntimeError(f"layer {li}: the block's cached aggregation is missing")
                    grad_src, recomputed = None, False
                elif x is READ_ROWS:  # the aggregation reads h itself, forward and backward: no gathered copy
                    recomputed = True
                    grad_src = self.model.layer_backward_rows(li, block, h, src, take_rows(h, dst, dst_rng),
                                                              grad_rows.to(dtype=h.dtype), epoch, self.cfg.dropout,
                                                              self.cfg.seed, need_input_grad)
                else:
                    recomputed = y_saved is None
                    if y_saved is None:
                        x_src = self._ready_input(x)
                        x_src.requires_grad_(need_input_grad)
                        with torch.enable_grad():
                            y = self.model.layer_forward(li, block, x_src, epoch, self.cfg.dropout, self.cfg.seed,
                                                         True, static_input=self._static(li))
                        if self._static(li) and not block.has_cached(LAYER0_ROWS):
                            # `inter` computes layer 0 forward in its own node-id bins, so the plan's bins first
                            # see the fixed features here: keep their rows now, or every epoch gathers them again
                            self._keep_layer0_rows(block, x_src)
                    torch.autograd.backward(y, grad_rows.to(y.device, dtype=y.dtype))
                    grad_src = x_src.grad.to("cpu", dtype=h.dtype) if need_input_grad else None
                if need_input_grad:
                    add_rows(grad_in, src, block.cached(SRC_RANGE, lambda: None), grad_src)
                self.timers["compute"] += (now_us() - t0) / 1e6
                self.timers["compute_cpu"] += time.thread_time() - c0
                self.tracer.span("compute", f"L{li} bin {step}", t0, now_us(), layer=li, bin=step, phase="bwd",
                                 recomputed=recomputed)
                if need_input_grad:
                    finished = self._remote_grads_final(src.numpy(), block, uses)
                    if len(finished):
                        sends.produced(finished, grad_in, index_offset=d.num_owned)
            if need_input_grad:
                recvs.poll(lambda nodes, rows, _m, g=grad_in: add_rows(g, nodes, None, rows), block=True)
                sends.wait()
                grad_out = grad_in[: d.num_owned]
            if li + 1 < self.num_layers:
                self.inputs[li + 1] = None  # kept until now: a cached layer li reads its outputs in backward
            self.saved[li] = []
        self.inputs[0] = None

    def _kept_output_suffices(self, li: int, block, need_input_grad: bool) -> bool:
        """Layer ``li``'s backward can skip the recomputation: its inputs are fixed and their aggregation is
        cached on the block (``--layer0-cache``), no input gradient is needed, and its output rows are kept as
        the next layer's input (SAGE, GCN; :meth:`GNNModel.layer_backward_static`)."""
        return not need_input_grad and li + 1 < self.num_layers and self._static(li) and block.has_cached(LAYER0_ROWS)

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
