"""The registry of training strategies: one entry per system, naming its planner and its runtime module.

A strategy is how a distributed training system executes a plan: ``g3 plan --strategy NAME`` runs the
planner ``stages.plan.<planner>`` (its ``OPTIONS`` become ``g3 plan`` options, its ``plan`` function writes
the worker folders), and ``g3 train`` / ``g3 eval`` run ``stages.runtime.strategies.<runtime>``'s
``STRATEGY`` class behind the interface of ``stages.runtime.strategies.base``. Each strategy's entry is a module
of this package (``bytegnn.py``: ``INFO``, with the `g3 train` knobs only it has); adding a strategy is one such
module, listed in :data:`STRATEGIES`, plus those two: the training loop, the CLI, eval, bench and report read
everything they need from the plan and this registry.
"""

from __future__ import annotations

from ..errors import G3InputError
from ..knobs import TrainKnob
from . import bns_gcn, bytegnn, clustergcn, distdgl, g3, hopgnn, neutrontp, p3, sancus
from .info import (
    FAMILIES,
    AdviseVariant,
    PlanOption,
    StrategyInfo,
    choice_option,
    count_or_auto,
    on_off,
    one_of,
    positive_int,
)

# one module per strategy, each its entry (INFO); the registry's order is the order `g3 plan --help` lists them
STRATEGIES: dict[str, StrategyInfo] = {
    m.INFO.name: m.INFO for m in (g3, bns_gcn, sancus, distdgl, bytegnn, neutrontp, clustergcn, p3, hopgnn)
}

# plans and runs written before strategies existed were all this strategy's
LEGACY_STRATEGY = "g3"
# the project's own system: `g3 bench` reports every entry against it at one worker (and its goal against DGL)
REFERENCE_STRATEGY = "g3"


def knob_declarations() -> dict[str, list[tuple[StrategyInfo, TrainKnob]]]:
    """Every `g3 train` knob by name, with each strategy's declaration of it (registry order). Read at each call,
    so a strategy registered later (a test's fixture) is seen."""
    out: dict[str, list[tuple[StrategyInfo, TrainKnob]]] = {}
    for info in STRATEGIES.values():
        for knob in info.knobs:
            out.setdefault(knob.name, []).append((info, knob))
    return out


def knob_values(name: str) -> tuple[str, ...]:
    """Every value some strategy takes for the text knob ``name`` (e.g. every --pipeline)."""
    return tuple(dict.fromkeys(v for _, k in knob_declarations().get(name, ()) for v in k.choices))


def full_graph_evaluator() -> StrategyInfo:
    """The strategy `g3 eval` plans to evaluate a run with another worker count (exact full-graph inference)."""
    return next(s for s in STRATEGIES.values() if s.evaluator_method)


def bins_strategy() -> StrategyInfo:
    """The strategy whose plans are the bins workload of the `bins` simulator."""
    return next(s for s in STRATEGIES.values() if s.bins)


def strategy_info(name: str) -> StrategyInfo:
    """The registered strategy ``name``; an unknown name is bad input (one line naming the choices)."""
    if name not in STRATEGIES:
        raise G3InputError(f"unknown strategy {name!r} (choose from {', '.join(STRATEGIES)})")
    return STRATEGIES[name]


def option_text(value: object) -> str | None:
    """The command-line text of a value as plan.json keeps it (the inverse of the options' parsers)."""
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict) and set(value) == {"policy", "bound"}:
        return f"{value['policy']}:{value['bound']}"
    return str(value)


def check_stored_options(strategy: str, stored: object, where: object) -> None:
    """A plan's recorded strategy options are what `g3 plan` itself writes: each one of the strategy's, parsed
    back from its text by the same parser as on the command line and equal to the recorded value — a plan
    sealed by another tool or edited and re-sealed is refused here, in one line, not in a worker."""
    info = strategy_info(strategy)
    if not isinstance(stored, dict):
        raise G3InputError("the strategy's options are not an object", path=where)
    own = {o.name: o for o in info.options()}
    for name, value in stored.items():
        opt = own.get(name)
        if opt is None:
            raise G3InputError(
                f"records option {name!r}, which the {strategy} strategy does not have", path=where
            )
        try:
            again = opt.parse(option_text(value))
        except (ValueError, TypeError) as exc:
            raise G3InputError(f"records {opt.flag} {value!r}: {exc}", path=where) from None
        if again != value:
            raise G3InputError(
                f"records {opt.flag} {value!r}, which `g3 plan` would record as {again!r}", path=where
            )


def check_partition_method(info: StrategyInfo, method: str | None, part: object) -> None:
    """Refuse a partition the strategy cannot run on, naming what to run instead."""
    if method in info.methods:
        return
    others = [s.name for s in STRATEGIES.values() if method in s.methods]
    instead = f"`g3 partition STORE --workers K --method {info.default_method}`"
    also = f"; a {method} partition runs {', '.join(others)}" if others else ""
    raise G3InputError(
        f"strategy {info.name} runs on {', '.join(info.methods)} partitions, not {method}: run {instead}{also}",
        path=part,
    )


__all__ = [
    "FAMILIES",
    "LEGACY_STRATEGY",
    "REFERENCE_STRATEGY",
    "STRATEGIES",
    "AdviseVariant",
    "PlanOption",
    "StrategyInfo",
    "bins_strategy",
    "check_partition_method",
    "check_stored_options",
    "choice_option",
    "count_or_auto",
    "full_graph_evaluator",
    "knob_declarations",
    "knob_values",
    "on_off",
    "one_of",
    "option_text",
    "positive_int",
    "strategy_info",
]
