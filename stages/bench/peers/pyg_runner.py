"""PyG full-graph training on the neutral graph file (a peer of `g3 bench`): standard PyG layers on a
``torch.sparse`` CSR adjacency. Prints one JSON line with the epoch times.

    python stages/bench/peers/pyg_runner.py GRAPH.npz --model sage --layers 2 --hidden 16 --epochs 5 --threads 2
"""

from __future__ import annotations

import warnings

from common import load_graph, parse_args, report, set_threads, test_accuracy, train

warnings.filterwarnings("ignore", message="Sparse")


def build(args, in_dim: int, num_classes: int):
    import torch
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList()
            d = in_dim
            for li in range(args.layers):
                last = li == args.layers - 1
                out = num_classes if last else args.hidden
                if args.model == "sage":
                    self.convs.append(SAGEConv(d, out, aggr="mean"))
                    d = out
                elif args.model == "gcn":
                    self.convs.append(GCNConv(d, out, add_self_loops=True, normalize=True))
                    d = out
                else:
                    self.convs.append(GATConv(d, out, heads=args.heads, concat=not last, add_self_loops=True))
                    d = out * (1 if last else args.heads)

        def forward(self, x, adj_t):
            for li, conv in enumerate(self.convs):
                x = conv(x, adj_t)
                if li < len(self.convs) - 1:
                    x = torch.nn.functional.dropout(torch.relu(x), p=args.dropout, training=self.training)
            return x

    return Net()


def main() -> None:
    args = parse_args(__doc__)
    set_threads(args.threads)
    import torch
    import torch_geometric

    g = load_graph(args.graph)
    n = len(g["indptr"]) - 1
    torch.manual_seed(args.seed)
    indptr = torch.from_numpy(g["indptr"]).to(torch.int64)
    indices = torch.from_numpy(g["indices"]).to(torch.int64)
    # rows = destinations, columns = sources: PyG's transposed adjacency adj_t, as a torch.sparse CSR tensor
    adj_t = torch.sparse_csr_tensor(indptr, indices, torch.ones(len(indices)), (n, n))
    x = torch.from_numpy(g["features"]).float()
    y = torch.from_numpy(g["labels"]).long()
    train_idx = torch.from_numpy(g["train_idx"])
    train_idx = train_idx[y[train_idx] >= 0]
    model = build(args, x.shape[1], g["num_classes"])
    times = train(model, (x, adj_t), y, train_idx, args.epochs, args.lr)
    test_idx = torch.from_numpy(g["test_idx"]) if "test_idx" in g else torch.zeros(0, dtype=torch.int64)
    acc = test_accuracy(model, (x, adj_t), y, test_idx)
    report("PyG", torch_geometric.__version__, args, times, {"adjacency": "torch.sparse_csr", "test_acc": acc})


if __name__ == "__main__":
    main()
