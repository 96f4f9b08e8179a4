"""`g3 report`: plots and a summary comparing one or several training runs.

Entry point: :func:`run_report`. Reads only run folders (run.json, metrics.jsonl, eval.json, trace/) and the plan
and partition they name; writes PNGs, ``summary.json`` and ``index.html`` into the output folder (each file is
documented in docs/ARTIFACTS.md, "Report").
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from stages.common.atomic import check_work_folder
from stages.common.errors import G3InputError
from stages.report import plots
from stages.report.data import RunData, label_runs, load_run
from stages.report.html import write_index
from stages.report.timeline import NO_TRACE, find_trace, plot_timeline

DEFINITIONS = [
    "throughput = the sum of all workers' average throughput (G3 paper, §7); a worker's throughput = the nodes it "
    "owns (and so computes every training epoch) / its epoch time, so for synchronous epochs it is the graph's "
    "node count / epoch time",
    "per-worker time: compute, communication wait (blocked on peers' embeddings or gradients), all-reduce + "
    "optimizer step, and idle = epoch time − the rest (floored at 0); means over all epochs but the first",
    "bytes sent / epoch: median over epochs of the bytes all workers sent peer-to-peer (the first epoch also "
    "sends the input features once)",
    "comm hidden (traced): share of communication time that overlapped compute, median over the traced "
    "epochs (g3 train --trace times every epoch but the first); comm blocked: the share during which the "
    "worker waited for a message",
    "accuracy (final, best): the last and the highest value recorded by `g3 train --eval-every`; "
    "test acc (g3 eval): RUN/eval.json, when `g3 eval` ran",
]


def default_out(runs: list[str | Path]) -> Path:
    """RUN/report for one run, else ./g3-report."""
    return Path(runs[0]) / "report" if len(runs) == 1 else Path("g3-report")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:48] or "run"


def file_suffixes(labels: list[str]) -> list[str]:
    """Per-run file name suffixes: '' for one run, else '-<i>-<the part of the label that differs>'."""
    if len(labels) == 1:
        return [""]
    prefix = os.path.commonprefix(labels)
    suffix = os.path.commonprefix([lab[::-1] for lab in labels])[::-1]
    cut = [
        lab[len(prefix) : len(lab) - len(suffix)] if len(prefix) + len(suffix) < len(lab) else lab
        for lab in labels
    ]
    return [f"-{i}-{_slug(c)}" if _slug(c) != "run" else f"-{i}" for i, c in enumerate(cut, 1)]


def run_report(
    runs: list[str | Path], out: str | Path | None = None, labels: list[str] | None = None
) -> dict:
    """Entry point of `g3 report`: load RUNS, draw every plot into OUT, write summary.json and index.html.

    Returns ``{"out", "index", "summary_json", "runs": [summary per run], "plots": [{"kind", "file", "caption",
    "runs"}], "notes": [what was skipped and why], "definitions"}``.
    """
    if not runs:
        raise G3InputError("give at least one run folder")
    data = [load_run(r) for r in runs]
    label_runs(data, labels)
    out = Path(out) if out is not None else default_out(runs)
    if out.exists() and not out.is_dir():
        raise G3InputError("the report output exists and is not a folder", path=out)
    # new, empty or an earlier report (whose files it replaces); never a run, nor the user's own folder
    check_work_folder(
        out,
        "-o",
        lambda f: (f / "summary.json").is_file() and (f / "index.html").is_file(),
        runs,
        inside_ok=True,
    )
    out.mkdir(parents=True, exist_ok=True)

    notes: list[str] = []
    for r in data:
        notes += [f"{r.label}: {n}" for n in r.notes]
    compare = _comparison_plots(data, out, notes)
    per_run = _per_run_plots(data, out, notes)
    return _write_summary(data, out, compare, per_run, notes)


def _add(target: list[dict], kind: str, file: str, caption: str, members: list[RunData]) -> None:
    """Record a drawn plot in ``target``."""
    target.append({"kind": kind, "file": file, "caption": caption, "runs": [m.label for m in members]})


def _comparison_plots(data: list[RunData], out: Path, notes: list[str]) -> list[dict]:
    """The plots comparing every run (time to accuracy, throughput, scaling); ``notes`` says which are missing."""
    compare: list[dict] = []
    comparisons = [  # the plot, its kind (and file name), its caption, why it is missing
        (
            plots.time_to_accuracy_figure,
            "time_to_accuracy",
            "Time to accuracy: test (solid) and validation (dashed) accuracy against training time after epoch 0 "
            "(epoch 0 compiles the kernels: its time is left out).",
            "no time-to-accuracy plot: no run evaluated during training (g3 train --eval-every 0)",
        ),
        (
            plots.throughput_figure,
            "throughput",
            "Throughput of every epoch (nodes/s summed over workers); dotted: each run's median.",
            "no throughput plot: no run has node counts (plan, partition and store metadata missing)",
        ),
        (
            plots.scaling_figure,
            "scaling",
            "Median throughput against the number of workers, one line per configuration.",
            "no scaling plot: the runs do not span two or more worker counts",
        ),
    ]
    for draw, kind, caption, why_not in comparisons:
        if kind == "scaling" and len(data) == 1:
            continue  # one run has one worker count
        if plots.save(draw(data), out / f"{kind}.png"):
            _add(compare, kind, f"{kind}.png", caption, data)
        else:
            notes.append(why_not)
    return compare


def _per_run_plots(data: list[RunData], out: Path, notes: list[str]) -> list[dict]:
    """Each run's worker breakdown, partition (once per partition) and timeline plots; ``notes``: which are missing."""
    per_run: list[dict] = []
    drawn_partitions: dict[str, dict] = {}
    untraced: list[str] = []
    # a comparison's worker plots share their y-scale
    top = plots.workers_top(data) if len(data) > 1 else None
    for r, suffix in zip(data, file_suffixes([r.label for r in data]), strict=True):
        f = f"workers{suffix}.png"
        if plots.save(plots.worker_breakdown_figure(r, top), out / f):
            _add(
                per_run,
                "workers",
                f,
                f"{r.label}: compute, communication wait, all-reduce + step and idle seconds "
                f"per epoch of each of the {r.num_workers} workers (balance and overlap).",
                [r],
            )
        if r.partition:
            key = str(r.partition.get("path") or id(r.partition))
            if key in drawn_partitions:
                drawn_partitions[key]["runs"].append(r.label)
            else:
                f = f"partition{suffix}.png"
                if plots.save(plots.partition_figure(r), out / f):
                    _add(
                        per_run,
                        "partition",
                        f,
                        f"{r.label}: remote-set size |V_i^remote| of each partition "
                        f"({r.partition.get('method')}, K={r.partition.get('num_partitions')}) = rows received per "
                        "layer.",
                        [r],
                    )
                    drawn_partitions[key] = per_run[-1]
        else:
            notes.append(
                f"{r.label}: no partition plot: the run's partition.json was not found "
                f"({(r.meta.get('partition') or {}).get('path')})"
            )
        _timeline_plot(r, suffix, out, per_run, untraced)
    if len(untraced) > 1 and len(untraced) == len(data) and all(n.endswith(NO_TRACE) for n in untraced):
        notes.append(
            f"no bin timeline: none of the {len(data)} runs has a trace/ folder (train with g3 train --trace)"
        )
    else:
        notes += untraced
    return per_run


def _timeline_plot(r: RunData, suffix: str, out: Path, per_run: list[dict], untraced: list[str]) -> None:
    """The run's bin timeline of its traced epoch, or why there is none (in ``untraced``)."""
    trace, why = find_trace(r.path)
    if trace is None:
        untraced.append(f"{r.label}: {why}")
        return
    if trace.epoch is None:  # the metrics mark the traced epoch
        trace.epoch = next((int(e["epoch"]) for e in r.epochs if e.get("traced")), None)
    f = f"timeline{suffix}.png"
    drawn = next((e for e in r.epochs if e.get("traced") and int(e["epoch"]) == trace.epoch), {})
    share = drawn.get("comm_hidden_share")  # this epoch's own share (the summary's is the median)
    hidden = None if share is None else f"communication hidden under compute: {100 * share:.0f} %"
    plot_timeline(trace, r.label, out / f, hidden)
    _add(
        per_run,
        "timeline",
        f,
        f"{r.label}: bin timeline of the traced epoch, one panel per rank, a row per "
        f"lane, coloured by category ({trace.num_events} events from {trace.folder}).",
        [r],
    )


def _write_summary(data: list[RunData], out: Path, compare: list, per_run: list, notes: list[str]) -> dict:
    """Write index.html and summary.json; return summary.json's content."""
    summaries = [r.summary() for r in data]
    sections = [
        ("Comparison" if len(data) > 1 else "Training", compare),
        ("Workers, partition and timeline", per_run),
    ]
    index = write_index(out, summaries, sections, notes, DEFINITIONS)
    result = {
        "schema": "g3.report",
        "schema_version": 1,
        "out": str(out),
        "index": str(index),
        "summary_json": str(out / "summary.json"),
        "runs": summaries,
        "plots": compare + per_run,
        "notes": notes,
        "definitions": DEFINITIONS,
    }
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
