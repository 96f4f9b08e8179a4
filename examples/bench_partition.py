"""Benchmark of `g3 partition`: every method x worker count on one or more stores, as a markdown table.

Each cell is one real `g3 partition` command run under `/usr/bin/time -v` (wall time, CPU time, peak RSS);
the figures come from the partition.json it writes. Shard folders are deleted after each run (they can be
gigabytes); the partition.json files are kept under WORKDIR/json/.

    python examples/bench_partition.py --store cnr-2000=/tmp/cnr --store products=/tmp/products \\
        --workers 4 8 16 --methods random chunk metis g3

``--variant LABEL=ARGS`` adds rows for g3 run with extra options, e.g. ``--variant "g3 d4=--degree-tol 4"``.

Then it checks the goals of the G3 partitioner (docs/BENCHMARKS.md): g3's min/max remote >= 1 - gamma with a
total remote <= 1.05 x METIS's, g3's time at the largest K <= 2 x plain METIS's, peak RSS <= 12 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

GAMMA = 0.005
G3_METHOD = "g3"  # the partition method whose goals (G3 §4, Algorithm 1) this benchmark checks
RSS_LIMIT_GB = 12.0


def run_one(
    g3: str,
    store: str,
    method: str,
    k: int,
    workdir: Path,
    extra: list[str] | None = None,
    label: str | None = None,
) -> dict:
    """One `g3 partition` under /usr/bin/time -v; returns its figures, wall/CPU seconds and peak RSS."""
    tag = (label or method).replace(" ", "_").replace("=", "")
    out = workdir / f"{Path(store).name}-{tag}-{k}"
    cmd = [
        "/usr/bin/time",
        "-v",
        g3,
        "partition",
        store,
        "--workers",
        str(k),
        "--method",
        method,
        *(extra or []),
        "-o",
        str(out),
        "--force",
    ]
    env = dict(os.environ, G3_QUIET="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    summary = json.loads((out / "partition.json").read_text())
    keep = workdir / "json" / f"{out.name}.json"
    keep.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(out / "partition.json", keep)
    shutil.rmtree(out)
    return {"command": " ".join(cmd[2:]), "summary": summary, **_time_v(proc.stderr)}


def _time_v(stderr: str) -> dict:
    def field(name: str) -> str:
        m = re.search(rf"{re.escape(name)}: (.+)", stderr)
        return m.group(1).strip() if m else "0"

    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    return {"wall_s": wall, "cpu_s": cpu, "rss_gb": int(field("Maximum resident set size (kbytes)")) / 1e6}


def row(name: str, k: int, method: str, r: dict) -> str:
    s = r["summary"]
    remote = s["balance"]["remote"]
    note = f"{s['stop_reason']}, {s['swaps']} swaps" if s.get("stop_reason") else ""
    refine = s.get("refine")
    if refine:
        outcome = "converged" if refine["converged"] else "not converged"
        kept = "" if refine["kept"] == "refined" else ", not kept"
        bound = refine.get("lower_bound") or {}
        infeasible = (
            f", budget infeasible: total >= {bound['total_remote']}" if bound.get("exceeds_budget") else ""
        )
        rounds = f" in {len(refine['rounds'])} rounds" if len(refine.get("rounds", [])) > 1 else ""
        note += f"; refine {outcome} ({refine['steps'] / 1e6:.0f} M steps{rounds}{kept}{infeasible})"
    return (
        f"| {name} | {k} | {method} | {remote['max_over_mean']:.3f} | {remote['min_over_max']:.3f} | "
        f"{s['totals']['remote']:,} | {s['totals']['edge_cut']:,} | "
        f"{s['balance']['degree_sum']['max_over_mean']:.2f} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
        f"{r['rss_gb']:.2f} | {note} |"
    )


HEADER = (
    "| graph | K | method | remote max/mean | remote min/max | total remote | edge-cut | degree sum max/mean | "
    "time (s) | CPU (s) | peak RSS (GB) | Algorithm 1; refinement |\n"
    "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
)


def _infeasible(summary: dict) -> str:
    """Where g3 proved the budget infeasible under its degree limit, say so (with the certificate)."""
    bound = (summary.get("refine") or {}).get("lower_bound") or {}
    if not bound.get("exceeds_budget"):
        return ""
    return (
        f" (infeasible under this degree limit: every assignment within it has a total remote >= "
        f"{bound['total_remote']}; below --degree-tol {bound['degree_tol_needed']} none fits)"
    )


def goals(results: dict, names: list[str], workers: list[int], g3_labels: list[str]) -> list[str]:
    """One line per goal and graph: met or missed, with the figure."""
    lines = []
    for name in names:
        for label in g3_labels:
            for k in workers:
                g3, metis = results.get((name, k, label)), results.get((name, k, "metis"))
                if not g3 or not metis:
                    continue
                ratio = g3["summary"]["balance"]["remote"]["min_over_max"]
                total = g3["summary"]["totals"]["remote"] / max(1, metis["summary"]["totals"]["remote"])
                deg = g3["summary"]["balance"]["degree_sum"]["max_over_mean"]
                ok = ratio >= 1 - GAMMA and total <= 1.05
                lines.append(
                    f"- {name}, K={k}, {label}: remote min/max {ratio:.4f} (goal >= {1 - GAMMA}), total "
                    f"remote {total:.3f} x METIS (goal <= 1.05), degree sum max/mean {deg:.2f}: "
                    f"{'met' if ok else 'MISSED'}" + _infeasible(g3["summary"])
                )
        k = max(workers)
        g3, metis = results.get((name, k, "g3")), results.get((name, k, "metis"))
        if g3 and metis:
            t = g3["wall_s"] / metis["wall_s"]
            c = g3["cpu_s"] / metis["cpu_s"]
            lines.append(
                f"- {name}, K={k}: g3 time {t:.2f} x plain METIS wall, {c:.2f} x CPU (goal <= 2): "
                f"{'met' if t <= 2 else 'MISSED'}"
            )
    peak = max(r["rss_gb"] for r in results.values())
    lines.append(
        f"- peak RSS over all runs {peak:.2f} GB (goal <= {RSS_LIMIT_GB}): "
        f"{'met' if peak <= RSS_LIMIT_GB else 'MISSED'}"
    )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", action="append", required=True, help="NAME=PATH of a g3 store (repeatable)")
    ap.add_argument("--workers", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--methods", nargs="+", default=["random", "chunk", "metis", "g3"])
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=ARGS",
        help="also run g3 with extra options, e.g. 'g3 d4=--degree-tol 4' (repeatable)",
    )
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/g3-bench-partition"))
    ap.add_argument("--g3", default=str(Path(sys.executable).parent / "g3"), help="the g3 executable")
    ap.add_argument("--json", type=Path, default=None, help="also write all results to this JSON file")
    args = ap.parse_args()
    stores = [s.split("=", 1) for s in args.store]
    variants = [(label, "g3", extra.split()) for label, extra in (v.split("=", 1) for v in args.variant)]
    runs = [(m, m, []) for m in args.methods] + variants
    args.workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    lines = [HEADER]
    for name, path in stores:
        for k in args.workers:
            for label, method, extra in runs:
                r = run_one(args.g3, path, method, k, args.workdir, extra, label)
                results[(name, k, label)] = r
                lines.append(row(name, k, label, r))
                print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))
    print()
    g3_labels = [label for label, method, _ in runs if method == G3_METHOD]
    print("\n".join(goals(results, [n for n, _ in stores], args.workers, g3_labels)))
    print()
    print(
        "Each row: `/usr/bin/time -v g3 partition STORE --workers K --method METHOD [ARGS] -o OUT --force`."
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    f"{n}|{k}|{m}": {key: v for key, v in r.items() if key != "summary"}
                    | {"summary": r["summary"]}
                    for (n, k, m), r in results.items()
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
