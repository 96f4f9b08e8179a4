"""An independent single-process reference for mini-batch training with neighbour sampling.

One process, the whole graph: per step, the targets' neighbours are sampled hop by hop on the store's CSR and
each layer runs over the whole graph restricted to that layer's sampled arcs (SAGE's mean divides by the
sampled count, GCN keeps the global degrees — g3's convention), the loss is the targets' summed cross-entropy
over their number, one Adam step per batch. No blocks, no partitions, no transport, no threads, and nothing
imported from ``stages.kits.runtime`` but :func:`stages.kits.runtime.dropout.dropout_mask` (shared with
:mod:`reference`): the random choices are re-implemented here in plain numpy from the specification below,
and ``tests/test_sampler_spec.py`` checks the runtime against them draw by draw.

Sampling specification (what g3's mini-batch strategies promise, whatever K, threads or prefetch):

* ``mix(z)`` is splitmix64's output function on 64-bit words (all arithmetic mod 2^64)::

      z += 0x9E3779B97F4A7C15
      z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9
      z = (z ^ z >> 27) * 0x94D049BB133111EB
      return z ^ z >> 31

* The key of hop ``h`` of step ``s`` of epoch ``e``: ``k = mix(seed)``, then ``k = mix(k ^ p)`` for ``p`` in
  ``(e, s, h)`` in that order (integers taken mod 2^64). Hop 0 samples the step's targets (the last layer).
* Node ``v``'s draw with fanout ``f`` under key ``k``: its in-neighbours sorted by ascending global id,
  ``n[0..d)``. If ``f = -1`` or ``d <= f``: all ``d`` of them. Otherwise Floyd's algorithm with
  ``node_key = mix(k ^ mix(v))``: for ``j = d-f .. d-1``, ``t = mix(node_key ^ j) mod (j + 1)``; take ``t``
  unless already taken, else ``j``. The picks are the ``n[t]`` of the taken positions in ascending position
  (= ascending global id): ``min(f, d)`` distinct neighbours, uniform over the ``f``-subsets.
* The next hop samples every node of this hop's destinations and picks (their union; the order the runtime
  builds blocks in does not change any node's draw).
* A batch permutation of ids under (seed, epoch, stream): key ``q`` = the key of (seed, epoch, stream,
  0x0BA7C4); the ids sorted by ``(mix(q ^ id), id)``. DistDGL's global order cuts the permutation of every
  training node (stream 0) into batches; its local order does so per worker on the worker's own training
  nodes (stream 0); ClusterGCN permutes each worker's cluster ids with stream = the worker's rank.
* The dropout key of step ``s`` of epoch ``e`` (the masks' "epoch"): ``(e ^ (s * 0x9E3779B1)) mod 2^32``, so
  step 0 uses the epoch itself.

ClusterGCN's clusters are made here too (:func:`worker_clusters`): METIS (pymetis) on each worker's own nodes,
the arcs among them symmetrised, no self-loops, with the planner's count and seed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from reference import RefGraph, _gcn, _num_layers, _sage

from stages.kits.runtime.dropout import dropout_mask

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_M64 = (1 << 64) - 1
BATCH_HOP = 0x0BA7C4  # the "hop" of a batch permutation's key


# --- the specification's random choices ---------------------------------------------------------------------
def mix(z) -> np.ndarray:
    """splitmix64's output function, elementwise on uint64 (wrapping)."""
    z = np.asarray(z, dtype=np.uint64).reshape(-1)
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _C1
        z = (z ^ (z >> np.uint64(27))) * _C2
    return z ^ (z >> np.uint64(31))


def key_of(seed: int, epoch: int, step: int, hop: int) -> int:
    """The 64-bit key of (seed, epoch, step, hop): mix(seed), then chained with each of epoch, step, hop."""
    k = mix(seed & _M64)
    for part in (epoch, step, hop):
        k = mix(k ^ np.uint64(part & _M64))
    return int(k[0])


def ascending_rows(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Every row's neighbours sorted by global id (the order draw positions refer to)."""
    row = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    return np.asarray(indices, dtype=np.int64)[np.lexsort((indices, row))]


def floyd_positions(node_key: np.ndarray, degree: np.ndarray, fanout: int) -> np.ndarray:
    """Floyd's draw of ``fanout`` of ``degree`` positions per row (every degree > fanout), ascending:
    ``[rows, fanout]``. A loop over the fanout, vectorised over rows."""
    d = degree.astype(np.uint64)
    chosen = np.empty((len(d), fanout), dtype=np.uint64)
    for i in range(fanout):
        j = d - np.uint64(fanout - i)
        t = mix(node_key ^ j) % (j + np.uint64(1))
        taken = (chosen[:, :i] == t[:, None]).any(axis=1)
        chosen[:, i] = np.where(taken, j, t)
    return np.sort(chosen, axis=1).astype(np.int64)


def draw(
    indptr: np.ndarray, nbrs: np.ndarray, nodes: np.ndarray, fanout: int, key: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, picks)``: the neighbours of every node of ``nodes`` (rows of the whole graph's CSR
    ``indptr``/``nbrs``, neighbours ascending in each row) under ``key``, in ``nodes``' order."""
    nodes = np.asarray(nodes, dtype=np.int64)
    start, degree = indptr[nodes], indptr[nodes + 1] - indptr[nodes]
    everyone = (degree <= fanout) | (fanout < 0)
    counts = np.where(everyone, degree, fanout)
    first = np.cumsum(counts) - counts
    position = np.arange(int(counts.sum())) - np.repeat(first, counts)  # 0, 1, ... within each node
    if not everyone.all():
        sampled = ~everyone
        node_key = mix(np.uint64(key) ^ mix(nodes[sampled].astype(np.uint64)))
        position[np.repeat(sampled, counts)] = floyd_positions(node_key, degree[sampled], fanout).reshape(-1)
    return counts, nbrs[np.repeat(start, counts) + position]


def permutation(ids: np.ndarray, seed: int, epoch: int, stream: int = 0) -> np.ndarray:
    """``ids`` sorted by (mix(key ^ id), id), the key that of (seed, epoch, stream, BATCH_HOP)."""
    ids = np.asarray(ids, dtype=np.int64)
    h = mix(np.uint64(key_of(seed, epoch, stream, BATCH_HOP)) ^ ids.astype(np.uint64))
    return ids[np.lexsort((ids, h))]


def dropout_epoch(epoch: int, step: int) -> int:
    """The dropout masks' "epoch" of a step."""
    return (epoch ^ (step * 0x9E3779B1)) & 0xFFFFFFFF


# --- ClusterGCN's clusters -----------------------------------------------------------------------------------
def worker_clusters(graph: RefGraph, owned: np.ndarray, clusters: int, seed: int) -> np.ndarray:
    """METIS clusters of the nodes ``owned`` (ascending global ids) on the arcs among them, symmetrised,
    self-loops dropped: ``min(clusters, len(owned))`` parts (all in cluster 0 when that is 1)."""
    import pymetis

    n = len(owned)
    count = min(clusters, n)
    if count <= 1:
        return np.zeros(n, dtype=np.int64)
    local = np.full(graph.num_nodes, -1, dtype=np.int64)
    local[owned] = np.arange(n)
    src, dst = (local[t.numpy()] for t in graph.arcs())
    keep = (src >= 0) & (dst >= 0) & (src != dst)
    pairs = np.unique(
        np.concatenate([np.stack([dst[keep], src[keep]], 1), np.stack([src[keep], dst[keep]], 1)]), axis=0
    )  # sorted by (row, column): a CSR with ascending columns
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=n), out=xadj[1:])
    part = pymetis.part_graph(
        count, pymetis.CSRAdjacency(xadj, pairs[:, 1].copy()), options=pymetis.Options(seed=seed)
    ).vertex_part
    return np.asarray(part, dtype=np.int64)


def every_worker_clusters(
    graph: RefGraph, assignment: np.ndarray, clusters: int, seed: int
) -> list[np.ndarray]:
    return [
        worker_clusters(graph, np.flatnonzero(assignment == w), clusters, seed)
        for w in range(int(assignment.max()) + 1)
    ]


# --- training -----------------------------------------------------------------------------------------------
def restricted(graph: RefGraph, dst: np.ndarray, src: np.ndarray) -> RefGraph:
    """The whole graph with only the arcs ``src -> dst`` (in-CSR; the global degrees kept)."""
    n = graph.num_nodes
    order = np.argsort(dst, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    return RefGraph(
        torch.from_numpy(ptr),
        torch.from_numpy(src[order]),
        graph.in_degree,
        graph.out_degree,
        graph.x,
        graph.y,
        graph.train_mask,
    )


def layer_graphs(
    graph: RefGraph,
    nbrs: np.ndarray,
    targets: np.ndarray,
    fanouts: list[int],
    seed: int,
    epoch: int,
    step: int,
) -> list[RefGraph]:
    """Per layer (first layer first) the whole graph with only that layer's sampled arcs."""
    indptr = graph.indptr.numpy()
    out, dst = [], np.asarray(targets, dtype=np.int64)
    for hop, f in enumerate(fanouts):
        counts, picks = draw(indptr, nbrs, dst, f, key_of(seed, epoch, step, hop))
        out.append(restricted(graph, np.repeat(dst, counts), picks))
        dst = np.union1d(dst, picks)
    return out[::-1]


def minibatch_train(
    kind: str,
    params_init: dict,
    graph: RefGraph,
    batches: Callable[[int], list[np.ndarray]],
    fanouts: list[int],
    epochs: int,
    lr: float,
    dropout: float,
    seed: int,
    delay: int = 0,
) -> dict:
    """Train on ``batches(epoch)`` (the target node ids of every step); returns the final parameters.

    ``delay > 0``: stale gradients with weight stashing (P3's pipeline, Eq. 3): the t-th batch (counted over
    epochs) computes its whole gradient with the weights as they were before update ``t - delay`` (the initial
    ones while ``t < delay``), and that gradient updates the current weights: w_{t+1} = w_t - a·grad f(w_{t-d})."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in params_init.items()}
    opt = torch.optim.Adam(list(params.values()), lr=lr)
    nbrs = ascending_rows(graph.indptr.numpy(), graph.indices.numpy())
    num_layers = _num_layers(params)
    ids = torch.arange(graph.num_nodes)
    versions, t = {}, 0
    for epoch in range(epochs):
        for step, targets in enumerate(batches(epoch)):
            opt.zero_grad()
            versions[t] = {k: v.detach().clone() for k, v in params.items()}
            used = (
                params
                if delay == 0
                else {k: v.clone().requires_grad_(True) for k, v in versions[max(0, t - delay)].items()}
            )
            graphs = layer_graphs(graph, nbrs, targets, fanouts, seed, epoch, step)
            h = graph.x.to(next(iter(params.values())).dtype)
            for li, g in enumerate(graphs):
                h = (_sage if kind == "sage" else _gcn)(used, f"layers.{li}.", h, g)
                if li < num_layers - 1:
                    h = torch.relu(h)
                    if dropout > 0:
                        mask_epoch = dropout_epoch(epoch, step)
                        h = h * dropout_mask(seed, mask_epoch, li, ids, h.shape[1], dropout, dtype=h.dtype)
            tg = torch.from_numpy(np.asarray(targets, dtype=np.int64))
            loss = F.cross_entropy(h[tg], graph.y[tg], reduction="sum") / len(tg)
            loss.backward()
            if delay:
                for k, v in params.items():
                    v.grad = used[k].grad
            opt.step()
            t += 1
    return {k: v.detach().clone() for k, v in params.items()}


def labelled_train(graph: RefGraph) -> np.ndarray:
    return torch.nonzero(graph.train_mask & (graph.y >= 0)).reshape(-1).numpy()


def global_batches(graph: RefGraph, batch_size: int, seed: int) -> Callable[[int], list[np.ndarray]]:
    """One permutation of every training node per epoch, cut into batches."""
    train = labelled_train(graph)

    def batches(epoch: int) -> list[np.ndarray]:
        perm = permutation(train, seed, epoch)
        return [perm[s : s + batch_size] for s in range(0, len(perm), batch_size)]

    return batches


def union_of_local_batches(
    graph: RefGraph, assignment: np.ndarray, k: int, batch_size: int, seed: int
) -> Callable[[int], list[np.ndarray]]:
    """DistDGL's local order seen by one process: the training nodes split so every trainer has the same count
    (001:205: N // K each, one more for the N % K trainers holding most, ties to the lower rank; a trainer over
    its share keeps its smallest ids and gives the rest, pooled in rank order, to those under their share in
    rank order), each trainer's set shuffled by its own permutation; step s trains on the union of every
    trainer's batch s."""
    train = labelled_train(graph)
    per_worker = even_split([np.sort(train[assignment[train] == w]) for w in range(k)])
    steps = max(-(-len(t) // batch_size) for t in per_worker)

    def batches(epoch: int) -> list[np.ndarray]:
        perms = [permutation(t, seed, epoch) for t in per_worker]
        return [
            np.concatenate([p[s * batch_size : (s + 1) * batch_size] for p in perms]) for s in range(steps)
        ]

    return batches


def even_split(own: list[np.ndarray]) -> list[np.ndarray]:
    """Every trainer's training nodes after the even split (see :func:`union_of_local_batches`), ascending."""
    k, n = len(own), sum(len(t) for t in own)
    rank_by_size = sorted(range(k), key=lambda w: (-len(own[w]), w))
    share = [n // k + (1 if rank_by_size.index(w) < n % k else 0) for w in range(k)]
    pool = np.concatenate([t[share[w] :] for w, t in enumerate(own)] + [np.zeros(0, dtype=np.int64)])
    out, taken = [], 0
    for w, t in enumerate(own):
        mine = t[: share[w]]
        need = share[w] - len(mine)
        out.append(np.sort(np.concatenate([mine, pool[taken : taken + need]])))
        taken += need
    return out


def cluster_batches(
    assignment: np.ndarray, clusters: list[np.ndarray], per_batch: int, seed: int
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
                order = permutation(np.arange(counts[w]), seed, epoch, stream=w)
                step.append(owned[w][np.isin(c, order[s * per_batch : (s + 1) * per_batch])])
            out.append(step)
        return out

    return batches


def cluster_train(
    kind: str, params_init: dict, graph: RefGraph, batches, epochs: int, lr: float, dropout: float, seed: int
) -> dict:
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
            g = RefGraph(
                torch.from_numpy(ptr),
                torch.from_numpy(src[order]),
                torch.from_numpy(np.bincount(dst, minlength=n)).to(dtype),
                torch.from_numpy(np.bincount(src, minlength=n)).to(dtype),
                graph.x,
                graph.y,
                graph.train_mask,
            )
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
                        h = h * dropout_mask(
                            seed, dropout_epoch(epoch, step), li, ids, h.shape[1], dropout, dtype=h.dtype
                        )
            loss = F.cross_entropy(h[targets], graph.y[targets], reduction="sum") / len(targets)
            loss.backward()
            opt.step()
    return {k: v.detach().clone() for k, v in params.items()}
