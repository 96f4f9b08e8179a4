"""The clustergcn strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.common.knobs import SamplingKnobs
from stages.strategies.clustergcn import plan, simulate
from stages.strategies.spec import StrategySpec


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.clustergcn.runtime import ClusterGcnStrategy

    return ClusterGcnStrategy


SPEC = StrategySpec(
    name="clustergcn",
    summary="ClusterGCN: each worker's nodes cut into METIS clusters; a step trains on the subgraph of "
    "--clusters-per-batch clusters (other arcs dropped), no exchange, all-reduce per step.",
    methods=("metis", "distdgl", "g3", "random", "chunk", "bytegnn"),
    exactness="drops the arcs between clusters and workers (an approximation); one worker with one "
    "cluster is full-graph training; evaluation is exact full-neighbour inference",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    runtime=runtime_class,
    knobs=SamplingKnobs,
    family="mini-batch",
    simulate=simulate.simulate,
)
