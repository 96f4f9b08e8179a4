"""How many epochs, and how many optimizer steps, each strategy needs to reach a target: the check of
`g3 advise`'s convergence models (time to target = epochs to target × predicted epoch).

    python examples/real_graphs.py --out OUT --epochs 60 --eval-every 1      # every strategy, evaluated each epoch
    python examples/convergence.py OUT --targets 0.97,0.99,0.995

For each graph of OUT (examples/real_graphs.py's run folders ``GRAPH.run-STRATEGY``) the target is a fraction of
the exact strategy's best validation figure (g3's run: every exact strategy trains the same model). For every
run: the first epoch whose validation figure reaches the target, the optimizer steps taken by then (a
full-graph epoch is one step; a mini-batch epoch is its ``steps``), and what each convergence model predicts
from the exact run — "epochs" (the same epochs as exact training) and "steps" (the same optimizer steps) — as
the ratio predicted ÷ measured epochs (1.0 = right; > 1 the model overestimates the time).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.common.run_artifact import read_metrics  # noqa: E402

REFERENCE = "g3"  # the exact strategy whose run sets the target and the models' inputs


def curve(run: Path) -> tuple[str, list[tuple[int, float]], int]:
    """(metric key, [(epochs trained, validation figure)], optimizer steps per epoch) of a run."""
    rows = read_metrics(run)
    key = "valid_rocauc" if any(r.get("valid_rocauc") is not None for r in rows) else "valid_acc"
    points = [(int(r["epoch"]) + 1, float(r[key])) for r in rows if r.get(key) is not None]
    steps = int(rows[-1].get("steps") or 1)
    return key, points, steps


def epochs_to(points: list[tuple[int, float]], target: float) -> int | None:
    return next((e for e, v in points if v >= target), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument(
        "--targets", default="0.97,0.99,0.995", help="fractions of the exact run's best validation figure"
    )
    a = ap.parse_args()
    fractions = [float(x) for x in a.targets.split(",")]
    print(
        "| graph | target | strategy | steps / epoch | epochs to target | steps to target | "
        "'epochs' model ÷ measured | 'steps' model ÷ measured |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    graphs = sorted({p.name.split(".run-")[0] for p in a.out.glob("*.run-*")})
    for graph in graphs:
        ref = a.out / f"{graph}.run-{REFERENCE}"
        key, ref_points, _ = curve(ref)
        best = max(v for _, v in ref_points)
        for frac in fractions:
            target = frac * best
            ref_epochs = epochs_to(ref_points, target)
            for run in sorted(a.out.glob(f"{graph}.run-*")):
                strategy = run.name.split(".run-")[1]
                _, points, steps = curve(run)
                e = epochs_to(points, target)
                by_epochs = f"{ref_epochs / e:.2f}" if e else "-"
                by_steps = f"{math.ceil(ref_epochs / steps) / e:.2f}" if e else "-"
                print(
                    f"| {graph} | {frac:g} × {best:.4f} ({key}) | {strategy} | {steps} | {e if e else 'not reached'} | "
                    f"{e * steps if e else '-'} | {by_epochs} | {by_steps} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
