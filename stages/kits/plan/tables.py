"""Building peer-to-peer send/receive tables (G3 §6.2; the :class:`Table` format is
``stages.common.plan_artifact``'s).

A table is a list of messages in the order they happen: ``msgs[m] = (step, peer, count)`` and the
``count`` node ids of message ``m`` are the next slice of ``nodes``. For a send table, ``step`` is the bin
after which the message is sent; for a receive table, it is the sender's step, and messages from one peer
arrive in its step order. Node ids are owned-local ids for what a worker sends (forward) or adds to
(backward), and remote offsets (local id - n_owned) for what it receives (forward) or returns (backward).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stages.common.plan_artifact import Table


def assemble(parts: Sequence[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]) -> Table:
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
