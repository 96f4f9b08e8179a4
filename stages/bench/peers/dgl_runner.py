"""DGL full-graph training on the neutral graph file (a peer of `g3 bench`), run in the legacy environment that
`make peers-dgl` builds (.venv-dgl: torch 2.2.1, dgl 2.1.0). Standard DGL layers (SAGEConv mean, GraphConv
norm='both', GATConv); GCN and GAT get self-loops, as g3's and PyG's layers have. Prints one JSON line.

    .venv-dgl/bin/python stages/bench/peers/dgl_runner.py GRAPH.npz --model sage --layers 2 --hidden 16 --threads 2
"""

from __future__ import annotations

import os

os.environ.setdefault("DGLBACKEND", "pytorch")

from common import load_graph, parse_args, report, set_threads, test_accuracy, train  # noqa: E402


def build(args, in_dim: int, num_classes: int):
    import torch
    from dgl.nn import GATConv, GraphConv, SAGEConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList()
            d = in_dim
            for li in range(args.layers):
                last = li == args.layers - 1
                out = num_classes if last else args.hidden
                if args.model == "sage":
                    self.convs.append(SAGEConv(d, out, aggregator_type="mean"))
                    d = out
                elif args.model == "gcn":
                    self.convs.append(GraphConv(d, out, norm="both"))
                    d = out
                else:
                    self.convs.append(GATConv(d, out, num_heads=args.heads))
                    d = out * (1 if last else args.heads)

        def forward(self, graph, x):
            for li, conv in enumerate(self.convs):
                last = li == len(self.convs) - 1
                x = conv(graph, x)
                if args.model == "gat":
                    x = x.mean(1) if last else x.flatten(1)
                if not last:
                    x = torch.nn.functional.dropout(torch.relu(x), p=args.dropout, training=self.training)
            return x

    return Net()


def main() -> None:
    args = parse_args(__doc__)
    set_threads(args.threads)
    import dgl
    import torch

    g = load_graph(args.graph)
    n = len(g["indptr"]) - 1
    torch.manual_seed(args.seed)
    indptr = torch.from_numpy(g["indptr"]).to(torch.int64)
    indices = torch.from_numpy(g["indices"]).to(torch.int64)
    # in-edge CSR = DGL's CSC (column = destination): arcs indices[e] -> v
    graph = dgl.graph(("csc", (indptr, indices, torch.tensor([], dtype=torch.int64))), num_nodes=n)
    if args.model in ("gcn", "gat"):
        graph = dgl.add_self_loop(graph)
    graph = graph.formats(["csc", "csr", "coo"])
    graph.create_formats_()
    x = torch.from_numpy(g["features"]).float()
    y = torch.from_numpy(g["labels"]).long()
    train_idx = torch.from_numpy(g["train_idx"])
    train_idx = train_idx[y[train_idx] >= 0]
    model = build(args, x.shape[1], g["num_classes"])
    times = train(model, (graph, x), y, train_idx, args.epochs, args.lr)
    test_idx = torch.from_numpy(g["test_idx"]) if "test_idx" in g else torch.zeros(0, dtype=torch.int64)
    acc = test_accuracy(model, (graph, x), y, test_idx)
    report("DGL", dgl.__version__, args, times, {"test_acc": acc})


if __name__ == "__main__":
    main()
