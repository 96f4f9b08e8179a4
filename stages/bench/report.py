"""What `g3 bench` shows: the comparison table (terminal) and a bar chart (PNG)."""

from __future__ import annotations

from pathlib import Path

from stages.common.units import human_bytes, parse_rate


def _s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}×"


def _b(x: float | None) -> str:
    return "-" if x is None else human_bytes(x)


def _a(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f} %"


def table_rows(result: dict, entries: list[dict] | None = None) -> list[list[str]]:
    """One row per system: label, workers, threads, median epoch, bytes sent per epoch (all workers), final
    test accuracy, peak memory of the largest worker, compute max/mean over the workers, ratio to g3 (1 worker),
    ratio to DGL, note."""
    rows = []
    for e in result["entries"] if entries is None else entries:
        if e["status"] != "ok":
            done = e.get("completed_epoch_seconds") or []
            extra = f" (epochs it finished: {', '.join(_s(t) for t in done)})" if done else ""
            rows.append([e["label"], *["-"] * (len(HEADER) - 2), (e["note"] or e["status"]) + extra])
            continue
        peak = max(e["peak_memory_bytes"]) if e.get("peak_memory_bytes") else None
        rows.append(
            [
                e["label"],
                str(e.get("workers", 1)),
                str(e.get("threads", "-")),
                _s(e["median_epoch_seconds"]),
                _b(e.get("bytes_per_epoch")),
                _a(e.get("test_acc")),
                _b(peak),
                _r(e.get("compute_balance")),
                _r(e["vs_g3_1"]),
                _r(e["vs_dgl"]),
                e.get("note", ""),
            ]
        )
    return rows


HEADER = [
    "system",
    "workers",
    "threads",
    "median epoch",
    "bytes / epoch",
    "test acc",
    "peak mem / worker",
    "compute max/mean",
    "÷ g3 (1 worker)",
    "÷ DGL",
    "note",
]
FIGURES = (0, 1, 3, 4, 5, 6)  # the first table: what each system did
RATIOS = (0, 2, 7, 8, 9, 10)  # the second: threads, balance, ratios, notes


def footnotes(rows: list[list[str]], col: int, notes: list[str] | None = None) -> list[str]:
    """Move column ``col`` (the notes) out of the rows: each cell becomes the number of its note (one per distinct
    text, in order of appearance; ``notes``: those of earlier tables, numbered on) and the notes are returned, to
    be printed below the tables. A long note in a cell would make the table wider than a terminal and fold every
    row into several lines."""
    notes = [] if notes is None else notes
    for row in rows:
        if row[col]:
            if row[col] not in notes:
                notes.append(row[col])
            row[col] = f"({notes.index(row[col]) + 1})"
    return notes


def print_bench(result: dict, console=None) -> None:
    """Two tables that fit a terminal — the figures of every system, then threads, balance, ratios and a note
    number — then the numbered notes below them."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    s = result["store"]
    o = result["options"]
    title = (
        f"{s['name']}: {s['num_nodes']:,} nodes, {s['num_arcs']:,} arcs — {o['model']}, {o['layers']} layers, "
        f"hidden {o['hidden']}, {o['epochs']} epochs (median without the first)"
    )
    notes: list[str] = []
    for link, entries in link_groups(result["entries"]):  # one pair of tables per emulated link rate
        rows = table_rows(result, entries)
        footnotes(rows, len(HEADER) - 1, notes)
        where = (
            f" — emulated hosts, {link} links"
            if link
            else (" — no network (one process, loopback)" if o.get("links") else "")
        )
        for cols, caption in ((FIGURES, title + where), (RATIOS, None)):
            t = Table(title=caption)
            for i in cols:
                t.add_column(
                    HEADER[i],
                    justify="left" if HEADER[i] in ("system", "note") else "right",
                    overflow="fold",
                    min_width=6 if i else 16,
                )
            for row in rows:
                t.add_row(*(escape(row[i]) for i in cols))
            console.print(t)
    if len(o.get("links") or ()) > 1:
        console.print(rate_table(result))
    for i, note in enumerate(notes, 1):
        console.print(f"({i}) {escape(note)}")
    goal = result.get("goal")
    if goal:
        verdict = "met" if goal["met"] else "NOT met"
        console.print(
            f"goal (one-worker g3 epoch ≤ DGL's): {verdict} — g3 {_s(goal['g3_1_worker'])} vs DGL "
            f"{_s(goal['dgl'])}"
        )
    la = result["load_average"]
    console.print(
        f"load average before/after: {la['before'][0]:.2f} / {la['after'][0]:.2f} on {result['cpu_count']} "
        f"cores; wrote {result['path']}/bench.json and bench.png"
    )


def link_groups(entries: list[dict]) -> list[tuple[str | None, list[dict]]]:
    """The entries by emulated link rate, in order of appearance (entries without one first)."""
    groups: dict = {}
    for e in entries:
        groups.setdefault(e.get("link"), []).append(e)
    return sorted(groups.items(), key=lambda g: g[0] is not None)


def rate_table(result: dict):
    """Each strategy run's median epoch at each emulated link rate (rows: spec and K; columns: rates), and
    its ratio to the fastest rate's."""
    from rich.table import Table

    links = list(result["options"]["links"])
    rows: dict = {}
    for e in result["entries"]:
        if e.get("link"):
            rows.setdefault(_without_link(e), {})[e["link"]] = e.get("median_epoch_seconds")
    t = Table(title="median epoch at each link rate (emulated hosts), and ÷ the epoch at the fastest rate")
    t.add_column("system", justify="left", overflow="fold", min_width=16)
    for link in links:
        t.add_column(link, justify="right", overflow="fold", min_width=6)
    fastest = max(links, key=parse_rate)
    for key, times in rows.items():
        base = times.get(fastest)
        cells = [
            f"{_s(times.get(link))}" + (f" ({times[link] / base:.1f}×)" if times.get(link) and base else "")
            for link in links
        ]
        t.add_row(key, *cells)
    return t


def _without_link(e: dict) -> str:
    """An emulated run's label without its ", <link>" (stages/bench/runs.py puts the link last): the spec and K."""
    return e["label"].removesuffix(f", {e['link']}")


def plot_links(result: dict, path: Path) -> None:
    """Median epoch time against the link rate, one line per strategy run (spec and K), log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict = {}
    for e in result["entries"]:
        if e.get("link") and e.get("median_epoch_seconds"):
            series.setdefault(_without_link(e), []).append(
                (parse_rate(e["link"]) / 1e9, e["median_epoch_seconds"])
            )
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for key, pts in series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("link rate per host and direction (Gbit/s)")
    ax.set_ylabel("median epoch (s)")
    s = result["store"]
    ax.set_title(f"{s['name']}: epoch time against the emulated link rate", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    _save(fig, path)


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


PANELS = (
    ("median_epoch_seconds", "median epoch time (s), lower is better", _s),
    ("bytes_per_epoch", "bytes sent per epoch (all workers)", _b),
    ("test_acc", "final test accuracy", _a),
    ("peak", "peak memory of the largest worker", _b),
)
BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def byte_unit(largest: float) -> tuple[float, str]:
    """(divisor, name) of the binary unit (as the table's, human_bytes) in which ``largest`` bytes is 1 to 1023."""
    k = 0
    while k + 1 < len(BYTE_UNITS) and largest >= 1024 ** (k + 1):
        k += 1
    return float(1024**k), BYTE_UNITS[k]


def plot_bench(result: dict, path: Path) -> None:
    """One row of bars per entry, a panel per figure (epoch time, bytes, accuracy, peak memory); entries that did
    not run are greyed with the reason, figures an entry lacks (a peer's bytes) left empty."""
    _save(bench_figure(result), path)


def bench_figure(result: dict):
    """The figure of :func:`plot_bench`. Bytes are drawn in one binary unit per panel, named on its axis (as the
    table writes them: MiB, GiB; no "1e8" offset), accuracy in % (as the bar labels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    ok = [e for e in result["entries"] if e["status"] == "ok" and e["median_epoch_seconds"]]
    missing = [e for e in result["entries"] if e["status"] != "ok"]
    value = {id(e): {"peak": max(e["peak_memory_bytes"]) if e.get("peak_memory_bytes") else None} for e in ok}
    for e in ok:
        value[id(e)].update({key: e.get(key) for key, _, _ in PANELS if key != "peak"})
    labels = [e["label"] for e in ok] + [e["label"] for e in missing]
    y = list(range(len(labels)))
    panels = [pn for pn in PANELS if any(value[id(e)][pn[0]] is not None for e in ok)]
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(3.4 * len(panels) + 2.5, 0.8 + 0.42 * max(1, len(labels))),
        sharey=True,
        squeeze=False,
    )
    from stages.strategies.registry import STRATEGIES

    palette = ("#4C72B0", "#55A868", "#8172B2", "#C44E52", "#CCB974", "#64B5CD", "#8C8C8C", "#E377C2")
    colors = {name: palette[i % len(palette)] for i, name in enumerate(STRATEGIES)}  # peers: orange
    for ax, (key, title, fmt) in zip(axes[0], panels, strict=True):
        raw = [value[id(e)][key] for e in ok]
        scale, unit = byte_unit(max(v or 0.0 for v in raw)) if fmt is _b else (1.0, None)
        vals = [(v or 0.0) / scale for v in raw] + [0.0] * len(missing)
        ax.barh(
            y,
            vals,
            color=[colors.get(e.get("strategy", ""), "#DD8452") for e in ok] + ["#cccccc"] * len(missing),
        )
        for yi, v in zip(y, raw, strict=False):
            if v is not None:
                ax.text(v / scale, yi, f" {fmt(v)}", va="center", fontsize=7)
        if key == "median_epoch_seconds":
            for yi, e in zip(y[len(ok) :], missing, strict=True):
                ax.text(
                    0, yi, "  " + (e["note"] or e["status"])[:60], va="center", fontsize=7, color="#666666"
                )
        ax.set_title(title, fontsize=8)
        ax.set_xlim(0, max(vals + [1e-9]) * 1.35)
        if key == "test_acc":
            ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        else:  # plain numbers in the unit the axis names: no offset, no scientific notation
            ax.ticklabel_format(axis="x", style="plain", useOffset=False)
            ax.set_xlabel(unit or "s", fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    axes[0][0].set_yticks(y)
    axes[0][0].set_yticklabels(labels, fontsize=8)
    axes[0][0].invert_yaxis()
    s, o = result["store"], result["options"]
    fig.suptitle(
        f"{s['name']} — {o['model']}, {o['layers']} layers, hidden {o['hidden']}, {o['epochs']} epochs, "
        f"{result['threads']} threads",
        fontsize=9,
    )
    return fig
