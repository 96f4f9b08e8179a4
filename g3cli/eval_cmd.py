"""`g3 eval RUN`."""

from __future__ import annotations

import click

from g3cli.output import print_eval, print_result
from g3cli.paths import force_option
from g3cli.settings import setting_options
from stages.eval import EvalOptions, run_eval


@click.command("eval")
@click.argument("run", type=click.Path())
@setting_options(EvalOptions)
@force_option("Replace the RUN/eval.json of an earlier evaluation.")
@click.option("--json", "as_json", is_flag=True, help="Print eval.json instead of a table.")
def command(run, force, as_json, **settings):
    """Full-graph inference of a trained RUN with the training runtime (forward only, bins, peer-to-peer),
    and accuracy per split (multi-class accuracy, as OGB's Evaluator computes it for ogbn-products and
    ogbn-papers100M). Writes RUN/eval.json."""
    result = run_eval(run, EvalOptions(**settings), force=force)
    print_result(result, as_json, print_eval)
