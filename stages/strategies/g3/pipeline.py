"""G3's multi-level pipeline (§5.2): the ``--pipeline`` schedules of the ``g3`` strategy, as data.

The runtime (``stages/strategies/g3/runtime.py``) and the simulator (``stages/strategies/g3/schedules.py``) both
read this one table. See docs/DESIGN.md "Multi-level pipeline".
"""

from __future__ import annotations

from dataclasses import dataclass


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
    "none": Schedule(
        eager=False, order="priority", prefetch=False, async_send=False, background_copies=False
    ),
    "intra": Schedule(eager=False, order="priority", prefetch=True, async_send=True, background_copies=True),
    "inter": Schedule(eager=True, order="id", prefetch=False, async_send=True, background_copies=False),
    "multi": Schedule(eager=True, order="priority", prefetch=True, async_send=True, background_copies=True),
}
