"""Peer-to-peer exchange of embedding and gradient rows along a plan's message tables.

Every message is a non-blocking ``isend``/``irecv`` of a contiguous ``[count, width]`` host tensor on the
P2P process group (gloo, also when training on CUDA: embeddings move through host buffers, as in G3 §6.2).
Each message gets its own tag ``(phase << 20) + index`` where ``index`` numbers the messages of one sender →
receiver stream in a phase, so both ends agree without any handshake.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from ..plan.tables import Table
from .kernels import take_rows_at

TAG_SHIFT = 20


def phase_tag(kind: str, layer: int) -> int:
    """A phase number per (kind, layer): features, forward and backward of each layer are separate."""
    return {"features": 0, "fwd": 1, "bwd": 2, "eval": 3}[kind] + 4 * (layer + 1)


@dataclass
class CommStats:
    bytes_sent: int = 0
    bytes_recv: int = 0
    wait_seconds: float = 0.0
    messages: int = 0
    per_layer_sent: dict[str, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.bytes_sent = self.bytes_recv = self.messages = 0
        self.wait_seconds = 0.0
        self.per_layer_sent = {}


class _Outgoing:
    """The sends of one table: messages are sent step by step as the bins that produce them finish."""

    def __init__(self, table: Table, phase: int, group, stats: CommStats, label: str):
        self.slices = table.message_slices()
        self.nodes = torch.from_numpy(table.nodes)
        self.phase = phase
        self.group = group
        self.stats = stats
        self.label = label
        self.cursor = 0
        self.counter: dict[int, int] = {}
        self.pending: list[tuple[dist.Work, torch.Tensor]] = []

    def send_step(self, step: int, rows: torch.Tensor, index_offset: int = 0) -> None:
        """Send every message of ``step``: the rows ``rows[nodes + index_offset]`` of each."""
        while self.cursor < len(self.slices) and self.slices[self.cursor][0] == step:
            _, peer, sl = self.slices[self.cursor]
            payload = take_rows_at(rows, self.nodes[sl] + index_offset)
            tag = (self.phase << TAG_SHIFT) + self.counter.get(peer, 0)
            self.counter[peer] = self.counter.get(peer, 0) + 1
            self.pending.append((dist.isend(payload, dst=peer, group=self.group, tag=tag), payload))
            nbytes = payload.numel() * payload.element_size()
            self.stats.bytes_sent += nbytes
            self.stats.messages += 1
            self.stats.per_layer_sent[self.label] = self.stats.per_layer_sent.get(self.label, 0) + nbytes
            self.cursor += 1

    def wait(self) -> None:
        t0 = time.perf_counter()
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()
        self.stats.wait_seconds += time.perf_counter() - t0
        if self.cursor != len(self.slices):
            raise RuntimeError(f"{self.label}: {len(self.slices) - self.cursor} messages were never sent")


class _Incoming:
    """All receives of one table, posted at once; ``finish`` waits and hands each message to a callback."""

    def __init__(self, table: Table, phase: int, group, stats: CommStats, width: int, dtype: torch.dtype):
        self.messages = []
        counter: dict[int, int] = {}
        nodes = torch.from_numpy(table.nodes)
        for _, peer, sl in table.message_slices():
            buf = torch.empty((sl.stop - sl.start, width), dtype=dtype)
            tag = (phase << TAG_SHIFT) + counter.get(peer, 0)
            counter[peer] = counter.get(peer, 0) + 1
            work = dist.irecv(buf, src=peer, group=group, tag=tag)
            self.messages.append((work, buf, nodes[sl]))
        self.stats = stats

    def finish(self, consume) -> None:
        t0 = time.perf_counter()
        for work, buf, nodes in self.messages:
            work.wait()
            self.stats.bytes_recv += buf.numel() * buf.element_size()
            consume(nodes, buf)
        self.stats.wait_seconds += time.perf_counter() - t0
        self.messages.clear()


class Exchanger:
    """Creates the outgoing/incoming halves of a phase's tables on the P2P group, sharing one stats object."""

    def __init__(self, group, rank: int, world: int):
        self.group = group
        self.rank = rank
        self.world = world
        self.stats = CommStats()

    def outgoing(self, table: Table, kind: str, layer: int) -> _Outgoing:
        return _Outgoing(table, phase_tag(kind, layer), self.group, self.stats, f"{kind}{layer}")

    def incoming(self, table: Table, kind: str, layer: int, width: int, dtype: torch.dtype) -> _Incoming:
        return _Incoming(table, phase_tag(kind, layer), self.group, self.stats, width, dtype)


def steps_of(table: Table) -> np.ndarray:
    return np.unique(table.msgs[:, 0]) if len(table.msgs) else np.zeros(0, dtype=np.int64)
