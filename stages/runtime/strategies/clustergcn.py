"""``clustergcn``: ClusterGCN (Chiang et al., KDD 2019), the mini-batch baseline of G3 Fig. 12c.

Every worker's own nodes are cut into clusters at plan time (METIS on the arcs among them,
``worker-RRRRR/clusters.npy``). Each step a worker takes the next ``--clusters-per-batch`` clusters of a
permutation drawn per (seed, epoch, worker) and trains on the subgraph they induce: its training nodes are
the step's targets, every layer runs over the subgraph's nodes with only the arcs among them (arcs between
clusters and from other workers' nodes are dropped). No feature or embedding exchange; gradients are
all-reduced every step, the loss normalised by the step's global target count. GCN normalises by the
subgraph's degrees (the normalised adjacency of the cluster subgraph, as ClusterGCN). Every rank runs the
largest step count; a rank out of clusters adds zero gradient.

One worker with one cluster trains on the whole graph: full-graph training. Evaluation is exact full-neighbour
inference, as for every strategy.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..neighbor_sampler import SampledBlock
from .base import WorkerContext
from .minibatch import MiniBatchStrategy, PreparedStep, shuffled


class ClusterGcnStrategy(MiniBatchStrategy):
    name = "clustergcn"

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        self.clusters = np.asarray(ctx.plan.array("clusters"), dtype=np.int64)
        self.per_batch = int(ctx.options["clusters_per_batch"])
        count = int(self.clusters.max()) + 1 if len(self.clusters) else 0
        self.cluster_ids = np.arange(count, dtype=np.int64)
        self.num_steps = ctx.all_reduce_int(math.ceil(count / self.per_batch), "max")
        self.indptr = np.asarray(ctx.shard.indptr, dtype=np.int64)
        self.indices = np.asarray(ctx.shard.indices, dtype=np.int64)
        self.is_train = np.zeros(self.n_own, dtype=bool)
        self.is_train[self.train_rows.numpy()] = True

    def steps(self, epoch: int) -> int:
        return self.num_steps

    def _sampling_transport(self):
        return self.tr  # nothing is exchanged while preparing a step

    def prepare(self, epoch: int, step: int) -> PreparedStep:
        t0 = time.perf_counter()
        order = shuffled(self.cluster_ids, self.cfg.seed, epoch, stream=self.rank)
        chosen = np.zeros(len(self.cluster_ids), dtype=bool)
        chosen[order[step * self.per_batch : (step + 1) * self.per_batch]] = True
        nodes = np.flatnonzero(chosen[self.clusters]) if len(self.clusters) else np.zeros(0, dtype=np.int64)
        block, degrees = self._induced(nodes)
        target_rows = np.flatnonzero(self.is_train[nodes])
        targets = self.owned_global[nodes[target_rows]]
        t1 = time.perf_counter()
        x0 = self.features[torch.from_numpy(nodes)]
        return PreparedStep(targets, None, [block] * self.ctx.spec.num_blocks, x0, degrees,
                            {"sample": t1 - t0, "fetch": time.perf_counter() - t1}, target_rows)

    def _induced(self, nodes: np.ndarray) -> tuple[SampledBlock, torch.Tensor]:
        """The subgraph of the owned-local ``nodes`` (ascending): its in-arcs among them, and its degrees."""
        pos = np.full(self.n_own + self.n_rem, -1, dtype=np.int64)
        pos[nodes] = np.arange(len(nodes))
        counts = self.indptr[nodes + 1] - self.indptr[nodes]
        starts = np.repeat(self.indptr[nodes] - (np.cumsum(counts) - counts), counts)
        src = pos[self.indices[starts + np.arange(int(counts.sum()))]]
        row = np.repeat(np.arange(len(nodes)), counts)
        keep = src >= 0
        src, row = src[keep], row[keep]
        indptr = np.zeros(len(nodes) + 1, dtype=np.int64)
        np.cumsum(np.bincount(row, minlength=len(nodes)), out=indptr[1:])
        gids = self.owned_global[nodes]
        degrees = torch.from_numpy(np.stack([np.diff(indptr), np.bincount(src, minlength=len(nodes))], axis=1))
        return SampledBlock(gids, gids, indptr, src), degrees


STRATEGY = ClusterGcnStrategy
