"""Rich rendering of stage results (presentation only)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from stages.common.units import human_bytes

console = Console()


def print_ingest_report(report) -> None:
    t = Table(title=f"ingested → {report.path}", show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("nodes", f"{report.num_nodes:,}")
    t.add_row("arcs in store", f"{report.num_arcs:,}")
    t.add_row("arcs read", f"{report.arcs_read:,}")
    t.add_row("reverse arcs added", f"{report.reverse_arcs_added:,}")
    t.add_row("self-loops removed", f"{report.self_loops_removed:,}")
    t.add_row("duplicates removed", f"{report.duplicates_removed:,}")
    t.add_row("external sort", f"yes, {report.buckets} buckets" if report.spilled else "no (fits the memory limit)")
    t.add_row("time", ", ".join(f"{k} {v:.1f}s" for k, v in report.seconds.items()))
    console.print(t)


def print_summary(summary: dict) -> None:
    """Print the summary dict of any artifact (``g3 info``)."""
    kind = summary.get("kind")
    if kind == "store":
        _print_store(summary)
    else:
        from rich.pretty import Pretty

        console.print(Pretty(summary))


def _print_store(s: dict) -> None:
    t = Table(title=f"g3 store: {s['name']}  ({s['path']})", show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("nodes", f"{s['num_nodes']:,}")
    t.add_row("arcs", f"{s['num_arcs']:,}" + ("  (directed)" if s["directed"] else "  (symmetric)"))
    d = s["degree"]
    for side in ("in", "out"):
        if d.get(side):
            t.add_row(f"{side}-degree min / mean / max", f"{d[side]['min']:,} / {d[side]['mean']:.2f} / {d[side]['max']:,}")
    t.add_row("features", f"{s['feat_dim']} × {s['feature_dtype']}  ({s['features']})")
    t.add_row("classes", f"{s['num_classes']}  ({s['labels']}, {s['num_labeled']:,} labelled)")
    sizes = s["split_sizes"]
    t.add_row("split train / valid / test", f"{sizes.get('train', 0):,} / {sizes.get('valid', 0):,} / {sizes.get('test', 0):,}")
    t.add_row("size on disk", human_bytes(s["size_on_disk"]))
    t.add_row("schema", f"{s['schema']} v{s['schema_version']}")
    console.print(t)
