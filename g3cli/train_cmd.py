"""`g3 train PLAN`."""

from __future__ import annotations

import click

from g3cli.output import print_run_summary
from g3cli.paths import force_option, out_option
from g3cli.settings import setting_options
from stages.strategies.registry import knob_declarations
from stages.train import TrainConfig, run_train


def knob_option(uses: list):
    """The `g3 train` option of one knob, from every strategy's declaration of it (stages/common/knobs.py): its
    type (the values any of them takes) and a help naming the strategies, their defaults and what each says the
    knob does there."""
    knob = uses[0][1]

    def shown(value) -> str:
        return ("on" if value else "off") if knob.type is bool else str(value)

    default = shown(knob.default)
    others = "".join(f"; {s.name}: {shown(k.default)}" for s, k in uses if shown(k.default) != default)
    head = f"[{', '.join(s.name for s, _ in uses)} plans; default {default}{others}]"
    text = " ".join([head, *dict.fromkeys(k.help for _, k in uses)])
    if knob.type is bool:
        return click.option(f"{knob.flag}/--no-{knob.flag[2:]}", knob.name, default=None, help=text)
    if all(k.choices for _, k in uses):
        kind = click.Choice(list(dict.fromkeys(v for _, k in uses for v in k.choices)))
    else:
        kind = knob.type
    metavar = next((k.metavar for _, k in uses if k.metavar), None)
    return click.option(knob.flag, knob.name, type=kind, default=None, metavar=metavar, help=text)


def knob_options(f):
    """Every strategy knob's option on the command ``f``, in the registry's order (they reach ``f`` as keywords
    by their names)."""
    for uses in reversed(knob_declarations().values()):  # the last option added is shown first
        f = knob_option(uses)(f)
    return f


@click.command("train")
@click.argument("plan", type=click.Path())
@setting_options(TrainConfig, first=TrainConfig)
@knob_options
@out_option("Run folder [default: PLAN.run beside PLAN].")
@force_option("Replace the run folder if it exists.")
def command(plan, out, force, **settings):
    """Train the plan's GNN with K workers, executed by the plan's strategy (`g3 plan --strategy`: g3's bins
    and peer-to-peer sharing, bns-gcn's or sancus's layer-synchronous exchange, ...); weight gradients are
    all-reduced and every rank takes the same Adam step. Writes RUN/run.json, per-epoch metrics
    (RUN/metrics.jsonl), logs per rank, checkpoints and the final weights RUN/model.pt. Options marked with
    strategies apply only to plans of those strategies (others are refused)."""
    knobs = {name: settings.pop(name) for name in knob_declarations()}
    cfg = TrainConfig(**settings, knobs=knobs)
    try:
        info = run_train(plan, cfg, out=out, force=force)
    except KeyboardInterrupt:
        _say_how_to_resume(plan, out, cfg.epochs)
        raise
    print_run_summary(info)


def _say_how_to_resume(plan: str, out: str | None, epochs: int) -> None:
    """After Ctrl-C: the command that continues the run, when it left a checkpoint to continue from."""
    import shlex
    from pathlib import Path

    run = Path(out) if out else Path(plan).parent / f"{Path(plan).name}.run"
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
        click.echo(
            f"g3: the run keeps its checkpoints; continue it with: g3 train {shlex.quote(str(plan))} "
            f"-o {shlex.quote(str(run))} --resume --epochs {epochs}",
            err=True,
        )
