"""`g3 ingest SOURCE OUT_STORE`."""

from __future__ import annotations

import click

from stages.common.units import parse_size
from stages.ingest import FORMATS, IngestOptions, SourceArgs, run_ingest

from .output import print_ingest_report
from .paths import OutputPath, force_option


def _size(ctx, param, value):
    if value is None:
        return None
    try:
        size = parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if size < (64 << 20):
        raise click.BadParameter("must be at least 64MiB")
    return size


def _ratios(ctx, param, value):
    try:
        parts = tuple(float(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter(
            f"expected three comma-separated ratios like 0.8,0.1,0.1, got {value!r}"
        ) from None
    if len(parts) != 3:
        raise click.BadParameter(f"expected three ratios, got {len(parts)}")
    return parts


@click.command()
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
@click.option(
    "--symmetrize/--no-symmetrize",
    default=None,
    help="Add the reverse of every arc. Default: on for sources that store undirected edges once "
    "(OGB, --undirected edge lists, synthetic), off otherwise (WebGraph).",
)
@click.option("--keep-duplicates", is_flag=True, help="Keep repeated arcs (removed and counted by default).")
@click.option("--keep-self-loops", is_flag=True, help="Keep self-loops (removed and counted by default).")
@click.option(
    "--feature-dtype",
    type=click.Choice(["float32", "float16"]),
    default="float32",
    show_default=True,
    help="Storage type of node features.",
)
@click.option(
    "--feat-dim",
    type=int,
    default=None,
    help="Width of the seeded random features given to graphs without features [default: 128]; "
    "for synthetic graphs, the feature width.",
)
@click.option(
    "--num-classes",
    type=int,
    default=None,
    help="Classes of the random labels given to graphs without labels [default: 100]; "
    "for synthetic graphs, the number of classes.",
)
@click.option(
    "--labeled-ratio",
    type=float,
    default=1.0,
    show_default=True,
    help="Share of nodes that get a random label when the source has none.",
)
@click.option(
    "--split",
    "split",
    default="0.8,0.1,0.1",
    show_default=True,
    callback=_ratios,
    help="train,valid,test ratios of labelled nodes when the source has no split.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed for random features, labels, splits and the synthetic generator.",
)
@click.option(
    "--memory-limit",
    default="4GiB",
    show_default=True,
    callback=_size,
    help="Working-memory budget of the CSR build; beyond it arcs are sorted externally on disk.",
)
@force_option("Replace OUT_STORE if it exists.")
@click.option(
    "--split-name", default=None, help="OGB: which folder under split/ to use when there are several."
)
@click.option("--num-nodes", type=int, default=None, help="Edge lists: node count (default: largest id + 1).")
@click.option("--undirected", is_flag=True, help="Edge lists: each line is an undirected edge stored once.")
@click.option(
    "--features",
    default=None,
    help="Edge lists: node features, FILE.npy, FILE.npz:KEY, FILE.h5:/dataset, or FILE.json mapping node "
    "ids to lists of feature ids (sparse features, made multi-hot; MUSAE's).",
)
@click.option(
    "--labels",
    default=None,
    help="Edge lists: node labels, FILE.npy, FILE.h5:/dataset, or FILE.csv:COLUMN (a header row; rows "
    "placed by an 'id' column when there is one; class names numbered in sorted order).",
)
@click.option("--train-idx", default=None, help="Edge lists: train node ids (text, one per line, or .npy).")
@click.option("--valid-idx", default=None, help="Edge lists: validation node ids.")
@click.option("--test-idx", default=None, help="Edge lists: test node ids.")
@click.option(
    "--split-index",
    type=click.IntRange(min=0),
    default=None,
    help="Sources that store several splits (the heterophilous benchmarks' .npz: 10): which one.",
)
@click.option(
    "--nodes", type=int, default=None, help="Synthetic: number of nodes (with --avg-degree, no preset)."
)
@click.option("--avg-degree", type=float, default=None, help="Synthetic: arcs per node after symmetrising.")
@click.option(
    "--communities", type=int, default=None, help="Synthetic: planted communities [default: nodes/400]."
)
@click.option(
    "--cross-ratio",
    type=float,
    default=None,
    help="Synthetic: share of edges leaving their community [0.25].",
)
def ingest(
    source,
    out_store,
    fmt,
    symmetrize,
    keep_duplicates,
    keep_self_loops,
    feature_dtype,
    feat_dim,
    num_classes,
    labeled_ratio,
    split,
    seed,
    memory_limit,
    force,
    split_name,
    num_nodes,
    undirected,
    features,
    labels,
    train_idx,
    valid_idx,
    test_idx,
    split_index,
    nodes,
    avg_degree,
    communities,
    cross_ratio,
):
    """Read SOURCE and write the zarr graph store OUT_STORE.

    \b
    SOURCE is one of:
      synthetic:PRESET        generated graph: tiny (~2K nodes), small (~100K nodes, ~2.5M arcs),
                              medium (~500K nodes, ~25M arcs), products (ogbn-products' shape)
      synthetic --nodes N --avg-degree D [--communities C --cross-ratio R --feat-dim F --num-classes K]
      DIR                     OGB node-property-prediction folder (raw/*.csv.gz or raw/data.npz, split/)
      BASENAME[.graph]        WebGraph BV graph (BASENAME.graph + .properties [+ .offsets])
      FILE                    edge list: text (CSV or whitespace, # comments, optional header), .npy, .npz
      FILE.npz                the heterophilous benchmarks' arrays (edges, node_features, node_labels,
                              train/val/test_masks; e.g. tolokers.npz): give --split-index
      FILE.pt                 torch.save of a PyG Data (needs torch_geometric) or of a dict of tensors

    The store holds the in-edge CSR, degrees, features, labels and splits; see docs/ARTIFACTS.md.
    """
    synthetic = {
        "nodes": nodes,
        "avg_degree": avg_degree,
        "communities": communities,
        "cross_ratio": cross_ratio,
        "feat_dim": feat_dim,
        "num_classes": num_classes,
    }
    args = SourceArgs(
        split_name=split_name,
        num_nodes=num_nodes,
        features=features,
        labels=labels,
        train_idx=train_idx,
        valid_idx=valid_idx,
        test_idx=test_idx,
        undirected=undirected,
        synthetic=synthetic,
        split_index=split_index,
    )
    options = IngestOptions(
        symmetrize=symmetrize,
        keep_duplicates=keep_duplicates,
        keep_self_loops=keep_self_loops,
        feature_dtype=feature_dtype,
        feat_dim=feat_dim or 128,
        num_classes=num_classes or 100,
        labeled_ratio=labeled_ratio,
        split=split,
        seed=seed,
        memory_limit=memory_limit,
    )
    report = run_ingest(source, out_store, fmt, args, options, force)
    print_ingest_report(report)
