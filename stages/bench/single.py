"""Single-process g3 full-graph training: g3's own layers and kernels on one whole-graph block, no partitions,
bins, processes or messages — the runtime-free baseline `g3 bench` puts next to the K-worker runs and the peers.
Same epoch as the others: forward, cross-entropy over the labelled training nodes, backward, Adam step."""

from __future__ import annotations

import numpy as np


def train_single(
    graph: dict,
    model_kind: str,
    layers: int,
    hidden: int,
    heads: int,
    epochs: int,
    lr: float,
    dropout: float,
    threads: int,
    seed: int = 0,
) -> dict:
    """Train on ``graph`` (the neutral graph's arrays) in this process; returns the epoch times."""
    import numba
    import torch

    from stages.bench.peers.common import train
    from stages.kits.runtime.block import Block
    from stages.kits.runtime.models import build_model

    old_threads, old_numba = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(threads)
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        indptr = torch.from_numpy(np.asarray(graph["indptr"], dtype=np.int64))
        indices = torch.from_numpy(np.asarray(graph["indices"], dtype=np.int64))
        n = len(indptr) - 1
        in_deg = torch.diff(indptr).to(torch.float32)
        out_deg = torch.bincount(indices, minlength=n).to(torch.float32)
        block = Block.whole_graph(indptr, indices, out_deg, in_deg)
        x = torch.from_numpy(np.asarray(graph["features"], dtype=np.float32))
        y = torch.from_numpy(np.asarray(graph["labels"], dtype=np.int64))
        train_idx = torch.from_numpy(np.asarray(graph["train_idx"], dtype=np.int64))
        train_idx = train_idx[y[train_idx] >= 0]
        torch.manual_seed(seed)
        model = build_model(model_kind, x.shape[1], hidden, int(graph["num_classes"]), layers, heads=heads)

        def forward(epoch: int) -> torch.Tensor:
            return model(block, x, epoch=epoch, dropout=dropout, seed=seed, training=True)

        times = train(model, forward, y, train_idx, epochs, lr)
        test = torch.from_numpy(np.asarray(graph.get("test_idx", np.zeros(0)), dtype=np.int64))
        test = test[y[test] >= 0]
        model.eval()
        with torch.no_grad():
            pred = model(block, x).argmax(1)
        acc = float((pred[test] == y[test]).float().mean()) if len(test) else None
        return {"epoch_seconds": times, "threads": threads, "torch": torch.__version__, "test_acc": acc}
    finally:
        torch.set_num_threads(old_threads)
        numba.set_num_threads(old_numba)
