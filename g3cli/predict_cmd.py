"""`g3 predict RUN -o FILE`."""

from __future__ import annotations

from pathlib import Path

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
    import numpy as np

    import g3
    from stages.common.atomic import atomic_file, check_target
    from stages.common.errors import G3InputError

    out = Path(out)
    if out.suffix not in (".npy", ".zarr"):
        raise G3InputError("the output must end in .npy or .zarr", path=out)
    # never an input (the run, the store predicted on, the weights) or part of one; a .zarr replaces only logits
    inputs = (run, store, checkpoint)
    kind = "logits" if out.suffix == ".zarr" else None
    check_target(out, force, kind, inputs)
    logits = g3.predict(run, store=store, split=split, checkpoint=checkpoint).numpy()
    if out.suffix == ".npy":
        with atomic_file(out) as tmp, open(tmp, "wb") as f:
            np.save(f, logits)
    else:
        import zarr

        from stages.common.atomic import atomic_dir

        with atomic_dir(out, force=force, kind=kind, inputs=inputs) as tmp:
            zarr.create_array(str(tmp), data=logits, chunks=(min(len(logits), 65536), logits.shape[1]))
    click.echo(f"wrote {out}: logits {logits.shape[0]:,} × {logits.shape[1]} ({logits.dtype})")
