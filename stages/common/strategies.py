"""The registry of training strategies: one entry per system, naming its planner and its runtime module.

A strategy is how a distributed training system executes a plan: ``g3 plan --strategy NAME`` runs the
planner ``stages.plan.<planner>`` (its ``OPTIONS`` become ``g3 plan`` options, its ``plan`` function writes
the worker folders), and ``g3 train`` / ``g3 eval`` run ``stages.runtime.strategies.<runtime>``'s
``STRATEGY`` class behind the interface of ``stages.runtime.strategies.base``. Adding a strategy is one
entry here plus those two modules: the training loop, the CLI, eval, bench and report read everything they
need from the plan and this registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import G3InputError

# `g3 train` options that change how a strategy runs, not what it computes; each strategy lists those it has
TRAIN_KNOBS = {
    "pipeline": "--pipeline",
    "prefetch": "--prefetch",
    "backward": "--backward",
    "layer0_cache": "--layer0-cache",
    "feature_cache": "--no-feature-cache",
    "micro_batches": "--micro-batches",
}


@dataclass(frozen=True)
class PlanOption:
    """One ``g3 plan`` option of a strategy. ``parse(text)`` turns the command-line text into the value kept in
    plan.json (a ValueError's message becomes the one-line error); ``default`` is that value's text form."""

    name: str  # key in plan.json's strategy options
    flag: str  # the command-line flag
    default: str | None
    help: str
    parse: Callable[[str], object] = str
    metavar: str = "VALUE"


def positive_int(what: str) -> Callable[[str], int]:
    """A :class:`PlanOption` parser of an integer >= 1 (``what`` names it in the error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError("expected a positive integer") from None
        if value < 1:
            raise ValueError(f"{what} must be at least 1")
        return value
    return parse


def count_or_auto(what: str) -> Callable[[str], int | None]:
    """A :class:`PlanOption` parser of a node count >= 1 or ``auto`` (None); ``what`` names it in the error."""
    def parse(text: str) -> int | None:
        if text in (None, "auto"):
            return None
        try:
            n = int(text)
        except ValueError:
            raise ValueError("expected a node count or 'auto'") from None
        if n < 1:
            raise ValueError(f"{what} must be at least 1 node")
        return n
    return parse


@dataclass(frozen=True)
class StrategyInfo:
    name: str
    summary: str  # one line for `g3 plan --help`
    methods: tuple[str, ...]  # partition methods it runs on; the first is the default (`g3 bench`)
    exactness: str  # what it computes, against single-process full-graph training
    planner: str  # module under stages.plan
    runtime: str  # module under stages.runtime.strategies
    train_knobs: tuple[str, ...] = ()
    models: tuple[str, ...] = ("sage", "gcn", "gat")  # model kinds it trains (`g3 plan --model`)
    mini_batch: bool = False
    samples_neighbours: bool = False  # neighbour sampling with --fanouts/--batch-size (peers match it, simulate models it)
    profiles: bool = True  # `g3 train --profile` can fit per-bin rates from its trace
    notes: tuple[str, ...] = field(default_factory=tuple)

    def planner_module(self):
        return importlib.import_module(f"stages.plan.{self.planner}")

    def runtime_class(self):
        return importlib.import_module(f"stages.runtime.strategies.{self.runtime}").STRATEGY

    def options(self) -> tuple[PlanOption, ...]:
        return tuple(self.planner_module().OPTIONS)

    @property
    def default_method(self) -> str:
        return self.methods[0]


STRATEGIES: dict[str, StrategyInfo] = {
    s.name: s
    for s in (
        StrategyInfo(
            name="g3",
            summary="G3: bins within device memory, peer-to-peer sharing per bin, multi-level pipeline (exact).",
            methods=("g3", "metis", "random", "chunk"),
            exactness="exact: the same model as single-process full-graph training",
            planner="g3", runtime="g3",
            train_knobs=("pipeline", "prefetch", "backward", "layer0_cache", "feature_cache"),
            models=("sage", "gcn", "gat", "dgcn"),
        ),
        StrategyInfo(
            name="bns-gcn",
            summary="BNS-GCN: layer-synchronous boundary exchange, whole partition at once; --boundary-sample P "
                    "(P = 1: exact; on a chunk partition: NeutronStar as G3 ran it).",
            methods=("metis", "chunk", "g3", "random"),
            exactness="exact with --boundary-sample 1; P < 1 samples boundary nodes (an approximation)",
            planner="bns_gcn", runtime="bns_gcn",
            train_knobs=("layer0_cache",),
        ),
        StrategyInfo(
            name="sancus",
            summary="SANCUS: full-graph training with cached (stale) remote embeddings, skipping sends while "
                    "fresh enough (--staleness; epoch:0 is exact).",
            methods=("chunk", "metis", "g3", "random"),
            exactness="exact with --staleness epoch:0; otherwise stale remote embeddings (an approximation)",
            planner="sancus", runtime="sancus",
            train_knobs=("layer0_cache",),
        ),
        StrategyInfo(
            name="distdgl",
            summary="DistDGL: mini-batch training, neighbour sampling (--fanouts, --batch-size, --batch-order), "
                    "remote neighbours sampled by their owners, features fetched by id, all-reduce per step.",
            methods=("distdgl", "metis", "random", "g3", "chunk", "bytegnn"),
            exactness="samples neighbours (an approximation); --fanouts -1 with one batch of every training node "
                      "is exact full-graph training; evaluation is exact full-neighbour inference",
            planner="distdgl", runtime="distdgl",
            train_knobs=("prefetch", "micro_batches"), mini_batch=True, samples_neighbours=True,
        ),
        StrategyInfo(
            name="bytegnn",
            summary="ByteGNN: DistDGL's sampling as task DAGs on a thread pool under its two-level scheduler "
                    "(--scheduler, --launch-sigma), on its K-hop block partition.",
            methods=("bytegnn", "distdgl", "metis", "random", "g3", "chunk"),
            exactness="as distdgl (the scheduler only reorders work): samples neighbours; --fanouts -1 with one "
                      "batch of every training node is exact full-graph training",
            planner="bytegnn", runtime="bytegnn", mini_batch=True, samples_neighbours=True,
        ),
        StrategyInfo(
            name="neutrontp",
            summary="NeutronTP: tensor parallelism on a feature split — every worker aggregates its column slice "
                    "over the whole graph chunk by chunk; --tp naive (all-to-all to row blocks and back per layer) "
                    "or decoupled (an MLP, then L propagation rounds: 4 collectives per epoch).",
            methods=("feature",),
            exactness="--tp naive: exact (the same model as single-process full-graph training); --tp decoupled "
                      "trains a different model, the decoupled GCN (dgcn: an MLP followed by Â^L), exactly",
            planner="neutrontp", runtime="neutrontp",
            train_knobs=("pipeline", "layer0_cache"),
            models=("sage", "gcn", "dgcn"), profiles=False,
        ),
        StrategyInfo(
            name="clustergcn",
            summary="ClusterGCN: each worker's nodes cut into METIS clusters; a step trains on the subgraph of "
                    "--clusters-per-batch clusters (other arcs dropped), no exchange, all-reduce per step.",
            methods=("metis", "distdgl", "g3", "random", "chunk", "bytegnn"),
            exactness="drops the arcs between clusters and workers (an approximation); one worker with one "
                      "cluster is full-graph training; evaluation is exact full-neighbour inference",
            planner="clustergcn", runtime="clustergcn",
            train_knobs=("prefetch",), mini_batch=True,
        ),
    )
}


def strategy_info(name: str) -> StrategyInfo:
    """The registered strategy ``name``; an unknown name is bad input (one line naming the choices)."""
    if name not in STRATEGIES:
        raise G3InputError(f"unknown strategy {name!r} (choose from {', '.join(STRATEGIES)})")
    return STRATEGIES[name]


def check_partition_method(info: StrategyInfo, method: str | None, part: object) -> None:
    """Refuse a partition the strategy cannot run on, naming what to run instead."""
    if method in info.methods:
        return
    others = [s.name for s in STRATEGIES.values() if method in s.methods]
    instead = f"`g3 partition STORE --workers K --method {info.default_method}`"
    also = f"; a {method} partition runs {', '.join(others)}" if others else ""
    raise G3InputError(
        f"strategy {info.name} runs on {', '.join(info.methods)} partitions, not {method}: run {instead}{also}",
        path=part)
