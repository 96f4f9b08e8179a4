"""The bns-gcn strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.common.knobs import Layer0CacheKnobs
from stages.kits.simulate.systems import BinsSystem
from stages.strategies.bns_gcn import plan
from stages.strategies.bns_gcn import simulate as bins
from stages.strategies.g3 import simulate
from stages.strategies.spec import AdviseVariant, StrategySpec


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.bns_gcn.runtime import BnsGcnStrategy

    return BnsGcnStrategy


SPEC = StrategySpec(
    name="bns-gcn",
    summary="BNS-GCN: layer-synchronous boundary exchange, whole partition at once; --boundary-sample P "
    "(P = 1: exact; on a chunk partition: NeutronStar as G3 ran it).",
    methods=("metis", "chunk", "g3", "random"),
    family="full-graph",
    exactness="exact with --boundary-sample 1; P < 1 samples boundary nodes (an approximation)",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    runtime=runtime_class,
    knobs=Layer0CacheKnobs,
    simulate=simulate.simulate,
    simulates_hosts=True,
    bins_system=BinsSystem(bins.workers, variants=(), skips_stale_sends=False),
    fits_own_speed=True,
    advise_variants=(
        AdviseVariant(
            "boundary sample 1 (exact)",
            plan_options={"boundary_sample": "1"},
            simulate={"boundary_sample": 1.0},
        ),
        AdviseVariant(
            "boundary sample 0.1", plan_options={"boundary_sample": "0.1"}, simulate={"boundary_sample": 0.1}
        ),
    ),
)
