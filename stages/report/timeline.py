"""The bin timeline of a traced epoch: RUN/trace/rank-NNNNN.json (Chrome trace format) drawn as a Gantt chart.

A trace file is ``{"traceEvents": [...]}`` (or the bare list), one complete event per bin step:
``{"name", "cat", "ph": "X", "ts": µs, "dur": µs, "pid": rank, "tid": lane, "args": {"layer", "bin", "phase"}}``
with ``cat`` among gather, copy_in, compute, copy_out, pack, unpack, send, recv, wait. ``"ph": "M"`` ``thread_name`` events
name the lanes. When the folder holds one sub-folder per traced epoch instead, the last one is drawn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

CATEGORIES = {  # category -> colour; others get grey shades
    "gather": "#8172B3",
    "copy_in": "#64B5CD",
    "compute": "#4C72B0",
    "copy_out": "#CCB974",
    "pack": "#937860",
    "unpack": "#DA8BC3",
    "send": "#DD8452",
    "recv": "#55A868",
    "wait": "#C44E52",
}
NO_TRACE = "the run has no trace/ folder (the epoch was not traced: g3 train --trace)"
_RANK_FILE = re.compile(r"rank-(\d+)\.json$")


@dataclass
class Trace:
    folder: Path
    events: dict[int, list[dict]] = field(default_factory=dict)  # rank -> complete events
    lane_names: dict[tuple[int, str], str] = field(default_factory=dict)
    epoch: int | None = None

    @property
    def num_events(self) -> int:
        return sum(len(v) for v in self.events.values())


def _rank_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("rank-*.json") if _RANK_FILE.search(p.name))


def find_trace(run: Path) -> tuple[Trace | None, str]:
    """The run's trace, or None and why not (a sentence for the summary)."""
    folder = Path(run) / "trace"
    if not folder.is_dir():
        return None, f"no bin timeline: {NO_TRACE}"
    files = _rank_files(folder)
    if not files:
        subs = sorted(d for d in folder.iterdir() if d.is_dir() and _rank_files(d))
        if subs:
            folder, files = subs[-1], _rank_files(subs[-1])
    if not files:
        return None, f"no bin timeline: {folder} holds no rank-NNNNN.json trace file"
    trace = Trace(folder=folder)
    for f in files:
        try:
            doc = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            return None, f"no bin timeline: {f} is not valid JSON ({exc})"
        events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
        if not isinstance(events, list):
            return None, f"no bin timeline: {f} has no traceEvents list"
        if isinstance(doc, dict):
            for key in ("epoch", "otherData", "metadata"):
                val = doc.get(key)
                val = val.get("epoch") if isinstance(val, dict) else val
                if isinstance(val, int) and trace.epoch is None:
                    trace.epoch = val
        file_rank = int(_RANK_FILE.search(f.name).group(1))
        for ev in events:
            if not isinstance(ev, dict):
                continue
            rank = ev.get("pid", file_rank)
            rank = int(rank) if isinstance(rank, int | float) or str(rank).isdigit() else file_rank
            lane = str(ev.get("tid", 0))
            if ev.get("ph") == "M" and ev.get("name") == "thread_name":
                trace.lane_names[(rank, lane)] = str((ev.get("args") or {}).get("name", lane))
            elif ev.get("ph") == "X" and all(isinstance(ev.get(k), int | float) for k in ("ts", "dur")):
                trace.events.setdefault(rank, []).append({**ev, "pid": rank, "tid": lane})
                args = ev.get("args") or {}
                if trace.epoch is None and isinstance(args.get("epoch"), int):
                    trace.epoch = args["epoch"]
    if not trace.num_events:
        return None, f"no bin timeline: the trace files in {folder} hold no complete ('ph': 'X') events"
    return trace, ""


def _lane_key(lane: str):
    return (0, int(lane), "") if lane.lstrip("-").isdigit() else (1, 0, lane)


def pack(events: list[dict], max_rows: int = 6) -> list[list[dict]]:
    """Events of one lane in sub-rows so that overlapping ones (e.g. a send during a receive) are all visible."""
    rows: list[list[dict]] = []
    ends: list[float] = []
    for ev in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        i = next((j for j, end in enumerate(ends) if ev["ts"] >= end - 1e-9), None)
        if i is None:
            if len(ends) < max_rows:
                rows.append([])
                ends.append(float("-inf"))
            i = len(ends) - 1
        rows[i].append(ev)
        ends[i] = max(ends[i], ev["ts"] + ev["dur"])
    return rows or [[]]


def plot_timeline(trace: Trace, title: str, path: Path, subtitle: str | None = None) -> None:
    """One Gantt panel per rank, a row per lane, bars coloured by category (time in ms from the first event)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = min(ev["ts"] for evs in trace.events.values() for ev in evs)
    t1 = max(ev["ts"] + ev["dur"] for evs in trace.events.values() for ev in evs)
    ranks = sorted(trace.events)
    lanes = {r: sorted({ev["tid"] for ev in trace.events[r]}, key=_lane_key) for r in ranks}
    heights = [max(1, len(lanes[r])) for r in ranks]
    fig_h = min(2.0 + 0.45 * sum(heights) + 0.3 * len(ranks), 40.0)
    fig, axes = plt.subplots(
        len(ranks), 1, figsize=(11, fig_h), sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights}
    )
    cats = sorted(
        {ev.get("cat", "?") for evs in trace.events.values() for ev in evs},
        key=lambda c: (list(CATEGORIES).index(c) if c in CATEGORIES else len(CATEGORIES), c),
    )
    grey = iter(plt.get_cmap("Greys")(x) for x in (0.35, 0.5, 0.65, 0.8) * 8)
    colors = {c: CATEGORIES.get(c) or next(grey) for c in cats}
    for ax, rank in zip(axes[:, 0], ranks, strict=True):
        for row, lane in enumerate(lanes[rank]):
            subrows = pack([ev for ev in trace.events[rank] if ev["tid"] == lane])
            h = 0.8 / len(subrows)
            for sub, evs in enumerate(subrows):
                for cat in cats:
                    spans = [
                        ((ev["ts"] - t0) / 1e3, max(ev["dur"], 0) / 1e3)
                        for ev in evs
                        if ev.get("cat", "?") == cat
                    ]
                    if spans:
                        ax.broken_barh(
                            spans, (row - 0.4 + sub * h, h), facecolors=colors[cat], edgecolor="none"
                        )
        ax.set_yticks(
            range(len(lanes[rank])),
            [trace.lane_names.get((rank, lane), f"lane {lane}") for lane in lanes[rank]],
            fontsize="small",
        )
        ax.set_ylim(len(lanes[rank]) - 0.5, -0.5)
        ax.set_ylabel(f"rank {rank}", rotation=0, ha="right", va="center", fontweight="bold")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlim(0, (t1 - t0) / 1e3 * 1.01)
    axes[-1, 0].set_xlabel("ms since the first event of the traced epoch")
    epoch = f", epoch {trace.epoch + 1}" if trace.epoch is not None else ""
    axes[0, 0].set_title(f"{title}: bin timeline{epoch}" + (f"\n{subtitle}" if subtitle else ""))
    fig.legend(
        handles=[Patch(color=colors[c], label=c) for c in cats],
        loc="upper right",
        ncol=min(len(cats), 7),
        fontsize="small",
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97 if len(ranks) > 2 else 0.93))
    fig.savefig(path, dpi=110)
    plt.close(fig)
