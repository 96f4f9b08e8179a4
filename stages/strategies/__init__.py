"""The strategies: one package per distributed training system, and the registry that lists them.

A strategy's package holds everything that is that system (its spec, planner, runtime, simulator and, where it
has one, its partitioner; docs/DESIGN.md, "A strategy folder"). Its ``SPEC`` (:class:`~.spec.StrategySpec`) holds
that code as callables and its options as typed declarations; every stage asks the registry for a spec by name
and calls it. Adding a strategy is one package and one name in the list below.
"""

from __future__ import annotations

from stages.strategies import bns_gcn, bytegnn, clustergcn, distdgl, g3, hopgnn, neutrontp, p3, sancus
from stages.strategies.registry import (
    EVALUATOR_METHOD,
    EVALUATOR_STRATEGY,
    LEGACY_STRATEGY,
    REFERENCE_STRATEGY,
    STRATEGIES,
    check_knobs,
    check_partition_method,
    check_stored_options,
    config_record,
    default_method,
    knob_accepts,
    knob_declarations,
    knob_values,
    load_plan,
    open_plan_worker,
    option_text,
    partition_method,
    partition_methods,
    register,
    resolve_knobs,
    strategy_spec,
)
from stages.strategies.spec import FAMILIES, AdviseVariant, StrategySpec

register(
    g3.SPEC,
    bns_gcn.SPEC,
    sancus.SPEC,
    distdgl.SPEC,
    bytegnn.SPEC,
    neutrontp.SPEC,
    clustergcn.SPEC,
    p3.SPEC,
    hopgnn.SPEC,
)

__all__ = [
    "resolve_knobs",
    "knob_accepts",
    "config_record",
    "check_knobs",
    "EVALUATOR_METHOD",
    "EVALUATOR_STRATEGY",
    "FAMILIES",
    "LEGACY_STRATEGY",
    "REFERENCE_STRATEGY",
    "STRATEGIES",
    "AdviseVariant",
    "StrategySpec",
    "check_partition_method",
    "check_stored_options",
    "default_method",
    "knob_declarations",
    "knob_values",
    "load_plan",
    "open_plan_worker",
    "option_text",
    "partition_method",
    "partition_methods",
    "strategy_spec",
]
