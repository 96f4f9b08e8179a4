"""Rendering of a partition summary (the content of partition.json): rich tables and the remote-set plot.

``g3 partition`` and ``g3 info PART`` both call :func:`print_partition_summary`, so they print the same thing.
"""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from stages.common.units import human_bytes
from stages.kits.partition.bound import infeasible_statement


def partition_table(summary: dict) -> Table:
    """One row per partition: nodes, arcs, degree sum, remote set, send volume and bytes per layer."""
    hidden = summary["parameters"]["hidden"]
    t = Table(
        title=f"{summary['method']} partition of {summary['store']['name']} into {summary['num_partitions']}",
        caption=f"arcs = |E(V_i)|, remote = |V_i^remote| (rows received per layer), send = rows sent per "
        f"layer summed over peers; bytes at hidden width {hidden}, float32",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for name in ("part", "nodes", "arcs", "deg sum", "remote", "send", "recv/layer", "send/layer"):
        t.add_column(name, justify="right", no_wrap=True)
    for p in summary["partitions"]:
        t.add_row(
            str(p["partition"]),
            f"{p['nodes']:,}",
            f"{p['arcs']:,}",
            f"{p['degree_sum']:,}",
            f"{p['remote']:,}",
            f"{p['send']:,}",
            human_bytes(p["recv_bytes_per_layer"]),
            human_bytes(p["send_bytes_per_layer"]),
        )
    tot = summary["totals"]
    t.add_section()
    t.add_row(
        "total",
        f"{tot['nodes']:,}",
        f"{tot['arcs']:,}",
        "",
        f"{tot['remote']:,}",
        f"{tot['remote']:,}",
        human_bytes(tot["recv_bytes_per_layer"]),
        human_bytes(tot["recv_bytes_per_layer"]),
    )
    return t


def balance_table(summary: dict) -> Table:
    """max/mean and min/max (1 = perfectly balanced) of nodes, arcs, degree sums and remote sets."""
    t = Table(title="balance", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("")
    t.add_column("max/mean", justify="right")
    t.add_column("min/max", justify="right")
    for key, label in (
        ("nodes", "nodes"),
        ("arcs", "arcs"),
        ("degree_sum", "degree sum"),
        ("remote", "remote"),
    ):
        r = summary["balance"][key]
        t.add_row(label, f"{r['max_over_mean']:.3f}", f"{r['min_over_max']:.3f}")
    return t


def facts_table(summary: dict) -> Table:
    """Edge-cut, total remote, Algorithm 1's outcome (g3) and the time of each phase."""
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("edge-cut", f"{summary['totals']['edge_cut']:,} arcs")
    t.add_row("total remote", f"{summary['totals']['remote']:,} rows per layer")
    for c in (summary.get("metis_memory") or {}).get("coarsened", []):
        t.add_row(
            "coarsened",
            f"METIS ran on {c['clusters']:,} clusters ({c['fine_arcs']:,} → {c['coarse_arcs']:,} "
            f"arcs in {c['levels']} level(s)): METIS on the whole graph would need more than "
            f"{human_bytes(summary['metis_memory']['bytes'])} ({summary['metis_memory']['from']})",
        )
    if summary.get("stop_reason"):
        before, after = summary["before"], summary["after"]
        t.add_row(
            "Algorithm 1",
            f"{summary['stop_reason']} after {summary['swaps']:,} swaps ({summary['stop_explanation']})",
        )
        refine = summary.get("refine")
        if refine:
            before_r, after_r = refine["remote_before"], refine["remote_after"]
            rounds = refine.get("rounds")  # absent in files written before the rounds existed
            t.add_row(
                "refinement",
                f"{'converged' if refine['converged'] else 'not converged'} after "
                f"{refine['steps']:,} steps"
                + (f" in {len(rounds)} round{'s' * (len(rounds) > 1)}" if rounds else "")
                + f": min/max {min(before_r) / max(1, max(before_r)):.3f} "
                f"-> {min(after_r) / max(1, max(after_r)):.3f}, total {sum(after_r):,} = "
                f"{sum(after_r) / max(1, refine['metis_total_remote']):.3f} x plain METIS "
                f"(budget {refine['remote_budget']} x)"
                + ("; not kept: Algorithm 1's assignment stays" if refine["kept"] != "refined" else ""),
            )
            bound = refine.get("lower_bound")  # absent in files written before the bound existed
            if bound and bound["exceeds_budget"]:
                t.add_row("infeasible", infeasible_statement(bound, refine["budget"]))
        t.add_row(
            "METIS -> g3",
            f"remote max {before['remote_max']:,} -> {after['remote_max']:,}, "
            f"min/max {before['remote_min_over_max']:.3f} -> {after['remote_min_over_max']:.3f}, "
            f"total {before['remote_total']:,} -> {after['remote_total']:,}",
        )
        params = summary["parameters"]
        t.add_row(
            "limits",
            f"feature size <= {params['balance_tol']} x mean, degree sum <= "
            f"{params.get('degree_tol') or params['balance_tol']} x mean",
        )
    t.add_row("time", ", ".join(f"{k} {v:.1f}s" for k, v in summary["timing"].items()))
    if summary.get("path"):
        t.add_row("written", summary["path"])
    return t


def print_partition_summary(summary: dict, console: Console | None = None) -> None:
    console = console or Console()
    console.print(partition_table(summary))
    console.print(balance_table(summary))
    console.print(facts_table(summary))


def plot_remote(summary: dict, path: str | Path) -> None:
    """Bar chart of |V_i^remote| per partition (with the METIS starting point for g3) to a PNG file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = summary["partitions"]
    ids = [p["partition"] for p in parts]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.4 * len(ids) + 2), 4))
    before = (summary.get("before") or {}).get("remote_per_partition")
    if before:
        ax.bar(ids, before, width=0.8, color="none", edgecolor="grey", label="METIS (stage 1)")
    ax.bar(ids, [p["remote"] for p in parts], width=0.5, label=summary["method"])
    ax.set_xlabel("partition")
    ax.set_ylabel("|V_i^remote| (nodes received per layer)")
    ax.set_title(f"{summary['store']['name']}: {summary['method']}, K={summary['num_partitions']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
