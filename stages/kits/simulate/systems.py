"""What the systems of `g3 simulate`'s bins simulator are built from (:class:`SystemContext`), and the
layer-synchronous epoch two of them share (bns-gcn, sancus): each worker its whole partition per layer, one
exchange, a barrier."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stages.kits.simulate.profile import Rates
from stages.kits.simulate.workload import WorkerLoad, Workload


def compute(seconds: float, label: str) -> tuple:
    """A compute span of ``seconds`` on the worker's compute lane, labelled for the timeline."""
    return ("compute", seconds, "compute", label)


@dataclass
class SystemContext:
    """What a system's worker generators are built from."""

    wl: Workload
    rates: Rates
    engine: object
    halo: list | None = None
    boundary_sample: float = 1.0  # bns-gcn's P
    fresh: bool = True  # sancus: an epoch in which owners send


@dataclass(frozen=True)
class BinsSystem:
    """How a full-graph strategy's workers run one epoch of a g3 plan's work, for the bins simulator: ``workers``
    builds every worker's generator from a :class:`SystemContext` and a variant; the system is named after its
    strategy, with ``-VARIANT`` for each of ``variants`` when it has some; ``skips_stale_sends``: it sends nothing
    in some epochs (sancus's epoch:N), so its epoch is a mean over a sending epoch and the skipping ones."""

    workers: Callable[[SystemContext, str], list]
    variants: tuple[str, ...] = ()
    skips_stale_sends: bool = False


def layer_sync(wl: Workload, w: WorkerLoad, rates: Rates, k: int, exchange, bwd_sample: float):
    """One epoch of a layer-synchronous worker: per layer its whole partition as one bin, then ``exchange(li)``
    and a barrier of all workers; backward alike, the gradients going back all-to-all."""
    now = 0.0
    L = wl.num_layers
    arcs, nodes = w.num_arcs, w.num_owned
    for li in range(L):
        now = yield compute(rates.fwd(li, arcs, nodes, 1) + rates.overhead_per_bin, f"L{li}")
        if li < L - 1:
            now = yield from exchange(li)
        now = yield ("barrier", ("fwd", li))
    for li in reversed(range(L)):
        now = yield compute(rates.bwd(li, arcs, nodes, 1) + rates.overhead_per_bin, f"L{li} bwd")
        if li > 0:
            now = yield from all_to_all(wl, w, k, "bwd", li, bwd_sample)
        now = yield ("barrier", ("bwd", li))
    return now


def all_to_all(wl: Workload, w: WorkerLoad, k: int, kind: str, li: int, sample: float = 1.0):
    """One message per peer with the boundary rows of layer ``li`` (a ``sample`` fraction of them, rounded),
    all received, all sent."""
    out = np.rint(w.table(f"{kind}_send_{li}").per_peer_total(k) * sample).astype(np.int64)
    inc = np.rint(w.table(f"{kind}_recv_{li}").per_peer_total(k) * sample).astype(np.int64)
    tag = "a2a-" + kind
    for peer in range(k):
        if out[peer]:
            nbytes = wl.fwd_bytes(li, out[peer]) if kind == "fwd" else wl.bwd_bytes(li, out[peer])
            yield ("send", (tag, li, w.rank, peer), peer, nbytes, False)
    now = yield ("wait_all", [(tag, li, peer, w.rank) for peer in range(k) if inc[peer]])
    now = yield ("wait_sends",)
    return now
