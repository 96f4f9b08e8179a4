"""The neutrontp strategy's `g3 train` knobs: the inter-chunk pipeline (NeutronTP §4.2.2) and layer 0's cache."""

from __future__ import annotations

from dataclasses import dataclass

from stages.common.knobs import LAYER0_CACHE, PIPELINE, knob
from stages.strategies.g3.pipeline import SCHEDULES


@dataclass(frozen=True)
class NeutronTPKnobs:
    # g3's schedule names: 'none' is the bulk collectives, any other the pipeline
    pipeline: str = knob(
        PIPELINE,
        choices=tuple(SCHEDULES),
        default="multi",
        help="neutrontp: 'none' = one bulk all-to-all per split/gather; any other value = the inter-chunk pipeline "
        "(NeutronTP §4.2.2: the split of the next chunk and the gather of the last run on a communication thread "
        "while a chunk aggregates; the same model, bitwise).",
    )
    layer0_cache: str = knob(
        LAYER0_CACHE,
        help="neutrontp (naive TP): layer 0's aggregation of the feature slices and its gather into owned rows happen in "
        "the first epoch only, unless 'off'.",
    )
