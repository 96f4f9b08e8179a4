"""The bytegnn strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.kits.partition.methods import PartitionMethod
from stages.strategies.bytegnn import partition, plan, simulate
from stages.strategies.bytegnn.knobs import ByteGnnKnobs
from stages.strategies.spec import StrategySpec

if TYPE_CHECKING:  # its class is imported when a worker asks for it
    from stages.kits.runtime.strategy import Strategy


def runtime_class() -> type[Strategy]:
    """Its runtime, imported when a worker runs it: planning, simulating and the CLI's help never load torch."""
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
