"""What a strategy's entry holds (:class:`StrategyInfo`), its `g3 plan` options (:class:`PlanOption`) and the
configurations `g3 advise` predicts (:class:`AdviseVariant`), with the plan options' shared parsers."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from ..knobs import TrainKnob


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
    # False: the option changes only what plan.json records, not how a run of the plan computes or moves data
    # (``g3 advise`` then reuses one calibration run across its values)
    layout: bool = True


def positive_int(what: str, unit: str = "", auto: bool = False) -> Callable[[str], int | None]:
    """A :class:`PlanOption` parser of an integer >= 1 (``what`` names it in the error, ``unit`` follows the 1);
    with ``auto``, also ``auto`` (None)."""

    def parse(text: str) -> int | None:
        if auto and text in (None, "auto"):
            return None
        try:
            value = int(text)
        except ValueError:
            raise ValueError(
                "expected a node count or 'auto'" if auto else "expected a positive integer"
            ) from None
        if value < 1:
            raise ValueError(f"{what} must be at least 1{unit}")
        return value

    return parse


def count_or_auto(what: str) -> Callable[[str], int | None]:
    """A :class:`PlanOption` parser of a node count >= 1 or ``auto`` (None); ``what`` names it in the error."""
    return positive_int(what, " node", auto=True)


def one_of(*choices: str) -> Callable[[str], str]:
    """A :class:`PlanOption` parser of one of ``choices`` (kept as the text)."""

    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected {', '.join(choices[:-1])} or {choices[-1]}")
        return text

    return parse


def on_off(text: str) -> bool:
    """A :class:`PlanOption` parser of on | off (kept as a bool)."""
    if text not in ("on", "off"):
        raise ValueError("expected on or off")
    return text == "on"


def choice_option(name: str, default: str, choices: tuple[str, ...], help: str, **more) -> PlanOption:
    """A `g3 plan` option ``--name`` taking one of ``choices``; ``("on", "off")`` is kept as a bool."""
    parse = on_off if choices == ("on", "off") else one_of(*choices)
    return PlanOption(
        name, "--" + name.replace("_", "-"), default, help, parse=parse, metavar="|".join(choices), **more
    )


@dataclass(frozen=True)
class AdviseVariant:
    """One configuration of a strategy that `g3 advise` predicts: ``plan_options`` by name as `g3 plan` takes
    them (text), ``train_knobs`` by the names of the strategy's knobs (``StrategyInfo.knobs``), and ``simulate``: the fields of
    ``stages.simulate.SimulateOptions`` that model them (e.g. bns-gcn's boundary sample ratio)."""

    label: str = "default"
    plan_options: dict = field(default_factory=dict)
    train_knobs: dict = field(default_factory=dict)
    simulate: dict = field(default_factory=dict)


FAMILIES = ("full-graph", "mini-batch", "tensor-parallel")


@dataclass(frozen=True)
class StrategyInfo:
    name: str
    summary: str  # one line for `g3 plan --help`
    methods: tuple[str, ...]  # partition methods it runs on; the first is the default (`g3 bench`)
    exactness: str  # what it computes, against single-process full-graph training
    planner: str  # module under stages.plan
    runtime: str  # module under stages.runtime.strategies
    # the `g3 train` knobs it has (stages/common/knobs.py): how it runs, not what it computes
    knobs: tuple[TrainKnob, ...] = ()
    models: tuple[str, ...] = ("sage", "gcn", "gat")  # model kinds it trains (`g3 plan --model`)
    mini_batch: bool = False
    samples_neighbours: bool = (
        False  # neighbour sampling with --fanouts/--batch-size (peers match it, simulate models it)
    )
    profiles: bool = True  # `g3 train --profile` can fit per-bin rates from its trace
    notes: tuple[str, ...] = field(default_factory=tuple)
    # `g3 simulate`: the module under stages.simulate that models it (its ``simulate(plan, meta, options, out)``
    # returns simulate.json's body and the systems with their timeline spans); None: no model
    simulator: str | None = None
    # its plans cut every layer into bins with P2P tables: the workload the `bins` simulator runs every
    # full-graph system on (a plan for another K is planned with this strategy)
    bins: bool = False
    # the exact full-graph evaluator: `g3 eval` at another worker count plans this strategy on a partition of
    # this method (None: not the evaluator)
    evaluator_method: str | None = None
    # `g3 bench` peers (DGL, PyG) run mini-batch with (fanouts, batch size): the plan options that give them
    peer_options: tuple[str, ...] = ()
    # the name `g3 simulate` gives the system that runs a plan of this strategy with these plan options and
    # `g3 train` knobs (None: its knob's default), to set a prediction beside a run (examples/simulate_vs_emulated.py)
    simulated_as: Callable[[dict, dict], str] | None = None
    # `g3 advise`: the family it belongs to (FAMILIES) and the configurations it predicts (its main options)
    family: str = "full-graph"
    advise_variants: tuple[AdviseVariant, ...] = (AdviseVariant(),)
    # `g3 advise`: its model's compute rates come from the bins strategy's profile, but its kernels are not the
    # ones that profile times (neutrontp aggregates whole-graph column slices of the input width; bns-gcn and
    # sancus run each layer as one block, without g3's bins), so a short run of its own plan fits its compute
    # speed against the profile's rates (and anchors it) before it is predicted
    advise_fits_speed: bool = False

    @property
    def train_knobs(self) -> tuple[str, ...]:
        """The names of its knobs."""
        return tuple(k.name for k in self.knobs)

    def knob(self, name: str) -> TrainKnob | None:
        """Its declaration of the knob ``name`` (None: it does not have that knob)."""
        return next((k for k in self.knobs if k.name == name), None)

    def simulator_module(self):
        return importlib.import_module(f"stages.simulate.{self.simulator}") if self.simulator else None

    def plan_summary(self, plan: dict) -> tuple[list[tuple[str, str]], dict | None]:
        """What `g3 info` / `g3 plan` print about a plan of this strategy beyond the common fields: (label, text)
        rows and a table (``title``, ``columns``, ``rows`` of text) or None, from the planner's optional
        ``summary_rows(plan)`` and ``summary_table(plan)``."""
        planner = self.planner_module()
        rows = planner.summary_rows(plan) if hasattr(planner, "summary_rows") else []
        table = planner.summary_table(plan) if hasattr(planner, "summary_table") else None
        return rows, table

    def planner_module(self):
        return importlib.import_module(f"stages.plan.{self.planner}")

    def runtime_class(self):
        return importlib.import_module(f"stages.runtime.strategies.{self.runtime}").STRATEGY

    def options(self) -> tuple[PlanOption, ...]:
        return tuple(self.planner_module().OPTIONS)

    @property
    def default_method(self) -> str:
        return self.methods[0]
