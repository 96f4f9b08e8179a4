"""One worker, 2-layer GraphSAGE (mean), full graph: g3 against PyG on the same store, as a markdown table.

Issue 5 §3's benchmark. Every variant trains the same model (SAGE 100 → 16 → 47 by default: hidden 16, ReLU,
dropout, Adam, cross-entropy over the training nodes) on the whole graph with the same thread count and
reports the median epoch time of epochs 2..N (the first epoch compiles, caches and warms up):

* ``pyg``        — PyG's ``SAGEConv`` (aggr mean) with a ``torch.sparse_csr_tensor`` ``adj_t`` (no torch_sparse),
  nodes in the store's order; skipped with a note when torch_geometric does not import.
* ``g3-layers``  — g3's own layers (``stages.kits.runtime.models``) on one whole-graph block in this process, without
  the runtime: what the kernels and layers cost (``--backends`` picks the aggregation backends, default
  ``numba`` and ``sparse``), with the nodes in the store's order and, given ``--plan``, in the plan's priority
  (BFS) order, which is the order ``g3 train`` computes in.
* ``g3 train``   — the real thing through the CLI, one row per ``--backward`` × ``--pipeline``: ``g3 train PLAN
  --epochs N --threads T --eval-every 0 --backward B [--pipeline P]``, read from RUN/metrics.jsonl.

    python examples/bench_single_worker.py --store /tmp/medium --plan /tmp/medium.plan --threads 2

The reference figure of the issue is DGL 2.1's full-graph epoch on a 2-core machine (0.96 s, ``--dgl``).

``--micro`` instead times the aggregation alone (docs/DESIGN.md, "CPU aggregation kernels"): sum, fused mean,
the mean's transposed backward, weighted and per-head weighted sums and their backward, for each backend
(``--backends``, e.g. ``numba sparse index``) and width (``--widths 16 47``), on the store's graph with the
nodes in the plan's order when ``--plan`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.common.store import GraphStore  # noqa: E402


def load_store(path: str):
    """In-edge CSR (int64), features, labels and training nodes of a g3 store."""
    store = GraphStore.open(path)
    indptr, indices = store.load_csr()
    x = torch.from_numpy(np.asarray(store.features[:], dtype=np.float32))
    y = torch.from_numpy(store.load_labels().astype(np.int64))
    train = torch.from_numpy(store.split_index("train"))
    train = train[y[train] >= 0]
    return (
        torch.from_numpy(indptr.astype(np.int64)),
        torch.from_numpy(indices.astype(np.int64)),
        x,
        y,
        train,
        store.num_classes,
    )


def median_epoch(times: list[float]) -> tuple[float, float]:
    rest = times[1:] if len(times) > 1 else times
    return statistics.median(rest), min(rest)


def bench_pyg(data, hidden: int, epochs: int, lr: float, dropout: float) -> dict:
    try:
        from torch_geometric.nn import SAGEConv
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, not raised
        return {"error": f"torch_geometric does not import: {type(exc).__name__}: {exc}"}
    import torch_geometric

    indptr, indices, x, y, train, classes = data
    n = x.shape[0]
    # adj_t[v, u] = 1 for every arc u -> v: the store's in-edge CSR is exactly PyG's adj_t
    adj_t = torch.sparse_csr_tensor(
        indptr, indices, torch.ones(indices.numel()), (n, n), check_invariants=False
    )

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = SAGEConv(x.shape[1], hidden, aggr="mean")
            self.c2 = SAGEConv(hidden, classes, aggr="mean")

        def forward(self, x, adj_t):
            h = F.dropout(F.relu(self.c1(x, adj_t)), p=dropout, training=self.training)
            return self.c2(h, adj_t)

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    times, losses = [], []
    for _ in range(epochs):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x, adj_t)[train], y[train])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    med, best = median_epoch(times)
    return {"median": med, "min": best, "loss": losses[-1], "version": torch_geometric.__version__}


def reorder(data, perm: torch.Tensor):
    """The graph with node ``perm[i]`` renumbered ``i`` (rows, sources, features, labels, training nodes)."""
    from stages.kits.runtime.block import gather_rows

    indptr, indices, x, y, train, classes = data
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    pos, new_indptr = gather_rows(indptr, perm)
    return new_indptr, inv[indices[pos]], x[perm], y[perm], torch.sort(inv[train]).values, classes


def plan_order(plan: str) -> torch.Tensor:
    """Worker 0's priority list of a 1-worker plan: global node ids in the order g3 train computes them."""
    from stages.common.plan_artifact import WorkerPlan

    return torch.from_numpy(np.asarray(WorkerPlan(plan, 0).priority, dtype=np.int64))


def bench_g3_layers(data, hidden: int, epochs: int, lr: float, dropout: float, backend: str) -> dict:
    from stages.kits.runtime.block import Block
    from stages.kits.runtime.kernels import use_backend
    from stages.kits.runtime.models import build_model

    indptr, indices, x, y, train, classes = data
    deg = (indptr[1:] - indptr[:-1]).float()
    block = Block.whole_graph(indptr, indices, deg, deg)
    torch.manual_seed(0)
    model = build_model("sage", x.shape[1], hidden, classes, 2)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    times, losses = [], []
    with use_backend(backend):
        for epoch in range(epochs):
            t0 = time.perf_counter()
            opt.zero_grad()
            logits = model(block, x, epoch=epoch, dropout=dropout, seed=0, training=True)
            loss = F.cross_entropy(logits[train], y[train])
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            losses.append(float(loss))
    med, best = median_epoch(times)
    return {"median": med, "min": best, "loss": losses[-1]}


def bench_g3_cli(
    g3: str,
    plan: str,
    epochs: int,
    threads: int,
    lr: float,
    dropout: float,
    backward: str,
    pipeline: str | None,
    workdir: Path,
) -> dict:
    run = workdir / f"run-{backward}-{pipeline or 'default'}"
    cmd = [
        g3,
        "train",
        plan,
        "--epochs",
        str(epochs),
        "--threads",
        str(threads),
        "--eval-every",
        "0",
        "--lr",
        str(lr),
        "--dropout",
        str(dropout),
        "--backward",
        backward,
        "-o",
        str(run),
        "--force",
    ]
    if pipeline:
        cmd += ["--pipeline", pipeline]
    env = dict(os.environ, G3_QUIET="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout)[-800:]}"}
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    times = [r["epoch_seconds"] for r in records if "epoch_seconds" in r]
    med, best = median_epoch(times)
    shutil.rmtree(run, ignore_errors=True)
    return {"median": med, "min": best, "loss": records[-1].get("loss"), "command": " ".join(cmd[1:])}


def _micro_ops(indptr, indices, x, gy, w, t, heads, g):
    """(name, callable) of every timed operation on one width and backend (forward graphs built once here)."""
    from stages.kits.runtime.kernels import csr_mean, csr_sum

    n, nnz = x.shape[0], indices.numel()
    xg, wg = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    mean = csr_mean(indptr, indices, xg, n, t)
    wsum = csr_sum(indptr, indices, xg, n, wg, t)
    ops = [
        ("sum A x", lambda: csr_sum(indptr, indices, x, n)),
        ("mean (fused on numba)", lambda: csr_mean(indptr, indices, x, n)),
        ("mean backward", lambda: torch.autograd.grad(mean, xg, gy, retain_graph=True)),
        ("weighted sum", lambda: csr_sum(indptr, indices, x, n, w)),
        (
            "weighted sum backward (x and w)",
            lambda: torch.autograd.grad(wsum, (xg, wg), gy, retain_graph=True),
        ),
    ]
    if heads > 1:
        x3, w3 = x.view(n, heads, -1), torch.rand(nnz, heads, generator=g)
        ops.append((f"per-head weighted sum ({heads} heads)", lambda: csr_sum(indptr, indices, x3, n, w3)))
    return ops


def micro(data, backends: list[str], widths: list[int], reps: int) -> list[tuple[str, int, str, float]]:
    """(operation, width, backend, median seconds) of the aggregation kernels on the whole graph."""
    from stages.kits.runtime.kernels import _nb_transpose_of, csr_transpose, use_backend

    indptr, indices = data[0], data[1]
    n, nnz = indptr.numel() - 1, indices.numel()
    transposes = {"numba": _nb_transpose_of(indptr, indices, n), "sparse": csr_transpose(indptr, indices, n)}
    g = torch.Generator().manual_seed(0)
    out = []

    def timed(fn) -> float:
        fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    for width in widths:
        x, gy = torch.randn(n, width, generator=g), torch.randn(n, width, generator=g)
        w = torch.rand(nnz, generator=g)
        heads = 4 if width % 4 == 0 else 1
        for be in backends:
            if be == "index" and width > 16:  # [nnz, width] temporaries: gigabytes, minutes
                continue
            with use_backend(be):
                ops = _micro_ops(
                    indptr, indices, x, gy, w, transposes.get(be), heads if be != "index" else 1, g
                )
                for name, fn in ops:
                    out.append((name, width, be, timed(fn)))
                    print(f"{name:34s} F={width:3d} {be:7s} {out[-1][3]:.3f} s", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="g3 store (e.g. from `g3 ingest synthetic:medium`)")
    ap.add_argument("--plan", help="g3 plan of that store for 1 worker, SAGE, 2 layers (omit: no CLI runs)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--backwards", nargs="+", default=["recompute", "keep"], choices=["recompute", "keep"])
    ap.add_argument("--pipelines", nargs="+", default=[""], help="g3 train --pipeline values ('' = default)")
    ap.add_argument(
        "--backends", nargs="+", default=["numba", "sparse"], help="aggregation backends of g3-layers"
    )
    ap.add_argument(
        "--skip", nargs="*", default=[], choices=["pyg", "g3-layers", "g3"], help="variants to skip"
    )
    ap.add_argument("--g3", default=shutil.which("g3") or str(Path(sys.executable).with_name("g3")))
    ap.add_argument("--workdir", default="/tmp/g3-bench-single-worker")
    ap.add_argument("--dgl", type=float, default=0.96, help="DGL 2.1's epoch on the reference machine (s)")
    ap.add_argument(
        "--pyg-quiet", type=float, default=5.0, help="PyG 2.8's epoch on the same quiet machine (s)"
    )
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--micro", action="store_true", help="time the aggregation kernels alone instead")
    ap.add_argument("--widths", nargs="+", type=int, default=[16, 47], help="--micro: feature widths")
    ap.add_argument("--reps", type=int, default=5, help="--micro: timed repetitions (median)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data = load_store(args.store)
    n, nnz = data[2].shape[0], data[1].numel()
    if args.micro:
        graph = reorder(data, plan_order(args.plan)) if args.plan else data
        res = micro(graph, args.backends, args.widths, args.reps)
        order = "the plan's BFS order" if args.plan else "store order"
        print(
            f"\n{n:,} rows, {nnz:,} arcs ({order}), {args.threads} threads, float32, median of {args.reps} "
            f"(seconds); load average {os.getloadavg()[0]:.2f}\n"
        )
        print("| operation | F | " + " | ".join(args.backends) + " |")
        print("| --- | --- | " + " | ".join("---" for _ in args.backends) + " |")
        table = {(op, w, be): t for op, w, be, t in res}
        for op, w in dict.fromkeys((op, w) for op, w, _, _ in res):
            cells = [f"{table[op, w, be]:.3f}" if (op, w, be) in table else "–" for be in args.backends]
            print(f"| {op} | {w} | " + " | ".join(cells) + " |")
        return
    rows: list[tuple[str, str, dict]] = []
    if "pyg" not in args.skip:
        r = bench_pyg(data, args.hidden, args.epochs, args.lr, args.dropout)
        rows.append(("PyG " + r.get("version", ""), "SAGEConv, torch.sparse CSR adj_t, store order", r))
    if "g3-layers" not in args.skip:
        orders = [("store order", data)]
        if args.plan:
            orders.append(("plan (BFS) order", reorder(data, plan_order(args.plan))))
        for order, graph in orders:
            for be in args.backends:
                r = bench_g3_layers(graph, args.hidden, args.epochs, args.lr, args.dropout, be)
                rows.append(("g3 layers", f"whole-graph block, {be} kernels, {order}, no runtime", r))
    if args.plan and "g3" not in args.skip:
        for bw in args.backwards:
            for pl in args.pipelines:
                r = bench_g3_cli(
                    args.g3,
                    args.plan,
                    args.epochs,
                    args.threads,
                    args.lr,
                    args.dropout,
                    bw,
                    pl or None,
                    workdir,
                )
                rows.append(("g3 train", f"--backward {bw}" + (f" --pipeline {pl}" if pl else ""), r))

    print(
        f"\n{n:,} nodes, {nnz:,} arcs, SAGE {data[2].shape[1]} → {args.hidden} → {data[5]}, {args.threads} threads, "
        f"{args.epochs} epochs (median of epochs 2..{args.epochs}); load average {os.getloadavg()[0]:.2f}\n"
    )
    pyg = next((r["median"] for name, _, r in rows if name.startswith("PyG") and "error" not in r), None)
    print(
        f"| system | variant | epoch (median) | epoch (min) | ÷ DGL 2.1 ({args.dgl:.2f} s) | ÷ PyG, same run | final loss |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, variant, r in rows:
        if "error" in r:
            print(f"| {name} | {variant} | – | – | – | – | {r['error'][:120]} |")
            continue
        loss = f"{r['loss']:.4f}" if r.get("loss") is not None else "–"
        rel = f"{r['median'] / pyg:.2f}" if pyg else "–"
        print(
            f"| {name} | {variant} | {r['median']:.3f} s | {r['min']:.3f} s | {r['median'] / args.dgl:.2f} | {rel} | {loss} |"
        )
    if pyg:
        print(
            f"\nOn a quiet machine of this kind DGL 2.1 took {args.dgl:.2f} s and PyG 2.8 {args.pyg_quiet:.1f} s "
            f"(DGL ÷ PyG = {args.dgl / args.pyg_quiet:.2f}); the ÷ PyG column compares under this run's load."
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps([{"system": a, "variant": b, **r} for a, b, r in rows], indent=1)
        )


if __name__ == "__main__":
    main()
