"""What a strategy is to every stage: :class:`StrategySpec`, a frozen declaration holding its code (planner,
runtime class, simulator, partitioner) and its typed options, and the configurations `g3 advise` predicts
(:class:`AdviseVariant`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stages.common.knobs import NoKnobs, TrainKnob, declared_knobs
from stages.common.plan_options import PlanOption
from stages.kits.partition.methods import PartitionMethod
from stages.kits.plan.context import PlanContext
from stages.kits.simulate.systems import BinsSystem

if TYPE_CHECKING:  # a spec names its runtime's class; importing it loads torch
    from stages.kits.runtime.strategy import Strategy


@dataclass(frozen=True)
class AdviseVariant:
    """One configuration of a strategy that `g3 advise` predicts: ``plan_options`` by name as `g3 plan` takes
    them (text), ``train_knobs`` by the names of the strategy's knobs, and ``simulate``: the fields of
    ``SimulateOptions`` that model them (e.g. bns-gcn's boundary sample ratio)."""

    label: str = "default"
    plan_options: dict = field(default_factory=dict)
    train_knobs: dict = field(default_factory=dict)
    simulate: dict = field(default_factory=dict)


FAMILIES = ("full-graph", "mini-batch", "tensor-parallel")

# `g3 simulate`'s model of a strategy: (plan folder, plan.json, SimulateOptions, output folder, replan) ->
# (simulate.json's body, the systems with their timeline spans or None); ``replan(k, strategy, options)`` is the
# folder of a plan of the same store, partition method and model for ``k`` workers (made once, then reused)
Simulate = Callable[..., tuple[dict, list[dict] | None]]


@dataclass(frozen=True)
class StrategySpec:
    """One distributed training system: everything `g3 plan`, `g3 train`, `g3 eval`, `g3 simulate`, `g3 advise`
    and `g3 bench` need of it, as code and typed declarations."""

    name: str
    summary: str  # one line for `g3 plan --help`
    family: str  # one of FAMILIES
    methods: tuple[str, ...]  # partition methods it runs on; the first is the default (`g3 bench`, advise)
    exactness: str  # what it computes, against single-process full-graph training
    plan: Callable[[Path, PlanContext], dict]  # writes the worker folders of a plan; returns plan.json's body
    # how a worker of `g3 train` / `g3 eval` runs a plan of it: its Strategy class, imported when asked for
    runtime: Callable[[], type[Strategy]]
    plan_options: tuple[PlanOption, ...] = ()  # its `g3 plan` options
    # its `g3 train` knobs (how it runs, not what it computes): a frozen dataclass its runtime reads
    knobs: type = NoKnobs
    models: tuple[str, ...] = ("sage", "gcn", "gat")  # model kinds it trains (`g3 plan --model`)
    # the partitioners it owns (`g3 partition --method NAME`); they may serve other strategies too
    partition_methods: tuple[PartitionMethod, ...] = ()
    simulate: Simulate | None = None  # `g3 simulate`'s model of it (None: none)
    simulates_hosts: bool = False  # its model takes `g3 simulate --hosts` (ranks sharing a host's link)
    # how its workers run a g3 plan's bins, for the bins simulator that sets every full-graph system side by side
    bins_system: BinsSystem | None = None
    # the system of its simulation that a run of a plan with these plan options and train knobs is (None: the
    # one named as the strategy; see :meth:`simulated_system`)
    simulated_as: Callable[[dict, dict], str] | None = None
    # a planner may name the model its options imply (neutrontp --tp decoupled --model gcn trains dgcn)
    model_kind: Callable[[dict, str], str] | None = None
    # what `g3 info` / `g3 plan` print about a plan of it beyond the common fields: (label, text) rows, and a
    # table (``title``, ``columns``, ``rows`` of text)
    summary_rows: Callable[[dict], list[tuple[str, str]]] | None = None
    summary_table: Callable[[dict], dict] | None = None
    # `g3 bench`'s peers run mini-batch with the (fanouts, batch size) these plan options give (names)
    peer_options: tuple[str, ...] = ()
    profiles: bool = True  # `g3 train --profile` can fit per-bin rates from its trace
    # `g3 advise`: its compute rates come from the bins strategy's profile, but its kernels are not the ones
    # that profile times (neutrontp aggregates column slices; bns-gcn and sancus run each layer as one block),
    # so a short run of its own plan fits its compute speed before it is predicted
    fits_own_speed: bool = False
    advise_variants: tuple[AdviseVariant, ...] = (AdviseVariant(),)
    notes: tuple[str, ...] = ()
    # the bytes of state of their own (beyond the weights, sharded or not, and Adam's moments) its ranks' files
    # of one checkpoint hold at least, all ranks together, from plan.json and the float width (`g3 train`'s check
    # of the run folder's disk: a lower bound); None: none declared
    checkpoint_state_bytes: Callable[[dict, int], int] | None = None

    @property
    def mini_batch(self) -> bool:
        return self.family == "mini-batch"

    @property
    def default_method(self) -> str:
        return self.methods[0]

    @property
    def declared_knobs(self) -> tuple[TrainKnob, ...]:
        """The declarations of its knobs (the fields of :attr:`knobs` that are knobs)."""
        return declared_knobs(self.knobs)

    @property
    def train_knobs(self) -> tuple[str, ...]:
        """The names of its knobs."""
        return tuple(k.name for k in self.declared_knobs)

    def knob(self, name: str) -> TrainKnob | None:
        """Its declaration of the knob ``name`` (None: it does not have that knob)."""
        return next((k for k in self.declared_knobs if k.name == name), None)

    def simulated_system(self, options: dict, knobs: dict) -> str:
        return self.simulated_as(options, knobs) if self.simulated_as else self.name

    def plan_summary(self, plan: dict) -> tuple[list[tuple[str, str]], dict | None]:
        """What `g3 info` / `g3 plan` print about a plan of it beyond the common fields."""
        rows = self.summary_rows(plan) if self.summary_rows else []
        table = self.summary_table(plan) if self.summary_table else None
        return rows, table

    def peer_setup(self, options: dict) -> tuple[list[int], int] | None:
        """(fanouts, batch size) for `g3 bench`'s mini-batch peers from its parsed plan options; None: nothing
        to match (full-graph, or clustergcn's cluster batches)."""
        if not self.peer_options:
            return None
        fanouts, batch_size = (options[name] for name in self.peer_options)
        return fanouts, batch_size
