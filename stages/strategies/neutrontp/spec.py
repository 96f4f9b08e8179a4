"""The neutrontp strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.kits.partition import feature
from stages.kits.partition.methods import PartitionMethod
from stages.strategies.neutrontp import plan, simulate
from stages.strategies.neutrontp.knobs import NeutronTPKnobs
from stages.strategies.spec import AdviseVariant, StrategySpec


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.neutrontp.runtime import NeutronTPStrategy

    return NeutronTPStrategy


SPEC = StrategySpec(
    name="neutrontp",
    summary="NeutronTP: tensor parallelism on a feature split — every worker aggregates its column slice "
    "over the whole graph chunk by chunk; --tp naive (all-to-all to row blocks and back per layer) "
    "or decoupled (an MLP, then L propagation rounds: 4 collectives per epoch).",
    methods=("feature",),
    exactness="--tp naive: exact (the same model as single-process full-graph training); --tp decoupled "
    "trains a different model, the decoupled GCN (dgcn: an MLP followed by Â^L), exactly",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    summary_rows=plan.summary_rows,
    summary_table=plan.summary_table,
    model_kind=plan.model_kind,
    runtime=runtime_class,
    partition_methods=(
        PartitionMethod(
            "feature",
            "the whole topology on every worker and ceil(F/K) feature columns each (NeutronTP)",
            assign=feature.assign,
            layouts=("columns",),
            options=("hidden",),
        ),
    ),
    knobs=NeutronTPKnobs,
    models=("sage", "gcn", "dgcn"),
    profiles=False,
    simulate=simulate.simulate,
    simulated_as=lambda options, knobs: (
        f"neutrontp-{options.get('tp') or 'naive'}" + ("" if knobs.get("pipeline") == "none" else "+pipe")
    ),
    family="tensor-parallel",
    fits_own_speed=True,
    advise_variants=(
        AdviseVariant("naive, pipelined"),
        AdviseVariant("naive, bulk", train_knobs={"pipeline": "none"}),
    ),
)
