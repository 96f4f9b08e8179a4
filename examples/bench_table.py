"""Usage: python examples/bench_table.py [--table KIND] BENCH_DIR [BENCH_DIR ...]

Markdown tables for docs/BENCHMARKS.md from `g3 bench` output folders (the -o of `g3 bench`: bench.json and
each strategy run's metrics.jsonl, run.json and plan). One table per KIND, each the table of one section of
docs/BENCHMARKS.md; every folder's rows go into the same table, and the line above it gives each folder's
graph, date, load and cores:

* ``peers``      — one worker against DGL and PyG: median epoch, ratio to DGL, test accuracy, seeds/s, epochs;
* ``strategies`` — strategies side by side: median epoch, MiB sent per training epoch, compute max/mean (wall,
                   CPU), the largest worker's communication wait, peak RSS per worker;
* ``minibatch``  — mini-batch strategies per global step: step time, MiB (features, remote sampling), rows
                   fetched from other workers, sampled arcs;
* ``tp``         — the tensor-parallel comparison: MiB per training epoch (epochs 1..n-2: no warm-up, no final
                   evaluation) against the plan's collective volume, compute CPU max/mean, peak RSS, accuracy;
* ``network``    — runs on emulated hosts (`g3 bench --emulate-link`): link, K, hosts, median epoch, MiB the
                   transport sent per training epoch and MiB that crossed the links (every byte: collectives,
                   evaluation, TCP/IP headers), the largest communication wait, the share of communication
                   hidden under compute (`--trace`).

Entries that did not run are listed below the table with their reason. Nothing is measured here: every
figure comes from the folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

MIB = 2**20
GIB = 2**30
KINDS = ("peers", "strategies", "minibatch", "tp", "network")


def load_bench(folder: Path) -> dict:
    f = folder / "bench.json"
    if not f.is_file():
        print(f"bench_table.py: {folder}: no bench.json (not a `g3 bench -o` folder)", file=sys.stderr)
        raise SystemExit(2)
    return json.loads(f.read_text())


def records(entry: dict) -> list[dict]:
    """The run's per-epoch metrics (metrics.jsonl), or [] when the entry has no run."""
    f = Path(entry.get("run") or "/nonexistent") / "metrics.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.is_file() else []


def steady(recs: list[dict]) -> list[dict]:
    """Epochs without the first (warm-up, input-feature fetch), as `g3 bench` takes them."""
    return recs[1:] if len(recs) > 1 else recs


def training_bytes(worker: dict) -> int:
    """A worker's bytes of an epoch's training: evaluation's exchanges left out."""
    phases = worker.get("bytes_sent_per_phase")
    if phases is None:
        return int(worker.get("bytes_sent", 0))
    return sum(n for phase, n in phases.items() if not phase.startswith("eval"))


def phase_bytes(worker: dict, prefix: str) -> int:
    return sum(
        n for phase, n in (worker.get("bytes_sent_per_phase") or {}).items() if phase.startswith(prefix)
    )


def per_worker_mean(recs: list[dict], key: str) -> list[float]:
    """Each worker's mean of ``key`` over the epochs."""
    k = len(recs[0]["workers"])
    return [statistics.fmean(float(r["workers"][i].get(key, 0.0)) for r in recs) for i in range(k)]


def max_over_mean(values: list[float]) -> float | None:
    mean = statistics.fmean(values) if values else 0.0
    return max(values) / mean if mean > 0 else None


def spec_label(e: dict) -> str:
    """`strategy@method {options}`, without the worker count the bench label adds."""
    opts = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in (e.get("options") or {}).items())
    return f"`{e['strategy']}@{e['method']}" + (f" {{{opts}}}" if opts else "") + "`"


def f3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def acc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f} %"


def seconds(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


# ----------------------------------------------------------------------------------------------------------
# One function per table: (header, rows) from one entry that ran
# ----------------------------------------------------------------------------------------------------------


def peers_row(e: dict) -> list[str]:
    epochs = ", ".join(f"{t:.3f}" for t in e.get("epoch_seconds") or [])
    sps = e.get("seeds_per_second")
    return [
        e["label"],
        str(e.get("workers", 1)),
        seconds(e["median_epoch_seconds"]),
        "-" if e.get("vs_dgl") is None else f"{e['vs_dgl']:.2f}×",
        acc(e.get("test_acc")),
        "-" if sps is None else f"{sps:,.0f}",
        epochs,
    ]


PEERS_HEADER = ["system", "workers", "median epoch", "÷ DGL", "test acc", "seeds/s", "epochs (s)"]


def strategies_row(e: dict) -> list[str] | None:
    recs = steady(records(e))
    if not recs:
        return None
    wall = max_over_mean(per_worker_mean(recs, "compute_seconds"))
    cpu = max_over_mean(per_worker_mean(recs, "compute_cpu_seconds"))
    wait = max(per_worker_mean(recs, "comm_wait_seconds"))
    mib = statistics.fmean(sum(training_bytes(w) for w in r["workers"]) for r in recs) / MIB
    peak = e.get("peak_memory_bytes") or []
    rss = f"{min(peak) / GIB:.2f}–{max(peak) / GIB:.2f}" if peak else "-"
    return [
        str(e["workers"]),
        spec_label(e),
        f3(e["median_epoch_seconds"]),
        f"{mib:.1f}",
        f"{f3(wall)}, {f3(cpu)}",
        f3(wait),
        rss,
    ]


STRATEGIES_HEADER = [
    "K",
    "strategy (partition)",
    "median epoch (s)",
    "MiB sent / epoch",
    "compute max/mean (wall, CPU)",
    "largest comm wait / epoch (s)",
    "peak RSS per worker (GiB)",
]


def minibatch_row(e: dict) -> list[str] | None:
    recs = steady(records(e))
    if not recs or not all(r.get("steps") for r in recs):
        return None

    def per_step(value) -> float:  # mean over the epochs of an all-worker sum divided by the epoch's steps
        return statistics.fmean(sum(value(w) for w in r["workers"]) / r["steps"] for r in recs)

    step = e["median_epoch_seconds"] / statistics.median(r["steps"] for r in recs)
    return [
        f"{e['method']} ({e['strategy']})",
        str(e["workers"]),
        f"{step * 1e3:.0f} ms",
        f"{per_step(training_bytes) / MIB:.1f}",
        f"{per_step(lambda w: phase_bytes(w, 'features')) / MIB:.1f}",
        f"{per_step(lambda w: phase_bytes(w, 'sample')) / MIB:.2f}",
        f"{per_step(lambda w: w.get('fetched_rows', 0)):,.0f}",
        f"{per_step(lambda w: w.get('sampled_arcs', 0)):,.0f}",
    ]


MINIBATCH_HEADER = [
    "partition (strategy)",
    "K",
    "step",
    "MiB / step",
    "of which features",
    "remote sampling",
    "fetched rows / step",
    "sampled arcs / step",
]


def plan_formula_mib(e: dict) -> str:
    """The plan's per-epoch collective volume × 4 bytes, for plans that list `collectives` (else "-")."""
    run_json = Path(e["run"]) / "run.json"
    plan = Path(json.loads(run_json.read_text())["plan"]["path"]) / "plan.json"
    collectives = json.loads(plan.read_text()).get("collectives") if plan.is_file() else None
    if not collectives:
        return "-"
    return f"{4 * sum(sum(c['elements_sent']) for c in collectives if not c['once']) / MIB:.1f}"


def tp_row(e: dict) -> list[str] | None:
    recs = records(e)
    mid = recs[1:-1] or recs[1:]  # no warm-up, no final evaluation
    if not mid:
        return None
    sent = statistics.fmean(sum(w["bytes_sent"] for w in r["workers"]) for r in mid) / MIB
    bal = statistics.median(
        max_over_mean([w["compute_cpu_seconds"] for w in r["workers"]]) or 0.0 for r in mid
    )
    peak = max(e["peak_memory_bytes"]) / MIB
    return [
        e["label"],
        str(e["workers"]),
        f"{e['median_epoch_seconds']:.3f} s",
        f"{sent:.1f}",
        plan_formula_mib(e),
        f"{bal:.3f}",
        f"{peak:.0f} MiB",
        acc(e.get("test_acc")),
    ]


TP_HEADER = [
    "system",
    "K",
    "median epoch",
    "MiB sent / training epoch",
    "plan formula (MiB)",
    "compute max/mean (CPU s)",
    "peak RSS / worker",
    "test acc",
]


def network_row(e: dict) -> list[str] | None:
    """A run on emulated hosts: its link, epoch, the transport's training bytes and what crossed the links."""
    recs = steady(records(e))
    if not recs or not e.get("link"):
        return None
    mib = statistics.fmean(sum(training_bytes(w) for w in r["workers"]) for r in recs) / MIB
    # the NIC counts evaluation's exchanges too: the epochs without one
    link = [r["link_bytes_sent"] for r in recs if "link_bytes_sent" in r and "test_acc" not in r]
    wait = max(per_worker_mean(recs, "comm_wait_seconds"))
    hidden = e.get("comm_hidden_share")
    return [
        e["link"],
        str(e["workers"]),
        str(e.get("hosts", e["workers"])),
        spec_label(e),
        f3(e["median_epoch_seconds"]),
        f"{mib:.1f}",
        f"{statistics.fmean(link) / MIB:.1f}" if link else "-",
        f3(wait),
        "-" if hidden is None else f"{100 * hidden:.0f} %",
    ]


NETWORK_HEADER = [
    "link",
    "K",
    "hosts",
    "strategy (partition)",
    "median epoch (s)",
    "MiB sent / epoch (transport)",
    "MiB on the links / epoch",
    "largest comm wait / epoch (s)",
    "comm hidden",
]

TABLES = {
    "peers": (PEERS_HEADER, peers_row, False),
    "strategies": (STRATEGIES_HEADER, strategies_row, True),
    "minibatch": (MINIBATCH_HEADER, minibatch_row, True),
    "tp": (TP_HEADER, tp_row, True),
    "network": (NETWORK_HEADER, network_row, True),
}


def caption(bench: dict) -> str:
    """Graph, date, load and cores of one bench folder: what BENCHMARKS writes beside the figures."""
    s, la = bench["store"], bench.get("load_average") or {}
    load = (
        f"load {la['before'][0]:.2f} → {la['after'][0]:.2f}"
        if la.get("before") and la.get("after")
        else "load not recorded"
    )
    return (
        f"`{s['name']}` ({s['num_nodes']:,} nodes, {s['num_arcs']:,} arcs), {bench['options']['model']} "
        f"hidden {bench['options']['hidden']}, {bench['options']['epochs']} epochs; {bench.get('created', '?')}, "
        f"{load} on {bench.get('cpu_count', '?')} cores"
    )


def render(kind: str, folders: list[Path]) -> str:
    header, row_of, runs_only = TABLES[kind]
    lines, rows, left_out = [], [], []
    for folder in folders:
        bench = load_bench(folder)
        lines.append(f"{folder}: {caption(bench)}")
        for e in bench["entries"]:
            if e["status"] != "ok" or not e.get("median_epoch_seconds"):
                left_out.append(f"- {e['label']}: {e['status']} — {e.get('note') or 'no reason recorded'}")
                continue
            if runs_only and not e.get("run"):
                continue  # a peer or the single-process reference: no run folder to read
            row = row_of(e)
            if row is None:
                left_out.append(f"- {e['label']}: no {kind} figures in its metrics")
            else:
                rows.append(row)
    lines += ["", "| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if left_out:
        lines += ["", "Not in the table:", *left_out]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path, metavar="BENCH_DIR", help="`g3 bench -o` folders")
    ap.add_argument("--table", choices=KINDS, default="strategies", help="which table (default: strategies)")
    args = ap.parse_args(argv)
    sys.stdout.write(render(args.table, args.folders))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
