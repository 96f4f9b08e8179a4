"""The fixture strategy's spec."""

from __future__ import annotations

from fixture_strategy import plan
from fixture_strategy.knobs import FixtureKnobs
from stages.kits.simulate.systems import BinsSystem
from stages.strategies.bns_gcn import simulate as bns_gcn_simulate
from stages.strategies.g3 import simulate
from stages.strategies.spec import StrategySpec


def runtime_class():
    from fixture_strategy.runtime import FixtureStrategy

    return FixtureStrategy


SPEC = StrategySpec(
    name="fixture",
    summary="Fixture: a strategy of the tests (layer-synchronous, exact).",
    family="full-graph",
    methods=("metis", "chunk"),
    exactness="exact",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    runtime=runtime_class,
    knobs=FixtureKnobs,
    models=("sage", "gcn"),
    simulate=simulate.simulate,
    simulates_hosts=True,
    bins_system=BinsSystem(bns_gcn_simulate.workers),
    simulated_as=lambda options, knobs: "fixture",
)
