"""`g3 predict RUN -o FILE`."""

from __future__ import annotations

import click

from g3cli.paths import force_option
from g3cli.settings import setting_options
from stages.predict import PredictOptions, run_predict


@click.command("predict")
@click.argument("run", type=click.Path())
@setting_options(PredictOptions)
@force_option("Replace FILE if it exists.")
def command(run, force, **settings):
    """Logits [N, C] of a trained RUN for every node (or one split), computed in this process on the whole
    graph, written to FILE — ready for OGB's Evaluator after an argmax. Node order: the store's ids (`--split`:
    the split's order, as `g3 info STORE --json` lists it)."""
    options = PredictOptions(**settings)
    logits = run_predict(run, options, force=force)
    click.echo(f"wrote {options.out}: logits {logits.shape[0]:,} × {logits.shape[1]} ({logits.dtype})")
