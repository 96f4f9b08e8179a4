"""`g3 eval RUN`."""

from __future__ import annotations

import json

import click

from stages.eval import run_eval

from .output import print_eval
from .paths import force_option


@click.command("eval")
@click.argument("run", type=click.Path())
@click.option(
    "--checkpoint",
    type=click.Path(),
    default=None,
    help="Weights to evaluate: a checkpoint file [default: RUN/model.pt, else the latest checkpoint].",
)
@click.option(
    "--split",
    type=click.Choice(["train", "valid", "test", "all"]),
    default="all",
    show_default=True,
    help="Which split's accuracy to report.",
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Worker processes [default: the run's]; another count evaluates through a temporary "
    "partition and plan of the same store (1 = single process).",
)
@click.option(
    "--plan",
    type=click.Path(),
    default=None,
    help="The plan the run was trained with [default: the one run.json names, found relative to RUN "
    "first]; for a multi-host run's folder copied back from its host, the plan that was bundled.",
)
@click.option(
    "--emulate-link",
    default=None,
    metavar="RATE",
    help="Evaluate on emulated hosts joined by links of RATE (e.g. 1gbit), as `g3 train --emulate-link`.",
)
@click.option(
    "--hosts", type=int, default=None, help="With --emulate-link: emulated hosts [default: one per worker]."
)
@click.option(
    "--metric",
    type=click.Choice(["accuracy", "rocauc"]),
    default=None,
    help="rocauc: each split's ROC-AUC besides the accuracy (binary tasks) [default: the run's --metric].",
)
@force_option("Replace the RUN/eval.json of an earlier evaluation.")
@click.option("--json", "as_json", is_flag=True, help="Print eval.json instead of a table.")
def command(run, checkpoint, split, workers, plan, emulate_link, hosts, metric, force, as_json):
    """Full-graph inference of a trained RUN with the training runtime (forward only, bins, peer-to-peer),
    and accuracy per split (multi-class accuracy, as OGB's Evaluator computes it for ogbn-products and
    ogbn-papers100M). Writes RUN/eval.json."""
    result = run_eval(
        run,
        checkpoint=checkpoint,
        split=split,
        workers=workers,
        force=force,
        plan=plan,
        emulate_link=emulate_link,
        hosts=hosts,
        metric=metric,
    )
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_eval(result)
