"""The g3 strategy's entry in the registry: what every stage needs to know about it."""

from __future__ import annotations

from dataclasses import replace

from ..knobs import BACKWARD, FEATURE_CACHE, LAYER0_CACHE, PIPELINE, PREFETCH, STREAM_BINS
from .info import AdviseVariant, StrategyInfo

G3_PREFETCH = replace(
    PREFETCH,
    choices=("auto", "on", "off"),
    check=None,
    metavar=None,
    help="g3: under --pipeline intra/multi, gather (on CUDA also copy in) the next bin on a second thread while "
    "one computes. 'auto' = on for cuda; on the CPU only when the workers leave a core idle (threads x local "
    "workers < cores): otherwise the thread takes a core from the compute kernels and epochs get slower.",
)

INFO = StrategyInfo(
    name="g3",
    summary="G3: bins within device memory, peer-to-peer sharing per bin, multi-level pipeline (exact).",
    methods=("g3", "metis", "random", "chunk"),
    exactness="exact: the same model as single-process full-graph training",
    planner="g3",
    runtime="g3",
    knobs=(PIPELINE, G3_PREFETCH, BACKWARD, LAYER0_CACHE, FEATURE_CACHE, STREAM_BINS),
    models=("sage", "gcn", "gat", "dgcn"),
    simulator="bins",
    bins=True,
    evaluator_method="chunk",
    simulated_as=lambda options, knobs: f"g3-{knobs.get('pipeline') or 'multi'}",
    advise_variants=(
        AdviseVariant("pipeline multi", train_knobs={"pipeline": "multi"}),
        AdviseVariant("pipeline none", train_knobs={"pipeline": "none"}),
    ),
)
