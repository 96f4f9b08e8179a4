"""The p3 strategy's `g3 train` knobs: the sampler's lead and P3's pipelined, stale training (P3 Eq. 3)."""

from __future__ import annotations

from dataclasses import dataclass

from stages.common.knobs import PIPELINE, SamplingKnobs, knob


@dataclass(frozen=True)
class P3Knobs(SamplingKnobs):
    pipeline: str = knob(
        PIPELINE,
        choices=("none", "p3"),
        default="none",
        help="p3: 'p3' = P3's staleness with weight stashing: batch t computes with the weights before update t-3 and "
        "its gradient updates the current ones (P3 Eq. 3, a different model); the next three batches' partials "
        "travel while this one computes its data-parallel phase (up to four batches in flight).",
    )
