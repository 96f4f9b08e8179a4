"""The one transport every strategy uses, and where its bytes, waits and trace spans are counted.

* **Static peer-to-peer tables** (G3 §6.2; ``stages.common.plan_artifact.Table``): a :class:`TableSender` sends
  each message of a table the moment its last node has been produced (non-blocking ``isend``, optionally
  packed on a sender thread); a :class:`TableReceiver` posts every receive of a table at once, and receiving
  threads wait for them. Every message is a contiguous ``[count, width]`` host tensor on the P2P group (gloo,
  also when training on CUDA: rows move through host buffers, as in G3 §6.2), tagged ``(phase << 20) + step``
  so both ends agree without headers. Whatever is *accumulated* from several peers is added in the table's
  message order (:meth:`TableReceiver.finish_in_order`), never in arrival order, so a run is bitwise
  reproducible at any worker count.
* **Collectives**: :meth:`Transport.all_to_all` (variable rows per peer), :meth:`Transport.broadcast`,
  :meth:`Transport.all_reduce_max` for small flag vectors.
* **Dynamic fetch** of rows by global node id through a :class:`PartitionBook` (global id → owner, local id):
  sizes, then ids, then rows (:meth:`Transport.fetch`).

Bytes are counted per phase label (``fwd0``, ``bwd1``, ``features0``, ``eval0``, …) in :class:`CommStats`;
time blocked on communication is ``wait_seconds`` and a ``wait`` span; messages in flight are ``send`` /
``recv`` spans and tracer messages (for the share of communication hidden under compute).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from stages.common.errors import G3InputError
from stages.common.partition_artifact import load_assignment
from stages.common.plan_artifact import Table
from stages.kits.runtime.dataflow import complete_messages, node_messages
from stages.kits.runtime.kernels import put_rows_at, take_rows_at
from stages.kits.runtime.threads import DaemonThreads, helper_executor
from stages.kits.runtime.trace import Tracer, now_us

TAG_SHIFT = 20
EXCHANGE_TAG = 1000 << TAG_SHIFT  # all-to-all exchanges (no table phase comes near it)
PHASE_KINDS = {"features": 0, "fwd": 1, "bwd": 2, "eval": 3}


def phase_tag(kind: str, layer: int) -> int:
    """A phase number per (kind, layer): features, forward, backward and evaluation of each layer are separate."""
    return PHASE_KINDS[kind] + 4 * (layer + 1)


@dataclass
class CommStats:
    bytes_sent: int = 0
    bytes_recv: int = 0
    wait_seconds: float = 0.0
    messages: int = 0
    per_phase_sent: dict[str, int] = field(default_factory=dict)
    per_phase_recv: dict[str, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.bytes_sent = self.bytes_recv = self.messages = 0
        self.wait_seconds = 0.0
        self.per_phase_sent = {}
        self.per_phase_recv = {}

    def sent(self, label: str, nbytes: int, messages: int = 1) -> None:
        self.bytes_sent += nbytes
        self.messages += messages
        self.per_phase_sent[label] = self.per_phase_sent.get(label, 0) + nbytes

    def received(self, label: str, nbytes: int) -> None:
        self.bytes_recv += nbytes
        self.per_phase_recv[label] = self.per_phase_recv.get(label, 0) + nbytes


def host(t: torch.Tensor) -> torch.Tensor:
    """``t`` in host memory, where the P2P group's messages travel (gloo): a device-resident worker's rows are
    copied out when they leave it, and received rows are placed into device tensors by the row helpers
    (``kernels.put_rows_at``/``add_rows_at``), which copy them in."""
    return t if t.device.type == "cpu" else t.cpu()


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class PartitionBook:
    """Global node id → (owner, the owner's shard-local id), from a partition's ``assignment.npy``: owned
    nodes are numbered by ascending global id in every shard, so the local id is the node's rank among its
    owner's nodes."""

    def __init__(self, assignment: np.ndarray, k: int):
        self.owner = np.asarray(assignment, dtype=np.int64)
        order = np.argsort(self.owner, kind="stable")
        starts = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.owner, minlength=k), out=starts[1:])
        self.local = np.empty(len(self.owner), dtype=np.int64)
        self.local[order] = np.arange(len(self.owner), dtype=np.int64) - starts[self.owner[order]]
        self.k = k

    @classmethod
    def open(cls, part: str | Path, k: int) -> PartitionBook:
        owner = load_assignment(part)
        if owner is None:
            raise G3InputError("the partition has no assignment.npy (re-run g3 partition)", path=part)
        return cls(owner, k)


class Transport:
    """A worker's communication: one process group (gloo for P2P), its stats and its tracer."""

    def __init__(self, group, rank: int, world: int, tracer: Tracer | None = None, timeout: float = 60.0):
        self.group = group
        self.rank = rank
        self.world = world
        self.tracer = tracer or Tracer(rank)
        self.timeout = timeout
        self.stats = CommStats()
        self._receiving: DaemonThreads | None = None
        self._sender = None

    # --- helpers ----------------------------------------------------------------------------------------
    @property
    def receiving_threads(self) -> DaemonThreads:
        """The threads that wait for peers' messages (one per open (table, peer) pair, started on demand)."""
        if self._receiving is None:
            self._receiving = DaemonThreads("recv")
        return self._receiving

    def sender_thread(self):
        """The thread that packs and posts messages when a strategy asks for background sends (one thread:
        a table's messages go out in the order they complete)."""
        if self._sender is None:
            self._sender = helper_executor("send")
        return self._sender

    def wait_for(self, work, label: str = "wait") -> None:
        """Block on one work, counted as waiting time."""
        self.waiting(label, work.wait)

    def waiting(self, label: str, call):
        """``call()``, its time counted as waiting (a wait span ``label``)."""
        t0 = now_us()
        out = call()
        t1 = now_us()
        self.stats.wait_seconds += (t1 - t0) / 1e6
        self.tracer.span("wait", label, t0, t1)
        return out

    # --- static P2P tables ------------------------------------------------------------------------------
    def sender(self, table: Table, kind: str, layer: int, n_nodes: int, **options) -> TableSender:
        """The sends of ``table`` in phase ``kind`` of ``layer`` (``options``: :class:`TableSender`'s)."""
        return TableSender(self, table, kind, layer, n_nodes, **options)

    def receiver(self, table: Table, kind: str, layer: int, width: int, dtype, **options) -> TableReceiver:
        """The receives of ``table`` in phase ``kind`` of ``layer`` (``options``: :class:`TableReceiver`'s)."""
        return TableReceiver(self, table, kind, layer, width, dtype, **options)

    def exchange_table(
        self, send: Table, recv: Table, kind: str, layer: int, rows: torch.Tensor, out: torch.Tensor
    ) -> None:
        """Send ``rows[send nodes]`` to their peers and put the rows received into ``out[recv nodes]``, all at
        once (the layer-0 input features)."""
        incoming = self.receiver(recv, kind, layer, rows.shape[1], rows.dtype)
        outgoing = self.sender(send, kind, layer, len(rows))
        outgoing.send_all(rows)
        incoming.finish_in_order(lambda nodes, buf, _m: put_rows_at(out, nodes, buf))
        outgoing.wait()

    # --- collectives ------------------------------------------------------------------------------------
    def all_to_all(self, chunks: list[torch.Tensor], recv_rows: list[int], label: str) -> list[torch.Tensor]:
        """``chunks[q]`` (rows, any width, same for all) go to worker q; returns what each peer sent here, whose
        row counts ``recv_rows[q]`` this worker knows in advance. Own chunk is passed through untouched."""
        width = tuple(chunks[0].shape[1:])
        return self.all_to_all_v(chunks, [(int(r), *width) for r in recv_rows], label)

    def all_to_all_v(
        self, chunks: list[torch.Tensor], recv_shapes: list[tuple[int, ...]], label: str
    ) -> list[torch.Tensor]:
        """:meth:`all_to_all` with any shape per peer, both ways (one dtype): ``chunks[q]`` goes to worker q;
        returns what each peer sent here, shaped as ``recv_shapes[q]`` says. Tensor parallelism sends a row
        block of different column widths to each peer. Own chunk is passed through untouched."""
        return self.start_all_to_all_v(chunks, recv_shapes, label).wait()

    def start_all_to_all_v(
        self, chunks: list[torch.Tensor], recv_shapes: Sequence[tuple[int, ...]], label: str
    ) -> PendingAllToAll:
        """:meth:`all_to_all_v` posted without waiting (P3's pipeline overlaps a batch's partial activations in
        flight with another batch's compute): :meth:`PendingAllToAll.wait` returns what the peers sent. Posted
        exchanges of one group complete in the order they were posted, the same on every rank."""
        if self.world == 1:
            return PendingAllToAll(self, None, list(chunks), recv_shapes, [], label)
        dtype = chunks[0].dtype
        send = [
            host(c.reshape(-1).contiguous()) if q != self.rank else c.new_empty(0, device="cpu")
            for q, c in enumerate(chunks)
        ]
        in_sizes = [int(np.prod(s)) if q != self.rank else 0 for q, s in enumerate(recv_shapes)]
        out = torch.empty(sum(in_sizes), dtype=dtype)
        work = self._post_exchange(send, in_sizes, out)
        self.stats.sent(label, sum(_nbytes(c) for c in send), messages=sum(1 for c in send if len(c)))
        self.stats.received(label, _nbytes(out))
        pending = PendingAllToAll(self, work, list(chunks), recv_shapes, in_sizes, label)
        pending.out, pending.sent = out, send  # both buffers live until the exchange completes
        return pending

    def _post_exchange(self, send: list[torch.Tensor], in_sizes: list[int], out: torch.Tensor) -> _Works:
        """Every receive (into ``out``, split by ``in_sizes``) and every send (contiguous tensors) of an all-to-all,
        posted at once as point-to-point messages on their own tag: both directions of every link move together.

        Not gloo's ``all_to_all_single``: measured on emulated hosts (docs/BENCHMARKS.md, "On an emulated
        network"), it moved the two directions one after the other — 26 MiB each way between two hosts took
        4.58 s at 100 Mbit/s, the sum of both directions at line rate, against 2.37 s this way, one direction's.
        Exchanges of one group are matched in the order they are posted (one tag: per peer, first in, first
        out), as a collective's are."""
        works = []
        for q, part in enumerate(out.split(in_sizes)):
            if q != self.rank and len(part):
                works.append(dist.irecv(part, src=q, group=self.group, tag=EXCHANGE_TAG))
        for q, chunk in enumerate(send):
            if q != self.rank and len(chunk):
                works.append(dist.isend(chunk, dst=q, group=self.group, tag=EXCHANGE_TAG))
        return _Works(works)

    def broadcast(self, tensor: torch.Tensor, src: int, label: str) -> torch.Tensor:
        """``tensor`` of worker ``src`` into every worker's ``tensor`` (same shape everywhere). Counted as the
        root sending its rows to each other worker and each receiving them once."""
        self.waiting(
            f"broadcast {label} from {src}", lambda: dist.broadcast(tensor, src=src, group=self.group)
        )
        if self.rank == src:
            self.stats.sent(label, _nbytes(tensor) * (self.world - 1), messages=self.world - 1)
        else:
            self.stats.received(label, _nbytes(tensor))
        return tensor

    def all_reduce_max(self, values: torch.Tensor, label: str) -> torch.Tensor:
        """Element-wise maximum over workers of a small int64 vector (flags), counted as every worker sending
        and receiving it once."""
        return self._all_reduce(values.to(torch.int64).clone(), label, dist.ReduceOp.MAX)

    def all_reduce_sum(self, value: int, label: str) -> int:
        """An integer summed over workers (a count), counted like :meth:`all_reduce_max`."""
        return int(self._all_reduce(torch.tensor([int(value)], dtype=torch.int64), label, dist.ReduceOp.SUM))

    def _all_reduce(self, out: torch.Tensor, label: str, op) -> torch.Tensor:
        if self.world > 1:
            self.waiting(f"all-reduce {label}", lambda: dist.all_reduce(out, op=op, group=self.group))
            self.stats.sent(label, _nbytes(out))
            self.stats.received(label, _nbytes(out))
        return out

    # --- dynamic fetch by global id ---------------------------------------------------------------------
    def fetch(
        self, ids: np.ndarray, book: PartitionBook, serve, width: int, dtype: torch.dtype, label: str
    ) -> torch.Tensor:
        """Rows of the nodes ``ids`` (global ids, any owners, repeats allowed), in that order. Collective: every
        worker calls it, each with its own ids. ``serve(local_ids)`` returns this worker's rows for its own
        nodes (shard-local ids, int64 array) as a ``[n, width]`` tensor. Three rounds: how many ids each owner
        gets, the ids, the rows; a worker's own nodes are served without communication."""
        ids = np.asarray(ids, dtype=np.int64)
        owner = book.owner[ids]
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=self.world).astype(np.int64)
        wanted = ids[order]
        per_owner = np.split(wanted, np.cumsum(counts)[:-1])
        sizes = self.all_to_all(
            [torch.tensor([[c]], dtype=torch.int64) for c in counts], [1] * self.world, f"{label}-sizes"
        )
        incoming = [int(s.reshape(-1)[0]) if q != self.rank else int(counts[q]) for q, s in enumerate(sizes)]
        asked = self.all_to_all(
            [torch.from_numpy(p.reshape(-1, 1)) for p in per_owner], incoming, f"{label}-ids"
        )
        answers = [serve(book.local[a.reshape(-1).numpy()]).to(dtype).reshape(len(a), width) for a in asked]
        rows = self.all_to_all(answers, [int(c) for c in counts], label)
        out = torch.empty((len(ids), width), dtype=dtype)
        out[torch.from_numpy(order)] = torch.cat(rows) if rows else out[:0]
        return out


class _Works:
    """Several point-to-point works waited for as one."""

    def __init__(self, works: list):
        self.works = works

    def wait(self) -> None:
        for w in self.works:
            w.wait()


class PendingAllToAll:
    """An all-to-all in flight (:meth:`Transport.start_all_to_all_v`); :meth:`wait` blocks (counted as waiting
    time) and returns what each peer sent, own chunk passed through."""

    def __init__(self, tr: Transport, work, chunks, recv_shapes, in_sizes, label: str):
        self.tr, self.work, self.chunks, self.label = tr, work, chunks, label
        self.recv_shapes, self.in_sizes = recv_shapes, in_sizes
        self.out = self.sent = None
        self._result: list[torch.Tensor] | None = None

    def wait(self) -> list[torch.Tensor]:
        if self._result is None:
            if self.work is None:
                self._result = self.chunks
            else:
                self.tr.wait_for(self.work, f"all-to-all {self.label}")
                parts = self.out.split(self.in_sizes)
                self._result = [
                    self.chunks[q] if q == self.tr.rank else parts[q].view(self.recv_shapes[q])
                    for q in range(self.tr.world)
                ]
                self.sent = None
        return self._result


def nodes_tensor(table: Table) -> torch.Tensor:
    """``table.nodes`` as a tensor sharing its memory, made once per table (tables are used every step)."""
    made = table.__dict__.get("_nodes_tensor")
    if made is None:
        made = table.__dict__["_nodes_tensor"] = torch.from_numpy(table.nodes)
    return made


class TableSender:
    """The sends of one table: each message leaves when its last node has been produced (:meth:`produced`),
    or all at once (:meth:`send_all`). ``blocking``: each send is waited for; ``background``: messages are
    packed and posted on the transport's sender thread while the caller goes on.

    ``alloc(rows, width, dtype)``, when given, makes one buffer for every message of the table (packed into its
    rows at the table's positions; host rows only): a streamed worker's is a file-backed array, because a
    message sent without waiting is held until :meth:`wait` and a layer's messages add up to 4 × width bytes
    per row peers read — memory the kernel could not otherwise page out. Without it each message is a tensor of
    its own, freed once its send has been waited for."""

    def __init__(
        self,
        tr: Transport,
        table: Table,
        kind: str,
        layer: int,
        n_nodes: int,
        blocking: bool = False,
        background: bool = False,
        structure: dict | None = None,
        alloc=None,
    ):
        # the table's static structure, built once per table when the caller keeps ``structure`` (an epoch
        # makes a sender per layer and phase); the entry holds the table, so its id cannot be reused meanwhile
        cache = structure if structure is not None else {}
        if id(table) not in cache:
            cache[id(table)] = (
                table,
                table.message_slices(),
                nodes_tensor(table),
                *node_messages(table.nodes, table.msgs[:, 2], n_nodes),
            )
        _, self.slices, self.nodes, self.msg_ptr, self.msg_ids = cache[id(table)]
        self.remaining = table.msgs[:, 2].copy()
        self.tr, self.blocking = tr, blocking
        self.phase, self.label = phase_tag(kind, layer), f"{kind}{layer}"
        self.pool = tr.sender_thread() if background and not blocking else None
        self.pending: list[tuple] = []
        self.queued: list = []  # the sender thread's jobs (futures) for this table
        self.alloc, self.packed = alloc, None
        self.alloc_lock = threading.Lock()  # messages are packed on the caller's or the sender thread

    def produced(self, nodes: np.ndarray, rows: torch.Tensor, index_offset: int = 0) -> None:
        """``rows[nodes + index_offset]`` are final: send every message they complete — on the sender thread
        when there is one (``rows`` must then not change at those positions, which holds: a bin's outputs and
        a finished remote gradient are written once)."""
        if len(self.slices) == 0:
            return
        if self.pool is None:
            self._produce(nodes, rows, index_offset, now_us())
        else:
            self.queued.append(self.pool.submit(self._produce, nodes, rows, index_offset, now_us()))

    def send_all(self, rows: torch.Tensor, index_offset: int = 0) -> None:
        """Every message of the table now: ``rows`` holds all of its nodes."""
        t = now_us()
        for m in range(len(self.slices)):
            self.remaining[m] = 0
            self._send(m, rows, index_offset, t)

    def _produce(self, nodes: np.ndarray, rows: torch.Tensor, index_offset: int, t_ready: float) -> None:
        for m in complete_messages(nodes, self.msg_ptr, self.msg_ids, self.remaining):
            self._send(int(m), rows, index_offset, t_ready)

    def _send(self, m: int, rows: torch.Tensor, index_offset: int, t_ready: float) -> None:
        # the message is in flight from t_ready, when its rows were final, not from when it was packed: time
        # spent queued for the sender thread counts as communication
        step, peer, sl = self.slices[m]
        tracer = self.tr.tracer
        t_pack = now_us()
        payload = host(take_rows_at(rows, self.nodes[sl] + index_offset, self._packed_slot(rows, sl)))
        work = dist.isend(payload, dst=peer, group=self.tr.group, tag=(self.phase << TAG_SHIFT) + step)
        tracer.span(
            "pack",
            f"{self.label} → {peer}",
            t_pack,
            now_us(),
            step=step,
            peer=peer,
            thread=threading.current_thread().name,
        )
        key = (self.phase, self.tr.rank, peer, step)
        self.tr.stats.sent(self.label, _nbytes(payload))
        if self.blocking:
            self._sent(work, key, t_ready, peer, step)
        else:
            self.pending.append((work, payload, key, t_ready, peer, step))

    def _sent(self, work, key: tuple, t0: float, peer: int, step: int) -> None:
        """Wait for one send (counted as waiting) and trace it as in flight from ``t0``."""
        self.tr.wait_for(work)
        self.tr.tracer.message(key, "send", t0, now_us())
        self.tr.tracer.span("send", f"{self.label} → {peer}", t0, now_us(), step=step, peer=peer)

    def _packed_slot(self, rows: torch.Tensor, sl: slice) -> torch.Tensor | None:
        """Message ``sl``'s rows in the table's buffer (made on first use), or None: a tensor of its own."""
        if self.alloc is None or rows.device.type != "cpu":
            return None
        with self.alloc_lock:
            if self.packed is None:
                self.packed = self.alloc(len(self.nodes), rows.shape[1], rows.dtype)
        return self.packed[sl]

    def wait(self) -> None:
        """Wait until every send has left; every message must have been completed by then."""
        for job in self.queued:
            job.result()  # raises what the sender thread raised
        self.queued.clear()
        for work, _payload, key, t0, peer, step in self.pending:
            self._sent(work, key, t0, peer, step)
        self.pending.clear()
        if (self.remaining > 0).any():
            raise RuntimeError(f"{self.label}: {int((self.remaining > 0).sum())} messages never completed")


def peer_failure(label: str, peer: int, timeout: float, exc: Exception) -> Exception:
    """gloo's error for a receive that did not complete, said in the run's terms: which worker, and what to change.
    A timeout is a peer slower than ``--timeout`` (a streamed layer on a few cores can take minutes); a reset
    connection is a peer that failed or gave up first (its own log says which)."""
    text = str(exc).split(" This is typically")[0].strip()
    if "timeout" in text.lower() or "timed out" in text.lower():
        return RuntimeError(
            f"{label}: no message from worker {peer} within --timeout {timeout:.0f} s; where a worker's layer "
            f"takes longer (streamed bins, several workers per core) give a larger --timeout [gloo: {text}]"
        )
    if "reset by peer" in text or "closed by peer" in text or "Connection closed" in text:
        return RuntimeError(
            f"{label}: worker {peer} closed its connection: it failed, or gave up waiting for another worker "
            f"(see its log) [gloo: {text}]"
        )
    return exc


class TableReceiver:
    """All incoming messages of one table, posted at once: into one buffer ``alloc(rows, width, dtype)`` for the
    whole table when given (a streamed worker's is file-backed: the receives are posted long before their rows
    are read, backward's at the forward's start), else into a tensor per message.

    gloo's point-to-point works cannot be polled (``is_completed`` only turns true inside ``wait``), so one
    receiving thread per sending peer waits for that peer's messages in step order and queues them; the caller
    takes them from the queue between bins (:meth:`poll`), blocks on it (:meth:`wait_one`), or takes all of
    them in table order (:meth:`finish_in_order`). ``unpack(nodes, rows)``, when given, runs on the receiving
    thread for each arrived message before it is queued (the forward's row copies; the rows it writes are
    read only once the caller has taken the message).
    """

    def __init__(
        self, tr: Transport, table: Table, kind: str, layer: int, width: int, dtype, unpack=None, alloc=None
    ):
        self.tr, self.label, self.unpack = tr, f"{kind}{layer}", unpack
        self.phase = phase = phase_tag(kind, layer)
        self.queue: queue.Queue = queue.Queue()
        self.outstanding = 0
        by_peer: dict[int, list] = {}
        nodes = nodes_tensor(table)
        whole = alloc(len(table.nodes), width, dtype) if alloc is not None and len(table.nodes) else None
        for m, (step, peer, sl) in enumerate(table.message_slices()):
            buf = torch.empty((sl.stop - sl.start, width), dtype=dtype) if whole is None else whole[sl]
            work = dist.irecv(buf, src=peer, group=tr.group, tag=(phase << TAG_SHIFT) + step)
            by_peer.setdefault(peer, []).append(
                (work, buf, nodes[sl], (phase, peer, tr.rank, step), m, now_us())
            )
            self.outstanding += 1
        for items in by_peer.values():
            tr.receiving_threads.submit(self._wait_all, items)

    def _wait_all(self, items) -> None:
        for work, buf, nodes, key, m, t_post in items:
            try:
                work.wait()  # exactly once: a second wait on a gloo recv waits for another message
                t_done = now_us()
                if self.unpack is not None:
                    self.unpack(nodes, buf)
                    self._unpack_span(key, t_done)
            except Exception as exc:  # surfaced in the caller's thread
                self.queue.put(peer_failure(self.label, key[1], self.tr.timeout, exc))
                return
            self.queue.put((buf, nodes, key, m, t_post, t_done))

    def _take(self, item) -> tuple:
        if isinstance(item, Exception):
            raise item
        buf, nodes, key, m, t_post, t_done = item
        self.outstanding -= 1
        self.tr.stats.received(self.label, _nbytes(buf))
        self.tr.tracer.message(key, "recv", t_post, t_done)
        self.tr.tracer.span("recv", f"{self.label} ← {key[1]}", t_post, t_done, step=key[3], peer=key[1])
        return item

    def _consume(self, item, consume) -> None:
        """``consume(nodes, rows, m)`` for an arrived message (``m``: its index in the table's message order)."""
        self._unpack(self._take(item), consume)

    def _unpack(self, taken, consume) -> None:
        """``consume(nodes, rows, m)`` for a message taken from the queue, timed as its unpack span."""
        buf, nodes, key, m, _t_post, _t_done = taken
        t0 = now_us()
        consume(nodes, buf, m)
        self._unpack_span(key, t0)

    def _unpack_span(self, key, t0: int) -> None:
        """The trace's span of a message unpacked from ``t0`` until now, on this thread."""
        self.tr.tracer.span(
            "unpack",
            f"{self.label} ← {key[1]}",
            t0,
            now_us(),
            step=key[3],
            peer=key[1],
            thread=threading.current_thread().name,
        )

    def poll(self, consume, block: bool = False) -> int:
        """Hand every arrived message to ``consume(nodes, rows, m)`` in arrival order (for rows that are
        *placed*, never added); with ``block``, wait for all of them."""
        done = 0
        while self.outstanding and (item := self._next(block)) is not None:
            self._consume(item, consume)
            done += 1
        return done

    def _next(self, block: bool):
        """The next arrived message; if none has arrived, the next to arrive (``block``) or None."""
        try:
            return self.queue.get_nowait()
        except queue.Empty:
            return self.wait_one() if block else None

    def finish_in_order(self, consume) -> None:
        """Wait for every message, then hand them to ``consume(nodes, rows, m)`` in the table's message order
        (step, then peer): what is accumulated from several peers is added in the same order in every run."""
        arrived = []
        while self.outstanding:
            arrived.append(self._take(self._next(block=True)))
        for taken in sorted(arrived, key=lambda it: it[3]):
            self._unpack(taken, consume)

    def wait_one(self):
        """Block until the next message of this table arrives (counted as waiting time)."""

        def get():
            try:
                return self.queue.get(timeout=self.tr.timeout)
            except queue.Empty:
                raise RuntimeError(
                    f"{self.label}: no message from a peer within --timeout {self.tr.timeout:.0f} s"
                ) from None

        return self.tr.waiting(f"wait {self.label}", get)

    def take_one(self, consume) -> None:
        """Block for the next message and hand it to ``consume(nodes, rows, m)``."""
        self._consume(self.wait_one(), consume)

    @property
    def finished(self) -> bool:
        return self.outstanding == 0
