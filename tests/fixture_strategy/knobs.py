"""The fixture strategy's `g3 train` knobs: layer 0's cache, and one of its own."""

from __future__ import annotations

from dataclasses import dataclass

from stages.common.knobs import Layer0CacheKnobs, TrainKnob, at_least_one, knob

FIXTURE_ROUNDS = TrainKnob(
    "fixture_rounds", int, 1, metavar="N", check=at_least_one, help="fixture: rounds its workers log."
)


@dataclass(frozen=True)
class FixtureKnobs(Layer0CacheKnobs):
    fixture_rounds: int = knob(FIXTURE_ROUNDS)
