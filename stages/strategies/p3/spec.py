"""The p3 strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.kits.partition import baselines
from stages.kits.partition.methods import PartitionMethod
from stages.strategies.p3 import plan, simulate
from stages.strategies.p3.knobs import P3Knobs
from stages.strategies.spec import AdviseVariant, StrategySpec


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.p3.runtime import P3Strategy

    return P3Strategy


SPEC = StrategySpec(
    name="p3",
    summary="P3: structure hashed, features split by column; layer 1 model-parallel (the structure "
    "pushed, partial activations pulled, gradients pushed back), layers 2+ data-parallel; "
    "g3 train --pipeline p3: P3's delay-3 staleness with weight stashing, four batches in flight.",
    methods=("p3",),
    exactness="as distdgl on the same batches (samples neighbours; exact against distdgl --batch-order "
    "global); --pipeline p3 updates with gradients three steps stale (P3 Eq. 3, an "
    "approximation)",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    summary_rows=plan.summary_rows,
    runtime=runtime_class,
    partition_methods=(
        PartitionMethod(
            "p3",
            "P3's independent partitioning (P3 §3.1): the structure by a random hash of node id, each "
            "arc with its destination, and the features split by column, every worker a column "
            "slice of every node",
            assign=baselines.assign_random,
            layouts=("rows", "columns"),
        ),
    ),
    knobs=P3Knobs,
    models=("sage", "gcn"),
    simulate=simulate.simulate,
    peer_options=("fanouts", "batch_size"),
    simulated_as=lambda options, knobs: "p3" if knobs.get("pipeline") in (None, "none") else "p3-pipelined",
    family="mini-batch",
    advise_variants=(
        AdviseVariant("unpipelined", train_knobs={"pipeline": "none"}),
        AdviseVariant("pipelined (delay 3)", train_knobs={"pipeline": "p3"}),
    ),
    notes=(
        "GAT is not built: its attention logits would need every head's scalars summed across the "
        "column slices per arc endpoint before the softmax, which P3 does not describe",
    ),
)
