"""Asynchronous request/response between workers: every worker serves named handlers on its own threads, and
any worker asks any owner without the other workers taking part (DistDGL's sampler servers, 001 §4.1.4;
ByteGNN's sampling and fetch tasks).

A request is a handler name, a few int64 parameters and numpy arrays; the reply is the arrays the handler
returns, each sent with its dtype and shape, so a reply is exactly as large as what was drawn (no padding).
The wire is plain TCP (why not gloo or torch RPC: docs/DESIGN.md, "DistDGL's sampling service"):

* **Server**: a listening socket per worker (any free port, every interface) and an accepting thread; each
  accepted connection gets a thread that reads a request, calls the handler, writes the reply, until the peer
  closes it. An idle server waits without a timeout (a run may go minutes without a remote draw).
* **Client**: :meth:`SamplingService.submit` sends a request at once and returns a :class:`Pending` whose
  :meth:`Pending.result` reads the reply, so a trainer sends to every owner first and samples its own nodes
  while they work. A connection carries one request at a time (pipelined requests on one socket could
  deadlock, each side writing while the other is not reading); a worker opens another connection to the same
  peer when all of its connections to that peer are busy (threads, several requests in flight).
* **Scheduled serving** (``serve_threads > 0``; ByteGNN's owners, 001 §4.2.2): a request may carry a priority
  (a tuple of ints, smaller first: ByteGNN sends its DAG's (epoch, step, cost), so an owner serves the oldest
  step's requests first, then the cheaper); a connection's thread then only reads it and queues it, and
  ``serve_threads`` threads answer the queue in priority order (arrival order among equals). Without it, or for
  a request without a priority, the connection's thread answers at once (first come, first served).
  ``schedule_stats`` counts, since :meth:`reset_schedule_stats`: ``queued_max`` (the most requests queued at
  once), ``ahead`` (those answered while one that arrived earlier was still waiting) and ``queued``.
* **Addresses**: each worker advertises the address it reaches ``MASTER_ADDR`` from (127.0.0.1 under the
  local launcher), exchanged once with one ``all_gather_object`` when the service starts.
* **Close**: the listening socket and every connection are shut down; threads blocked in ``accept`` or
  ``recv`` wake and end. Nothing waits for a peer: a synchronous run's last request precedes the last
  gradient all-reduce every worker joins, so none can come after a worker closes.

Bytes are counted in the transport's :class:`~stages.kits.runtime.transport.CommStats`: a request's arrays as
``<label>-ids`` sent by the asker, the reply as ``<label>`` sent by the owner (each also as received by the
other side); a client's time blocked on a reply is ``wait_seconds`` and a ``wait`` span.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import socket
import struct
import threading
from collections.abc import Callable

import numpy as np
import torch.distributed as dist

from stages.kits.runtime.trace import Tracer, now_us
from stages.kits.runtime.transport import CommStats

# a handler: (params (int64 array), arrays) -> the reply's arrays
Handler = Callable[[np.ndarray, list[np.ndarray]], list[np.ndarray]]

_COUNT = struct.Struct("<I")
_ARRAY = struct.Struct("<4sI")  # dtype string (e.g. '<i8'), ndim; then ndim uint64 extents
_OK, _FAILED = 0, 1


def advertised_host() -> str:
    """The local address peers reach this worker at: the one that routes to ``MASTER_ADDR`` (no packet is sent:
    a UDP socket's connect only picks the route)."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((socket.gethostbyname(master), 9))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


# --- framing ------------------------------------------------------------------------------------------------
def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    _recv_into(sock, memoryview(buf))
    return buf


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the peer closed the connection")
        got += n


def _send_arrays(sock: socket.socket, arrays: list[np.ndarray]) -> int:
    """Count, every array's header (dtype, shape), then their raw bytes (no copy of a contiguous array);
    returns the bytes sent."""
    parts = [_COUNT.pack(len(arrays))]
    payloads = []
    for a in arrays:
        a = np.ascontiguousarray(a)
        parts.append(
            _ARRAY.pack(a.dtype.str.encode().ljust(4), a.ndim) + struct.pack(f"<{a.ndim}Q", *a.shape)
        )
        payloads.append(a)
    head = b"".join(parts)
    sock.sendall(head)
    for a in payloads:
        if a.nbytes:
            sock.sendall(memoryview(a).cast("B"))
    return len(head) + sum(a.nbytes for a in payloads)


def _wire_size(arrays: list[np.ndarray]) -> int:
    """The bytes :func:`_send_arrays` sends for ``arrays``."""
    return _COUNT.size + sum(_ARRAY.size + 8 * np.ndim(a) + np.asarray(a).nbytes for a in arrays)


def _recv_arrays(sock: socket.socket) -> tuple[list[np.ndarray], int]:
    """What :func:`_send_arrays` sent, each array received straight into its own buffer; and the bytes read."""
    (count,) = _COUNT.unpack(_recv_exact(sock, _COUNT.size))
    arrays, nbytes = [], _COUNT.size
    for _ in range(count):  # the headers, then the payloads in the same order
        dtype, ndim = _ARRAY.unpack(_recv_exact(sock, _ARRAY.size))
        shape = struct.unpack(f"<{ndim}Q", _recv_exact(sock, 8 * ndim))
        arrays.append(np.empty(shape, dtype=np.dtype(dtype.decode().strip())))
        nbytes += _ARRAY.size + 8 * ndim
    for a in arrays:
        if a.nbytes:
            _recv_into(sock, memoryview(a).cast("B"))
        nbytes += a.nbytes
    return arrays, nbytes


def _send_text(sock: socket.socket, text: str) -> None:
    data = text.encode()
    sock.sendall(_COUNT.pack(len(data)) + data)


def _recv_text(sock: socket.socket) -> str:
    (n,) = _COUNT.unpack(_recv_exact(sock, _COUNT.size))
    return _recv_exact(sock, n).decode()


def _split_priority(text: str) -> tuple[str, tuple[int, ...] | None]:
    """``name`` or ``name@p1,p2,…`` (a request's handler and its priority) split."""
    name, _, priority = text.partition("@")
    return name, (tuple(int(x) for x in priority.split(",")) if priority else None)


def _all_gather(address: tuple[str, int]) -> list[tuple[str, int]]:
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, address)
    return everyone


class Pending:
    """A request in flight to one peer; :meth:`result` waits for its reply (once)."""

    def __init__(self, service: SamplingService, peer: int, sock: socket.socket, label: str):
        self.service, self.peer, self.sock, self.label = service, peer, sock, label

    def result(self) -> list[np.ndarray]:
        svc = self.service
        t0 = now_us()
        try:
            status = _recv_exact(self.sock, 1)[0]
            failure = _recv_text(self.sock) if status == _FAILED else None
            arrays, nbytes = _recv_arrays(self.sock) if failure is None else ([], 0)
        except OSError as exc:  # ConnectionError and socket timeouts included
            self.sock.close()
            why = f"no reply within {svc.timeout:.0f} s" if isinstance(exc, TimeoutError) else str(exc)
            raise RuntimeError(f"worker {self.peer} did not answer a {self.label} request ({why})") from None
        svc.release(self.peer, self.sock)
        if failure is not None:
            raise RuntimeError(f"worker {self.peer} failed to answer a {self.label} request: {failure}")
        t1 = now_us()
        with svc.lock:
            svc.stats.wait_seconds += (t1 - t0) / 1e6
            svc.stats.received(self.label, nbytes + 1)  # and the status byte
        svc.tracer.span("wait", f"{self.label} ← {self.peer}", t0, t1, peer=self.peer)
        return arrays


class SamplingService:
    """One worker's server for ``handlers`` and its client to every other worker's (collective to start)."""

    def __init__(
        self,
        rank: int,
        world: int,
        handlers: dict[str, Handler],
        stats: CommStats,
        tracer: Tracer,
        timeout: float,
        exchange: Callable[[tuple[str, int]], list[tuple[str, int]]] | None = None,
        serve_threads: int = 0,
    ):
        """``exchange(own (host, port))`` returns every worker's, in rank order (default: one
        ``all_gather_object`` on the default group). ``serve_threads`` > 0: requests that carry a priority are
        queued and answered by that many threads in priority order (scheduled serving)."""
        self.rank, self.world, self.handlers = rank, world, handlers
        self.stats, self.tracer, self.timeout = stats, tracer, timeout
        self.lock = threading.Lock()  # the stats and the connection pools are shared by threads
        self.idle: dict[int, list[socket.socket]] = {}
        self.served: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.closed = False
        self.serve_threads = serve_threads
        self._queue: list[tuple] = []  # (priority, arrival, connection, handler name, arrays): a heap
        self._arrivals = 0
        self._ready = threading.Condition()
        self.schedule_stats = {"queued_max": 0, "ahead": 0, "queued": 0}
        self.listener = socket.create_server(("", 0), backlog=max(16, 4 * world))
        self.addresses = (exchange or _all_gather)((advertised_host(), self.listener.getsockname()[1]))
        self._start(self._accept, "serve-accept")
        for i in range(serve_threads):
            self._start(self._execute, f"serve-{i}")

    def reset_schedule_stats(self) -> None:
        with self._ready:
            self.schedule_stats = {"queued_max": len(self._queue), "ahead": 0, "queued": 0}

    def _start(self, target, name: str, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True, name=name)
        self.threads.append(t)
        t.start()

    # --- server ----------------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # the listening socket was closed: the service is closing
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                if self.closed:
                    conn.close()
                    return
                self.served.append(conn)
            self._start(self._serve, "serve", conn)

    def _serve(self, conn: socket.socket) -> None:
        """Read the requests of one connection until the peer closes it (or the service does): each answered at
        once, or queued for the serving threads when it carries a priority and serving is scheduled."""
        try:
            while True:
                try:
                    text = _recv_text(conn)
                except ConnectionError:
                    return
                arrays, nbytes = _recv_arrays(conn)
                name, priority = _split_priority(text)
                with self.lock:
                    self.stats.received(f"{name}-ids", nbytes + _COUNT.size + len(text.encode()))
                if priority is not None and self.serve_threads:
                    with self._ready:
                        heapq.heappush(self._queue, (priority, self._arrivals, conn, name, arrays))
                        self._arrivals += 1
                        self.schedule_stats["queued"] += 1
                        self.schedule_stats["queued_max"] = max(
                            self.schedule_stats["queued_max"], len(self._queue)
                        )
                        self._ready.notify()
                    continue  # the connection carries one request at a time: the next comes after the reply
                self._send_reply(conn, name, self._compute(name, arrays))  # answered at once
        except OSError:  # shut down by close(), or the peer went away
            return
        finally:
            # the peer closed it (it does only once it has its replies) or the service did: a reply still queued
            # for it fails to send, and is dropped
            conn.close()

    def _execute(self) -> None:
        """A serving thread: answer the queued request of highest priority (smallest), oldest among equals."""
        while True:
            with self._ready:
                while not self._queue and not self.closed:
                    self._ready.wait()
                if self.closed:
                    return
                _, arrival, conn, name, arrays = heapq.heappop(self._queue)
                if any(other[1] < arrival for other in self._queue):
                    self.schedule_stats["ahead"] += 1
            # the handler's work runs here, in priority order; writing the reply does not: an asker reads its
            # replies in its own order (ByteGNN's network thread: the order it sent them), so a reply larger
            # than the socket's buffers, written here, would hold this thread until the asker reads it — while
            # the reply the asker is waiting for sits in this queue behind it (a deadlock both ways, seen with
            # 4,714-wide features on Facebook page-page)
            reply = self._compute(name, arrays)
            # (not kept in self.threads: one per reply; close() shuts the socket, which ends the write)
            threading.Thread(
                target=self._write_reply, args=(conn, name, reply), daemon=True, name="serve-reply"
            ).start()

    def _write_reply(self, conn: socket.socket, name: str, reply) -> None:
        with contextlib.suppress(OSError):  # the asker went away, or close(): nothing to answer
            self._send_reply(conn, name, reply)

    def _compute(self, name: str, arrays: list[np.ndarray]) -> list[np.ndarray] | Exception:
        """The handler's reply, or the exception it raised (the asker's to report)."""
        try:
            return [np.asarray(a) for a in self.handlers[name](arrays[0], arrays[1:])]
        except Exception as exc:  # noqa: BLE001 - every failure is the asker's to report
            return exc

    def _send_reply(self, conn: socket.socket, name: str, reply: list[np.ndarray] | Exception) -> None:
        """Write the handler's reply, or its error (which the asker raises naming this worker)."""
        if isinstance(reply, Exception):
            conn.sendall(bytes([_FAILED]))
            _send_text(conn, f"{type(reply).__name__}: {reply}")
            return
        t0 = now_us()
        with self.lock:  # counted before it leaves: the asker may read the figures once it has the reply
            self.stats.sent(name, 1 + _wire_size(reply))
        conn.sendall(bytes([_OK]))
        _send_arrays(conn, reply)
        self.tracer.span("send", f"{name} reply", t0, now_us())

    # --- client ----------------------------------------------------------------------------------------
    def _connection(self, peer: int) -> socket.socket:
        with self.lock:
            pool = self.idle.setdefault(peer, [])
            if pool:
                return pool.pop()
        host, port = self.addresses[peer]
        try:
            sock = socket.create_connection((host, port), timeout=self.timeout)
        except OSError as exc:
            raise RuntimeError(
                f"cannot reach worker {peer}'s sampling service at {host}:{port} ({exc})"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def release(self, peer: int, sock: socket.socket) -> None:
        with self.lock:
            if self.closed:
                sock.close()
            else:
                self.idle.setdefault(peer, []).append(sock)

    def submit(
        self,
        peer: int,
        handler: str,
        params: list[int],
        arrays: list[np.ndarray],
        priority: tuple[int, ...] | None = None,
    ) -> Pending:
        """Send ``handler(params, arrays)`` to worker ``peer`` now; the reply is read by :meth:`Pending.result`.
        ``priority`` (smaller first) orders it among the requests an owner with scheduled serving has queued."""
        if peer == self.rank:
            raise ValueError("a worker answers its own requests without the service")
        text = handler if priority is None else f"{handler}@{','.join(str(int(x)) for x in priority)}"
        sock = self._connection(peer)
        t0 = now_us()
        try:
            _send_text(sock, text)
            sent = _send_arrays(sock, [np.asarray(params, dtype=np.int64), *arrays])
        except OSError as exc:
            sock.close()
            raise RuntimeError(f"cannot send a {handler} request to worker {peer} ({exc})") from None
        with self.lock:
            self.stats.sent(f"{handler}-ids", sent + _COUNT.size + len(text.encode()))
        self.tracer.span("send", f"{handler} → {peer}", t0, now_us(), peer=peer)
        return Pending(self, peer, sock, handler)

    def close(self) -> None:
        """Stop serving and drop every connection; blocked threads wake (no peer is waited for)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        with self._ready:
            self._queue.clear()
            self._ready.notify_all()
        with self.lock:
            socks = [s for pool in self.idle.values() for s in pool] + self.served
            self.idle.clear()
        for s in [*socks, self.listener]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for s in socks:
            s.close()
        for t in self.threads:
            t.join(timeout=1.0)
