"""`g3 plan PART --strategy NAME`: the options of every registered strategy come from its planner."""

from __future__ import annotations

import dataclasses

import click

from g3cli.output import print_plan_report
from g3cli.paths import force_option, out_option
from g3cli.settings import setting_options
from stages.plan import PlanConfig, run_plan
from stages.strategies.registry import STRATEGIES


def _strategy_options() -> list:
    """One click option per strategy option (a name shared by strategies appears once)."""
    seen: dict[str, list[str]] = {}
    opts = {}
    for s in STRATEGIES.values():
        for o in s.plan_options:
            seen.setdefault(o.name, []).append(s.name)
            opts[o.name] = o
    return [(o, seen[name]) for name, o in opts.items()]


def _strategies_help() -> str:
    lines = ["\b", "Strategies (--strategy; the partition methods each runs on, its default first):"]
    for s in STRATEGIES.values():
        lines.append(f"  {s.name:<9} {s.summary}")
        lines.append(f"  {'':<9} partitions: {', '.join(s.methods)}")
    return "\n".join(lines)


def _metavar(name: str) -> str | None:
    """The values an option takes under any strategy: the union of its strategies' ``a|b|c`` metavars."""
    values: list[str] = []
    for s in STRATEGIES.values():
        for o in s.plan_options:
            if o.name == name and o.metavar:
                values += [v for v in o.metavar.split("|") if v not in values]
    return "|".join(values) or None


def _add_strategy_options(fn):
    for opt, owners in reversed(_strategy_options()):
        fn = click.option(
            opt.flag,
            opt.name,
            default=None,
            metavar=_metavar(opt.name),
            help=f"[{', '.join(owners)}] {opt.help} [default: {opt.default}]",
        )(fn)
    return fn


@click.command("plan", epilog=_strategies_help())
@click.argument("part", type=click.Path())
@setting_options(PlanConfig)
@_add_strategy_options
@out_option("Plan folder [default: PART.plan-MODEL for g3, PART.plan-STRATEGY-MODEL otherwise, beside PART].")
@force_option("Replace the plan folder if it exists.")
@click.option(
    "--report", is_flag=True, help="Print the per-worker, per-layer plan table (bins, compute, bytes)."
)
def command(part, out, force, report, **settings):
    """Plan how a strategy executes partition PART, written as plan.json plus one folder per worker. For g3:
    per worker a BFS priority list (nodes peers need first), per layer a bin limit and bins with their
    blocks, and the peer-to-peer send/receive tables of the forward (embeddings) and backward (gradients)
    passes; for the layer-synchronous strategies the per-peer boundary exchange. Options marked with another
    strategy's name are refused."""
    own = {f.name for f in dataclasses.fields(PlanConfig) if "setting" in f.metadata}
    options = {name: value for name, value in settings.items() if name not in own}
    cfg = PlanConfig(**{name: settings[name] for name in own}, options=options)
    plan = run_plan(part, cfg, out=out, force=force)
    print_plan_report(plan, detailed=report)
