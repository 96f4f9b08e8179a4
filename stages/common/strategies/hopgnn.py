"""The hopgnn strategy's entry in the registry: what every stage needs to know about it."""

from __future__ import annotations

from ..knobs import PREFETCH
from .info import StrategyInfo

INFO = StrategyInfo(
    name="hopgnn",
    summary="HopGNN: the model migrates to the features — distdgl's global batches as per-root "
    "micrographs trained in K time steps on their home servers (--pregather, --merge, "
    "--migrate; --batch-order local-only: each server its own roots).",
    methods=("distdgl", "metis", "g3"),
    exactness="as distdgl --batch-order global (migration, pre-gathering and merging change where work "
    "runs, not the gradients); --batch-order local-only trains on batches stratified by "
    "partition (a different model)",
    planner="hopgnn",
    runtime="hopgnn",
    simulator="hopgnn",
    simulated_as=lambda options, knobs: "hopgnn",
    family="mini-batch",
    knobs=(PREFETCH,),
    mini_batch=True,
    samples_neighbours=True,
    peer_options=("fanouts", "batch_size"),
)
