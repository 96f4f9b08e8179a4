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
    """Everything one worker reads from disk: its shard (partition) and its plan folder."""

    def __init__(self, shard: Shard, plan: WorkerPlan, num_layers: int, dtype: torch.dtype):
        self.rank = shard.rank
        self.shard = shard
        self.plan = plan
        self.num_owned = shard.num_owned
        self.num_remote = shard.num_remote
        self.global_ids = torch.from_numpy(np.concatenate([shard.owned, shard.remote]).astype(np.int64))
        self.features = torch.from_numpy(np.asarray(shard.load("features", mmap=False))).to(dtype)
        self.labels = torch.from_numpy(np.asarray(shard.load("labels", mmap=False)).astype(np.int64))
        self.in_degree = torch.from_numpy(np.array(shard.load("in_degree"), dtype=np.float64)).to(dtype)
        self.out_degree = torch.from_numpy(np.array(shard.load("out_degree"), dtype=np.float64)).to(dtype)
        self.splits = {s: torch.from_numpy(np.array(shard.load(s), dtype=np.int64)) for s in ("train", "valid", "test")}
        self.priority = plan.priority
        self.row_ptr = plan.row_ptr
        self.layers = [plan.layer(li) for li in range(num_layers)]
        self._tables: dict[str, Table] = {}

    def table(self, name: str) -> Table:
        if name not in self._tables:
            self._tables[name] = self.plan.table(name)
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
