"""g3 from Python: a graph held in memory (PyG's Cora when torch_geometric and its data are at hand, else a
generated one) ingested, partitioned for two workers, trained with G3's strategy, and its predictions read back.

    python examples/python_api.py [--out examples/out/api] [--cora DIR]

Every step writes the artifact its `g3` command writes (docs/ARTIFACTS.md), so `g3 info`, `g3 eval` and
`g3 report` read them too.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

import g3


def generated_graph(n: int = 2000, classes: int = 4, seed: int = 0) -> dict:
    """Planted communities: most edges inside a node's class, features that hint at it."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    members = np.argsort(y, kind="stable")  # nodes grouped by class
    start = np.searchsorted(y[members], np.arange(classes))
    size = np.bincount(y, minlength=classes)
    src = rng.integers(0, n, 8 * n)
    same_class = members[start[y[src]] + (rng.random(8 * n) * size[y[src]]).astype(np.int64)]
    dst = np.where(rng.random(8 * n) < 0.85, same_class, rng.integers(0, n, 8 * n))
    x = rng.normal(size=(n, 16)) + np.eye(classes, 16)[y]
    edges = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
    return {"edge_index": edges, "x": x.astype(np.float32), "y": y}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="examples/out/api", help="folder of the artifacts")
    ap.add_argument("--cora", help="a torch_geometric Planetoid root holding Cora (nothing is downloaded)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.cora:
        from torch_geometric.datasets import Planetoid

        data, name = Planetoid(a.cora, "Cora")[0], "cora"  # a PyG Data: edge_index, x, y, the three masks
    else:
        data, name = generated_graph(), "generated"
    store = g3.ingest(data, out / f"{name}.g3", force=True)
    part = g3.partition(store, workers=2, out=out / f"{name}.part", force=True)
    plan = g3.plan(part, strategy="g3", model="sage", hidden=32, out=out / f"{name}.plan", force=True)
    run = g3.train(plan, epochs=30, lr=0.02, dropout=0.3, out=out / f"{name}.run", force=True)
    print(
        f"{name}: test accuracy {run.test_acc:.3f} after {len(run.metrics)} epochs "
        f"(median epoch {np.median([r['epoch_seconds'] for r in run.metrics[1:]]) * 1e3:.1f} ms)"
    )
    logits = g3.predict(run, split="test")  # [test nodes, classes], the split's order
    print(f"predicted {tuple(logits.shape)} test logits; first classes: {logits.argmax(1)[:10].tolist()}")
    model = g3.load_model(run)
    print(
        f"model: {type(model.gnn).__name__} with {sum(p.numel() for p in model.parameters())} parameters, "
        f"dtype {next(model.parameters()).dtype}"
    )
    torch.save(model.state_dict(), out / f"{name}.weights.pt")


if __name__ == "__main__":
    main()
