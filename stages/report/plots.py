"""The plots of `g3 report` (matplotlib, Agg backend, PNG): one function per plot family.

Each ``*_figure`` function returns its figure, or None where there is nothing to draw (e.g. no run evaluated);
:func:`save` writes it.
Colours: one per run, the same in every comparison plot; time categories use fixed colours.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import EngFormatter, MaxNLocator, PercentFormatter  # noqa: E402

from stages.report.data import RunData  # noqa: E402

DPI = 110
TIME_PARTS = (  # key in worker_breakdown, legend label, colour
    ("compute", "compute", "#4C72B0"),
    ("comm_wait", "communication wait", "#DD8452"),
    ("sync", "all-reduce + step", "#55A868"),
    ("idle", "idle (epoch − the rest)", "#BBBBBB"),
)


def run_color(i: int) -> str:
    return plt.get_cmap("tab10")(i % 10)


def save(fig, path: Path) -> bool:
    """Write ``fig`` to ``path``; False (nothing written) where there was nothing to draw (``fig`` None)."""
    if fig is None:
        return False
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True


def _max_over_mean(values: list[float]) -> float:
    """The balance ratio of ``values`` (1 = even; 1 also when they are all 0)."""
    mean = sum(values) / len(values)
    return max(values) / mean if mean else 1.0


def _legend(ax, n: int) -> None:
    if n > 6:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize="small")


TIME_AXIS = "training time after epoch 0 (s; epoch 0, with its JIT compilation, and evaluation not counted)"


def time_to_accuracy_figure(runs: list[RunData]):
    """Test (solid) and validation (dashed) accuracy against training time after epoch 0, one colour per run.
    The time axis starts at the end of epoch 0: that epoch's time is mostly one-time start-up (numba's JIT
    compilation, the first feature exchange), which would shift every curve by its own constant and hide how fast
    each strategy then learns; an evaluation after epoch 0 lies at 0."""
    if not any(r.accuracy("test") or r.accuracy("valid") for r in runs):
        return None
    fig, ax = plt.subplots(figsize=(10.5 if 2 * len(runs) > 6 else 8, 4.8))
    for i, r in enumerate(runs):
        warmup = float(r.epochs[0]["epoch_seconds"])
        for split, style in (("test", "-"), ("valid", "--")):
            acc = r.accuracy(split)
            if acc:
                ax.plot(
                    [max(0.0, t - warmup) for _, t, _ in acc],
                    [a for _, _, a in acc],
                    style,
                    marker="o",
                    markersize=3,
                    color=run_color(i),
                    label=f"{r.label} ({split})",
                )
    ax.set_xlabel(TIME_AXIS, fontsize="small")
    ax.set_xlim(left=0)
    ax.set_ylabel("accuracy")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_title("Time to accuracy")
    ax.grid(alpha=0.3)
    _legend(ax, 2 * len(runs))
    return fig


def throughput_figure(runs: list[RunData]):
    """Throughput (nodes/s, sum over workers) of every epoch, with each run's median as a dotted line; epochs
    numbered from 0, as `g3 train` prints and records them."""
    series = [(i, r, r.throughput()) for i, r in enumerate(runs)]
    series = [s for s in series if s[2]]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(10.5 if len(series) > 6 else 8, 4.8))
    for i, r, tp in series:
        epochs = [int(rec["epoch"]) for rec in r.epochs]
        med = statistics.median(tp)
        ax.plot(
            epochs,
            tp,
            marker="o" if len(tp) < 40 else None,
            markersize=3,
            color=run_color(i),
            label=f"{r.label} (K={r.num_workers}, median {EngFormatter(places=1)(med)} nodes/s)",
        )
        ax.axhline(med, color=run_color(i), linestyle=":", linewidth=1)
    ax.set_xlabel("epoch (from 0, as g3 train counts)")
    ax.set_ylabel("throughput (nodes/s)")
    ax.yaxis.set_major_formatter(EngFormatter())
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput per epoch: Σ over workers of owned nodes / epoch time")
    ax.grid(alpha=0.3)
    _legend(ax, len(series))
    return fig


def scaling_groups(runs: list[RunData]) -> dict[str, list[RunData]]:
    """Runs grouped by everything that varies between them except the worker count."""
    attrs = [r.attributes() for r in runs]
    varying = [k for k in attrs[0] if len({str(a[k]) for a in attrs}) > 1]
    groups: dict[str, list[RunData]] = {}
    for r, a in zip(runs, attrs, strict=True):
        key = ", ".join(f"{k} {a[k]}" for k in varying) if varying else f"{a['model']}, {a['partition']}"
        groups.setdefault(key, []).append(r)
    return groups


def scaling_figure(runs: list[RunData]):
    """Median throughput against the worker count, one line per configuration (the paper's Fig. 7-11, 16, 17)."""
    if len({r.num_workers for r in runs}) < 2 or not any(r.throughput() for r in runs):
        return None
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ks = sorted({r.num_workers for r in runs})
    groups = scaling_groups(runs)
    for i, (name, group) in enumerate(groups.items()):
        pts: dict[int, list[float]] = {}
        for r in group:
            tp = r.throughput()
            if tp:
                pts.setdefault(r.num_workers, []).append(statistics.median(tp))
        xs = sorted(pts)
        ax.plot(xs, [max(pts[k]) for k in xs], marker="o", color=run_color(i), label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("workers")
    ax.set_ylabel("throughput (nodes/s, median epoch)")
    ax.yaxis.set_major_formatter(EngFormatter())
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput against workers")
    ax.grid(alpha=0.3)
    _legend(ax, len(groups))
    return fig


def workers_top(runs: list[RunData]) -> float | None:
    """One y-axis limit for the per-worker plots of several runs, so that their bars compare: the tallest stack
    (seconds per epoch) of any worker of any run, plus a margin; None when no run has per-worker figures."""
    tallest = [sum(w[key] for key, _, _ in TIME_PARTS) for r in runs for w in r.worker_breakdown()]
    return 1.05 * max(tallest) if tallest and max(tallest) > 0 else None


def worker_breakdown_figure(run: RunData, top: float | None = None):
    """Stacked bars per worker: compute, communication wait, all-reduce + step and idle seconds per epoch.
    ``top``: the y-axis limit, the same for every run of a comparison (:func:`workers_top`)."""
    rows = run.worker_breakdown()
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(7.0, 0.45 * len(rows) + 2.5), 5.0))
    ranks = [str(w["rank"]) for w in rows]
    bottom = [0.0] * len(rows)
    for key, label, color in TIME_PARTS:
        vals = [w[key] for w in rows]
        ax.bar(ranks, vals, bottom=bottom, color=color, label=label, width=0.7)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    if top is not None:
        ax.set_ylim(0, top)
    # the epochs averaged, numbered as g3 train does (from 0)
    averaged = [int(r["epoch"]) for r in run.epochs[len(run.epochs) - rows[0]["epochs"] :]]
    ax.set_xlabel("worker (rank)")
    ax.set_ylabel("seconds per epoch" + (" (one scale for all runs)" if top is not None else ""))
    ax.set_title(
        f"{run.label}\nwhere each worker's epoch goes (mean of epochs {averaged[0]}–{averaged[-1]}; "
        f"compute max/mean {_max_over_mean([w['compute'] for w in rows]):.2f})",
        fontsize="medium",
    )
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=4, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return fig


def partition_figure(run: RunData):
    """Per partition: remote-set size |V_i^remote| (bars; for g3 the METIS starting point as outlines) and arcs
    |E(V_i)| (the compute each worker aggregates), with their max/mean balance ratios."""
    part = run.partition or {}
    parts = part.get("partitions") or []
    if not parts:
        return None
    ids = [int(p.get("partition", i)) for i, p in enumerate(parts)]
    remote = [float(p.get("remote", 0)) for p in parts]
    arcs = [float(p.get("arcs", 0)) for p in parts]
    fig, (ax, ax2) = plt.subplots(
        1, 2, figsize=(max(9.0, 0.5 * len(ids) + 6), 4.6), gridspec_kw={"width_ratios": [3, 2]}
    )
    before = (part.get("before") or {}).get("remote_per_partition")
    if before and len(before) == len(ids):
        ax.bar(ids, before, width=0.8, color="none", edgecolor="grey", label="METIS (before rebalancing)")
    ax.bar(ids, remote, width=0.5, color="#4C72B0", label=f"{part.get('method', '?')}")
    ax.axhline(sum(remote) / len(remote), color="black", linestyle=":", linewidth=1, label="mean")
    ax.set_title(f"remote set |V_i^remote| (max/mean {_max_over_mean(remote):.3f})", fontsize="medium")
    ax.set_ylabel("nodes received per layer")
    ax2.bar(ids, arcs, width=0.6, color="#55A868")
    ax2.axhline(sum(arcs) / len(arcs), color="black", linestyle=":", linewidth=1)
    ax2.set_title(f"arcs |E(V_i)| (max/mean {_max_over_mean(arcs):.3f})", fontsize="medium")
    for a in (ax, ax2):
        a.set_xlabel("partition")
        a.set_xticks(ids, [str(i) for i in ids], fontsize="small" if len(ids) > 16 else None)
        a.yaxis.set_major_formatter(EngFormatter())
        a.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, frameon=False)
    store = (part.get("store") or {}).get("name", run.store_name)
    fig.suptitle(
        f"{store}: {part.get('method', '?')} partition, K={part.get('num_partitions', len(ids))}"
        f"  (used by {run.label})",
        fontsize="medium",
    )
    return fig
