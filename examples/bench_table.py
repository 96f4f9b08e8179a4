"""Usage: python examples/bench_table.py BENCH_FOLDER (the -o of `g3 bench`).

Markdown rows from a g3 bench folder: per strategy entry the median epoch, bytes of a training epoch
(epochs 1..n-2: no warm-up, no final evaluation), the plan's formula for neutrontp, compute CPU max/mean,
peak RSS of the largest worker, test accuracy."""
import json, statistics, sys
from pathlib import Path
root = Path(sys.argv[1])
b = json.loads((root / "bench.json").read_text())
print("| system | K | median epoch | MiB sent / training epoch | plan formula (MiB) | compute max/mean (CPU s) | peak RSS / worker | test acc |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for e in b["entries"]:
    if e["status"] != "ok" or not e.get("run"):
        continue
    run = Path(e["run"])
    recs = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    mid = recs[1:-1] or recs[1:]
    sent = statistics.fmean(sum(w["bytes_sent"] for w in r["workers"]) for r in mid) / 2**20
    bal = statistics.median(max(c) / statistics.fmean(c) for c in ([w["compute_cpu_seconds"] for w in r["workers"]] for r in mid))
    formula = "-"
    plan = Path(json.loads((run / "run.json").read_text())["plan"]["path"])
    if e["system"] == "neutrontp":
        p = json.loads((plan / "plan.json").read_text())
        formula = f"{4 * sum(sum(c['elements_sent']) for c in p['collectives'] if not c['once']) / 2**20:.1f}"
    peak = max(e["peak_memory_bytes"]) / 2**20
    print(f"| {e['label']} | {e['workers']} | {e['median_epoch_seconds']:.3f} s | {sent:.1f} | {formula} | {bal:.3f} | {peak:.0f} MiB | {100*e['test_acc']:.2f} % |")
