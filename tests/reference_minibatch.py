"""An independent single-process reference for mini-batch training with neighbour sampling.

One process, the whole graph: per step, the targets' neighbours are sampled hop by hop on the store's CSR and
each layer runs over the whole graph restricted to that layer's sampled arcs (SAGE's mean divides by the
sampled count, GCN keeps the global degrees — g3's convention), the loss is the targets' summed cross-entropy
over their number, one Adam step per batch. No blocks, no partitions, no transport, no threads.

What it shares with g3 is the spec of the random choices, as :mod:`reference` shares the dropout masks: the
sampler's draw (:func:`stages.runtime.neighbor_sampler.sample_rows` with its key), the batch permutation
(:func:`stages.runtime.strategies.minibatch.shuffled`) and the dropout key of a step
(:func:`stages.runtime.strategies.minibatch.step_key`). ``tests/test_minibatch.py`` checks the sampler
itself (uniform, without replacement, independent of who asks).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from reference import RefGraph, _gcn, _num_layers, _sage

from stages.runtime.dropout import dropout_mask
from stages.runtime.neighbor_sampler import sample_key, sample_rows, sorted_rows_by_global
from stages.runtime.strategies.minibatch import shuffled, step_key


def layer_graphs(graph: RefGraph, nbrs: np.ndarray, targets: np.ndarray, fanouts: list[int], seed: int,
                 epoch: int, step: int) -> list[RefGraph]:
    """Per layer (first layer first) the whole graph with only that layer's sampled arcs."""
    indptr = graph.indptr.numpy()
    n = graph.num_nodes
    out, dst = [], np.asarray(targets, dtype=np.int64)
    for hop, f in enumerate(fanouts):
        counts, nb = sample_rows(indptr, nbrs, dst, dst, f, sample_key(seed, epoch, step, hop))
        arc_dst = np.repeat(dst, counts)
        order = np.argsort(arc_dst, kind="stable")
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(arc_dst, minlength=n), out=ptr[1:])
        out.append(RefGraph(torch.from_numpy(ptr), torch.from_numpy(nb[order]), graph.in_degree, graph.out_degree,
                            graph.x, graph.y, graph.train_mask))
        dst = np.union1d(dst, nb)
    return out[::-1]


def minibatch_train(kind: str, params_init: dict, graph: RefGraph, batches: Callable[[int], list[np.ndarray]],
                    fanouts: list[int], epochs: int, lr: float, dropout: float, seed: int) -> dict:
    """Train on ``batches(epoch)`` (the target node ids of every step); returns the final parameters."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in params_init.items()}
    opt = torch.optim.Adam(list(params.values()), lr=lr)
    nbrs = sorted_rows_by_global(graph.indptr.numpy(), graph.indices.numpy(), np.arange(graph.num_nodes))
    num_layers = _num_layers(params)
    ids = torch.arange(graph.num_nodes)
    for epoch in range(epochs):
        for step, targets in enumerate(batches(epoch)):
            opt.zero_grad()
            graphs = layer_graphs(graph, nbrs, targets, fanouts, seed, epoch, step)
            h = graph.x.to(next(iter(params.values())).dtype)
            for li, g in enumerate(graphs):
                h = (_sage if kind == "sage" else _gcn)(params, f"layers.{li}.", h, g)
                if li < num_layers - 1:
                    h = torch.relu(h)
                    if dropout > 0:
                        h = h * dropout_mask(seed, step_key(epoch, step), li, ids, h.shape[1], dropout, dtype=h.dtype)
            t = torch.from_numpy(np.asarray(targets, dtype=np.int64))
            loss = F.cross_entropy(h[t], graph.y[t], reduction="sum") / len(t)
            loss.backward()
            opt.step()
    return {k: v.detach().clone() for k, v in params.items()}


def labelled_train(graph: RefGraph) -> np.ndarray:
    return torch.nonzero(graph.train_mask & (graph.y >= 0)).reshape(-1).numpy()


def global_batches(graph: RefGraph, batch_size: int, seed: int) -> Callable[[int], list[np.ndarray]]:
    """One permutation of every training node per epoch, cut into batches."""
    train = labelled_train(graph)

    def batches(epoch: int) -> list[np.ndarray]:
        perm = shuffled(train, seed, epoch)
        return [perm[s : s + batch_size] for s in range(0, len(perm), batch_size)]
    return batches


def union_of_local_batches(graph: RefGraph, assignment: np.ndarray, k: int, batch_size: int, seed: int
                           ) -> Callable[[int], list[np.ndarray]]:
    """DistDGL's local order seen by one process: step s trains on the union of every worker's batch s."""
    train = labelled_train(graph)
    per_worker = [train[assignment[train] == w] for w in range(k)]
    steps = max(-(-len(t) // batch_size) for t in per_worker)

    def batches(epoch: int) -> list[np.ndarray]:
        perms = [shuffled(t, seed, epoch) for t in per_worker]
        return [np.concatenate([p[s * batch_size : (s + 1) * batch_size] for p in perms]) for s in range(steps)]
    return batches


def cluster_batches(assignment: np.ndarray, clusters: list[np.ndarray], per_batch: int, seed: int
                    ) -> Callable[[int], list[list[np.ndarray]]]:
    """ClusterGCN's steps seen by one process: per step, every worker's chosen nodes (global ids), from each
    worker's clusters of its own nodes (``clusters[w]`` over its nodes in ascending id)."""
    owned = [np.flatnonzero(assignment == w) for w in range(len(clusters))]
    counts = [int(c.max()) + 1 if len(c) else 0 for c in clusters]
    steps = max(-(-c // per_batch) for c in counts)

    def batches(epoch: int) -> list[list[np.ndarray]]:
        out = []
        for s in range(steps):
            step = []
            for w, c in enumerate(clusters):
                order = shuffled(np.arange(counts[w]), seed, epoch, stream=w)
                step.append(owned[w][np.isin(c, order[s * per_batch : (s + 1) * per_batch])])
            out.append(step)
        return out
    return batches


def cluster_train(kind: str, params_init: dict, graph: RefGraph, batches, epochs: int, lr: float, dropout: float,
                  seed: int) -> dict:
    """Train on the union of every worker's induced subgraph per step (arcs only among one worker's chosen
    nodes; GCN with the subgraph's degrees); returns the final parameters."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in params_init.items()}
    opt = torch.optim.Adam(list(params.values()), lr=lr)
    num_layers = _num_layers(params)
    n = graph.num_nodes
    src_all, dst_all = (t.numpy() for t in graph.arcs())
    ids = torch.arange(n)
    train = labelled_train(graph)
    for epoch in range(epochs):
        for step, chosen in enumerate(batches(epoch)):
            group = np.full(n, -1)
            for w, nodes in enumerate(chosen):
                group[nodes] = w
            keep = (group[src_all] >= 0) & (group[src_all] == group[dst_all])
            src, dst = src_all[keep], dst_all[keep]
            order = np.argsort(dst, kind="stable")
            ptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
            dtype = next(iter(params.values())).dtype
            g = RefGraph(torch.from_numpy(ptr), torch.from_numpy(src[order]),
                         torch.from_numpy(np.bincount(dst, minlength=n)).to(dtype),
                         torch.from_numpy(np.bincount(src, minlength=n)).to(dtype), graph.x, graph.y, graph.train_mask)
            targets = torch.from_numpy(train[group[train] >= 0])
            if len(targets) == 0:
                continue
            opt.zero_grad()
            h = graph.x.to(dtype)
            for li in range(num_layers):
                h = (_sage if kind == "sage" else _gcn)(params, f"layers.{li}.", h, g)
                if li < num_layers - 1:
                    h = torch.relu(h)
                    if dropout > 0:
                        h = h * dropout_mask(seed, step_key(epoch, step), li, ids, h.shape[1], dropout, dtype=h.dtype)
            loss = F.cross_entropy(h[targets], graph.y[targets], reduction="sum") / len(targets)
            loss.backward()
            opt.step()
    return {k: v.detach().clone() for k, v in params.items()}
