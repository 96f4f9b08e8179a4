"""The sancus strategy's entry in the registry: what every stage needs to know about it."""

from __future__ import annotations

from ..knobs import LAYER0_CACHE
from .info import AdviseVariant, StrategyInfo

INFO = StrategyInfo(
    name="sancus",
    summary="SANCUS: full-graph training with cached (stale) remote embeddings, skipping sends while "
    "fresh enough (--staleness; epoch:0 is exact).",
    methods=("chunk", "metis", "g3", "random"),
    exactness="exact with --staleness epoch:0; otherwise stale remote embeddings (an approximation)",
    planner="sancus",
    runtime="sancus",
    knobs=(LAYER0_CACHE,),
    simulator="bins",
    simulated_as=lambda options, knobs: f"sancus-{options.get('sancus_comm') or 'broadcast'}",
    advise_fits_speed=True,
    advise_variants=(
        AdviseVariant(
            "broadcast, epoch:1",
            plan_options={"sancus_comm": "broadcast", "staleness": "epoch:1"},
            simulate={"staleness_epochs": 1},
        ),
        AdviseVariant(
            "p2p, epoch:1",
            plan_options={"sancus_comm": "p2p", "staleness": "epoch:1"},
            simulate={"staleness_epochs": 1},
        ),
    ),
)
