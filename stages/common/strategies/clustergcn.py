"""The clustergcn strategy's entry in the registry: what every stage needs to know about it."""

from __future__ import annotations

from ..knobs import PREFETCH
from .info import StrategyInfo

INFO = StrategyInfo(
    name="clustergcn",
    summary="ClusterGCN: each worker's nodes cut into METIS clusters; a step trains on the subgraph of "
    "--clusters-per-batch clusters (other arcs dropped), no exchange, all-reduce per step.",
    methods=("metis", "distdgl", "g3", "random", "chunk", "bytegnn"),
    exactness="drops the arcs between clusters and workers (an approximation); one worker with one "
    "cluster is full-graph training; evaluation is exact full-neighbour inference",
    planner="clustergcn",
    runtime="clustergcn",
    knobs=(PREFETCH,),
    mini_batch=True,
    family="mini-batch",
    simulator="clustergcn",
    simulated_as=lambda options, knobs: "clustergcn",
)
