"""``sancus``: SANCUS (seed 001 §4.3) — full-graph training where each worker caches its peers' embeddings and a
worker whose rows are fresh enough skips sending them (skip-broadcast); receivers then use their cached copy.

Per hidden layer l and owner j, every worker knows when j last sent (``version[l][j]``, an epoch); whether j
sends this epoch follows ``--staleness``:

* ``epoch:N`` (check E): when the copy the others hold would be more than N epochs old (deterministic: every
  worker computes every owner's decision itself);
* ``ask:N`` (check A, 001 Alg. 5): the *receivers* decide. After computing with its copy of owner j's rows, a
  receiver whose copy was more than N epochs old (``Ver − Ver_i(j) > N``) asks j for fresh rows, and j sends at
  its next epoch — the paper's Fig. 14(b): too stale at epoch 9, sent at epoch 10. Only receivers that hold
  rows of j ask. The asks travel as one word per (receiver, owner) pair (``p2p``: j sends to the askers alone)
  or as an OR all-reduce of the K flags (``broadcast``: every worker must know the roots). A copy is thus used
  up to N+1 epochs old; in this lock-step runtime every receiver of j holds the same version, so the sends fall
  on epoch:N+1's epochs (no ask:N is exact) — the asymmetry check A is for, workers at different speeds, does
  not arise here;
* ``drift:X`` (check H): the owner sends when ``‖H − H_sent‖ / ‖H_sent‖ > X`` over the rows it sends (the
  relative Frobenius norm by default, ``--drift-norm max`` the relative largest change); the others learn it
  from the one-word headers (``p2p``) or an all-reduce of the K flags (``broadcast``).

Layouts (``--sancus-comm``): ``broadcast`` — the thesis's: each fresh owner in turn broadcasts its whole block
of rows, every worker keeps the rows of its remote nodes (``broadcast_pick``), so a worker receives about
(K−1)/K · N rows per fresh layer; ``p2p`` — g3's boundary rows, one message per peer, each preceded by a
one-word header (1: rows follow; 0: stale, use the cache), so a stale owner sends the header alone.

What is cached is the owner's output *before* dropout: the receiver applies the current epoch's mask, keyed
by (seed, epoch, layer, node) as everywhere in g3, so epoch:0 and drift:0 are exactly full-graph training. Layer-0
features are static: fetched once. Backward gradients are exchanged every epoch (the authors' code never
skips them), peer-to-peer in both layouts: they are contributions to the owners' rows, not rows of a block
(the thesis broadcasts δ_i; with in-edge row blocks the owners need the sum of the contributions). The
receiver's gradient flows to the owner's *current* rows (the stale value stood in for them). Optional gradient
clipping (``--grad-clip TH``, off by default) clips the L2 norm of the gradient rows a worker returns per
layer at TH/√K. Evaluation is exact: every boundary row, fresh, no cache read or written.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from stages.kits.runtime.kernels import relu_dropout, take_rows_at
from stages.kits.runtime.layersync import LayerSyncStrategy
from stages.kits.runtime.strategy import WorkerContext


class SancusStrategy(LayerSyncStrategy):
    name = "sancus"
    owner_dropout = False  # rows are cached before dropout; the receiver applies the current epoch's mask

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        opts = ctx.options
        st = opts.get("staleness") or {"policy": "epoch", "bound": 0}
        self.policy, self.bound = st["policy"], st["bound"]
        self.layout = opts.get("sancus_comm", "broadcast")
        self.norm = opts.get("drift_norm", "fro")
        self.clip = float(opts.get("grad_clip", 0.0) or 0.0)
        k, L = ctx.world, self.num_layers
        widths = ctx.spec.widths
        # per hidden layer l (1..L-1): the remote rows last received, the epoch each owner last sent, and (drift)
        # this worker's rows as it last sent them
        self.cache = {
            li: torch.zeros((self.n_rem, widths[li]), dtype=ctx.cfg.torch_dtype) for li in range(1, L)
        }
        self.version = {li: torch.full((k,), -1, dtype=torch.int64) for li in range(1, L)}
        self.sent: dict[int, torch.Tensor | None] = {li: None for li in range(1, L)}
        self.sent_layers = self.skipped_layers = 0
        # check A: the owners whose rows this worker holds (the only ones it ever asks)
        self.holds = torch.from_numpy(np.diff(np.asarray(ctx.shard.remote_owner_ptr, dtype=np.int64)) > 0)
        self.holds[self.rank] = False
        if self.layout == "p2p":  # the rows a peer receives from this worker: drift is measured on them
            ids = [i for i in self.send_ids if len(i)]
            self.send_rows = torch.unique(torch.cat(ids)) if ids else torch.zeros(0, dtype=torch.int64)
        else:
            self.block_sizes = [int(w["num_owned"]) for w in ctx.plan_meta["workers"]]
            pick = ctx.plan.table("broadcast_pick")
            self.pick = [torch.zeros(0, dtype=torch.int64) for _ in range(k)]
            for _step, peer, sl in pick.message_slices():
                self.pick[peer] = torch.from_numpy(np.asarray(pick.nodes[sl], dtype=np.int64))
            self.send_rows = None  # the whole block

    # --- staleness ------------------------------------------------------------------------------------------
    def _my_rows(self, h: torch.Tensor) -> torch.Tensor:
        return h if self.send_rows is None else take_rows_at(h, self.send_rows)

    def _drifted(self, li: int, h: torch.Tensor) -> bool:
        """Check H: this worker's rows moved by more than the bound since it last sent them."""
        last = self.sent[li]
        if last is None:
            return True
        now = self._my_rows(h)
        if self.norm == "max":
            change, scale = (now - last).abs().max(), last.abs().max()
        else:
            change, scale = torch.linalg.norm(now - last), torch.linalg.norm(last)
        return bool(change > self.bound * scale) if float(scale) > 0 else bool(change > 0)

    def fresh_owners(self, li: int, h: torch.Tensor, epoch: int) -> torch.Tensor:
        """Bool ``[K]``: the owners that send layer ``li``'s rows this epoch (known to every worker); checks E
        and H, where the owner's side decides."""
        age = epoch - self.version[li]
        never = self.version[li] < 0
        if self.policy == "epoch":
            return never | (age > self.bound)
        mine = self._drifted(li, h)
        if self.layout == "p2p":  # the others learn it from the headers
            out = torch.zeros(self.ctx.world, dtype=torch.bool)
            out[self.rank] = mine
            return out
        flags = torch.zeros(self.ctx.world, dtype=torch.int64)
        flags[self.rank] = int(mine)
        return self.tr.all_reduce_max(flags, f"drift{li - 1}").bool()

    def asks(self, li: int, epoch: int) -> torch.Tensor:
        """Check A, the receiver's side: bool ``[K]``, the owners this worker asks for layer ``li``'s rows at
        ``epoch``. It raised the asks at the end of the previous epoch, after computing with its copies: an owner
        whose copy was then more than N epochs old, or of whom it holds no copy yet."""
        version = self.version[li]
        return self.holds & ((version < 0) | ((epoch - 1) - version > self.bound))

    # --- exchanges ------------------------------------------------------------------------------------------
    def exchange_forward(self, li: int, h: torch.Tensor, epoch: int, training: bool) -> torch.Tensor:
        if not training:  # exact inference: every boundary row, fresh; the caches are left alone
            return self.exact_exchange(li, h, f"eval{li - 1}")
        label = f"fwd{li - 1}"
        if self.policy == "ask":
            asks = self.asks(li, epoch)
            if self.layout == "broadcast":  # the roots of this layer's broadcasts: asked by someone
                fresh = self.tr.all_reduce_max(asks, f"ask{li - 1}").bool()
                self._broadcast(li, h, fresh, label)
            else:
                fresh = self._p2p_on_request(li, h, asks, label)
        elif self.layout == "broadcast":
            fresh = self.fresh_owners(li, h, epoch)
            self._broadcast(li, h, fresh, label)
        else:
            fresh = self._p2p(li, h, bool(self.fresh_owners(li, h, epoch)[self.rank]), label)
        self.version[li][fresh] = epoch
        mine = int(bool(fresh[self.rank]))
        if mine and self.policy == "drift":
            self.sent[li] = self._my_rows(h).clone()
        self.sent_layers += mine
        self.skipped_layers += 1 - mine
        return self.cache[li]

    def _broadcast(self, li: int, h: torch.Tensor, fresh: torch.Tensor, label: str) -> None:
        """Each fresh owner in turn broadcasts its whole block; the others keep the rows they need."""
        for j in range(self.ctx.world):
            if not bool(fresh[j]):
                continue
            if j == self.rank:
                self.tr.broadcast(h.contiguous(), j, label)
            else:
                buf = torch.empty((self.block_sizes[j], h.shape[1]), dtype=h.dtype)
                self.tr.broadcast(buf, j, label)
                lo = int(self.ctx.shard.remote_owner_ptr[j])
                self.cache[li][lo : lo + len(self.pick[j])] = take_rows_at(buf, self.pick[j])

    def _p2p(self, li: int, h: torch.Tensor, mine: bool, label: str) -> torch.Tensor:
        """A one-word header to every peer (1: rows follow), then the fresh owners' boundary rows."""
        k = self.ctx.world
        heads = self._words([mine] * k, f"{label}-header")
        fresh = torch.tensor([bool(mine) if q == self.rank else heads[q] for q in range(k)])
        self._boundary_rows(li, h, [bool(mine)] * k, fresh.tolist(), label)
        return fresh

    def _p2p_on_request(self, li: int, h: torch.Tensor, asks: torch.Tensor, label: str) -> torch.Tensor:
        """Check A over p2p: a one-word ask to every peer (1: send me your rows), then each owner sends its
        boundary rows to the peers that asked. Returns bool ``[K]``: the owners that sent here, and at this
        worker's own position whether anyone asked it."""
        asked_by = self._words(asks.tolist(), f"ask{li - 1}")
        self._boundary_rows(li, h, asked_by, [bool(a) for a in asks], label)
        fresh = asks.clone()
        fresh[self.rank] = any(asked_by)
        return fresh

    def _words(self, words: list, label: str) -> list[bool]:
        """One word to every peer (``words[q]``, a flag); returns the flag each peer sent here (False at this
        worker's own position)."""
        k = self.ctx.world
        got = self.tr.all_to_all([torch.tensor([[int(w)]], dtype=torch.int64) for w in words], [1] * k, label)
        return [q != self.rank and bool(got[q].reshape(-1)[0]) for q in range(k)]

    def _boundary_rows(self, li: int, h: torch.Tensor, send_to: list, recv_from: list, label: str) -> None:
        """This worker's boundary rows to the peers ``send_to`` marks, and into the cache the rows of those
        ``recv_from`` marks (one all-to-all)."""
        chunks = [
            take_rows_at(h, ids) if send_to[q] else h.new_zeros((0, h.shape[1]))
            for q, ids in enumerate(self.send_ids)
        ]
        parts = self.tr.all_to_all(
            chunks, [len(r) if recv_from[q] else 0 for q, r in enumerate(self.recv_ids)], label
        )
        for q, rows in enumerate(parts):
            if q != self.rank and recv_from[q] and len(rows):
                self.cache[li][self.recv_ids[q]] = rows

    def input_transform(self, li: int, x: torch.Tensor, epoch: int, training: bool) -> torch.Tensor:
        """The current epoch's dropout mask on every input row, owned or cached (ReLU is idempotent on them)."""
        if not training or self.cfg.dropout <= 0.0:
            return x
        return relu_dropout(x, self.cfg.seed, epoch, li - 1, self.global_ids.to(x.device), self.cfg.dropout)

    def clip_gradient(self, grad_remote: torch.Tensor) -> torch.Tensor:
        return clip_rows(grad_remote, self.clip, self.ctx.world)

    # --- statistics and checkpoints ---------------------------------------------------------------------------
    def stats(self) -> dict:
        return {
            **super().stats(),
            "sancus_sent_layers": self.sent_layers,
            "sancus_skipped_layers": self.skipped_layers,
        }

    def reset_stats(self) -> None:
        super().reset_stats()
        self.sent_layers = self.skipped_layers = 0

    def state_dict(self) -> dict:
        state = {}
        for li in self.cache:
            state[f"cache.{li}"] = self.cache[li].clone()
            state[f"version.{li}"] = self.version[li].clone()
            if self.sent[li] is not None:
                state[f"sent.{li}"] = self.sent[li].clone()
        return state

    def load_state_dict(self, state: dict) -> None:
        for li in self.cache:
            cache, version = state.get(f"cache.{li}"), state.get(f"version.{li}")
            if cache is None or version is None or cache.shape != self.cache[li].shape:
                raise ValueError(
                    f"the checkpoint holds no sancus cache of layer {li} for this worker (or one of "
                    "another shape): resume needs the checkpoints of the same plan"
                )
            self.cache[li] = cache.to(self.cache[li].dtype)
            self.version[li] = version.to(torch.int64)
            self.sent[li] = state.get(f"sent.{li}")


def clip_rows(grad: torch.Tensor, threshold: float, workers: int) -> torch.Tensor:
    """``grad`` scaled down so that its L2 norm is at most ``threshold / sqrt(workers)`` (SANCUS's local share
    of a global threshold); unchanged when ``threshold`` is 0 (off) or the norm is within it."""
    if threshold <= 0.0 or grad.numel() == 0:
        return grad
    limit = threshold / math.sqrt(workers)
    norm = float(torch.linalg.norm(grad))
    return grad * (limit / norm) if norm > limit else grad


STRATEGY = SancusStrategy
