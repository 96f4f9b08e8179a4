"""`g3 export RUN --format pyg -o FILE`."""

from __future__ import annotations

import click

from .paths import OutputPath, force_option


@click.command("export")
@click.argument("run", type=click.Path())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["pyg"]),
    default="pyg",
    show_default=True,
    help="pyg: a state dict torch_geometric.nn.models.GraphSAGE / GCN / GAT loads.",
)
@click.option(
    "-o", "--out", type=OutputPath(), required=True, help="The state dict file (FILE.json beside it)."
)
@click.option(
    "--checkpoint",
    default=None,
    help="Weights to export: a checkpoint file of the run [default: RUN/model.pt, else its latest].",
)
@force_option("Replace FILE if it exists.")
def command(run, fmt, out, checkpoint, force):
    """The trained model of RUN as another library loads it. With --format pyg, FILE is a state dict for PyG's
    GraphSAGE, GCN or GAT model and FILE.json its constructor call, so that

        spec = json.load(open("FILE.json"))
        model = getattr(torch_geometric.nn.models, spec["class"])(**spec["kwargs"])
        model.load_state_dict(torch.load("FILE"))

    computes what g3 computes (GCN: on a symmetric graph, as PyG normalises by in-degrees)."""
    from stages.eval import run_export

    path = run_export(run, out, format=fmt, checkpoint=checkpoint, force=force)
    click.echo(f"wrote {path} and {path}.json")
