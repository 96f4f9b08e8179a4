"""`g3 ingest`: turn OGB folders, WebGraph BV files, edge lists or a synthetic generator into a g3 store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..common.errors import G3InputError
from .arrays import source_of
from .build import IngestOptions, IngestReport, build_store, check_options
from .source import GraphSource

FORMATS = ("auto", "ogb", "webgraph", "edgelist", "synthetic")


@dataclass
class SourceArgs:
    """Format-specific reader arguments gathered by the CLI."""

    split_name: str | None = None  # OGB split folder
    num_nodes: int | None = None  # edge lists
    features: str | None = None  # edge lists: .npy or file.h5:/dataset
    labels: str | None = None
    train_idx: str | None = None
    valid_idx: str | None = None
    test_idx: str | None = None
    undirected: bool = False
    synthetic: dict | None = None  # overrides for the synthetic generator
    split_index: int | None = None  # sources with several stored splits: which one


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


def open_source(source: str, fmt: str, args: SourceArgs, seed: int) -> GraphSource:
    """Parse SOURCE with the reader of its format."""
    fmt = detect_format(source) if fmt == "auto" else fmt
    if fmt == "synthetic":
        from .synthetic import resolve_spec, synthetic_source

        preset = source.split(":", 1)[1] if ":" in source else None
        overrides = dict(args.synthetic or {})
        overrides.setdefault("seed", seed)
        spec = resolve_spec(preset, **overrides)
        return synthetic_source(spec, name=f"synthetic-{preset}" if preset else None)
    if fmt == "ogb":
        from .ogb import read_ogb

        return read_ogb(source, split_name=args.split_name)
    if fmt == "webgraph":
        from .webgraph import read_webgraph

        return read_webgraph(source)
    if fmt == "edgelist":
        from .arrays import HETEROPHILOUS_KEYS, heterophilous_source, torch_file_source
        from .edgelist import npz_keys, read_edgelist

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
    from ..common.atomic import check_target

    check_target(Path(out), force, "store", (source,))  # fail before parsing anything
    check_options(options)
    graph = open_source(source, fmt, args, options.seed)
    return build_store(graph, out, options, force=force)


__all__ = [
    "source_of",
    "run_ingest",
    "detect_format",
    "open_source",
    "SourceArgs",
    "IngestOptions",
    "IngestReport",
    "FORMATS",
]
