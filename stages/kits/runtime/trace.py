"""Timeline of one epoch per rank, as Chrome-trace JSON (Perfetto / chrome://tracing), and the share of
communication time hidden under compute.

Spans use wall-clock microseconds, so the ranks of one machine line up in one view. Lanes (``tid``):
0 = compute (and waiting), 1 = the runtime's data movement (gather / copy in / copy out of bin inputs and outputs,
pack = a message's rows copied out and its send posted, unpack = a received message's rows copied in and the
rows it completes marked ready), 2 = sends in flight, 3 = receives in flight.
"""

from __future__ import annotations

import time
from pathlib import Path

from stages.common.atomic import write_json_atomic

MOVING = ("gather", "copy_in", "copy_out", "pack", "unpack")  # the runtime's own data movement
LANES = {"compute": 0, "wait": 0, **dict.fromkeys(MOVING, 1), "send": 2, "recv": 3}


def now_us() -> float:
    return time.time_ns() / 1000.0


class Tracer:
    """Collects spans when ``enabled``; costs one branch per call otherwise."""

    def __init__(self, rank: int):
        self.rank = rank
        self.enabled = False
        self.events: list[dict] = []
        self.messages: list[tuple] = []  # (key, role, post_us, done_us) for the hidden-share computation

    def start(self) -> None:
        self.enabled = True
        self.events = []
        self.messages = []

    def stop(self) -> None:
        self.enabled = False

    def span(self, cat: str, name: str, t0: float, t1: float, **args) -> None:
        if self.enabled:
            self.events.append(
                {
                    "name": name,
                    "cat": cat,
                    "ph": "X",
                    "ts": t0,
                    "dur": max(0.0, t1 - t0),
                    "pid": self.rank,
                    "tid": LANES[cat],
                    "args": args,
                }
            )

    def message(self, key: tuple, role: str, post_us: float, done_us: float) -> None:
        if self.enabled:
            self.messages.append((key, role, post_us, done_us))

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = [{"name": "process_name", "ph": "M", "pid": self.rank, "args": {"name": f"rank {self.rank}"}}]
        meta += [
            {"name": "thread_name", "ph": "M", "pid": self.rank, "tid": tid, "args": {"name": name}}
            for name, tid in (("compute", 0), ("data movement", 1), ("send", 2), ("recv", 3))
        ]
        write_json_atomic(path, {"traceEvents": meta + self.events, "displayTimeUnit": "ms"}, indent=None)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _spans(events: list[dict], cats) -> list[tuple[float, float]]:
    return [(e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in cats]


def hidden_share(per_rank: list[dict]) -> dict:
    """Share of communication time hidden under compute, from every rank's spans of one epoch.

    A message is in flight from the moment its rows are final at the sender (its ``send`` record's start:
    before it is packed, so time queued for a sender thread counts) until its receiver has it. For each rank,
    communication time is the union of the in-flight intervals of the messages it receives, and the hidden
    part is what of it overlaps the rank's own compute spans. Returns the ratio per rank and over all ranks
    (hidden seconds / communication seconds, summed); ``waited``: the share of communication time the rank
    spent blocked on messages (wait spans); ``moving``: the share that overlapped none of those but the rank's
    data movement (gathers, copies, packing and unpacking messages). The rest (``1 - overall - waited -
    moving``) overlapped the runtime's scheduling bookkeeping or time the OS gave to other processes.
    """
    posts = {}
    for r in per_rank:
        for key, role, post, _ in r["messages"]:
            if role == "send":
                posts[tuple(key)] = post
    shares, hidden_total, waited_total, moving_total, comm_total = [], 0.0, 0.0, 0.0, 0.0
    for r in per_rank:
        recv = [
            (posts.get(tuple(key), post), done) for key, role, post, done in r["messages"] if role == "recv"
        ]
        comm = _union(recv)
        compute, wait, moving = (_spans(r["events"], cats) for cats in (("compute",), ("wait",), MOVING))
        c, h = _length(comm), _overlap(comm, _union(compute))
        w = _overlap(comm, _union(wait))  # waits and compute share the compute thread: never overlap
        shares.append(h / c if c > 0 else None)
        hidden_total += h
        waited_total += w
        moving_total += _overlap(comm, _union(compute + wait + moving)) - h - w
        comm_total += c

    def ratio(x):
        return x / comm_total if comm_total > 0 else None

    return {
        "per_rank": shares,
        "overall": ratio(hidden_total),
        "waited": ratio(waited_total),
        "moving": ratio(moving_total),
        "comm_seconds": comm_total / 1e6,
    }
