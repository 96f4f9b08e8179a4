"""The bns-gcn strategy's entry in the registry: what every stage needs to know about it."""

from __future__ import annotations

from ..knobs import LAYER0_CACHE
from .info import AdviseVariant, StrategyInfo

INFO = StrategyInfo(
    name="bns-gcn",
    summary="BNS-GCN: layer-synchronous boundary exchange, whole partition at once; --boundary-sample P "
    "(P = 1: exact; on a chunk partition: NeutronStar as G3 ran it).",
    methods=("metis", "chunk", "g3", "random"),
    exactness="exact with --boundary-sample 1; P < 1 samples boundary nodes (an approximation)",
    planner="bns_gcn",
    runtime="bns_gcn",
    knobs=(LAYER0_CACHE,),
    simulator="bins",
    simulated_as=lambda options, knobs: "bns-gcn",
    advise_fits_speed=True,
    advise_variants=(
        AdviseVariant(
            "boundary sample 1 (exact)",
            plan_options={"boundary_sample": "1"},
            simulate={"boundary_sample": 1.0},
        ),
        AdviseVariant(
            "boundary sample 0.1", plan_options={"boundary_sample": "0.1"}, simulate={"boundary_sample": 0.1}
        ),
    ),
)
