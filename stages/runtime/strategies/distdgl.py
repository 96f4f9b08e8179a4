"""``distdgl``: DistDGL (Zheng et al., IA3 2020; seed 001 §4.1) — mini-batch training with neighbour sampling
on partitioned data, synchronous gradient all-reduce every step.

Every worker trains on batches of its own training nodes. Per step it samples the targets' neighbours
(``--fanouts``, targets' first) hop by hop; a node's in-edges live with its owner (the shard has one hop), so
the frontier nodes another worker owns are sampled by that owner: one request/response round per hop through
the transport (``sample<h>`` bytes), answered with the same counter-based draw the owner would make for
itself. Then the input features of every source it does not own are fetched by global id (``features0``).

Batch order (``g3 plan --batch-order``):

* ``local`` (DistDGL's): each worker shuffles its own training nodes every epoch and cuts them into batches of
  ``--batch-size``; every rank runs ``max`` over ranks of its batch count, a rank with no batch left
  contributes zero gradient, and the loss is normalised by the step's global target count. K workers equal one
  process fed, at each step, the union of the K local batches.
* ``global``: one permutation of all training nodes per epoch; global step s is batch s, each worker computing
  the targets of it that it owns. The same batches whatever K: K workers equal one worker.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist

from ..neighbor_sampler import build_blocks, sample_key, sample_rows, sorted_rows_by_global
from .base import WorkerContext
from .minibatch import MiniBatchStrategy, shuffled


class DistDglStrategy(MiniBatchStrategy):
    name = "distdgl"

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        opts = ctx.options
        self.fanouts = [int(f) for f in opts["fanouts"]]
        self.batch_size = int(opts["batch_size"])
        self.order = opts["batch_order"]
        shard = ctx.shard
        self.indptr = np.asarray(shard.indptr, dtype=np.int64)
        self.nbrs = sorted_rows_by_global(self.indptr, shard.indices, self.global_ids.numpy())
        max_degree = int(np.diff(self.indptr).max()) if self.n_own else 0
        self.max_degree = ctx.all_reduce_int(max_degree, "max")  # the reply width of a fanout −1 request
        if self.order == "global":
            self.all_train = np.sort(self._all_gather(self.train_global))
            self.num_steps = math.ceil(len(self.all_train) / self.batch_size)
        else:
            self.num_steps = ctx.all_reduce_int(math.ceil(len(self.train_global) / self.batch_size), "max")
        self._perm_epoch, self._perm = None, None
        self.replicated = opts.get("topology", "partitioned") == "replicated"
        if self.replicated:
            self.g_indptr, self.g_nbrs = load_topology(ctx.plan_dir, ctx.plan_meta)

    def _all_gather(self, ids: np.ndarray) -> np.ndarray:
        if self.ctx.world == 1 or not dist.is_initialized():
            return ids
        everyone = [None] * self.ctx.world
        dist.all_gather_object(everyone, ids)
        return np.concatenate(everyone)

    # --- batches --------------------------------------------------------------------------------------
    def steps(self, epoch: int) -> int:
        return self.num_steps

    def batch(self, epoch: int, step: int) -> tuple[np.ndarray, int | None]:
        if self._perm_epoch != epoch:
            pool = self.all_train if self.order == "global" else self.train_global
            self._perm, self._perm_epoch = shuffled(pool, self.cfg.seed, epoch), epoch
        chunk = self._perm[step * self.batch_size : (step + 1) * self.batch_size]
        if self.order == "global":
            mine = chunk[self.book.owner[chunk] == self.rank]
            return mine, len(chunk)
        return chunk, None

    # --- sampling -------------------------------------------------------------------------------------
    def blocks(self, epoch: int, step: int, targets: np.ndarray):
        seed = self.cfg.seed

        def sample(nodes: np.ndarray, fanout: int, hop: int):
            return self.sample(nodes, fanout, sample_key(seed, epoch, step, hop), remote=hop > 0)

        return build_blocks(targets, self.fanouts, sample, self.scratch())

    def sample(self, nodes: np.ndarray, fanout: int, key: int, remote: bool = True):
        """``(counts, neighbours)`` of ``nodes`` in their order: own nodes from the shard, the others by their
        owners (a collective round: every rank calls it for every hop but the first — the targets are always
        its own)."""
        if self.replicated:  # the whole CSR is here: no one to ask
            return sample_rows(self.g_indptr, self.g_nbrs, nodes, nodes, fanout, key)
        owner = self.book.owner[nodes]
        mine = owner == self.rank
        c_own, n_own = sample_rows(self.indptr, self.nbrs, self.book.local[nodes[mine]], nodes[mine], fanout, key)
        if not remote:
            assert mine.all(), "a step's targets are owned by the worker that computes them"
            return c_own, n_own
        width = (fanout if fanout >= 0 else self.max_degree) + 1

        def serve(local_ids: np.ndarray) -> torch.Tensor:  # this worker's answer for its own nodes
            asked = self.owned_global[local_ids]
            counts, nbrs = sample_rows(self.indptr, self.nbrs, local_ids, asked, fanout, key)
            reply = np.full((len(local_ids), width), -1, dtype=np.int64)
            reply[:, 0] = counts
            cols = np.arange(len(nbrs)) - np.repeat(np.cumsum(counts) - counts, counts)
            reply[np.repeat(np.arange(len(local_ids)), counts), 1 + cols] = nbrs
            return torch.from_numpy(reply)

        replies = self.sampling_tr.fetch(nodes[~mine], self.book, serve, width, torch.int64, "sample").numpy()
        c_rem = replies[:, 0]
        n_rem = replies[:, 1:][np.arange(width - 1)[None, :] < c_rem[:, None]]
        # put both answers back in the order of ``nodes``
        counts = np.empty(len(nodes), dtype=np.int64)
        counts[mine], counts[~mine] = c_own, c_rem
        starts = np.empty(len(nodes), dtype=np.int64)
        starts[mine] = np.cumsum(c_own) - c_own
        starts[~mine] = len(n_own) + np.cumsum(c_rem) - c_rem
        both = np.concatenate([n_own, n_rem])
        offsets = np.cumsum(counts) - counts
        take = np.repeat(starts, counts) + (np.arange(int(counts.sum())) - np.repeat(offsets, counts))
        return counts, both[take]


def load_topology(plan_dir, plan_meta: dict) -> tuple[np.ndarray, np.ndarray]:
    """The plan's replicated CSR, memory-mapped (read-only, shared by the workers of a host through the page
    cache), checked against plan.json's ``topology``."""
    from pathlib import Path

    from ...common.errors import G3InputError

    info = plan_meta.get("topology") or {}
    folder = Path(plan_dir) / info.get("path", "topology")
    try:
        indptr = np.load(folder / "indptr.npy", mmap_mode="r")
        nbrs = np.load(folder / "nbrs.npy", mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise G3InputError(f"the replicated topology cannot be read ({exc}); re-run g3 plan", path=folder) from None
    if (len(indptr) != info.get("num_nodes", -2) + 1 or len(nbrs) != info.get("num_arcs", -1)
            or int(indptr[-1]) != len(nbrs)):
        raise G3InputError("the replicated topology does not match plan.json (nodes or arcs differ); re-run g3 plan",
                           path=folder)
    return indptr, nbrs


STRATEGY = DistDglStrategy
