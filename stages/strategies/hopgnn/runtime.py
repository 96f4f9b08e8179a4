"""``hopgnn``: HopGNN (paper 004, published as LeapGNN) — the model migrates to the features.

An iteration is one optimizer step on distdgl's global batch (``--batch-order global``: one permutation of all
training nodes per epoch, batch s = step s). Each of the K models takes a 1/K share of it; the roots are
regrouped by home server (the owner of their features) and trained in K time steps: at time step t model d
runs on server (d + t) mod K on the micrographs of its roots homed there (a micrograph = a root's sampled k-hop
computation graph, drawn with distdgl's counter-based sampler keyed by node, so the draws are distdgl's). In
g3 each process is one server: at time step t process s computes the micrographs of model (s − t) mod K with
that model's weights — which within an iteration are every replica's weights — so the micro-steps of an
optimizer step are the time steps, and over the iteration process s computes exactly the roots of the global
batch it owns: distdgl's global order, with each time step's loss divided by the global batch size.

* **Migration** (``--migrate on``): between two time steps every model moves to its next server with its
  parameters and accumulated gradients (one message of 2·P values per server, phase ``migrate``); the
  receiving server carries on accumulating into them. The optimizer state does not move: every server applies
  the same all-reduced update, so its Adam moments are the migrating model's. ``off``: each server keeps
  accumulating its own gradients (the gradients' sum is the same).
* **Pre-gathering** (``--pregather on``, §5.2): before its first time step a server samples all of the
  iteration's micrographs and fetches their deduplicated remote features in one request per peer.
* **Merging** (``--merge``, §5.3): the time step with the fewest roots (over all models) is dropped and each
  model's roots there are spread evenly over the same model's other steps (so they run away from home); N
  steps are dropped one after another. ``auto``: one more per epoch from the second epoch on while the epoch
  time (the slowest rank's, all-reduced) falls, then back one and frozen; the decisions are the strategy's
  checkpointed state, so a resumed run repeats them.
* **local-only** (``--batch-order local-only``, the paper's "locality-optimised" variant): each server trains
  only its own training nodes (a per-epoch shuffle cut into batches of ceil(B/K)), one time step, nothing
  migrates. A different model: the batches are stratified by partition.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Any

import numpy as np
import torch

from stages.kits.runtime.minibatch import PreparedStep, count_preparation, shuffled
from stages.kits.runtime.strategy import StepOutput, WorkerContext
from stages.strategies.distdgl.runtime import DistDglStrategy


def time_steps(home: np.ndarray, k: int, merges: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HopGNN's schedule of one iteration. ``home[i]``: the home server of root i of the global batch (in
    batch order). Model d takes the d-th of K contiguous shares (``np.array_split``); a root of model d homed
    at s runs at time step (s − d) mod K. Then ``merges`` times (at most K − 1): the kept step with the fewest
    roots (the lowest on a tie) is dropped and each model's roots there are spread over that model's other
    kept steps, ascending, as evenly as ``np.array_split`` cuts them. Returns (the kept time steps ascending,
    each root's model, each root's time step); root i runs on server (model + step) mod K."""
    n = len(home)
    model = np.repeat(np.arange(k), [len(a) for a in np.array_split(np.arange(n), k)])
    step = (np.asarray(home, dtype=np.int64) - model) % k
    kept = np.arange(k)
    for _ in range(min(merges, k - 1)):
        drop = kept[np.argmin(np.bincount(step, minlength=k)[kept])]
        kept = kept[kept != drop]
        _spread(step, model, drop, kept)
    return kept, model, step


def _spread(step: np.ndarray, model: np.ndarray, drop: int, kept: np.ndarray) -> None:
    """Move every root at time step ``drop`` to its model's kept steps: the j-th of a model's n moved roots
    (batch order) to piece j of ``np.array_split(range(n), len(kept))`` (vectorised)."""
    moved = np.flatnonzero(step == drop)
    order = moved[np.argsort(model[moved], kind="stable")]
    m = model[order]
    sizes = np.bincount(m, minlength=int(model.max()) + 1 if len(model) else 0)
    first = np.cumsum(sizes) - sizes
    j = np.arange(len(order)) - first[m]
    q, r = sizes[m] // len(kept), sizes[m] % len(kept)
    big = r * (q + 1)  # the first r pieces hold q + 1 roots
    piece = np.where(j < big, j // (q + 1), r + (j - big) // np.maximum(q, 1))
    step[order] = kept[piece]


def merge_decision(history: list[dict], k: int) -> tuple[int, bool]:
    """``auto`` merging (§5.3) after an epoch: ``history`` holds every measured epoch's ``merged`` steps and
    agreed ``seconds``. After the first, merge one step; then while the epoch time fell merge one more (up to
    K − 1, then freeze there); once it did not, go back to the previous epoch's count and freeze.
    Returns (merged steps of the next epoch, frozen)."""
    cur = history[-1]
    if len(history) == 1 or cur["seconds"] < history[-2]["seconds"]:
        if cur["merged"] >= k - 1:
            return cur["merged"], True
        return cur["merged"] + 1, False
    return history[-2]["merged"], True


def _with_global_order(ctx: WorkerContext) -> WorkerContext:
    """The context distdgl's set-up sees: global batch order (hopgnn's own orders are handled here)."""
    meta = dict(ctx.plan_meta)
    meta["strategy"] = {**meta["strategy"], "options": {**ctx.options, "batch_order": "global"}}
    return dataclasses.replace(ctx, plan_meta=meta)


class HopGnnStrategy(DistDglStrategy):
    name = "hopgnn"

    def __init__(self, ctx: WorkerContext, model):
        opts = ctx.options
        super().__init__(_with_global_order(ctx), model)
        self.k = ctx.world
        self.migrated_to: dict[int, int] = {}
        self.local_only = opts["batch_order"] == "local-only"
        self.pregather = bool(opts["pregather"])
        self.migrate = bool(opts["migrate"]) and not self.local_only
        merge = opts["merge"]
        self.auto = merge == "auto" and not self.local_only and self.k > 1
        # one worker has no peer to merge with: 'auto' means no merging there
        fixed = 0 if merge == "auto" else min(int(merge), self.k - 1)
        self.merged = 0 if (self.auto or self.local_only) else fixed
        self.frozen = not self.auto
        self.history: list[dict] = []  # auto merging: every measured epoch's merged steps and agreed seconds
        # every training node's label (a merged root runs away from home)
        self._root_ids, self._root_labels = self._labels_by_id(
            self.train_global, self.labels[self.train_rows].numpy()
        )
        if self.local_only:
            self.local_batch = math.ceil(self.batch_size / self.k)
            self.train_counts = np.bincount(self.book.owner[self.all_train], minlength=self.k)
            self.num_steps = int(math.ceil(self.train_counts.max() / self.local_batch))
        self.micro = self._time_step_count()
        self._perm_lock = threading.Lock()
        # the global order's permutation (either thread), and local-only: this server's own (sampler thread)
        self._perm_for: int | None = None
        self._perm_all: np.ndarray | None = None
        self._own_for: int | None = None
        self._own_perm: np.ndarray | None = None
        self._stash: Any = None  # pre-gathered: every micro-batch's step; else (roots, total, seconds)
        self._at = (0, 0, 0)
        self._epoch_start, self._epoch_merged = time.perf_counter(), self.merged
        self.param_count = sum(p.numel() for p in self.model.parameters())

    def _time_step_count(self) -> int:
        return 1 if self.local_only else self.k - self.merged

    # --- batches and time steps ---------------------------------------------------------------------------
    def global_batch(self, epoch: int, step: int) -> np.ndarray:
        """Global batch ``step`` of ``epoch`` (distdgl's global order), from either thread."""
        with self._perm_lock:
            if self._perm_for != epoch:
                self._perm_for, self._perm_all = epoch, shuffled(self.all_train, self.cfg.seed, epoch)
            perm = self._perm_all
        return perm[step * self.batch_size : (step + 1) * self.batch_size]

    def iteration(self, epoch: int, step: int) -> tuple[np.ndarray, list[np.ndarray], int]:
        """(the kept time steps, this server's roots at each of them, the global batch size)."""
        chunk = self.global_batch(epoch, step)
        kept, model, at = time_steps(self.book.owner[chunk], self.k, self.merged)
        here = (model + at) % self.k == self.rank
        return kept, [chunk[here & (at == t)] for t in kept], len(chunk)

    def batch(self, epoch: int, step: int) -> tuple[np.ndarray, int | None]:
        """local-only: this server's next ceil(B/K) own training nodes; the step's count over all servers."""
        if self._own_for != epoch:
            self._own_perm, self._own_for = shuffled(self.train_global, self.cfg.seed, epoch), epoch
        b = self.local_batch
        everyone = np.clip(self.train_counts - step * b, 0, b)
        return self._own_perm[step * b : (step + 1) * b], int(everyone.sum())

    # --- preparing a time step (sampler side) -----------------------------------------------------------
    def prepare_micro(self, epoch: int, step: int, micro: int) -> PreparedStep:
        if self.local_only:
            return self.prepare(epoch, step)
        if micro == 0:
            t0 = time.perf_counter()
            _kept, roots, total = self.iteration(epoch, step)
            seconds = time.perf_counter() - t0
            self._stash = (
                self._pregathered(epoch, step, roots, total, seconds)
                if self.pregather
                else (roots, total, seconds)
            )
        if self.pregather:
            return self._stash[micro]
        roots, total, seconds = self._stash
        return self.prepare(epoch, step, (roots[micro], total), extra_seconds=seconds if micro == 0 else 0.0)

    def _pregathered(
        self, epoch: int, step: int, roots: list[np.ndarray], total: int, seconds: float
    ) -> list[PreparedStep]:
        """Every time step of the iteration sampled, then their deduplicated input rows gathered at once (one
        fetch: a request per peer)."""
        t0 = time.perf_counter()
        blocks = [self.blocks(epoch, step, r) for r in roots]
        t1 = time.perf_counter()
        if self.on_device is not None:  # sampled on the device: the union and the gather stay there
            union = torch.unique(torch.cat([b[0].src for b in blocks]))
            x, degrees, fetched = self.on_device.inputs(union)
        else:
            union = np.unique(np.concatenate([b[0].src for b in blocks]))
            x, degrees, fetched = self.gather_inputs(union)
        t2 = time.perf_counter()
        out, union = [], torch.as_tensor(union)
        for i, (r, b) in enumerate(zip(roots, blocks, strict=True)):
            at = torch.searchsorted(union, torch.as_tensor(b[0].src))
            first = i == 0  # the iteration's sampling and fetch are counted once
            out.append(
                PreparedStep(
                    r,
                    total,
                    b,
                    x[at],
                    degrees[at] if degrees is not None else None,
                    {"sample": (t1 - t0 + seconds) if first else 0.0, "fetch": (t2 - t1) if first else 0.0},
                    fetched_rows=fetched if first else 0,
                )
            )
        return out

    # --- the interface ----------------------------------------------------------------------------------
    def forward(self, epoch: int, step: int, micro: int = 0) -> StepOutput:
        if step == 0 and micro == 0:
            self._epoch_start, self._epoch_merged = time.perf_counter(), self.merged
        if micro > 0 and self.migrate:
            kept = self.iteration(epoch, step)[0]
            self._migrate(int(kept[micro] - kept[micro - 1]))
        self.epoch, self._at = epoch, (epoch, step, micro)
        prep = self._next(epoch, step, micro)
        self._count(prep)
        count_preparation(prep)
        # a time step with no root of this model homed here computes nothing
        return self.step_output(
            epoch, step, prep, self.root_labels(prep.targets), torch.arange(len(prep.targets))
        )

    def _count(self, prep: PreparedStep) -> None:
        super()._count(prep)
        t = self.timers
        src = prep.blocks[0].src if prep.blocks else prep.targets
        if isinstance(src, torch.Tensor):  # sampled on the device: counted there, read once per epoch
            t["feature_misses"] += (self.on_device.input_row_of[src] < 0).sum()
        else:  # the rows this time step reads remotely
            t["feature_misses"] += int((self.book.owner[src] != self.rank).sum())
        t["away_roots"] += int((self.book.owner[prep.targets] != self.rank).sum())

    def root_labels(self, roots: np.ndarray) -> torch.Tensor:
        return self._root_labels[torch.from_numpy(np.searchsorted(self._root_ids, roots))]

    def backward(self, grad_logits: torch.Tensor) -> None:
        super().backward(grad_logits)
        epoch, step, micro = self._at
        if not self.frozen and step == self.steps(epoch) - 1 and micro == self.micro - 1:
            self._decide_merge(epoch)

    # --- migration and merging --------------------------------------------------------------------------
    def _migrate(self, shift: int) -> None:
        """Every model moves ``shift`` servers on with its parameters and accumulated gradients: this server
        sends what it holds to server rank + shift and takes over the model of server rank − shift."""
        params = list(self.model.parameters())
        with torch.no_grad():
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            flat = torch.cat([t.reshape(-1) for t in (*params, *grads)]).cpu().reshape(1, -1)
            to, frm = (self.rank + shift) % self.k, (self.rank - shift) % self.k
            self.migrated_to[to] = self.migrated_to.get(to, 0) + flat.numel() * flat.element_size()
            chunks = [flat if q == to else flat[:0] for q in range(self.k)]
            got = self.tr.all_to_all(chunks, [int(q == frm) for q in range(self.k)], "migrate")[frm]
            for p, g in zip(params, grads, strict=True):
                p.grad = g  # a new zero gradient where there was none
            held = [*params, *grads]
            parts = got.to(params[0].device).reshape(-1).split([t.numel() for t in held])
            for t, part in zip(held, parts, strict=True):
                t.copy_(part.view_as(t))

    def reset_stats(self) -> None:
        super().reset_stats()
        self.migrated_to = {}  # bytes of models this server sent on, per receiving server

    def _decide_merge(self, epoch: int) -> None:
        """At an epoch's end (every rank, in its compute thread): the slowest rank's epoch time, and the next
        epoch's merged steps by :func:`merge_decision` — the same on every rank."""
        mine = int((time.perf_counter() - self._epoch_start) * 1e6)
        seconds = self.ctx.all_reduce_int(mine, "max") / 1e6
        if epoch == 0:  # the warm-up epoch pays first-use costs (caches, JIT, heap): comparing against it
            return  # would favour the first merge, so the examination starts from the second epoch
        self.history.append({"epoch": epoch, "merged": self.merged, "seconds": seconds})
        self.merged, self.frozen = merge_decision(self.history, self.k)
        self.micro = self._time_step_count()

    # --- state and figures ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"merged": self.merged, "frozen": self.frozen, "history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.merged, self.frozen = int(state["merged"]), bool(state["frozen"])
        self.history = list(state["history"])
        self.micro = self._time_step_count()

    def stats(self) -> dict:
        t = self.timers
        width, itemsize = self.features.shape[1], self.features.element_size()
        measured = [h["seconds"] for h in self.history if h["epoch"] == self.epoch]
        return {
            **super().stats(),
            "time_steps": 1 if self.local_only else self.k - self._epoch_merged,
            "merged_steps": self._epoch_merged,
            "merge_frozen": self.frozen,
            **({"merge_epoch_seconds": measured[0]} if measured else {}),
            "feature_misses": int(t["feature_misses"]),
            "miss_rate": int(t["feature_misses"]) / t["source_rows"] if t["source_rows"] else 0.0,
            "feature_bytes": int(t["fetched_rows"]) * width * itemsize,
            "away_roots": int(t["away_roots"]),
            "model_values": self.param_count,
            # where this server's models went (a model at server s in time step t is at s + 1 in t + 1)
            "migrated_bytes_to": {str(q): n for q, n in sorted(self.migrated_to.items())},
        }


STRATEGY = HopGnnStrategy
