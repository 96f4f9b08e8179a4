"""The distdgl strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.kits.partition.methods import PartitionMethod
from stages.strategies.distdgl import partition, plan, simulate
from stages.strategies.distdgl.knobs import DistDglKnobs
from stages.strategies.spec import StrategySpec


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.distdgl.runtime import DistDglStrategy

    return DistDglStrategy


SPEC = StrategySpec(
    name="distdgl",
    summary="DistDGL: mini-batch training, neighbour sampling (--fanouts, --batch-size, --batch-order), "
    "remote neighbours sampled by their owners, features fetched by id, all-reduce per step.",
    methods=("distdgl", "metis", "random", "g3", "chunk", "bytegnn", "p3"),
    exactness="samples neighbours (an approximation); --fanouts -1 with one batch of every training node "
    "is exact full-graph training; evaluation is exact full-neighbour inference",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    runtime=runtime_class,
    partition_methods=(
        PartitionMethod(
            "distdgl",
            "METIS with DistDGL's five balance constraints (nodes, train, valid, test, arcs)",
            assign=partition.assign,
        ),
    ),
    knobs=DistDglKnobs,
    simulate=simulate.simulate,
    peer_options=("fanouts", "batch_size"),
    family="mini-batch",
)
