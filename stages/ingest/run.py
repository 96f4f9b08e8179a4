"""`g3 ingest`: turn OGB folders, WebGraph BV files, edge lists or a synthetic generator into a g3 store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stages.common.errors import G3InputError
from stages.common.settings import setting
from stages.ingest.build import IngestOptions, IngestReport, build_store, check_options
from stages.ingest.source import GraphSource

FORMATS = ("auto", "ogb", "webgraph", "edgelist", "synthetic")


def _split_index(text: str) -> int:
    index = int(text) if text.strip().lstrip("-").isdigit() else None
    if index is None or index < 0:
        raise ValueError(f"expected a split number >= 0, got {text!r}")
    return index


@dataclass
class SourceArgs:
    """What a source's reader is told besides the options every format shares (IngestOptions); each field is a
    `g3 ingest` option."""

    split_name: str | None = setting(None, "OGB: which folder under split/ to use when there are several.")
    num_nodes: int | None = setting(None, "Edge lists: node count (default: largest id + 1).")
    undirected: bool = setting(False, "Edge lists: each line is an undirected edge stored once.")
    features: str | None = setting(
        None,
        "Edge lists: node features, FILE.npy, FILE.npz:KEY, FILE.h5:/dataset, or FILE.json mapping node ids "
        "to lists of feature ids (sparse features, made multi-hot; MUSAE's).",
    )
    labels: str | None = setting(
        None,
        "Edge lists: node labels, FILE.npy, FILE.h5:/dataset, or FILE.csv:COLUMN (a header row; rows placed "
        "by an 'id' column when there is one; class names numbered in sorted order).",
    )
    train_idx: str | None = setting(None, "Edge lists: train node ids (text, one per line, or .npy).")
    valid_idx: str | None = setting(None, "Edge lists: validation node ids.")
    test_idx: str | None = setting(None, "Edge lists: test node ids.")
    split_index: int | None = setting(
        None,
        "Sources that store several splits (the heterophilous benchmarks' .npz: 10): which one.",
        parse=_split_index,
    )
    # the synthetic generator's parameters (None: the preset's); its feature width and classes are --feat-dim
    # and --num-classes
    nodes: int | None = setting(None, "Synthetic: number of nodes (with --avg-degree, no preset).")
    avg_degree: float | None = setting(None, "Synthetic: arcs per node after symmetrising.")
    communities: int | None = setting(None, "Synthetic: planted communities [default: nodes/400].")
    cross_ratio: float | None = setting(None, "Synthetic: share of edges leaving their community [0.25].")


def detect_format(source: str) -> str:
    """Guess the format of SOURCE (see ``g3 ingest --help``)."""
    if source == "synthetic" or source.startswith("synthetic:"):
        return "synthetic"
    p = Path(source)
    if p.is_dir():
        if (p / "raw").is_dir():
            return "ogb"
        raise G3InputError("a folder but not an OGB dataset (no raw/ inside); use --format", path=p)
    base = p.with_suffix("") if p.suffix in (".graph", ".properties", ".offsets") else p
    if base.with_suffix(".properties").exists() and base.with_suffix(".graph").exists():
        return "webgraph"
    if p.suffix in (".graph", ".properties"):
        return "webgraph"  # the reader names the missing file
    if not p.exists():
        raise G3InputError("no such file or folder", path=p)
    return "edgelist"


def open_source(source: str, fmt: str, args: SourceArgs, options: IngestOptions) -> GraphSource:
    """Parse SOURCE with the reader of its format."""
    fmt = detect_format(source) if fmt == "auto" else fmt
    if fmt == "synthetic":
        from stages.ingest.synthetic import resolve_spec, synthetic_source

        preset = source.split(":", 1)[1] if ":" in source else None
        generator = {k: getattr(args, k) for k in ("nodes", "avg_degree", "communities", "cross_ratio")}
        shared = {k: getattr(options, k) for k in ("feat_dim", "num_classes", "seed")}
        spec = resolve_spec(preset, **generator, **shared)
        return synthetic_source(spec, name=f"synthetic-{preset}" if preset else None)
    if fmt == "ogb":
        from stages.ingest.ogb import read_ogb

        return read_ogb(source, split_name=args.split_name)
    if fmt == "webgraph":
        from stages.ingest.webgraph import read_webgraph

        return read_webgraph(source)
    if fmt == "edgelist":
        from stages.ingest.arrays import HETEROPHILOUS_KEYS, heterophilous_source, torch_file_source
        from stages.ingest.edgelist import npz_keys, read_edgelist

        path = Path(source)
        if path.suffix == ".pt":
            return torch_file_source(path, args.split_index)
        if path.suffix == ".npz" and HETEROPHILOUS_KEYS <= set(npz_keys(path)):
            return heterophilous_source(path, args.split_index)

        edge_list = ("num_nodes", "features", "labels", "train_idx", "valid_idx", "test_idx", "undirected")
        return read_edgelist(source, **{name: getattr(args, name) for name in edge_list})
    raise G3InputError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def run_ingest(
    source: str, out: str, fmt: str, args: SourceArgs, options: IngestOptions, force: bool
) -> IngestReport:
    """Entry point of `g3 ingest`: parse the source and write the store atomically."""
    from stages.common.atomic import check_target

    check_target(Path(out), force, "store", (source,))  # fail before parsing anything
    check_options(options)
    graph = open_source(source, fmt, args, options)
    return build_store(graph, out, options, force=force)
