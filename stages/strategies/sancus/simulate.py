"""sancus in `g3 simulate`: its workers' epoch on a g3 plan's work, in an epoch where owners send and in one
where they skip (the bins simulator of :mod:`stages.strategies.g3.simulate` runs it beside g3's schedules)."""

from __future__ import annotations

from stages.kits.simulate.profile import Rates
from stages.kits.simulate.systems import SystemContext, all_to_all, layer_sync
from stages.kits.simulate.workload import WorkerLoad, Workload


def sancus_worker(wl: Workload, w: WorkerLoad, rates: Rates, k: int, layout: str, fresh: bool):
    """``sancus`` in an epoch where every owner sends (``fresh``) or none does (a skipped epoch of epoch:N):
    ``p2p`` sends a one-word header to every peer and, when fresh, bns-gcn's boundary rows; ``broadcast`` has
    every owner send its whole block to every other worker when fresh (each root in turn: K − 1 messages of
    n_owned rows from its egress link), nothing when stale. Gradients go back every epoch, as in bns-gcn."""

    peers = [peer for peer in range(k) if peer != w.rank]

    def to_every_peer(tag: str, nbytes: int):
        for peer in peers:
            yield ("send", (tag, w.rank, peer), peer, nbytes, False)
        yield ("wait_all", [(tag, peer, w.rank) for peer in peers])

    def exchange(li):
        if layout == "p2p":
            yield from to_every_peer(f"sc-{li}-h", 8)
            if fresh:
                yield from all_to_all(wl, w, k, "fwd", li)
        elif fresh:
            yield from to_every_peer(f"sc-{li}", wl.fwd_bytes(li, w.num_owned))
        return (yield ("wait_sends",))

    return (yield from layer_sync(wl, w, rates, k, exchange, 1.0))


def workers(c: SystemContext, layout: str) -> list:
    return [sancus_worker(c.wl, w, c.rates, c.wl.k, layout, c.fresh) for w in c.wl.workers]
