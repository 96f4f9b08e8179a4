"""A small discrete-event engine: K workers, each a generator of requests, and a network of full-duplex links.

A worker is a Python generator that yields requests and receives the current simulated time back:

``("compute", seconds, kind)``  busy on the worker's compute lane (``kind``: "compute" or "overhead");
``("until", t)``                 idle until time ``t`` (e.g. a prefetched gather still running on another lane);
``("send", key, peer, nbytes, blocking)``  post a message; ``blocking`` waits until it has left the sender;
``("wait_all", keys)``           block until every message in ``keys`` has arrived here;
``("wait_any", keys)``           block until one of ``keys`` has arrived (resumes at the earliest arrival);
``("wait_sends",)``              block until every message this worker posted has left it;
``("barrier", name)``            block until every worker has reached the barrier ``name``.

**Network.** Every host has one egress and one ingress link of ``bandwidth`` bytes/s, of which ``share`` carries
payload (TCP/IP and Ethernet headers take the rest). Messages from one host to another travel in order over one
connection (FIFO within the pair, as over one TCP connection); the connections that are sending at a moment
share the links fairly (a fluid model: max-min fair rates over every egress and ingress link, recomputed
whenever a message starts or finishes), as TCP flows converge to on a switched network. A uniform all-to-all
of K hosts then takes K − 1 link times, as measured on g3's emulated hosts, where first come, first served
took 2K − 3. A message's *send* completes when its last byte has left the sender (what a blocking send and
waiting on sends wait for); it arrives ``latency`` seconds later. Workers of one host (``workers_per_host``
consecutive ranks, or the ranks ``hosts`` maps to it; default one worker per host) exchange messages over its
loopback: no link time, no latency.

**A cluster of unlike hosts.** ``links`` gives each rank its host's link rate (bytes/s per direction, before
``share``) and ``speeds`` its compute speed relative to the machine the rates were measured on; the defaults
(None) are ``bandwidth`` and 1.0 for every rank, and every result is then what it was without them. A message
between two workers runs at the slower of their two links; a collective or transfer that every worker joins
(the ring all-reduce) at the slowest link of all. The engine applies the links; a worker's compute durations
are divided by its speed where its requests are made (the models' own modules: each builds its worker's
durations from its rates).

Events are processed in time order; the network's own events (a message finishing) are interleaved with the
workers', so a wait that a message completes resumes at the message's arrival.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Network:
    bandwidth: float  # bytes per second, per host and direction
    latency: float  # seconds
    share: float = 1.0  # of the link's bytes that are payload (stages/kits/simulate/calibration.py)
    workers_per_host: int = 1  # consecutive ranks on one host, which talk over its loopback
    # per rank: its host's link, bytes/s per direction; its compute speed relative to the profiled machine; its
    # host, 0 … H−1 (None: bandwidth for all, 1 for all, workers_per_host consecutive ranks)
    links: tuple[float, ...] | None = None
    speeds: tuple[float, ...] | None = None
    hosts: tuple[int, ...] | None = None

    def link(self, worker: int) -> float:
        """Bytes/s of ``worker``'s host's link (before ``share``)."""
        return self.bandwidth if self.links is None else self.links[worker]

    def speed(self, worker: int) -> float:
        return 1.0 if self.speeds is None else self.speeds[worker]

    def slowest_speed(self) -> float:
        """The slowest worker's speed: what a step every worker must finish (the optimizer's) waits for."""
        return 1.0 if self.speeds is None else min(self.speeds)

    def transfer(self, nbytes: float, src: int | None = None, dst: int | None = None) -> float:
        """Seconds for ``nbytes`` of payload from ``src`` to ``dst``: at the slower of their two links; without
        the two ends (a collective every worker joins), at the slowest link of all."""
        if self.links is None:
            bandwidth = self.bandwidth
        elif src is None or dst is None:
            bandwidth = min(self.links)
        else:
            bandwidth = min(self.links[src], self.links[dst])
        rate = bandwidth * self.share
        return nbytes / rate if rate > 0 and math.isfinite(rate) else 0.0

    def peer_transfer(self, nbytes: float, worker: int, k: int) -> float:
        """Seconds for ``worker`` to move ``nbytes`` spread evenly over its K − 1 peers (an all-to-all's share,
        remote rows fetched from every owner), one peer after the other, each part at the slower of the two
        links; a peer on the same host (``hosts``) over its loopback, free. With one link rate for all and no
        host map: ``transfer(nbytes)``."""
        if (self.links is None and self.hosts is None) or k <= 1:
            return self.transfer(nbytes)
        part = nbytes / (k - 1)
        home = self.host(worker)
        return sum(
            (self.transfer(part, worker, p) for p in range(k) if p != worker and self.host(p) != home), 0.0
        )

    def host(self, worker: int) -> int:
        if self.hosts is not None:
            return self.hosts[worker]
        return worker // max(1, self.workers_per_host)

    def one_host(self, k: int) -> bool:
        """Whether all ``k`` workers are on one host (nothing crosses a link)."""
        return all(self.host(w) == self.host(0) for w in range(k))


@dataclass
class WorkerStats:
    busy: float = 0.0  # compute lane: bins, gathers and per-bin runtime overhead
    overhead: float = 0.0  # part of busy that is per-bin runtime bookkeeping
    comm_wait: float = 0.0  # blocked on messages or on its own sends
    gather_wait: float = 0.0  # waiting for a prefetched gather
    barrier_wait: float = 0.0  # blocked at a barrier
    end: float = 0.0  # when its last request finished
    bytes_sent: int = 0
    messages: int = 0
    link_seconds: float = 0.0  # time its egress link was busy (communication time, hidden or not)
    spans: list = field(default_factory=list)  # (t0, t1, kind, label) when recording


class Deadlock(RuntimeError):
    pass


NET = -1  # the heap entries of the network's own events (a message finishing), not a worker's
_DONE = 1e-9  # a message is sent when this share of its bytes (or one byte in a billion) is left


class Engine:
    def __init__(self, k: int, net: Network, record: bool = False):
        self.k, self.net, self.record = k, net, record
        self.arrival: dict = {}  # key -> arrival time at the receiver
        self.left: dict = {}  # key -> time the last byte left the sender
        self.posted_by: list[list] = [[] for _ in range(k)]  # keys each worker posted
        self.stats = [WorkerStats() for _ in range(k)]
        self._heap: list = []
        self._seq = 0
        self._waiting: dict[int, tuple] = {}  # worker -> (kind, keys, since, wait id)
        self._wait_id = 0
        self._barriers: dict = {}
        # the fluid network: per (sending host, receiving host) connection, its messages in order, each
        # [key, bytes left, bytes, sender, receiver]; the first one of each is sending at ``_rate[pair]``
        self._queues: dict[tuple[int, int], deque] = {}
        self._rate: dict[tuple[int, int], float] = {}
        self._t_net = 0.0
        self._net_tag = 0

    # --- network -------------------------------------------------------------------------------------------
    def post(self, t: float, key, src: int, dst: int, nbytes: int) -> None:
        """Post a message at ``t``; its ``left`` and ``arrival`` times are known once it has been sent."""
        hs, hd = self.net.host(src), self.net.host(dst)
        st = self.stats[src]
        st.bytes_sent += int(nbytes)
        st.messages += 1
        self.posted_by[src].append(key)
        seconds = self.net.transfer(nbytes, src, dst)
        st.link_seconds += seconds if hs != hd else 0.0
        if hs == hd or seconds <= 0.0:  # one host's loopback, or nothing to carry: there at once
            self._finish(t, key, src, dst, latency=0.0 if hs == hd else self.net.latency)
            return
        self._progress(t)
        self._queues.setdefault((hs, hd), deque()).append([key, float(nbytes), float(nbytes), src, dst])
        self._reallocate(t)

    def _capacity(self, worker: int) -> float:
        return self.net.link(worker) * self.net.share

    def _progress(self, t: float) -> None:
        """Every sending connection's first message, carried on at its rate up to ``t``."""
        dt = t - self._t_net
        if dt > 0:
            for pair, rate in self._rate.items():
                self._queues[pair][0][1] -= rate * dt
        self._t_net = max(self._t_net, t)

    def _reallocate(self, t: float) -> None:
        """Max-min fair rates of the sending connections (progressive filling over the egress and ingress
        links), and the network's next event: the first message to finish at those rates."""
        heads = {pair: q[0] for pair, q in self._queues.items() if q}
        left_cap: dict = {}
        users: dict = {}
        for (hs, hd), msg in heads.items():
            for link, cap in ((("out", hs), self._capacity(msg[3])), (("in", hd), self._capacity(msg[4]))):
                left_cap[link] = min(left_cap.get(link, cap), cap)
                users.setdefault(link, set()).add((hs, hd))
        rate: dict = {}
        while len(rate) < len(heads):
            share, link = min((left_cap[lk] / len(u), lk) for lk, u in users.items() if u)
            for pair in list(users[link]):
                rate[pair] = share
                for lk in (("out", pair[0]), ("in", pair[1])):
                    users[lk].discard(pair)
                    left_cap[lk] -= share
        self._rate = rate
        self._net_tag += 1
        if rate:
            t_next = min(t + max(0.0, heads[p][1]) / r for p, r in rate.items() if r > 0)
            self._push(t_next, NET, self._net_tag)

    def _net_event(self, t: float) -> None:
        """At ``t``: the messages whose last byte has left are sent; the next in their connections start."""
        self._progress(t)
        for pair in list(self._rate):
            queue = self._queues[pair]
            key, remaining, size, src, dst = queue[0]
            if remaining <= _DONE * max(1.0, size):
                queue.popleft()
                self._finish(t, key, src, dst, self.net.latency)
        self._reallocate(t)

    def _finish(self, t: float, key, src: int, dst: int, latency: float) -> None:
        self.left[key] = t
        self.arrival[key] = t + latency
        for w in (src, dst):
            if w in self._waiting:
                self._reschedule(w)

    # --- scheduling ----------------------------------------------------------------------------------------
    def _push(self, t: float, w: int, tag=None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, w, tag))

    def _wait_time(self, kind: str, keys) -> float:
        """When the wait can end given what has been sent so far (inf: not yet known)."""
        if kind == "any":
            times = [self.arrival[k] for k in keys if k in self.arrival]
            return min(times) if times else math.inf
        # "sent", "sends" (a blocking send; every send of this worker): when they have left; "all": arrived
        done = self.left if kind in ("sent", "sends") else self.arrival
        if any(k not in done for k in keys):
            return math.inf
        return max((done[k] for k in keys), default=0.0)

    def _reschedule(self, w: int) -> None:
        kind, keys, since, wid = self._waiting[w]
        t = self._wait_time(kind, keys)
        if math.isfinite(t):
            self._push(max(t, since), w, wid)

    def run(self, workers: list) -> list[WorkerStats]:
        """Run the worker generators (all starting at time 0) to completion; returns per-worker statistics."""
        gens = list(workers)
        done = [False] * self.k
        started = [False] * self.k
        for w in range(self.k):
            self._push(0.0, w)
        while self._heap:
            t, _, w, tag = heapq.heappop(self._heap)
            if w == NET:
                if tag == self._net_tag:  # not superseded by a later reallocation
                    self._net_event(t)
                continue
            if done[w]:
                continue
            if w in self._waiting:
                kind, keys, since, wid = self._waiting[w]
                if tag != wid or self._wait_time(kind, keys) > t:
                    continue  # superseded by an earlier arrival, or not satisfied yet
                del self._waiting[w]
                self._account_wait(w, kind, since, t)
            elif tag is not None:
                continue  # a wake-up of a wait that an earlier arrival already ended
            self._advance(w, gens[w], t, done, started)
        if not all(done):
            stuck = [w for w in range(self.k) if not done[w]]
            raise Deadlock(f"simulation deadlocked: workers {stuck} wait for messages that are never sent")
        return self.stats

    def _account_wait(self, w: int, kind: str, since: float, t: float) -> None:
        st = self.stats[w]
        if kind in ("all", "any", "sends", "sent"):
            st.comm_wait += t - since
        if self.record and t > since:
            st.spans.append((since, t, "wait", "send" if kind == "sent" else kind))

    def _advance(self, w: int, gen, t: float, done: list, started: list) -> None:
        """Resume worker ``w`` at time ``t`` and handle its requests until it has to wait."""
        st = self.stats[w]
        while True:
            try:
                req = gen.send(t) if started[w] else next(gen)
                started[w] = True
            except StopIteration:
                done[w] = True
                st.end = t
                return
            op = req[0]
            if op == "compute":
                dur = max(0.0, float(req[1]))
                st.busy += dur
                if len(req) > 2 and req[2] == "overhead":
                    st.overhead += dur
                if self.record and dur > 0:
                    st.spans.append(
                        (t, t + dur, req[2] if len(req) > 2 else "compute", req[3] if len(req) > 3 else "")
                    )
                self._push(t + dur, w)
                st.end = t + dur
                return
            if op == "until":
                t_next = max(t, float(req[1]))
                st.gather_wait += t_next - t
                self._push(t_next, w)
                st.end = t_next
                return
            if op == "send":
                _, key, peer, nbytes, blocking = req
                self.post(t, key, w, peer, nbytes)
                if blocking:
                    self._wait(w, "sent", [key], t)
                    return
                continue
            if op in ("wait_all", "wait_any"):
                kind = "all" if op == "wait_all" else "any"
                keys = list(req[1])
                if not keys:
                    continue
                self._wait(w, kind, keys, t)
                return
            if op == "wait_sends":
                if self._wait_time("sends", self.posted_by[w]) <= t:
                    continue
                self._wait(w, "sends", list(self.posted_by[w]), t)
                return
            if op == "barrier":
                name = req[1]
                arrived = self._barriers.setdefault(name, {})
                arrived[w] = t
                if len(arrived) == self.k:
                    t_all = max(arrived.values())
                    for v, tv in arrived.items():
                        self.stats[v].barrier_wait += t_all - tv
                        if self.record and t_all > tv:
                            self.stats[v].spans.append((tv, t_all, "barrier", str(name)))
                        self._push(t_all, v)
                return
            raise ValueError(f"unknown simulation request {op!r}")

    def _wait(self, w: int, kind: str, keys: list, t: float) -> None:
        self._wait_id += 1
        wid = ("wait", self._wait_id)
        self._waiting[w] = (kind, keys, t, wid)
        t_ready = self._wait_time(kind, keys)
        if math.isfinite(t_ready):
            self._push(max(t_ready, t), w, wid)
