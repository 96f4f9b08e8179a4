"""Every strategy on the two real graphs of ../shared/data/real (Tolokers, Facebook page-page), K workers: do the
approximations (sampling, staleness, decoupling) cost accuracy on real graphs? Through the Python API.

    python examples/real_graphs.py --shared ../shared --out examples/out/real --epochs 100 --workers 2

Tolokers is binary and imbalanced (78 % of one class): it is measured by ROC-AUC (`--metric rocauc`), its
split 0 of the ten its authors publish. Facebook has four classes and no split: a seeded 80/10/10 ratio split of
its nodes (ingest's default, seed 0). Each strategy runs with its own partition method and default plan
options, the same model (SAGE, 2 layers, hidden 64), Adam, learning rate, dropout and seed; the table gives the
best validation epoch's test figure (evaluated every 5 epochs, `--eval-every`) and the last epoch's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import g3  # noqa: E402
from stages.strategies.registry import STRATEGIES  # noqa: E402

GRAPHS = {"tolokers": {"metric": "rocauc"}, "facebook": {"metric": "accuracy"}}


def ingest(shared: Path, out: Path, name: str) -> Path:
    store = out / f"{name}.g3"
    if (store / "zarr.json").is_file():
        return store
    real = shared / "data" / "real"
    if name == "tolokers":
        return _cli_ingest([str(real / "tolokers.npz"), str(store), "--split-index", "0"])
    return _cli_ingest(
        [
            str(real / "facebook_edges.csv"),
            str(store),
            "--undirected",
            "--features",
            str(real / "facebook.json"),
            "--labels",
            f"{real / 'facebook_target.csv'}:page_type",
        ]
    )


def _cli_ingest(args: list[str]) -> Path:
    """`g3 ingest` with its options for these files (CSV labels, JSON features, the split index)."""
    from click.testing import CliRunner

    from g3cli.main import cli

    r = CliRunner().invoke(cli, ["ingest", *args])
    if r.exit_code != 0:
        raise SystemExit(r.output)
    return Path(args[1])


def best_and_last(run: g3.Run, metric: str) -> tuple[float | None, float | None]:
    key = "acc" if metric == "accuracy" else "rocauc"
    evaluated = [r for r in run.metrics if r.get(f"valid_{key}") is not None]
    if not evaluated:
        return None, None
    best = max(evaluated, key=lambda r: r[f"valid_{key}"])
    return best[f"test_{key}"], evaluated[-1][f"test_{key}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", default=str(REPO.parent / "shared"))
    ap.add_argument("--out", default="examples/out/real")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--graphs", default="tolokers,facebook")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument(
        "--eval-every",
        type=int,
        default=5,
        help="epochs between evaluations (1: every epoch, for examples/convergence.py)",
    )
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.graphs.split(","):
        spec = GRAPHS[name]
        store = ingest(Path(a.shared), out, name)
        for strategy in a.strategies.split(","):
            method = STRATEGIES[strategy].methods[0]
            part = out / f"{name}.part-{method}-{a.workers}"
            if not (part / "partition.json").is_file():
                g3.partition(store, a.workers, method=method, out=part, seed=1)
            plan = g3.plan(
                part, strategy=strategy, hidden=64, out=out / f"{name}.plan-{strategy}", force=True
            )
            run = g3.train(
                plan,
                epochs=a.epochs,
                lr=0.01,
                dropout=0.3,
                seed=1,
                eval_every=a.eval_every,
                metric=spec["metric"],
                out=out / f"{name}.run-{strategy}",
                force=True,
            )
            best, last = best_and_last(run, spec["metric"])
            epoch = sorted(r["epoch_seconds"] for r in run.metrics[1:])[len(run.metrics[1:]) // 2]
            rows.append(
                {
                    "graph": name,
                    "metric": spec["metric"],
                    "strategy": strategy,
                    "method": method,
                    "test_at_best_valid": best,
                    "test_last": last,
                    "median_epoch_s": epoch,
                }
            )
            print(
                f"{name:9s} {strategy:10s} {spec['metric']:8s} test {best:.4f} (last {last:.4f}), "
                f"epoch {epoch * 1e3:.0f} ms",
                flush=True,
            )
    (out / "real_graphs.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(
        "\n| graph | metric | strategy (partition) | test at best valid | test, last epoch | median epoch |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['graph']} | {r['metric']} | {r['strategy']} ({r['method']}) | {r['test_at_best_valid']:.4f} | "
            f"{r['test_last']:.4f} | {r['median_epoch_s'] * 1e3:.0f} ms |"
        )


if __name__ == "__main__":
    main()
