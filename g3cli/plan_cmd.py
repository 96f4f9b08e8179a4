"""`g3 plan PART --strategy NAME`: the options of every registered strategy come from its planner."""

from __future__ import annotations

import dataclasses

import click

from g3cli.output import print_plan_report
from g3cli.paths import force_option, out_option
from g3cli.settings import setting_options
from stages.plan import PlanConfig, run_plan
from stages.strategies.registry import STRATEGIES


def _strategies_help() -> str:
    lines = ["\b", "Strategies (--strategy; the partition methods each runs on, its default first):"]
    for s in STRATEGIES.values():
        lines.append(f"  {s.name:<9} {s.summary}")
        lines.append(f"  {'':<9} partitions: {', '.join(s.methods)}")
    return "\n".join(lines)


def _add_strategy_options(fn):
    """One click option per strategy option; a name shared by strategies appears once, its help naming them and
    its metavar the union of their ``a|b|c`` values."""
    options, owners, values = {}, {}, {}
    for s in STRATEGIES.values():
        for o in s.plan_options:
            options[o.name] = o
            owners.setdefault(o.name, []).append(s.name)
            known = values.setdefault(o.name, [])
            if o.metavar:
                known += [v for v in o.metavar.split("|") if v not in known]
    for name, opt in reversed(options.items()):
        fn = click.option(
            opt.flag,
            name,
            default=None,
            metavar="|".join(values[name]) or None,
            help=f"[{', '.join(owners[name])}] {opt.help} [default: {opt.default}]",
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
