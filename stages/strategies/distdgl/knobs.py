"""The distdgl strategy's `g3 train` knobs: the sampler's lead and gradient accumulation over micro-batches."""

from __future__ import annotations

from dataclasses import dataclass

from stages.common.knobs import MICRO_BATCHES, SamplingKnobs, knob


@dataclass(frozen=True)
class DistDglKnobs(SamplingKnobs):
    micro_batches: int = knob(MICRO_BATCHES)
