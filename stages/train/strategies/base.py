"""The small interface every training strategy implements, and the per-worker data it works on.

A strategy turns "this worker's share of the graph + the model" into logits for the worker's owned nodes
(``forward``) and accumulates the local weight gradients from the gradient of those logits (``backward``).
The training loop (``stages/train/loop.py``) owns everything else: loss, gradient all-reduce, optimizer,
evaluation, metrics, checkpoints. A new strategy is one new file in this package.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from ...common.partition_artifact import Shard
from ...plan.artifact import WorkerPlan
from ...plan.tables import Table


class WorkerData:
    """Everything one worker reads from disk: its shard (partition) and its plan folder.

    Owned nodes are renumbered into the plan's priority order on load (owned-local id ``i`` here is
    ``plan.priority[i]`` in the shard; remote nodes keep their ids). Every plan bin then owns a contiguous
    range of rows, so writing a bin's outputs, reading a one-bin layer's inputs or a bin's output gradients are
    slices instead of scattered row copies. Everything this class hands out (features, labels, splits,
    degrees, global ids, bins, tables) uses the new numbering; ``order`` maps back to the shard's.
    """

    # P2P tables whose node lists are owned-local ids (the others hold remote offsets)
    OWNED_ID_TABLES = ("features_send", "fwd_send_", "bwd_recv_")

    def __init__(self, shard: Shard, plan: WorkerPlan, num_layers: int, dtype: torch.dtype):
        self.rank = shard.rank
        self.shard = shard
        self.plan = plan
        self.num_owned = shard.num_owned
        self.num_remote = shard.num_remote
        n_own = self.num_owned
        self.order = np.asarray(plan.priority, dtype=np.int64)  # shard owned-local id of each owned node here
        if len(self.order) != n_own:
            raise ValueError(f"plan priority list has {len(self.order)} nodes, the shard owns {n_own}")
        self.new_id = np.empty(n_own, dtype=np.int64)  # shard owned-local id -> id here
        self.new_id[self.order] = np.arange(n_own, dtype=np.int64)
        local_order = np.concatenate([self.order, np.arange(n_own, n_own + self.num_remote, dtype=np.int64)])
        self.global_ids = torch.from_numpy(np.concatenate([shard.owned, shard.remote]).astype(np.int64)[local_order])
        # one copy each: fancy indexing reads the memory-mapped shard straight into the reordered array
        self.features = torch.from_numpy(np.asarray(shard.load("features"))[self.order]).to(dtype)
        self.labels = torch.from_numpy(np.asarray(shard.load("labels"))[self.order].astype(np.int64))
        self.in_degree = torch.from_numpy(np.asarray(shard.load("in_degree"), dtype=np.float64)[local_order]).to(dtype)
        self.out_degree = torch.from_numpy(np.asarray(shard.load("out_degree"), dtype=np.float64)[local_order]).to(dtype)
        self.splits = {s: torch.from_numpy(np.sort(self.new_id[np.asarray(shard.load(s), dtype=np.int64)]))
                       for s in ("train", "valid", "test")}
        self.priority = np.arange(n_own, dtype=np.int64)
        self.row_ptr = plan.row_ptr
        self.layers = [self._renumber_layer(plan.layer(li)) for li in range(num_layers)]
        self._tables: dict[str, Table] = {}

    def _owned_to_new(self, ids: np.ndarray) -> np.ndarray:
        """Local ids (owned ones renumbered, remote ones kept)."""
        ids = np.asarray(ids, dtype=np.int64)
        owned = ids < self.num_owned
        out = ids.copy()
        out[owned] = self.new_id[ids[owned]]
        return out

    def _renumber_layer(self, lp):
        lp.src = self._owned_to_new(lp.src)
        return lp

    def table(self, name: str) -> Table:
        if name not in self._tables:
            t = self.plan.table(name)
            if name.startswith(self.OWNED_ID_TABLES) and len(t.nodes):
                t = Table(self.new_id[np.asarray(t.nodes, dtype=np.int64)], t.msgs)
            self._tables[name] = t
        return self._tables[name]


class Strategy:
    """Base class: holds the data, model, exchanger and per-epoch timers."""

    name = "base"

    def __init__(self, data: WorkerData, model: torch.nn.Module, exchanger, cfg):
        self.data = data
        self.model = model
        self.ex = exchanger
        self.cfg = cfg
        self.device = torch.device(cfg.device_for(data.rank))
        self.timers: dict[str, float] = defaultdict(float)

    def forward(self, epoch: int, training: bool) -> torch.Tensor:
        """Logits ``[num_owned, num_classes]`` of the owned nodes (owned-local order), on the host."""
        raise NotImplementedError

    def backward(self, grad_out: torch.Tensor, epoch: int) -> None:
        """Accumulate local weight gradients from ``grad_out`` (the gradient of ``forward``'s result)."""
        raise NotImplementedError

    def reset_timers(self) -> None:
        self.timers = defaultdict(float)


def strategy_class(name: str):
    """The strategy registered under ``name`` (one module per strategy)."""
    if name == "g3":
        from .g3 import G3Strategy

        return G3Strategy
    raise ValueError(f"unknown training strategy {name!r}")


def shard_and_plan(part: Path, plan_root: Path, rank: int, world: int):
    from ...common.partition_artifact import open_shard

    return open_shard(part, rank, world), WorkerPlan(plan_root, rank)
