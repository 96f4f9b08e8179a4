"""The bytegnn strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.kits.partition.methods import PartitionMethod
from stages.strategies.bytegnn import partition, simulate
from stages.strategies.bytegnn.knobs import ByteGnnKnobs
from stages.strategies.distdgl import plan
from stages.strategies.spec import StrategySpec


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.bytegnn.runtime import ByteGnnStrategy

    return ByteGnnStrategy


SPEC = StrategySpec(
    name="bytegnn",
    summary="ByteGNN: DistDGL's sampling as task DAGs on a thread pool under its two-level scheduler "
    "(g3 train --scheduler, --launch-sigma), on its K-hop block partition.",
    methods=("bytegnn", "distdgl", "metis", "random", "g3", "chunk"),
    exactness="as distdgl (the scheduler only reorders work): samples neighbours; --fanouts -1 with one "
    "batch of every training node is exact full-graph training",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    runtime=runtime_class,
    partition_methods=(
        PartitionMethod(
            "bytegnn",
            "ByteGNN's K-hop blocks assigned greedily (seed paper 001 §4.2.3, Algorithm 2)",
            assign=partition.assign,
            options=("seed", "balance_tol", "bytegnn_alpha", "bytegnn_beta", "bytegnn_gamma", "bytegnn_hops"),
        ),
    ),
    knobs=ByteGnnKnobs,
    simulate=simulate.simulate,
    peer_options=("fanouts", "batch_size"),
    family="mini-batch",
    simulated_as=lambda options, knobs: (
        "bytegnn" if (knobs.get("scheduler") or "on") == "on" else "bytegnn-off"
    ),
)
