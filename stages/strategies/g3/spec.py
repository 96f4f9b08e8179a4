"""The g3 strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.kits.partition.methods import PartitionMethod
from stages.kits.simulate.systems import BinsSystem
from stages.strategies.g3 import partition, plan, schedules, simulate
from stages.strategies.g3.knobs import G3Knobs
from stages.strategies.g3.pipeline import SCHEDULES
from stages.strategies.spec import AdviseVariant, StrategySpec


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.g3.runtime import G3Strategy

    return G3Strategy


SPEC = StrategySpec(
    name="g3",
    summary="G3: bins within device memory, peer-to-peer sharing per bin, multi-level pipeline (exact).",
    methods=("g3", "metis", "random", "chunk"),
    family="full-graph",
    exactness="exact: the same model as single-process full-graph training",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    summary_rows=plan.summary_rows,
    runtime=runtime_class,
    partition_methods=(
        PartitionMethod(
            "g3",
            "multi-constraint METIS (feature size, degree) then Algorithm 1 swaps that balance the "
            "remote sets (G3 §4.2), refined when they stop short",
            assign=partition.assign,
            options=(
                "seed",
                "gamma",
                "balance_tol",
                "degree_tol",
                "hidden",
                "max_swaps",
                "refine_steps",
                "remote_budget",
            ),
        ),
    ),
    knobs=G3Knobs,
    models=("sage", "gcn", "gat", "dgcn"),
    simulate=simulate.simulate,
    simulates_hosts=True,
    bins_system=BinsSystem(schedules.g3_workers, variants=tuple(SCHEDULES)),
    simulated_as=lambda options, knobs: f"g3-{knobs.get('pipeline') or 'multi'}",
    advise_variants=(
        AdviseVariant("pipeline multi", train_knobs={"pipeline": "multi"}),
        AdviseVariant("pipeline none", train_knobs={"pipeline": "none"}),
    ),
)
