"""PyG full-graph training on the neutral graph file (a peer of `g3 bench`): standard PyG layers on a
``torch.sparse`` CSR adjacency; with --fanouts, mini-batch training with ``NeighborLoader``, which samples with
pyg-lib or torch-sparse (neither has a wheel for g3's torch: `make peers-minibatch` builds torch-sparse from source).
Prints one JSON line with the epoch times.

    python stages/bench/peers/pyg_runner.py GRAPH.npz --model sage --layers 2 --hidden 16 --epochs 5 --threads 2
"""

from __future__ import annotations

import warnings

from common import peer_model, run, start

warnings.filterwarnings("ignore", message="Sparse")


def build(args, in_dim: int, num_classes: int):
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    def conv(d: int, out: int, last: bool):
        if args.model == "sage":
            return SAGEConv(d, out, aggr="mean")
        if args.model == "gcn":
            return GCNConv(d, out, add_self_loops=True, normalize=True)
        return GATConv(d, out, heads=args.heads, concat=not last, add_self_loops=True)

    return peer_model(args, in_dim, num_classes, conv, lambda li, conv, adj_t, x: conv(x, adj_t))


def sampler_backend() -> str:
    """The library ``NeighborLoader`` samples with (PyG prefers pyg-lib), with its version; ImportError, before
    any training, where neither is installed."""
    from importlib.metadata import version

    import torch_geometric.typing as pyg

    for name, present in (("pyg-lib", pyg.WITH_PYG_LIB), ("torch-sparse", pyg.WITH_TORCH_SPARSE)):
        if present:
            return f"{name} {version(name)}"
    raise ImportError("PyG's NeighborLoader needs pyg-lib or torch-sparse; neither is installed")


def main() -> None:
    args, t = start(__doc__)
    import torch
    import torch_geometric

    n = t["n"]
    # rows = destinations, columns = sources: PyG's transposed adjacency adj_t, as a torch.sparse CSR tensor
    adj_t = torch.sparse_csr_tensor(t["indptr"], t["indices"], torch.ones(len(t["indices"])), (n, n))
    model = build(args, t["x"].shape[1], t["num_classes"])
    batches, extra = None, {"adjacency": "torch.sparse_csr"}
    if args.fanout_list:
        backend = sampler_backend()
        from torch_geometric.data import Data
        from torch_geometric.loader import NeighborLoader

        # PyG's num_neighbors start at the seeds: g3's order; edge_index = (source, destination)
        dst = torch.repeat_interleave(torch.arange(n), t["indptr"][1:] - t["indptr"][:-1])
        data = Data(num_nodes=n, edge_index=torch.stack([t["indices"], dst]), n_id=torch.arange(n))
        loader = NeighborLoader(
            data,
            num_neighbors=args.fanout_list,
            batch_size=args.batch_size,
            input_nodes=t["train_idx"],
            shuffle=True,
        )

        def batches():
            for b in loader:  # the seeds are the first batch_size nodes of b.n_id
                yield b.n_id, b.n_id[: b.batch_size], b.edge_index

        extra = {"sampler": f"torch_geometric.loader.NeighborLoader ({backend})"}
    run("PyG", torch_geometric.__version__, args, model, (adj_t, t["x"]), t, extra, batches)


if __name__ == "__main__":
    main()
