"""`g3 predict RUN -o FILE`."""

from __future__ import annotations

import click

from .paths import OutputPath, force_option


@click.command("predict")
@click.argument("run", type=click.Path())
@click.option(
    "-o",
    "--out",
    type=OutputPath(),
    required=True,
    help="Output file: .npy (numpy) or .zarr (a zarr array, chunked by rows).",
)
@click.option(
    "--split",
    type=click.Choice(["train", "valid", "test"]),
    default=None,
    help="Only this split's nodes, in the split's order [default: every node, in node-id order].",
)
@click.option(
    "--checkpoint",
    default=None,
    help="Weights to use: a checkpoint file of the run [default: RUN/model.pt, else its latest].",
)
@click.option(
    "--store",
    type=click.Path(),
    default=None,
    help="Predict on another store with the same feature width and classes [default: the run's].",
)
@force_option("Replace FILE if it exists.")
def command(run, out, split, checkpoint, store, force):
    """Logits [N, C] of a trained RUN for every node (or one split), computed in this process on the whole
    graph, written to FILE — ready for OGB's Evaluator after an argmax. Node order: the store's ids (`--split`:
    the split's order, as `g3 info STORE --json` lists it)."""
    from stages.eval import run_predict

    logits = run_predict(run, out, split=split, checkpoint=checkpoint, store=store, force=force)
    click.echo(f"wrote {out}: logits {logits.shape[0]:,} × {logits.shape[1]} ({logits.dtype})")
