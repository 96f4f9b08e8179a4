"""The p3 strategy's entry in the registry: what every stage needs to know about it."""

from __future__ import annotations

from dataclasses import replace

from ..knobs import PIPELINE, PREFETCH
from .info import AdviseVariant, StrategyInfo

P3_PIPELINE = replace(
    PIPELINE,
    choices=("none", "p3"),
    default="none",
    help="p3: 'p3' = P3's staleness with weight stashing: batch t computes with the weights before update t-3 and "
    "its gradient updates the current ones (P3 Eq. 3, a different model); the next three batches' partials "
    "travel while this one computes its data-parallel phase (up to four batches in flight).",
)

INFO = StrategyInfo(
    name="p3",
    summary="P3: structure hashed, features split by column; layer 1 model-parallel (the structure "
    "pushed, partial activations pulled, gradients pushed back), layers 2+ data-parallel; "
    "g3 train --pipeline p3: P3's delay-3 staleness with weight stashing, four batches in flight.",
    methods=("p3",),
    exactness="as distdgl on the same batches (samples neighbours; exact against distdgl --batch-order "
    "global); --pipeline p3 updates with gradients three steps stale (P3 Eq. 3, an "
    "approximation)",
    planner="p3",
    runtime="p3",
    knobs=(PREFETCH, P3_PIPELINE),
    models=("sage", "gcn"),
    mini_batch=True,
    samples_neighbours=True,
    simulator="p3",
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
