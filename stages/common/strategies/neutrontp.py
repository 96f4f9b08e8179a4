"""The neutrontp strategy's entry in the registry: what every stage needs to know about it."""

from __future__ import annotations

from dataclasses import replace

from ..knobs import LAYER0_CACHE, PIPELINE
from .info import AdviseVariant, StrategyInfo

NEUTRONTP_PIPELINE = replace(
    PIPELINE,
    help="neutrontp: 'none' = one bulk all-to-all per split/gather; any other value = the inter-chunk pipeline "
    "(NeutronTP §4.2.2: the split of the next chunk and the gather of the last run on a communication thread "
    "while a chunk aggregates; the same model, bitwise).",
)
NEUTRONTP_LAYER0_CACHE = replace(
    LAYER0_CACHE,
    help="neutrontp (naive TP): layer 0's aggregation of the feature slices and its gather into owned rows happen in "
    "the first epoch only, unless 'off'.",
)

INFO = StrategyInfo(
    name="neutrontp",
    summary="NeutronTP: tensor parallelism on a feature split — every worker aggregates its column slice "
    "over the whole graph chunk by chunk; --tp naive (all-to-all to row blocks and back per layer) "
    "or decoupled (an MLP, then L propagation rounds: 4 collectives per epoch).",
    methods=("feature",),
    exactness="--tp naive: exact (the same model as single-process full-graph training); --tp decoupled "
    "trains a different model, the decoupled GCN (dgcn: an MLP followed by Â^L), exactly",
    planner="neutrontp",
    runtime="neutrontp",
    knobs=(NEUTRONTP_PIPELINE, NEUTRONTP_LAYER0_CACHE),
    models=("sage", "gcn", "dgcn"),
    profiles=False,
    simulator="tensor_parallel",
    simulated_as=lambda options, knobs: (
        f"neutrontp-{options.get('tp') or 'naive'}" + ("" if knobs.get("pipeline") == "none" else "+pipe")
    ),
    family="tensor-parallel",
    advise_fits_speed=True,
    advise_variants=(
        AdviseVariant("naive, pipelined"),
        AdviseVariant("naive, bulk", train_knobs={"pipeline": "none"}),
    ),
)
