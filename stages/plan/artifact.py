"""Reading a plan (``g3.plan`` v1): plan.json plus one self-contained folder per worker."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import numpy as np

from ..common.artifact_json import load_artifact_json
from ..common.errors import G3InputError
from .tables import Table

PLAN_SCHEMA = "g3.plan"
# 2: backward messages are numbered by the last bin (in plan order) that reads each node; version 1 plans
# numbered them for a reversed backward order
PLAN_VERSION = 2


def load_plan_meta(plan: str | Path) -> dict:
    """plan.json, checked for schema and version."""
    return load_artifact_json(plan, "plan.json", PLAN_SCHEMA, PLAN_VERSION, "plan", "g3 plan")


class LayerPlan:
    """Bins and blocks of one layer (arrays over the worker's priority list)."""

    def __init__(self, path: Path):
        self.path = path
        self.bin_ptr = self._load("bin_ptr")
        self.src_ptr = self._load("src_ptr")
        self.src = self._load("src")
        self.indices = self._load("indices")

    def _load(self, name: str) -> np.ndarray:
        f = self.path / f"{name}.npy"
        if not f.is_file():
            raise G3InputError(f"plan file {f.name} missing", path=self.path)
        return np.load(f)

    @property
    def num_bins(self) -> int:
        return len(self.bin_ptr) - 1


class WorkerPlan:
    """One worker's plan folder: priority list, per-layer bins, P2P tables."""

    def __init__(self, plan: str | Path, rank: int):
        self.root = Path(plan)
        self.rank = rank
        self.path = self.root / f"worker-{rank:05d}"
        if not self.path.is_dir():
            raise G3InputError(f"plan has no folder for worker {rank}", path=self.root)
        self.meta = json.loads((self.path / "worker.json").read_text())

    @cached_property
    def plan_meta(self) -> dict:
        """plan.json of the whole plan (widths and layer shapes)."""
        return load_plan_meta(self.root)

    def _load(self, name: str) -> np.ndarray:
        f = self.path / f"{name}.npy"
        if not f.is_file():
            raise G3InputError(f"plan file {f.name} missing", path=self.path)
        return np.load(f)

    @cached_property
    def priority(self) -> np.ndarray:
        return self._load("priority")

    @cached_property
    def row_ptr(self) -> np.ndarray:
        return self._load("row_ptr")

    def layer(self, li: int) -> LayerPlan:
        return LayerPlan(self.path / f"layer-{li}")

    def table(self, name: str) -> Table:
        """A P2P table by name (``features_send``, ``fwd_recv_0``, ``bwd_send_1`` …); empty when absent."""
        nodes, msgs = self.path / f"{name}_nodes.npy", self.path / f"{name}_msgs.npy"
        if not nodes.is_file():
            return Table.empty()
        return Table(np.load(nodes), np.load(msgs).reshape(-1, 3))
