"""What `g3 simulate` shows: terminal tables and PNGs (per-worker time breakdown, timeline, scaling)."""

from __future__ import annotations

from pathlib import Path

COLORS = {"busy": "#4C72B0", "comm_wait": "#DD8452", "idle": "#BBBBBB", "sync": "#55A868"}


def _fmt(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, dpi: int = 110) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    _plt().close(fig)


def plot_workers(systems: list[dict], path: Path) -> None:
    """Stacked bars per worker (busy / communication wait / idle / all-reduce + step), one panel per system."""
    plt = _plt()
    n = len(systems)
    fig, axes = plt.subplots(1, n, figsize=(max(4.0, 2.6 * n), 3.6), sharey=True, squeeze=False)
    for ax, r in zip(axes[0], systems, strict=True):
        ws = r["workers"]
        x = list(range(len(ws)))
        bottom = [0.0] * len(ws)
        for key in ("busy", "comm_wait", "idle", "sync"):
            vals = [w[key] for w in ws]
            ax.bar(x, vals, bottom=bottom, color=COLORS[key], label=key.replace("_", " "))
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_title(f"{r['system']}\n{_fmt(r['epoch_seconds'])}", fontsize=9)
        ax.set_xlabel("worker")
        ax.set_xticks(x)
    axes[0][0].set_ylabel("seconds per epoch (simulated)")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    _save(fig, path)


def plot_timeline(systems: list[dict], path: Path) -> None:
    """Gantt chart of the simulated epoch: one panel per system, a row per worker."""
    plt = _plt()
    n = len(systems)
    fig, axes = plt.subplots(
        n,
        1,
        figsize=(10, 1.0 + 0.35 * sum(len(r["workers"]) for r in systems) + 0.4 * n),
        squeeze=False,
        sharex=True,
    )
    colors = {
        "compute": COLORS["busy"],
        "overhead": "#8172B2",
        "wait": COLORS["comm_wait"],
        "barrier": "#999999",
    }
    for ax, r in zip(axes[:, 0], systems, strict=True):
        for w in r["workers"]:
            for t0, t1, kind, _label in w.get("spans", []):
                ax.barh(
                    w["rank"], t1 - t0, left=t0, height=0.7, color=colors.get(kind, "#cccccc"), linewidth=0
                )
        ax.set_title(f"{r['system']} ({_fmt(r['epoch_seconds'])})", fontsize=9, loc="left")
        ax.set_yticks(range(len(r["workers"])))
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel(
        "simulated seconds (blue: compute, purple: overhead, orange: waiting for messages)"
    )
    _save(fig, path, dpi=100)


def plot_scaling(scaling: list[dict], path: Path, baselines=()) -> None:
    """Throughput (nodes / s, the paper's metric) against the worker count, a line per system (``baselines``
    dashed)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    systems = list(scaling[0]["systems"])
    ks = [row["workers"] for row in scaling]
    for s in systems:
        ax.plot(
            ks,
            [row["systems"].get(s, {}).get("throughput") for row in scaling],
            marker="o",
            label=s,
            linestyle="--" if s in baselines else "-",
        )  # the baselines dashed, the plan's systems solid
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlabel("workers K")
    ax.set_ylabel("throughput (nodes / s, simulated)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def print_simulation(result: dict, console=None) -> None:
    """Summary per system, the per-worker breakdown of the fastest system, the scaling table."""
    from rich.console import Console

    console = console or Console()
    net = result["network"]
    bw = net["bandwidth_bytes_per_second"]
    console.print(
        f"[bold]Simulated epoch[/bold] of {result['simulated_plan']} on {result['workers']} workers — "
        f"network {bw * 8 / 1e9:g} Gbit/s, latency {net['latency_seconds'] * 1e6:g} µs; rates: "
        f"{result['rates']['source']}"
    )
    for note in result["rates"]["notes"]:
        console.print(f"  note: {note}")
    console.print(_systems_table(result["systems"]))
    console.print(_workers_table(min(result["systems"], key=lambda r: r["epoch_seconds"])))
    if result["scaling"]:
        console.print(_scaling_table(result["scaling"]))
    console.print(f"wrote {result['path']}/simulate.json and PNGs ({result['seconds']:.1f} s)")


def _systems_table(systems: list[dict]):
    """The summary table: a row per system."""
    from rich.table import Table

    t = Table(title="per system")
    for c in (
        "system",
        "epoch",
        "throughput (nodes/s)",
        "busy max",
        "comm wait (mean)",
        "idle (mean)",
        "all-reduce + step",
        "bytes / epoch",
    ):
        t.add_column(c, justify="left" if c == "system" else "right")
    for r in systems:
        t.add_row(
            r["system"],
            _fmt(r["epoch_seconds"]),
            f"{r['throughput']:,.0f}",
            _fmt(r["busy_max"]),
            _fmt(r["comm_wait_mean"]),
            _fmt(r["idle_mean"]),
            _fmt(r["allreduce_seconds"] + r["step_seconds"]),
            f"{r['bytes_per_epoch'] / 1e6:,.2f} MB",
        )
    return t


def _workers_table(first: dict):
    """The per-worker breakdown of one system (the fastest)."""
    from rich.table import Table

    w = Table(title=f"per worker ({first['system']}, the fastest)")
    for c in (
        "worker",
        "busy",
        "of it overhead",
        "comm wait",
        "idle",
        "all-reduce + step",
        "link busy",
        "sent",
    ):
        w.add_column(c, justify="right")
    for x in first["workers"]:
        w.add_row(
            str(x["rank"]),
            _fmt(x["busy"]),
            _fmt(x["overhead"]),
            _fmt(x["comm_wait"]),
            _fmt(x["idle"]),
            _fmt(x["sync"]),
            _fmt(x["link_seconds"]),
            f"{x['bytes_sent'] / 1e6:,.2f} MB",
        )
    return w


def _scaling_table(scaling: list[dict]):
    """The scaling table: a row per worker count, a column per system."""
    from rich.table import Table

    systems = list(scaling[0]["systems"])
    s = Table(title="scaling: simulated epoch time (throughput, nodes/s)")
    s.add_column("K", justify="right")
    for name in systems:
        s.add_column(name, justify="right")
    for row in scaling:
        s.add_row(
            str(row["workers"]),
            *[
                f"{_fmt(row['systems'][n]['epoch_seconds'])} ({row['systems'][n]['throughput']:,.0f})"
                if n in row["systems"]
                else "-"
                for n in systems
            ],
        )
    return s
