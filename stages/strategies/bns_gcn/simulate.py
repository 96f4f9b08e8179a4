"""bns-gcn in `g3 simulate`: its workers' epoch on a g3 plan's work (the bins simulator of
:mod:`stages.strategies.g3.simulate` runs it beside g3's schedules)."""

from __future__ import annotations

from stages.kits.simulate.profile import Rates
from stages.kits.simulate.systems import SystemContext, all_to_all, layer_sync
from stages.kits.simulate.workload import WorkerLoad, Workload


def bns_gcn_worker(wl: Workload, w: WorkerLoad, rates: Rates, k: int, sample: float = 1.0):
    """``bns-gcn`` as the runtime runs it (stages/strategies/bns_gcn/runtime.py): per layer the whole partition
    as one bin, then one message per peer with the boundary rows (a ``sample`` fraction of the hidden layers'),
    waited for, then a barrier of all workers; backward the same with gradients."""

    def exchange(li):
        return (yield from all_to_all(wl, w, k, "fwd", li, sample))

    return (yield from layer_sync(wl, w, rates, k, exchange, sample))


def workers(c: SystemContext, _variant: str) -> list:
    return [bns_gcn_worker(c.wl, w, c.rates, c.wl.k, c.boundary_sample) for w in c.wl.workers]
