"""What `g3 bench` shows: the comparison table (terminal) and a bar chart (PNG)."""

from __future__ import annotations

from pathlib import Path


def _s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}×"


def table_rows(result: dict) -> list[list[str]]:
    """One row per system: label, workers, threads, median epoch, ratio to g3 (1 worker), ratio to DGL, note."""
    rows = []
    for e in result["entries"]:
        if e["status"] != "ok":
            done = e.get("completed_epoch_seconds") or []
            extra = f" (epochs it finished: {', '.join(_s(t) for t in done)})" if done else ""
            rows.append([e["label"], "-", "-", "-", "-", "-", (e["note"] or e["status"]) + extra])
            continue
        rows.append([e["label"], str(e.get("workers", 1)), str(e.get("threads", "-")), _s(e["median_epoch_seconds"]),
                     _r(e["vs_g3_1"]), _r(e["vs_dgl"]), e.get("note", "")])
    return rows


HEADER = ["system", "workers", "threads", "median epoch", "÷ g3 (1 worker)", "÷ DGL", "note"]


def print_bench(result: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    s = result["store"]
    o = result["options"]
    t = Table(title=f"{s['name']}: {s['num_nodes']:,} nodes, {s['num_arcs']:,} arcs — {o['model']}, {o['layers']} "
                    f"layers, hidden {o['hidden']}, {o['epochs']} epochs (median without the first)")
    for h in HEADER:
        t.add_column(h, justify="left" if h in ("system", "note") else "right")
    for row in table_rows(result):
        t.add_row(*row)
    console.print(t)
    goal = result.get("goal")
    if goal:
        verdict = "met" if goal["met"] else "NOT met"
        console.print(f"goal (one-worker g3 epoch ≤ DGL's): {verdict} — g3 {_s(goal['g3_1_worker'])} vs DGL "
                      f"{_s(goal['dgl'])}")
    la = result["load_average"]
    console.print(f"load average before/after: {la['before'][0]:.2f} / {la['after'][0]:.2f} on {result['cpu_count']} "
                  f"cores; wrote {result['path']}/bench.json and bench.png")


def plot_bench(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [e for e in result["entries"] if e["status"] == "ok" and e["median_epoch_seconds"]]
    missing = [e for e in result["entries"] if e["status"] != "ok"]
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.45 * max(1, len(ok) + len(missing))))
    labels = [e["label"] for e in ok] + [e["label"] for e in missing]
    vals = [e["median_epoch_seconds"] for e in ok] + [0.0] * len(missing)
    colors = ["#4C72B0" if e["system"].startswith("g3") else "#DD8452" for e in ok] + ["#cccccc"] * len(missing)
    y = list(range(len(labels)))
    ax.barh(y, vals, color=colors)
    for yi, e in zip(y[len(ok):], missing, strict=True):
        ax.text(0, yi, "  " + (e["note"] or e["status"]), va="center", fontsize=8, color="#666666")
    for yi, v in zip(y, vals, strict=True):
        if v:
            ax.text(v, yi, f" {_s(v)}", va="center", fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    s, o = result["store"], result["options"]
    ax.set_xlabel("median epoch time (s), lower is better")
    ax.set_title(f"{s['name']} — {o['model']}, {o['layers']} layers, hidden {o['hidden']}, {result['threads']} threads",
                 fontsize=9)
    ax.set_xlim(0, max(vals + [1e-3]) * 1.25)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
