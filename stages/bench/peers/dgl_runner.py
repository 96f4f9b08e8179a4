"""DGL full-graph (or, with --fanouts, mini-batch: NeighborSampler + DataLoader) training on the neutral graph file (a peer of `g3 bench`), run in the legacy environment that
`make peers-dgl` builds (.venv-dgl: torch 2.2.1, dgl 2.1.0). Standard DGL layers (SAGEConv mean, GraphConv
norm='both', GATConv); GCN and GAT get self-loops, as g3's and PyG's layers have. Prints one JSON line.

    .venv-dgl/bin/python stages/bench/peers/dgl_runner.py GRAPH.npz --model sage --layers 2 --hidden 16 --threads 2
"""

from __future__ import annotations

import os

os.environ.setdefault("DGLBACKEND", "pytorch")

from common import peer_model, run, start  # noqa: E402


def build(args, in_dim: int, num_classes: int):
    from dgl.nn import GATConv, GraphConv, SAGEConv

    def conv(d: int, out: int, last: bool):
        if args.model == "sage":
            return SAGEConv(d, out, aggregator_type="mean")
        if args.model == "gcn":
            return GraphConv(d, out, norm="both")
        return GATConv(d, out, num_heads=args.heads)

    def layer(li: int, conv, graph, x):
        x = conv(graph[li] if isinstance(graph, list) else graph, x)  # blocks in mini-batch mode
        if args.model == "gat":
            x = x.mean(1) if li == args.layers - 1 else x.flatten(1)
        return x

    return peer_model(args, in_dim, num_classes, conv, layer)


def main() -> None:
    args, t = start(__doc__)
    import dgl
    import torch

    # in-edge CSR = DGL's CSC (column = destination): arcs indices[e] -> v
    graph = dgl.graph(
        ("csc", (t["indptr"], t["indices"], torch.tensor([], dtype=torch.int64))), num_nodes=t["n"]
    )
    if args.model in ("gcn", "gat"):
        graph = dgl.add_self_loop(graph)
    graph = graph.formats(["csc", "csr", "coo"])
    graph.create_formats_()
    model = build(args, t["x"].shape[1], t["num_classes"])
    batches, extra = None, None
    if args.fanout_list:
        # DGL's fanouts run from the input layer to the output one: g3's (targets first) reversed
        sampler = dgl.dataloading.NeighborSampler(list(reversed(args.fanout_list)))
        loader = dgl.dataloading.DataLoader(
            graph,
            t["train_idx"],
            sampler,
            batch_size=args.batch_size,
            shuffle=True,
            drop_last=False,
            num_workers=0,
        )

        def batches():
            return iter(loader)  # (input_nodes, seeds, blocks) per batch

        extra = {"sampler": "dgl.dataloading.NeighborSampler + DataLoader"}
    run("DGL", dgl.__version__, args, model, (graph, t["x"]), t, extra, batches)


if __name__ == "__main__":
    main()
