"""`g3 ingest SOURCE OUT_STORE`."""

from __future__ import annotations

import click

from g3cli.output import print_ingest_report
from g3cli.paths import OutputPath, force_option
from g3cli.settings import setting_options, settings_of
from stages.ingest import FORMATS, IngestOptions, SourceArgs, run_ingest


@click.command("ingest")
@click.argument("source")
@click.argument("out_store", type=OutputPath())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="Source format; 'auto' detects: 'synthetic[:PRESET]', an OGB folder (has raw/), "
    "a WebGraph BASENAME(.graph) with .properties, else an edge list.",
)
@setting_options(IngestOptions)
@force_option("Replace OUT_STORE if it exists.")
@setting_options(SourceArgs)
def command(source, out_store, fmt, force, **settings):
    """Read SOURCE and write the zarr graph store OUT_STORE.

    \b
    SOURCE is one of:
      synthetic:PRESET        generated graph: tiny (~2K nodes), small (~100K nodes, ~2.5M arcs),
                              medium (~500K nodes, ~25M arcs), products (ogbn-products' shape)
      synthetic --nodes N --avg-degree D [--communities C --cross-ratio R --feat-dim F --num-classes K]
      DIR                     OGB node-property-prediction folder (raw/*.csv.gz or raw/data.npz, split/)
      BASENAME[.graph]        WebGraph BV graph (BASENAME.graph + .properties [+ .offsets])
      FILE                    edge list: text (CSV or whitespace, # comments, optional header), .npy, .npz
                              ([2, E] or [E, 2]; a 2 x 2 array is read as [2, E]: row 0 the sources)
      FILE.npz                the heterophilous benchmarks' arrays (edges, node_features, node_labels,
                              train/val/test_masks; e.g. tolokers.npz): give --split-index
      FILE.pt                 torch.save of a PyG Data (needs torch_geometric) or of a dict of tensors

    The store holds the in-edge CSR, degrees, features, labels and splits; see docs/ARTIFACTS.md.
    """
    args, options = settings_of(SourceArgs, settings), settings_of(IngestOptions, settings)
    report = run_ingest(source, out_store, fmt, args, options, force)
    print_ingest_report(report)
