"""``distdgl``: DistDGL (Zheng et al., IA3 2020; seed 001 §4.1) — mini-batch training with neighbour sampling
on partitioned data, synchronous gradient all-reduce every step.

Every worker trains on batches of its own training nodes. Per step it samples the targets' neighbours
(``--fanouts``, targets' first) hop by hop; a node's in-edges live with its owner (the shard has one hop), so
the frontier nodes another worker owns are sampled by that owner's sampling server (DistDGL's sampler
servers, 001 §4.1.4; :mod:`stages.kits.runtime.sampling_service`): the worker sends each owner the ids it needs
with the hop's sampling key, draws its own nodes meanwhile, and gets back CSR replies sized by what was drawn
(counts, concatenated picks; ``sample-ids`` / ``sample`` bytes). No other worker joins in, and the owner's
answer is the same counter-based draw it would make for itself. Then the input features of every source it
does not own are pulled from their owners' servers the same way, one ``features0`` request per owner (the
KVStore's pull, 001 §4.1.3): no collective per step, so a slow peer delays only the workers that need its
rows.

Batch order (``g3 plan --batch-order``):

* ``local`` (DistDGL's): each worker shuffles its own training nodes every epoch and cuts them into batches of
  ``--batch-size``; every rank runs ``max`` over ranks of its batch count, a rank with no batch left
  contributes zero gradient, and the loss is normalised by the step's global target count. K workers equal one
  process fed, at each step, the union of the K local batches.
* ``global``: one permutation of all training nodes per epoch; global step s is batch s, each worker computing
  the targets of it that it owns. The same batches whatever K: K workers equal one worker.
* ``split``: global's batches, but worker k computes positions k, k+K, k+2K, … of batch s wherever those
  targets live — model-centric data parallelism, where a trainer samples and fetches for roots another server
  holds (HopGNN 004 §2–3, P3 §2). The same batches and global target count as ``global``, so the same model;
  only where each root is computed, and so what is fetched, differs. Every worker holds every training node's
  label (shared once at the start).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist

from stages.kits.runtime.device.sampler import DeviceGraph, Owners
from stages.kits.runtime.minibatch import MiniBatchStrategy, PreparedStep, shuffled
from stages.kits.runtime.neighbor_sampler import (
    Ids,
    build_blocks,
    sample_key,
    sample_rows,
    signed64,
    sorted_rows_by_global,
)
from stages.kits.runtime.sampling_service import SamplingService
from stages.kits.runtime.strategy import WorkerContext

_M64 = (1 << 64) - 1


class DistDglStrategy(MiniBatchStrategy):
    name = "distdgl"
    # a resident worker samples through :class:`DeviceGraph` (this class's :meth:`blocks` and :meth:`prepare`,
    # which p3 and hopgnn use too); bytegnn's steps are its DAGs of host tasks
    samples_on_device = True

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        opts = ctx.options
        self.fanouts = [int(f) for f in opts["fanouts"]]
        self.batch_size = int(opts["batch_size"])
        self.order = opts["batch_order"]
        shard = ctx.shard
        self.indptr = np.asarray(shard.indptr, dtype=np.int64)
        self.nbrs = sorted_rows_by_global(self.indptr, shard.indices, self.global_ids.numpy())
        everyone = self.ctx.all_gather(self.train_global)
        if self.order in ("global", "split"):
            self.all_train = np.sort(np.concatenate(everyone))
            self.num_steps = math.ceil(len(self.all_train) / self.batch_size)
            if self.order == "split":  # any worker may train any node: every label everywhere
                self._adopt_labels([self.all_train] * ctx.world)
        else:  # DistDGL's even split: the same number of training nodes per worker, own ones first
            split = balanced_split(everyone)
            self.my_train = split[self.rank]
            self.num_steps = math.ceil(max(len(t) for t in split) / self.batch_size)
            self._adopt_labels(split)
        self._perm_epoch: int | None = None
        self._perm: np.ndarray | None = None
        self.replicated = opts.get("topology", "partitioned") == "replicated"
        if self.replicated:
            self.g_indptr, self.g_nbrs = load_topology(ctx.plan_dir, ctx.plan_meta)
        # DistDGL's step computes on its inputs and is done with them after its backward (subclasses that keep
        # them longer, or gather elsewhere, make new ones every step)
        self.reuse_inputs = type(self) is DistDglStrategy
        # one worker holds every input row: its first layer may read them in the feature table
        self.inputs_in_place = self.reuse_inputs and ctx.world == 1
        # a resident worker samples, relabels and gathers its steps on the device (the host sampler's draws; DGL's
        # GPU sampling); with peers, their nodes are drawn and their rows pulled by them, through the service
        self.on_device = None
        if self.samples_on_device and ctx.resident:
            self.on_device = self._device_graph()
        # node ids on the wire: 4 bytes while they fit
        self.wire_ids = np.int32 if self.num_nodes < 2**31 else np.int64
        # the sampling and feature server (threads) and its client, K > 1: remote neighbours are drawn by their
        # owners (partitioned topology) and remote input rows pulled from their owners, request by request
        self.service = None
        if ctx.world > 1 and dist.is_initialized():
            self.service = SamplingService(
                self.rank,
                ctx.world,
                {"sample": self._serve_sample, "features0": self._serve_rows},
                self.tr.stats,
                self.tracer,
                self.cfg.wait_seconds(),
                serve_threads=self.serving_threads(ctx),
            )
            if self.on_device is not None:
                self.on_device.owners = Owners(self._ask_owners, self._owners_rows)

    def _device_graph(self) -> DeviceGraph:
        """This worker's sampling input on its device: its rows (or, replicated, the whole CSR) and its input rows,
        each global id mapped to its row here (−1: another worker's)."""
        degrees = torch.from_numpy(self.own_degrees(slice(None))) if self.needs_degrees else None
        here = np.where(self.book.owner == self.rank, self.book.local, -1)
        if self.replicated:  # its own rows are the whole CSR's: input rows by ``here``
            indptr, nbrs, row_of, input_row_of = self.g_indptr, self.g_nbrs, None, here
        else:
            indptr, nbrs, row_of, input_row_of = self.indptr, self.nbrs, here, None
        return DeviceGraph(
            indptr, nbrs, row_of, self.features, self.labels, degrees, self.device, input_row_of=input_row_of
        )

    def serving_threads(self, ctx: WorkerContext) -> int:
        """Threads that answer the requests this worker serves in priority order (0: each connection's thread
        answers at once, first come first served — DistDGL's servers)."""
        return 0

    def _adopt_labels(self, split: list[np.ndarray]) -> None:
        """The labels of the training nodes other workers gave this one (its targets that it does not own):
        every owner sends those of its nodes that went elsewhere, once, at the start (collective)."""
        gone = np.unique(
            np.concatenate([t for r, t in enumerate(split) if r != self.rank] or [np.zeros(0, np.int64)])
        )
        gone = gone[self.book.owner[gone] == self.rank]
        self.adopted_ids, self.adopted_labels = self._labels_by_id(
            gone, self.labels[torch.from_numpy(self.book.local[gone])].numpy()
        )

    def _labels_by_id(self, ids: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
        """The ``labels`` of ``ids`` that every rank gives, all of them by ascending id (collective)."""
        given = self.ctx.all_gather((ids, labels))
        ids = np.concatenate([g for g, _ in given])
        order = np.argsort(ids)
        return ids[order], torch.from_numpy(np.concatenate([lab for _, lab in given])[order])

    def target_labels(self, nodes: Ids) -> torch.Tensor:
        """Labels of a step's targets: own ones from the shard, adopted ones (local order) from the owners'."""
        if isinstance(nodes, torch.Tensor):  # sampled on the device
            if self.ctx.world == 1:
                return self.on_device.target_labels(nodes)
            return self._host_target_labels(nodes.cpu().numpy()).to(self.device)
        return self._host_target_labels(nodes)

    def _host_target_labels(self, nodes: np.ndarray) -> torch.Tensor:
        mine = self.book.owner[nodes] == self.rank
        if mine.all():
            return super().target_labels(nodes)
        out = torch.empty(len(nodes), dtype=self.labels.dtype)
        # integer positions, not boolean masks: the same rows, and on a device no size to read back
        own_at, other_at = np.flatnonzero(mine), np.flatnonzero(~mine)
        out[torch.from_numpy(own_at)] = super().target_labels(nodes[own_at])
        at = np.searchsorted(self.adopted_ids, nodes[other_at])
        out[torch.from_numpy(other_at)] = self.adopted_labels[torch.from_numpy(at)]
        return out

    def prepare(self, epoch: int, step: int, batch=None, extra_seconds: float = 0.0) -> PreparedStep:
        """A step's inputs; on the device when the worker samples there (:class:`DeviceGraph`)."""
        if self.on_device is None:
            return super().prepare(epoch, step, batch, extra_seconds)
        sampled = self.sample_step(epoch, step, batch)
        x0, degrees, fetched = self.on_device.inputs(sampled.blocks[0].src)
        return sampled.step(x0, degrees, extra_seconds, fetched_rows=fetched)

    # --- batches --------------------------------------------------------------------------------------
    def steps(self, epoch: int) -> int:
        return self.num_steps

    def batch(self, epoch: int, step: int) -> tuple[np.ndarray, int | None]:
        if self._perm_epoch != epoch:
            pool = self.my_train if self.order == "local" else self.all_train
            self._perm, self._perm_epoch = shuffled(pool, self.cfg.seed, epoch), epoch
        chunk = self._perm[step * self.batch_size : (step + 1) * self.batch_size]
        if self.order == "global":
            mine = chunk[self.book.owner[chunk] == self.rank]
            return mine, len(chunk)
        if self.order == "split":
            return chunk[self.rank :: self.ctx.world], len(chunk)
        return chunk, None

    # --- sampling -------------------------------------------------------------------------------------
    def blocks(self, epoch: int, step: int, targets: np.ndarray):
        """The step's blocks, first layer first: of device tensors when the worker samples there."""
        seed = self.cfg.seed
        if self.on_device is not None:
            return self.on_device.blocks(
                targets, self.fanouts, lambda hop: sample_key(seed, epoch, step, hop)
            )

        def sample(nodes: np.ndarray, fanout: int, hop: int):
            return self.sample(nodes, fanout, sample_key(seed, epoch, step, hop), remote=hop > 0)

        return build_blocks(targets, self.fanouts, sample, self.scratch())

    def sample(self, nodes: np.ndarray, fanout: int, key: int, remote: bool = True):
        """``(counts, neighbours)`` of ``nodes`` in their order: own nodes from the shard, the others by their
        owners' sampling servers, asked first so that they draw while this worker draws its own (DistDGL's
        sampler, 001 §4.1.4). No other worker has to take part; ``remote`` is accepted for callers that know a
        hop has no remote node, and changes nothing."""
        if self.replicated:  # the whole CSR is here: no one to ask
            return sample_rows(self.g_indptr, self.g_nbrs, nodes, nodes, fanout, key)
        owner = self.book.owner[nodes]
        if self.service is None or (owner == self.rank).all():
            return sample_rows(self.indptr, self.nbrs, self.book.local[nodes], nodes, fanout, key)
        return self._ask_owners(nodes, fanout, key, owner)()

    def _ask_owners(self, nodes: np.ndarray, fanout: int, key: int, owner: np.ndarray | None = None):
        """Send the owners of ``nodes`` their sampling requests now (the device sampler's requests too); returns
        a function that draws this worker's own nodes meanwhile and waits for the answers, ``(counts, picks)``
        in the order of ``nodes``."""
        order, bounds = self._by_owner(self.book.owner[nodes] if owner is None else owner)
        groups = [nodes[order[bounds[q] : bounds[q + 1]]] for q in range(self.ctx.world)]
        pending = {
            q: self.service.submit(q, "sample", [fanout, signed64(key)], [g.astype(self.wire_ids)])
            for q, g in enumerate(groups)
            if q != self.rank and len(g)
        }

        def wait() -> tuple[np.ndarray, np.ndarray]:
            answers = {
                self.rank: sample_rows(
                    self.indptr, self.nbrs, self.book.local[groups[self.rank]], groups[self.rank], fanout, key
                )
            }
            for q, p in pending.items():
                counts_q, picks_q = p.result()
                answers[q] = (counts_q.astype(np.int64), picks_q.astype(np.int64))
            answered = [answers[q] for q in range(self.ctx.world) if q in answers]
            return regroup(
                order, np.concatenate([c for c, _ in answered]), np.concatenate([n for _, n in answered])
            )

        return wait

    def _owners_rows(self, nodes: np.ndarray):
        """The device gather's requests for input rows other workers own (and, for GCN, their global degrees),
        sent now; the function returned waits for the replies."""
        order, bounds = self._by_owner(self.book.owner[nodes])
        pending = self._ask_rows(nodes, order, bounds)

        def wait() -> tuple[torch.Tensor, torch.Tensor | None]:
            x = torch.empty((len(nodes), self.features.shape[1]), dtype=self.features.dtype)
            degrees = torch.empty((len(nodes), 2), dtype=torch.int64) if self.needs_degrees else None
            self._take_rows(pending, order, bounds, x, degrees)
            return x, degrees

        return wait

    def _serve_sample(self, params: np.ndarray, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """A peer's ``sample`` request: the same counter-based draw this worker makes for its own nodes,
        replied as CSR (counts, concatenated picks) sized by what was drawn."""
        fanout, key = int(params[0]), int(params[1]) & _M64
        ids = arrays[0].astype(np.int64)
        if len(ids) and (self.book.owner[ids] != self.rank).any():
            raise ValueError(f"asked to sample nodes worker {self.rank} does not own")
        counts, picks = sample_rows(self.indptr, self.nbrs, self.book.local[ids], ids, fanout, key)
        return [counts.astype(np.int32), picks.astype(self.wire_ids)]

    # --- input rows -----------------------------------------------------------------------------------
    def gather_inputs(
        self, nodes: np.ndarray, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """Input features of ``nodes`` (global ids, in their order): own rows copied here, the others pulled
        from their owners' servers — one ``features0`` request per owner, all sent before any reply is read
        (DistDGL's KVStore pull, 001 §4.1.3). No other worker takes part: a slow peer delays only those that
        need its rows. With GCN each reply carries the rows' global (in, out) degrees too. ``out``: where to
        gather (``[len(nodes), width]``), else a new tensor."""
        if self.service is None:
            return super().gather_inputs(nodes, out)
        order, bounds = self._by_owner(self.book.owner[nodes])
        pending = self._ask_rows(nodes, order, bounds)
        mine = order[bounds[self.rank] : bounds[self.rank + 1]]
        local = self.book.local[nodes[mine]]
        x = self.own_rows(
            torch.from_numpy(local), len(nodes), torch.from_numpy(mine) if pending else None, out
        )
        degrees = None
        if self.needs_degrees:
            degrees = torch.empty((len(nodes), 2), dtype=torch.int64)
            degrees[torch.from_numpy(mine)] = torch.from_numpy(self.own_degrees(local))
        self._take_rows(pending, order, bounds, x, degrees)
        return x, degrees, len(nodes) - len(mine)

    def _ask_rows(self, nodes: np.ndarray, order: np.ndarray, bounds: np.ndarray) -> dict:
        """One ``features0`` request to every other owner of ``nodes`` (grouped by :meth:`_by_owner`), all sent
        before any reply is read."""
        return {
            q: self.service.submit(
                q, "features0", [], [nodes[order[bounds[q] : bounds[q + 1]]].astype(self.wire_ids)]
            )
            for q in range(self.ctx.world)
            if q != self.rank and bounds[q + 1] > bounds[q]
        }

    def _take_rows(
        self,
        pending: dict,
        order: np.ndarray,
        bounds: np.ndarray,
        x: torch.Tensor,
        degrees: torch.Tensor | None,
    ) -> None:
        """The replies of :meth:`_ask_rows` written where their nodes stand (and, for GCN, their degrees)."""
        for q, p in pending.items():
            arrays = p.result()
            at = torch.from_numpy(order[bounds[q] : bounds[q + 1]])
            x[at] = torch.from_numpy(arrays[0])
            if degrees is not None:
                degrees[at] = torch.from_numpy(arrays[1].astype(np.int64))

    def _serve_rows(self, params: np.ndarray, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """A peer's ``features0`` request: the input rows of nodes this worker owns (and, for GCN, their global
        (in, out) degrees)."""
        ids = arrays[0].astype(np.int64)
        if len(ids) and (self.book.owner[ids] != self.rank).any():
            raise ValueError(f"asked for rows worker {self.rank} does not own")
        local = self.book.local[ids]
        reply = [self.features.index_select(0, torch.from_numpy(local)).numpy()]
        if self.needs_degrees:
            reply.append(self.own_degrees(local))
        return reply

    def _by_owner(self, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(``order``, ``bounds``): positions grouped by owner, each group in its original order, and group q
        at ``order[bounds[q]:bounds[q + 1]]``."""
        order = np.argsort(owner, kind="stable")
        return order, np.searchsorted(owner[order], np.arange(self.ctx.world + 1))

    def stats(self) -> dict:
        # where this worker's steps were sampled, relabelled and gathered: its device (resident) or the host
        return {**super().stats(), "sampling_on": "device" if self.on_device is not None else "host"}

    def close(self) -> None:
        super().close()
        if self.service is not None:
            self.service.close()


def regroup(
    order: np.ndarray, counts_sorted: np.ndarray, picks_sorted: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """CSR answers given for ``nodes[order]`` put back in the order of ``nodes`` (vectorised)."""
    counts = np.empty(len(order), dtype=np.int64)
    counts[order] = counts_sorted
    starts = np.empty(len(order), dtype=np.int64)
    starts[order] = np.cumsum(counts_sorted) - counts_sorted
    offsets = np.cumsum(counts) - counts
    take = np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()))
    return counts, picks_sorted[take]


def balanced_split(train: list[np.ndarray]) -> list[np.ndarray]:
    """DistDGL's split of the training set (001 §4.1.5, 001:205): every worker gets the same number of training
    nodes, ``N // K`` or one more (the extra ones to the workers holding most, ties to the lower rank), keeping
    as many of its own as that allows. A worker over its share keeps its smallest ids and gives the rest; the
    given ids, pooled in rank order (ascending within a worker), fill the workers under their share in rank
    order. ``train[w]``: worker w's own training nodes (global ids, ascending). The same on every worker."""
    sizes = np.array([len(t) for t in train], dtype=np.int64)
    k, n = len(train), int(sizes.sum())
    share = np.full(k, n // k, dtype=np.int64)
    share[np.lexsort((np.arange(k), -sizes))[: n % k]] += 1
    pool = np.concatenate([t[share[w] :] for w, t in enumerate(train)] or [np.zeros(0, np.int64)])
    missing = np.maximum(share - sizes, 0)
    cuts = np.split(pool, np.cumsum(missing)[:-1])
    return [np.sort(np.concatenate([t[: share[w]], cuts[w]])).astype(np.int64) for w, t in enumerate(train)]


def load_topology(plan_dir, plan_meta: dict) -> tuple[np.ndarray, np.ndarray]:
    """The plan's replicated CSR, memory-mapped (read-only, shared by the workers of a host through the page
    cache), checked against plan.json's ``topology``."""
    from pathlib import Path

    from stages.common.errors import G3InputError

    info = plan_meta.get("topology") or {}
    folder = Path(plan_dir) / info.get("path", "topology")
    try:
        indptr = np.load(folder / "indptr.npy", mmap_mode="r")
        nbrs = np.load(folder / "nbrs.npy", mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise G3InputError(
            f"the replicated topology cannot be read ({exc}); re-run g3 plan", path=folder
        ) from None
    if (
        len(indptr) != info.get("num_nodes", -2) + 1
        or len(nbrs) != info.get("num_arcs", -1)
        or int(indptr[-1]) != len(nbrs)
    ):
        raise G3InputError(
            "the replicated topology does not match plan.json (nodes or arcs differ); re-run g3 plan",
            path=folder,
        )
    return indptr, nbrs


STRATEGY = DistDglStrategy
