"""The registry's questions: a strategy by name, every knob and partition method, and the checks of what a plan
records against the strategy it names."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stages.common.errors import G3InputError
from stages.common.knobs import TrainKnob
from stages.common.plan_artifact import V2_STRATEGY, load_plan_meta, plan_strategy
from stages.kits.partition.methods import KIT_METHODS, PartitionMethod
from stages.strategies.spec import StrategySpec

if TYPE_CHECKING:  # the worker's set-up loads torch: a worker imports it when it starts
    from stages.kits.runtime.worker import Worker

# filled by stages/strategies/__init__.py, in the order `g3 plan --help` lists them; a test may register more
STRATEGIES: dict[str, StrategySpec] = {}
# plans and runs written before strategies existed were all this strategy's
LEGACY_STRATEGY = V2_STRATEGY
# the project's own system: `g3 bench` reports every entry against it at one worker (and its goal against DGL),
# `g3 partition` defaults to its method, and its profile (`g3 train --profile`) times the kernels every full-graph
# prediction of `g3 advise` starts from
REFERENCE_STRATEGY = "g3"
# `g3 eval` at another worker count: exact full-graph inference with this strategy on a partition of this method
EVALUATOR_STRATEGY = "g3"
EVALUATOR_METHOD = "chunk"


def register(*packages) -> None:
    """Add each strategy package's ``SPEC`` to the registry, in order."""
    for package in packages:
        STRATEGIES[package.SPEC.name] = package.SPEC


def partition_methods() -> dict[str, PartitionMethod]:
    """Every `g3 partition` method by name: the reference strategy's own (the default), those no strategy owns,
    then each other strategy's own (registry order)."""
    first = STRATEGIES[REFERENCE_STRATEGY].partition_methods
    owned = (m for spec in STRATEGIES.values() for m in spec.partition_methods if m not in first)
    return {m.name: m for m in (*first, *KIT_METHODS, *owned)}


def default_method() -> str:
    """`g3 partition`'s default method: the reference strategy's."""
    return STRATEGIES[REFERENCE_STRATEGY].default_method


def partition_method(name: str) -> PartitionMethod:
    """The registered method ``name``; an unknown name is bad input (one line naming the choices)."""
    methods = partition_methods()
    if name not in methods:
        raise G3InputError(f"unknown method {name!r} (choose from {', '.join(methods)})")
    return methods[name]


def knob_declarations() -> dict[str, list[tuple[StrategySpec, TrainKnob]]]:
    """Every `g3 train` knob by name, with each strategy's declaration of it (registry order). Read at each call,
    so a strategy registered later (a test's fixture) is seen."""
    out: dict[str, list[tuple[StrategySpec, TrainKnob]]] = {}
    for spec in STRATEGIES.values():
        for knob in spec.declared_knobs:
            out.setdefault(knob.name, []).append((spec, knob))
    return out


def knob_values(name: str) -> tuple[str, ...]:
    """Every value some strategy takes for the text knob ``name`` (e.g. every --pipeline)."""
    return tuple(dict.fromkeys(v for _, k in knob_declarations().get(name, ()) for v in k.choices))


def strategy_spec(name: str) -> StrategySpec:
    """The registered strategy ``name``; an unknown name is bad input (one line naming the choices)."""
    if name not in STRATEGIES:
        raise G3InputError(f"unknown strategy {name!r} (choose from {', '.join(STRATEGIES)})")
    return STRATEGIES[name]


def option_text(value: object) -> str:
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


def load_plan(plan: str | Path) -> tuple[dict, StrategySpec]:
    """plan.json (:func:`~stages.common.plan_artifact.load_plan_meta`) with its strategy's spec, the options it
    records checked against that strategy's (:func:`check_stored_options`)."""
    meta = load_plan_meta(plan)
    spec = strategy_spec(plan_strategy(meta))
    check_stored_options(spec.name, meta["strategy"].get("options") or {}, Path(plan) / "plan.json")
    return meta, spec


def import_runtimes() -> None:
    """Import every strategy's runtime class. A workers' entry module calls it as it is imported, so the fork
    server, which preloads that module, holds them all and no forked worker imports one again."""
    for spec in STRATEGIES.values():
        spec.runtime()


def open_plan_worker(rank: int, world: int, plan_dir: Path, cfg, init_method: str | None) -> Worker:
    """A rank of the plan's strategy (:func:`~stages.kits.runtime.worker.open_worker`): its runtime with its
    typed knobs (resolved by the launcher; again here for a rank started directly)."""
    from stages.kits.runtime.worker import open_worker

    _, spec = load_plan(plan_dir)
    knobs = resolve_knobs(cfg.knobs, spec)
    return open_worker(rank, world, Path(plan_dir), cfg, init_method, spec.runtime(), knobs)


def check_stored_options(strategy: str, stored: object, where: object) -> None:
    """A plan's recorded strategy options are what `g3 plan` itself writes: each one of the strategy's, parsed
    back from its text by the same parser as on the command line and equal to the recorded value — a plan
    sealed by another tool or edited and re-sealed is refused here, in one line, not in a worker."""
    spec = strategy_spec(strategy)
    if not isinstance(stored, dict):
        raise G3InputError("the strategy's options are not an object", path=where)
    own = {o.name: o for o in spec.plan_options}
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


def check_partition_method(spec: StrategySpec, method: str | None, part: object) -> None:
    """Refuse a partition the strategy cannot run on, naming what to run instead."""
    if method in spec.methods:
        return
    others = [s.name for s in STRATEGIES.values() if method in s.methods]
    instead = f"`g3 partition STORE --workers K --method {spec.default_method}`"
    also = f"; a {method} partition runs {', '.join(others)}" if others else ""
    raise G3InputError(
        f"strategy {spec.name} runs on {', '.join(spec.methods)} partitions, not {method}: run {instead}{also}",
        path=part,
    )


def check_knobs(given: dict) -> None:
    """Each knob given is a value some strategy that has it takes (the plan's strategy is checked when it is
    known: :func:`resolve_knobs`)."""
    for name, value in given.items():
        uses = [k for _, k in knob_declarations().get(name, ())]
        if value is None or not uses or any(k.problem(value) is None for k in uses):
            continue
        if all(k.choices for k in uses):
            values = dict.fromkeys(v for k in uses for v in k.choices)
            raise G3InputError(f"{uses[0].flag} {value} is not one of {', '.join(values)}")
        free = next(k for k in uses if not k.choices)
        raise G3InputError(f"{free.flag} {free.problem(value)}")


def resolve_knobs(given: dict, spec: StrategySpec):
    """The strategy's typed knobs (an instance of ``spec.knobs``) from the knobs given by name: each one it has
    checked against its declaration, the others at its defaults (written back into ``given``, which run.json
    records); a knob it does not have is refused in one line."""
    for name, uses in knob_declarations().items():
        value = given.get(name)
        own = spec.knob(name)
        if own is None:
            if value is not None:
                raise G3InputError(
                    f"{uses[0][1].flag} does not apply to the {spec.name} strategy of this plan (it "
                    f"applies to {', '.join(s.name for s, _ in uses)})"
                )
        elif value is None:
            given[name] = own.default
        elif own.problem(value):
            raise G3InputError(
                f"{own.flag} {value} does not apply to the {spec.name} strategy of this plan "
                f"({own.problem(value)})"
            )
    return spec.knobs(**{name: given[name] for name in spec.train_knobs})


def knob_accepts(spec: StrategySpec, knob: str, value) -> bool:
    """Whether the strategy takes ``value`` for the train knob ``knob`` (``g3 bench`` passes its ``--pipeline``
    only to the strategies that take it: g3's schedules are not p3's)."""
    own = spec.knob(knob)
    return own is not None and own.problem(value) is None


def config_record(cfg) -> dict:
    """A run's settings as run.json keeps them: one key per field and one per knob of any strategy (None: not
    given, or not the run's strategy's)."""
    return {**cfg.settings(), **{name: cfg.knobs.get(name) for name in knob_declarations()}}
