"""Shared by the peer runners of `g3 bench`: read the neutral graph file, time a full-graph training loop, print
the result as one JSON line. Only numpy and torch: the runners run in other environments (PyG in g3's, DGL in
.venv-dgl) and import nothing of g3 but the standard-library-only stages.common.cost (through this checkout).

The neutral file (written by `g3 bench`, stages/bench/export.py) is an uncompressed ``.npz``:
``indptr`` int64 [N+1] and ``indices`` [E] — the in-edge CSR (the sources of the arcs into v are
``indices[indptr[v]:indptr[v+1]]``); ``features`` [N, F]; ``labels`` int32 [N] (-1: unlabelled); ``train_idx``,
``valid_idx``, ``test_idx`` int64; ``num_classes`` int64 scalar; ``meta`` a JSON string.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[3]))  # the checkout holding stages/
from stages.common.cost import process_peak_bytes  # noqa: E402


def parse_args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("graph", help="neutral graph file (.npz) written by g3 bench")
    p.add_argument("--model", choices=("sage", "gcn", "gat"), default="sage")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--fanouts",
        default=None,
        help="mini-batch mode: neighbours per hop, the TARGETS' first (g3's order), e.g. 25,10",
    )
    p.add_argument("--batch-size", type=int, default=1000, help="mini-batch mode: training nodes per batch")
    args = p.parse_args()
    args.fanout_list = [int(f) for f in args.fanouts.split(",")] if args.fanouts else None
    return args


# what loading the graph cost (seconds, the process's peak resident bytes once loaded), reported with the result
LOADED: dict = {}


def start(description: str) -> tuple[argparse.Namespace, dict]:
    """A peer's arguments and its graph's tensors, its threads set first (before torch starts its pools)."""
    args = parse_args(description)
    set_threads(args.threads)
    t0 = time.perf_counter()
    tensors = graph_tensors(load_graph(args.graph), args.seed)
    LOADED.update(load_seconds=time.perf_counter() - t0, load_peak_memory_bytes=process_peak_bytes() or None)
    return args, tensors


def set_threads(n: int) -> None:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    import torch

    torch.set_num_threads(n)


def peer_model(args, in_dim: int, num_classes: int, conv, layer):
    """A peer's model, called as ``model(graph, x)``: layers ``conv(d_in, d_out, last)`` with the widths g3's
    model has (hidden layers of ``args.hidden``, a GAT's heads concatenated; the last of ``num_classes``), each
    applied as ``layer(li, conv, graph, x)``, ReLU and dropout after every hidden one."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList()
            d = in_dim
            for li in range(args.layers):
                last = li == args.layers - 1
                out = num_classes if last else args.hidden
                self.convs.append(conv(d, out, last))
                d = out * (args.heads if args.model == "gat" and not last else 1)

        def forward(self, graph, x):
            for li, conv in enumerate(self.convs):
                x = layer(li, conv, graph, x)
                if li < len(self.convs) - 1:
                    x = torch.nn.functional.dropout(torch.relu(x), p=args.dropout, training=self.training)
            return x

    return Net()


def load_graph(path: str) -> dict:
    import numpy as np

    with np.load(path, allow_pickle=False) as z:
        g = {k: z[k] for k in z.files}
    g["num_classes"] = int(g["num_classes"])
    g["meta"] = json.loads(str(g["meta"]))
    return g


def train(model, forward, labels, train_idx, epochs: int, lr: float) -> list[float]:
    """Full-graph epochs (``forward(epoch)``: the logits of every node, then cross-entropy on the training nodes,
    backward, Adam step); seconds each. g3's single-process baseline runs the same loop."""
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    times = []
    for epoch in range(epochs):
        t0 = time.perf_counter()
        opt.zero_grad()
        out = forward(epoch)
        loss = torch.nn.functional.cross_entropy(out[train_idx], labels[train_idx])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times


def train_batches(model, batches, x, labels, epochs: int, lr: float) -> tuple[list[float], int]:
    """Mini-batch epochs: ``batches()`` yields ``(input_nodes, seeds, graph_arg)`` — the model reads
    ``x[input_nodes]`` through ``graph_arg`` and returns the seeds' logits first. One Adam step per batch;
    returns the seconds of each epoch (sampling included, as the loader does it) and the seeds per epoch."""
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    times, seeds = [], 0
    for _ in range(epochs):
        t0, seeds = time.perf_counter(), 0
        for input_nodes, out_nodes, graph_arg in batches():
            opt.zero_grad()
            out = model(graph_arg, x[input_nodes])[: len(out_nodes)]
            loss = torch.nn.functional.cross_entropy(out, labels[out_nodes])
            loss.backward()
            opt.step()
            seeds += len(out_nodes)
        times.append(time.perf_counter() - t0)
    return times, seeds


def graph_tensors(g: dict, seed: int) -> dict:
    """What every runner needs from the neutral graph as torch tensors: the node count, the in-edge CSR
    (int64), features (float32), labels, labelled training and test nodes, the class count; the torch seed set
    first."""
    import torch

    torch.manual_seed(seed)
    y = torch.from_numpy(g["labels"]).long()
    train_idx = torch.from_numpy(g["train_idx"])
    test_idx = torch.from_numpy(g["test_idx"]) if "test_idx" in g else torch.zeros(0, dtype=torch.int64)
    return {
        "n": len(g["indptr"]) - 1,
        "num_classes": int(g["num_classes"]),
        "indptr": torch.from_numpy(g["indptr"]).to(torch.int64),
        "indices": torch.from_numpy(g["indices"]).to(torch.int64),
        "x": torch.from_numpy(g["features"]).float(),
        "y": y,
        "train_idx": train_idx[y[train_idx] >= 0],
        "test_idx": test_idx,
    }


def run(
    system: str, version: str, args, model, inputs, t: dict, extra: dict | None = None, batches=None
) -> None:
    """Train (full-graph on ``inputs``, or mini-batch over ``batches()`` where given), then the full-graph test
    accuracy (exact inference, as g3 evaluates); print the JSON line."""
    if batches is None:
        times = train(model, lambda epoch: model(*inputs), t["y"], t["train_idx"], args.epochs, args.lr)
    else:
        times, seeds = train_batches(model, batches, t["x"], t["y"], args.epochs, args.lr)
        steady = times[1:] if len(times) > 1 else times
        extra = {
            **(extra or {}),
            "mode": "mini-batch",
            "fanouts": args.fanout_list,
            "batch_size": args.batch_size,
            "seeds_per_epoch": seeds,
            "seeds_per_second": seeds / statistics.median(steady),
        }
    acc = test_accuracy(model, inputs, t["y"], t["test_idx"])
    report(system, version, args, times, {**(extra or {}), "test_acc": acc})


def test_accuracy(model, inputs, labels, test_idx) -> float | None:
    """Accuracy on the labelled test nodes after training, full-graph inference without dropout."""
    import torch

    test_idx = test_idx[labels[test_idx] >= 0]
    if len(test_idx) == 0:
        return None
    model.eval()
    with torch.no_grad():
        pred = model(*inputs).argmax(1)
    return float((pred[test_idx] == labels[test_idx]).float().mean())


def report(system: str, version: str, args, times: list[float], extra: dict | None = None) -> None:
    import torch

    steady = times[1:] if len(times) > 1 else times
    print(
        json.dumps(
            {
                "system": system,
                "version": version,
                "torch": torch.__version__,
                "python": platform.python_version(),
                "model": args.model,
                "layers": args.layers,
                "hidden": args.hidden,
                "heads": args.heads,
                "threads": torch.get_num_threads(),
                "epochs": len(times),
                "epoch_seconds": times,
                "median_epoch_seconds": statistics.median(steady),
                "peak_memory_bytes": process_peak_bytes() or None,
                **LOADED,
                **(extra or {}),
            }
        )
    )
    sys.stdout.flush()
