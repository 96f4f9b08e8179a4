"""Single-process g3 full-graph training: g3's own layers and kernels on one whole-graph block, no partitions,
bins, processes or messages — the runtime-free baseline `g3 bench` puts next to the K-worker runs and the peers.
Same epoch as the others: forward, cross-entropy over the labelled training nodes, backward, Adam step."""

from __future__ import annotations


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

    from stages.bench.peers.common import graph_tensors, test_accuracy, train
    from stages.kits.runtime.block import Block
    from stages.kits.runtime.models import build_model

    old_threads, old_numba = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(threads)
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        t = graph_tensors(graph, seed)
        in_deg = torch.diff(t["indptr"]).to(torch.float32)
        out_deg = torch.bincount(t["indices"], minlength=t["n"]).to(torch.float32)
        block = Block.whole_graph(t["indptr"], t["indices"], out_deg, in_deg)
        model = build_model(model_kind, t["x"].shape[1], hidden, t["num_classes"], layers, heads=heads)

        def forward(epoch: int) -> torch.Tensor:
            return model(block, t["x"], epoch=epoch, dropout=dropout, seed=seed, training=True)

        times = train(model, forward, t["y"], t["train_idx"], epochs, lr)
        acc = test_accuracy(model, (block, t["x"]), t["y"], t["test_idx"])
        return {"epoch_seconds": times, "threads": threads, "torch": torch.__version__, "test_acc": acc}
    finally:
        torch.set_num_threads(old_threads)
        numba.set_num_threads(old_numba)
