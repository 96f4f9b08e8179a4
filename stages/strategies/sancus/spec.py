"""The sancus strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.common.knobs import Layer0CacheKnobs
from stages.kits.simulate.systems import BinsSystem
from stages.strategies.g3 import simulate
from stages.strategies.sancus import plan
from stages.strategies.sancus import simulate as bins
from stages.strategies.spec import AdviseVariant, StrategySpec


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.sancus.runtime import SancusStrategy

    return SancusStrategy


SPEC = StrategySpec(
    name="sancus",
    summary="SANCUS: full-graph training with cached (stale) remote embeddings, skipping sends while "
    "fresh enough (--staleness; epoch:0 is exact).",
    methods=("chunk", "metis", "g3", "random"),
    family="full-graph",
    exactness="exact with --staleness epoch:0; otherwise stale remote embeddings (an approximation)",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    runtime=runtime_class,
    knobs=Layer0CacheKnobs,
    simulate=simulate.simulate,
    simulates_hosts=True,
    bins_system=BinsSystem(bins.workers, variants=("broadcast", "p2p"), skips_stale_sends=True),
    simulated_as=lambda options, knobs: f"sancus-{options.get('sancus_comm') or 'broadcast'}",
    fits_own_speed=True,
    advise_variants=(
        AdviseVariant(
            "broadcast, epoch:1",
            plan_options={"sancus_comm": "broadcast", "staleness": "epoch:1"},
            simulate={"staleness_epochs": 1},
        ),
        AdviseVariant(
            "p2p, epoch:1",
            plan_options={"sancus_comm": "p2p", "staleness": "epoch:1"},
            simulate={"staleness_epochs": 1},
        ),
    ),
)
