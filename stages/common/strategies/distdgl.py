"""The distdgl strategy's entry in the registry: what every stage needs to know about it."""

from __future__ import annotations

from ..knobs import MICRO_BATCHES, PREFETCH
from .info import StrategyInfo

INFO = StrategyInfo(
    name="distdgl",
    summary="DistDGL: mini-batch training, neighbour sampling (--fanouts, --batch-size, --batch-order), "
    "remote neighbours sampled by their owners, features fetched by id, all-reduce per step.",
    methods=("distdgl", "metis", "random", "g3", "chunk", "bytegnn", "p3"),
    exactness="samples neighbours (an approximation); --fanouts -1 with one batch of every training node "
    "is exact full-graph training; evaluation is exact full-neighbour inference",
    planner="distdgl",
    runtime="distdgl",
    knobs=(PREFETCH, MICRO_BATCHES),
    mini_batch=True,
    samples_neighbours=True,
    simulator="minibatch",
    peer_options=("fanouts", "batch_size"),
    simulated_as=lambda options, knobs: "distdgl",
    family="mini-batch",
)
