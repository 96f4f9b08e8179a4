"""Usage: python examples/advise_vs_measured.py ADVISE_DIR [--epochs 4] [--runs RUNS_DIR] [--strategies S,…]

`g3 advise`'s prediction against a measurement: every predicted candidate of ADVISE_DIR/advise.json (made with
``--plans``) is trained from its own plan on emulated hosts at its link rate (``g3 train PLAN --emulate-link
RATE`` with the candidate's train options: what its ``train_command`` says), and per link rate the predicted
ranking is set against the measured one: Spearman's rank correlation, whether the top pick is the measured best
or within 10 % of it, and the epoch-time error of every candidate (measured: the mean of the epochs after the
first, what the models predict). Needs root (or CAP_NET_ADMIN) for the emulated hosts. Writes Markdown to
stdout and RUNS_DIR/advise-vs-measured.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def ranks(values: list[float]) -> list[float]:
    """Average ranks (ties share their mean rank), 1 = smallest."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            out[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 2:
        return None
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else None


def measure(e: dict, epochs: int, runs: Path) -> dict:
    from stages.train import run_train
    from stages.train.config import TrainConfig

    name = f"{Path(e['plan']).name}-{e['link']}-" + "-".join(
        f"{k}-{v}" for k, v in e["train_options"].items()
    )
    out = runs / name
    if not (out / "run.json").is_file():
        cfg = TrainConfig(
            epochs=epochs,
            eval_every=0,
            checkpoint_every=0,
            live=False,
            emulate_link=e["link"],
            knobs=dict(e["train_options"]),
        )
        run_train(e["plan"], cfg, out=out, force=True)
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steady = [r["epoch_seconds"] for r in records[1:]] or [r["epoch_seconds"] for r in records]
    return {
        "run": str(out),
        "epochs": [r["epoch_seconds"] for r in records],
        "mean": sum(steady) / len(steady),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a `g3 advise --plans PLANS -o FOLDER` output folder")
    ap.add_argument("--epochs", type=int, default=4, help="epochs per measured run (the first is dropped)")
    ap.add_argument("--runs", type=Path, default=None, help="where the runs go [default: FOLDER/measured]")
    ap.add_argument("--strategies", default=None, help="only these strategies (comma-separated)")
    args = ap.parse_args(argv)
    advice = json.loads((args.folder / "advise.json").read_text())
    runs = args.runs or args.folder / "measured"
    runs.mkdir(parents=True, exist_ok=True)
    only = set(args.strategies.split(",")) if args.strategies else None
    rows = []
    for e in advice["ranking"]:
        if e["predicted_epoch_seconds"] is None or not e.get("plan") or (only and e["strategy"] not in only):
            continue
        t = time.perf_counter()
        try:
            m = measure(e, args.epochs, runs)
        except Exception as exc:  # a run that fails is reported in its row
            rows.append({**e, "measured": None, "error_text": str(exc).splitlines()[0]})
            continue
        rows.append({**e, "measured": m, "wall_seconds": round(time.perf_counter() - t, 1)})
        print(
            f"measured {e['strategy']} ({e['variant']}) K={e['workers']} {e['link']}: {m['mean']:.3f} s "
            f"(predicted {e['predicted_epoch_seconds']:.3f} s)",
            file=sys.stderr,
        )
    summary = []
    for link in advice["links"]:
        for k in advice["workers"]:
            here = [r for r in rows if r["link"] == link and r["workers"] == k and r["measured"]]
            if not here:
                continue
            pred = [r["predicted_epoch_seconds"] for r in here]
            meas = [r["measured"]["mean"] for r in here]
            top = min(here, key=lambda r: r["predicted_epoch_seconds"])
            best = min(here, key=lambda r: r["measured"]["mean"])
            summary.append(
                {
                    "link": link,
                    "workers": k,
                    "candidates": len(here),
                    "spearman": spearman(pred, meas),
                    "top_pick": f"{top['strategy']} ({top['variant']})",
                    "measured_best": f"{best['strategy']} ({best['variant']})",
                    "top_pick_over_best": top["measured"]["mean"] / best["measured"]["mean"],
                }
            )
    print(
        "| link | K | strategy (variant) | predicted epoch (s) | measured epoch (s), mean of 2..E | error |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in sorted(rows, key=lambda r: (r["link"], r["workers"], r["predicted_epoch_seconds"])):
        if not r["measured"]:
            print(
                f"| {r['link']} | {r['workers']} | {r['strategy']} ({r['variant']}) | "
                f"{r['predicted_epoch_seconds']:.3f} | failed: {r['error_text']} | - |"
            )
            continue
        m = r["measured"]["mean"]
        print(
            f"| {r['link']} | {r['workers']} | {r['strategy']} ({r['variant']}) | {r['predicted_epoch_seconds']:.3f} | "
            f"{m:.3f} | {100 * (r['predicted_epoch_seconds'] - m) / m:+.0f} % |"
        )
    print()
    print("| link | K | candidates | Spearman ρ | top pick | measured best | top pick / best (measured) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for s in summary:
        rho = "-" if s["spearman"] is None else f"{s['spearman']:.2f}"
        print(
            f"| {s['link']} | {s['workers']} | {s['candidates']} | {rho} | {s['top_pick']} | {s['measured_best']} | "
            f"{s['top_pick_over_best']:.2f} |"
        )
    (runs / "advise-vs-measured.json").write_text(
        json.dumps({"rows": rows, "summary": summary}, indent=1, default=str)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
