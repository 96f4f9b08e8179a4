"""Peer-to-peer send/receive tables (G3 §6.2), as message lists.

A table is a list of messages in the order they happen: ``msgs[m] = (step, peer, count)`` and the
``count`` node ids of message ``m`` are the next slice of ``nodes``. For a send table, ``step`` is the bin
after which the message is sent; for a receive table, it is the sender's step, and messages from one peer
arrive in its step order. Node ids are owned-local ids for what a worker sends (forward) or adds to
(backward), and remote offsets (local id - n_owned) for what it receives (forward) or returns (backward).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Table:
    nodes: np.ndarray  # int64 [sum(count)]
    msgs: np.ndarray  # int64 [M, 3]: step, peer, count

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
        return [(int(s), int(p), slice(int(a), int(b))) for (s, p, _), a, b in zip(self.msgs, starts, ends, strict=True)]


def assemble(parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]) -> Table:
    """Build a table from per-peer pieces ``(peer, steps_sorted, nodes_in_that_order, _)``.

    Messages are ordered by step, then peer; empty messages are dropped.
    """
    if not parts:
        return Table.empty()
    steps = np.concatenate([p[1] for p in parts])
    peers = np.concatenate([np.full(len(p[1]), p[0], dtype=np.int64) for p in parts])
    nodes = np.concatenate([p[2] for p in parts])
    if len(nodes) == 0:
        return Table.empty()
    order = np.lexsort((peers, steps))  # stable within a (step, peer) group: keeps each peer's node order
    steps, peers, nodes = steps[order], peers[order], nodes[order]
    key = steps * (peers.max() + 1) + peers
    change = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate([[0], change])
    counts = np.diff(np.concatenate([starts, [len(key)]]))
    msgs = np.stack([steps[starts], peers[starts], counts], axis=1).astype(np.int64)
    return Table(nodes=nodes.astype(np.int64), msgs=msgs)


def ordered_by_step(steps: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """Permutation sorting nodes by step, then by ``tiebreak`` (priority position or id)."""
    return np.lexsort((tiebreak, steps))
