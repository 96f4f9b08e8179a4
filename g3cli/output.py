"""Rich rendering of stage results (presentation only)."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from stages.common.units import human_bytes
from stages.strategies.registry import LEGACY_STRATEGY, strategy_spec

# Off a terminal (a pipe, a file, a test's captured output) rich assumes 80 columns and folds every table cell
# that does not fit, so one row becomes several lines. There, tables print at their natural width, up to this.
PIPE_WIDTH = 240


def stdout_console() -> Console:
    """A console on the current ``sys.stdout``: rich's own on a terminal; off one, a fixed width wide enough that
    no table row is folded."""
    out = sys.stdout
    on_terminal = bool(getattr(out, "isatty", lambda: False)())
    return Console(file=out) if on_terminal else Console(file=out, width=PIPE_WIDTH)


class _StdoutConsole:
    """``console.print(...)`` on whatever ``sys.stdout`` is when it is called (click's test runner swaps it)."""

    def __getattr__(self, name):
        return getattr(stdout_console(), name)


console = _StdoutConsole()


def print_result(result: dict, as_json: bool, show, indent: int = 2) -> None:
    """A command's result: its JSON with ``--json`` (``indent`` as the command has always printed it), else
    ``show(result)``, its tables."""
    if as_json:
        click.echo(json.dumps(result, indent=indent, default=str))
    else:
        show(result)


def print_path(what: str, path) -> None:
    """``what: PATH`` on a line of its own, below the table it belongs to. Paths are not put in table titles: rich
    wraps a title to the table's width, which folds a long path mid-word (``…plan-sag⏎e.run``) at any terminal
    width; here it is printed whole (soft wrap: copied from the terminal, it is one piece)."""
    console.print(f"{what}: {path}", soft_wrap=True, highlight=False)


def _fields_table(title: str, justify: str = "left") -> Table:
    """A table of named values: the names bold, the values in the second column."""
    t = Table(title=title, show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column(justify=justify)
    return t


def print_ingest_report(report) -> None:
    t = _fields_table("ingested", justify="right")
    t.add_row("nodes", f"{report.num_nodes:,}")
    t.add_row("arcs in store", f"{report.num_arcs:,}")
    t.add_row("arcs read", f"{report.arcs_read:,}")
    t.add_row("reverse arcs added", f"{report.reverse_arcs_added:,}")
    t.add_row("self-loops removed", f"{report.self_loops_removed:,}")
    t.add_row("duplicates removed", f"{report.duplicates_removed:,}")
    t.add_row(
        "external sort", f"yes, {report.buckets} buckets" if report.spilled else "no (fits the memory limit)"
    )
    t.add_row("time", ", ".join(f"{k} {v:.1f}s" for k, v in report.seconds.items()))
    console.print(t)
    print_path("store", report.path)


def print_summary(summary: dict) -> None:
    """Print the summary dict of any artifact (``g3 info``)."""
    kind = summary.get("kind")
    if kind == "partition":
        from stages.partition import print_partition_summary

        print_partition_summary(summary, console)
    elif kind in ("store", "plan", "run"):
        {"store": _print_store, "plan": _print_plan, "run": _print_run}[kind](summary)
    else:
        from rich.pretty import Pretty

        console.print(Pretty(summary))
    if isinstance(summary.get("cost"), dict):
        console.print(cost_line(summary["cost"]))


def cost_line(cost: dict) -> str:
    """What the stage that made an artifact took: its time, peak memory (with the workers' share) and disk."""
    line = f"made in {cost.get('seconds', 0):.1f} s, peak memory {human_bytes(int(cost.get('peak_memory_bytes', 0)))}"
    if cost.get("workers_peak_bytes"):
        line += (
            f" (the command {human_bytes(int(cost.get('process_peak_bytes', 0)))}, its workers "
            f"{human_bytes(int(cost['workers_peak_bytes']))})"
        )
    if "disk_bytes" in cost:  # artifacts made before disk was recorded have none
        line += f", disk {human_bytes(int(cost['disk_bytes']))}"
        if cost.get("scratch_peak_bytes"):
            line += f" (scratch at most {human_bytes(int(cost['scratch_peak_bytes']))})"
    return line


def _print_run(run: dict) -> None:
    """`g3 info RUN`: what was trained how, how far it got, and its figures (paths below the table)."""
    p, cfg, strategy = run.get("progress", {}), run.get("config", {}), run.get("strategy", {})
    model = run.get("plan", {}).get("model", {})
    t = _fields_table("g3 run")
    t.add_row("status", str(run.get("status")))
    t.add_row(
        "strategy",
        strategy.get("name", "?")
        + "".join(
            f", {k} {_option_text(v)}" for k, v in (strategy.get("options") or {}).items() if v is not None
        ),
    )
    if model:
        t.add_row(
            "model", f"{model.get('model')} × {model.get('layers')} layers, hidden {model.get('hidden')}"
        )
    t.add_row(
        "workers",
        f"{run.get('plan', {}).get('num_workers')} on {cfg.get('device', 'cpu')}, {cfg.get('dtype')}",
    )
    t.add_row(
        "epochs",
        f"{p.get('epochs_done', 0)} of {cfg.get('epochs')} (lr {cfg.get('lr')}, dropout "
        f"{cfg.get('dropout')}, seed {cfg.get('seed')})",
    )
    if p.get("epochs_done"):
        t.add_row("last loss", f"{p['last_loss']:.4f}")
        accs = [
            f"{s} {p[f'{s}_acc'] * 100:.2f} %"
            for s in ("train", "valid", "test")
            if p.get(f"{s}_acc") is not None
        ]
        if accs:
            t.add_row("accuracy", ", ".join(accs))
        t.add_row("median epoch", f"{p['median_epoch_seconds'] * 1e3:.1f} ms")
        t.add_row("bytes sent / epoch", human_bytes(p["bytes_sent_per_epoch"]))
        t.add_row("peak memory / worker", human_bytes(p["peak_memory_bytes"]))
    if p.get("eval"):
        t.add_row("g3 eval", ", ".join(f"{s} {a * 100:.2f} %" for s, a in p["eval"].items() if a is not None))
    console.print(t)
    console.print(f"run:  {run.get('path', '')}", soft_wrap=True)
    console.print(f"plan: {run.get('plan', {}).get('path', '')}", soft_wrap=True)


def _print_plan(plan: dict) -> None:
    """`g3 info PLAN`: the strategy and its options, the model, the partition, per-worker sizes."""
    strategy = plan.get("strategy") or {"name": LEGACY_STRATEGY, "options": {}}
    t = _fields_table("g3 plan")
    t.add_row("strategy", strategy["name"])
    for k, v in (strategy.get("options") or {}).items():
        t.add_row(f"  {k}", _option_text(v))
    cfg = plan["config"]
    t.add_row(
        "model",
        f"{cfg['model']} × {cfg['layers']} layers, hidden {cfg['hidden']}"
        + (f", {cfg['heads']} heads" if cfg["model"] == "gat" else "")
        + f", widths {plan['widths']}",
    )
    t.add_row("partition", f"{plan['partition']['method']} ({plan['partition']['path']})")
    t.add_row("workers", str(plan["num_workers"]))
    t.add_row("schema", f"g3.plan v{plan['schema_version']}")
    console.print(t)
    print_path("plan", plan.get("path", ""))
    print_plan_report({**plan, "strategy": strategy, "path": plan.get("path", "")})


def _print_store(s: dict) -> None:
    t = _fields_table(f"g3 store {s['name']}", justify="right")
    t.add_row("nodes", f"{s['num_nodes']:,}")
    t.add_row("arcs", f"{s['num_arcs']:,}" + ("  (directed)" if s["directed"] else "  (symmetric)"))
    d = s["degree"]
    for side in ("in", "out"):
        if d.get(side):
            t.add_row(
                f"{side}-degree min / mean / max",
                f"{d[side]['min']:,} / {d[side]['mean']:.2f} / {d[side]['max']:,}",
            )
    t.add_row("features", f"{s['feat_dim']} × {s['feature_dtype']}  ({s['features']})")
    t.add_row("classes", f"{s['num_classes']}  ({s['labels']}, {s['num_labeled']:,} labelled)")
    sizes = s["split_sizes"]
    t.add_row(
        "split train / valid / test",
        f"{sizes.get('train', 0):,} / {sizes.get('valid', 0):,} / {sizes.get('test', 0):,}",
    )
    t.add_row("size on disk", human_bytes(s["size_on_disk"]))
    t.add_row("schema", f"{s['schema']} v{s['schema_version']}")
    console.print(t)
    print_path("store", s["path"])


def print_plan_report(plan: dict, detailed: bool = False) -> None:
    cfg, strategy = plan["config"], plan["strategy"]
    opts = strategy["options"]
    shown = ", ".join(f"{k} {_option_text(v)}" for k, v in opts.items())
    head = (
        f"[bold]plan[/bold] ({strategy['name']}{': ' + shown if shown else ''}) → {plan['path']}: "
        f"{plan['num_workers']} workers, {cfg['model']} × {cfg['layers']} layers, widths {plan['widths']}"
    )
    rows, table = strategy_spec(strategy["name"]).plan_summary(plan)  # from the strategy's planner
    head += "".join(f"; {label}: {text}" for label, text in rows)
    console.print(head)
    _print_residency(plan["workers"])
    if table is not None:
        _print_planner_table(table)
        return
    bins = "layers" in plan["workers"][0] if plan["workers"] else False
    t = Table(title="per worker" if not detailed else "per worker and layer")
    per_worker = ("bins/layer",) if bins else ("send rows", "memory (whole partition)")
    per_layer = ("layer", "bins", "max bin nodes") if bins else ("layer", "memory")
    for col in ("worker", "owned", "remote", "arcs") + (
        (*per_layer, "compute (arcs×width)", "recv bytes", "send bytes") if detailed else per_worker
    ):
        t.add_column(col, justify="right")
    for w in plan["workers"]:
        head = (str(w["rank"]), f"{w['num_owned']:,}", f"{w['num_remote']:,}", f"{w['num_arcs']:,}")
        if not detailed:
            if bins:
                t.add_row(*head, " / ".join(str(layer["num_bins"]) for layer in w["layers"]))
            else:
                t.add_row(*head, f"{sum(w['send_rows']):,}", human_bytes(w["memory_bytes"]))
            continue
        for li, est in enumerate(w["estimate"]):
            cells = (
                (str(li), str(w["layers"][li]["num_bins"]), f"{w['layers'][li]['max_bin_nodes']:,}")
                if bins
                else (str(li), human_bytes(est["memory_bytes"]))
            )
            t.add_row(
                *(head if li == 0 else ("", "", "", "")),
                *cells,
                f"{est['compute']:,}",
                human_bytes(est["recv_bytes"]) + (" (once)" if est["recv_is_static_features"] else ""),
                human_bytes(est["send_bytes"])
                + (" (once)" if est["recv_is_static_features"] and not bins else ""),
            )
    console.print(t)


def _print_residency(workers: list[dict]) -> None:
    """One line: how many workers' partitions fit their device (plan.json ``residency``; absent in older plans)."""
    records = [w["residency"] for w in workers if w.get("residency")]
    if not records:
        return
    fit = sum(r["mode"] == "device" for r in records)
    largest = max(records, key=lambda r: r["bytes"])
    rest = (
        ""
        if fit == len(records)
        else f"; the other {len(records) - fit} stay in host memory, moved to the device in parts"
    )
    console.print(
        f"on the device: {fit} of {len(records)} workers' partitions fit for the whole run (the largest "
        f"needs {human_bytes(largest['bytes'])} of {human_bytes(largest['device_memory'])}){rest}"
    )


def _print_planner_table(table: dict) -> None:
    """A table a strategy's planner gives (``summary_table``: title, columns, rows of text)."""
    t = Table(title=table["title"])
    for col in table["columns"]:
        t.add_column(col, justify="right")
    for row in table["rows"]:
        t.add_row(*row)
    console.print(t)


def _option_text(v) -> str:
    if isinstance(v, dict) and "policy" in v:
        return f"{v['policy']}:{v['bound']}"
    if isinstance(v, int) and v >= 2**20:
        return human_bytes(v)
    return "auto" if v is None else str(v)


def print_run_summary(info: dict) -> None:
    from pathlib import Path

    from stages.common.errors import G3InputError
    from stages.common.run_artifact import read_metrics

    if info.get("rank", 0) != 0:
        return  # under torchrun only rank 0 reports
    try:
        history = read_metrics(Path(info["path"]), need=("epoch",))
    except G3InputError:  # no epoch recorded
        history = []
    if not history:
        console.print(f"run {info.get('status', '')}")
        return
    last = history[-1]
    t = _fields_table(f"run {info['status']}", justify="right")
    t.add_row("epochs", str(len(history)))
    t.add_row("final loss", f"{last['loss']:.4f}")
    times = sorted(r["epoch_seconds"] for r in history)
    t.add_row("median epoch time", f"{times[len(times) // 2]:.3f} s")
    for split in ("train", "valid", "test"):
        if last.get(f"{split}_acc") is not None:
            t.add_row(f"{split} accuracy", f"{100 * last[f'{split}_acc']:.2f} %")
    console.print(t)
    print_path("run", info["path"])


def print_eval(result: dict) -> None:
    how = (
        "the earlier evaluation of the same weights"
        if result.get("reused")
        else f"{result['workers']} workers, {result['seconds']:.2f} s"
    )
    t = Table(title=f"eval ({how})")
    auc = result.get("rocauc")
    for col in ("split", "accuracy", *(["ROC-AUC"] if auc else []), "correct", "labelled"):
        t.add_column(col, justify="right")
    for split, acc in result["accuracy"].items():
        roc = [] if not auc else ["n/a" if auc.get(split) is None else f"{auc[split]:.4f}"]
        t.add_row(
            split,
            "n/a" if acc is None else f"{100 * acc:.2f} %",
            *roc,
            f"{result['correct'][split]:,}",
            f"{result['labelled'][split]:,}",
        )
    console.print(t)
    console.print(f"weights: {result['weights']}", soft_wrap=True)


def print_report(result: dict) -> None:
    """`g3 report`: the summary (a column per run, three runs per table), the plots written, what was skipped."""
    from stages.report import COLUMNS, cell

    runs = result["runs"]
    for start in range(0, len(runs), 3):
        chunk = runs[start : start + 3]
        t = Table(title="g3 report" if start == 0 else None, show_lines=False)
        t.add_column("", style="bold")
        for s in chunk:
            t.add_column(s["label"], justify="right", overflow="fold")
        for key, header, fmt in COLUMNS[1:]:  # rows no run has (e.g. accuracy without eval) are left out
            if any(s.get(key) is not None for s in runs):
                t.add_row(header, *(cell(s, key, fmt) for s in chunk))
        console.print(t)
    for p in result["plots"]:
        console.print(f"  [bold]{p['kind']:<17}[/bold] {result['out']}/{p['file']}", soft_wrap=True)
    for note in result["notes"]:
        console.print(f"  [yellow]skipped[/yellow] {note}", soft_wrap=True)
    console.print(f"open {result['index']}", soft_wrap=True)
