"""`g3 export RUN --format pyg -o FILE`."""

from __future__ import annotations

import click

from g3cli.paths import force_option
from g3cli.settings import setting_options
from stages.predict import ExportOptions, run_export


@click.command("export")
@click.argument("run", type=click.Path())
@setting_options(ExportOptions)
@force_option("Replace FILE if it exists.")
def command(run, force, **settings):
    """The trained model of RUN as another library loads it. With --format pyg, FILE is a state dict for PyG's
    GraphSAGE, GCN or GAT model and FILE.json its constructor call, so that

        spec = json.load(open("FILE.json"))
        model = getattr(torch_geometric.nn.models, spec["class"])(**spec["kwargs"])
        model.load_state_dict(torch.load("FILE"))

    computes what g3 computes (GCN: on a symmetric graph, as PyG normalises by in-degrees)."""
    path = run_export(run, ExportOptions(**settings), force=force)
    click.echo(f"wrote {path} and {path}.json")
