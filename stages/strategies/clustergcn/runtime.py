"""``clustergcn``: ClusterGCN (Chiang et al., KDD 2019), the mini-batch baseline of G3 Fig. 12c.

Every worker's own nodes are cut into clusters at plan time (METIS on the arcs among them,
``worker-RRRRR/clusters.npy``). Each step a worker takes the next ``--clusters-per-batch`` clusters of a
permutation drawn per (seed, epoch, worker) and trains on the subgraph they induce: its training nodes are
the step's targets, every layer runs over the subgraph's nodes with only the arcs among them (arcs between
clusters and from other workers' nodes are dropped). No feature or embedding exchange; gradients are
all-reduced every step, the loss normalised by the step's global target count. GCN normalises by the
subgraph's degrees (the normalised adjacency of the cluster subgraph, as ClusterGCN). Every rank runs the
largest step count; a rank out of clusters adds zero gradient.

A resident worker (the device path) keeps its structure, clusters, features and labels on its device and
induces each step's subgraph there (:func:`~stages.kits.runtime.device.sampler.induced_subgraph`): the same
subgraph, numbered alike, so the same model; nothing of a step crosses to the host but four sizes.

One worker with one cluster trains on the whole graph: full-graph training. Evaluation is exact full-neighbour
inference, as for every strategy.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from stages.kits.runtime.device.sampler import device_array, induced_subgraph
from stages.kits.runtime.minibatch import MiniBatchStrategy, PreparedStep, shuffled
from stages.kits.runtime.neighbor_sampler import SampledBlock
from stages.kits.runtime.strategy import WorkerContext


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
        # a step reads only this worker's own rows: a resident worker induces its subgraphs on the device
        self.on_device = DeviceClusters(self) if ctx.resident else None

    def steps(self, epoch: int) -> int:
        return self.num_steps

    def _sampling_transport(self):
        return self.tr  # nothing is exchanged while preparing a step

    def _chosen(self, epoch: int, step: int) -> np.ndarray:
        """The clusters of a step."""
        order = shuffled(self.cluster_ids, self.cfg.seed, epoch, stream=self.rank)
        return order[step * self.per_batch : (step + 1) * self.per_batch]

    def prepare(self, epoch: int, step: int) -> PreparedStep:
        if self.on_device is not None:
            return self.on_device.prepare(self._chosen(epoch, step))
        t0 = time.perf_counter()
        chosen = np.zeros(len(self.cluster_ids), dtype=bool)
        chosen[self._chosen(epoch, step)] = True
        nodes = np.flatnonzero(chosen[self.clusters]) if len(self.clusters) else np.zeros(0, dtype=np.int64)
        block, degrees = self._induced(nodes)
        target_rows = np.flatnonzero(self.is_train[nodes])
        targets = self.owned_global[nodes[target_rows]]
        t1 = time.perf_counter()
        x0 = self.features[torch.from_numpy(nodes)]
        return PreparedStep(
            targets,
            None,
            [block] * self.ctx.spec.num_blocks,
            x0,
            degrees,
            {"sample": t1 - t0, "fetch": time.perf_counter() - t1},
            target_rows,
        )

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
        degrees = torch.from_numpy(
            np.stack([np.diff(indptr), np.bincount(src, minlength=len(nodes))], axis=1)
        )
        return SampledBlock(gids, gids, indptr, src), degrees

    def target_labels(self, nodes) -> torch.Tensor:
        if self.on_device is not None:
            return self.on_device.labels_of(nodes)
        return super().target_labels(nodes)


class DeviceClusters:
    """A resident clustergcn worker's structure, clusters, features and labels on its device, and a step's
    subgraph induced there: what :meth:`ClusterGcnStrategy.prepare` makes on the host, as device tensors. A
    step reads back four sizes: its nodes', its arcs' before and after the subgraph's cut, its targets'."""

    def __init__(self, strategy: ClusterGcnStrategy):
        dev = strategy.device
        self.num_blocks = strategy.ctx.spec.num_blocks
        self.indptr, self.indices, self.clusters, self.owned_global = (
            device_array(a, dev)
            for a in (strategy.indptr, strategy.indices, strategy.clusters, strategy.owned_global)
        )
        self.is_train = device_array(strategy.is_train, dev, torch.bool)
        self.features = strategy.features.to(dev)
        self.labels = strategy.labels[: strategy.n_own].to(dev)
        # an owned row's in-arcs come from owned and remote rows: every one has its place
        self.scratch = torch.full((strategy.n_own + strategy.n_rem,), -1, dtype=torch.int64, device=dev)
        self.num_clusters = len(strategy.cluster_ids)
        self.device = dev

    def prepare(self, clusters: np.ndarray) -> PreparedStep:
        t0 = time.perf_counter()
        chosen = torch.zeros(self.num_clusters, dtype=torch.bool, device=self.device)
        chosen.index_fill_(0, torch.as_tensor(clusters).to(self.device), True)  # the step's one copy in
        nodes = torch.nonzero(chosen[self.clusters]).flatten()
        indptr, src = induced_subgraph(self.indptr, self.indices, nodes, self.scratch)
        target_rows = torch.nonzero(self.is_train[nodes]).flatten()
        gids = self.owned_global[nodes]
        out_degree = torch.zeros(len(nodes), dtype=torch.int64, device=self.device)
        out_degree.index_add_(0, src, torch.ones_like(src))
        degrees = torch.stack([indptr[1:] - indptr[:-1], out_degree], dim=1)
        t1 = time.perf_counter()
        x0 = self.features.index_select(0, nodes)
        return PreparedStep(
            gids[target_rows],
            None,
            [SampledBlock(gids, gids, indptr, src)] * self.num_blocks,
            x0,
            degrees,
            {"sample": t1 - t0, "fetch": time.perf_counter() - t1},
            target_rows,
        )

    def labels_of(self, nodes: torch.Tensor) -> torch.Tensor:
        """Labels of owned nodes given by global id (the owned ids ascend)."""
        return self.labels[torch.searchsorted(self.owned_global, nodes)]


STRATEGY = ClusterGcnStrategy
