"""The fixture strategy's runtime: the kit's layer-synchronous execution, which logs its own knob."""

from __future__ import annotations

import logging

from fixture_strategy.knobs import FixtureKnobs
from stages.kits.runtime.layersync import LayerSyncStrategy
from stages.kits.runtime.strategy import WorkerContext


class FixtureStrategy(LayerSyncStrategy):
    name = "fixture"
    knobs: FixtureKnobs

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        logging.getLogger("g3.runtime").info("fixture rounds %d", self.knobs.fixture_rounds)
