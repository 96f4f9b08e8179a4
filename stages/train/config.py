"""Training settings: the runtime's (``stages.kits.runtime.config.RuntimeConfig``) plus what only training needs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from stages.common.errors import G3InputError
from stages.common.settings import setting
from stages.kits.runtime.config import RuntimeConfig, check_runtime


@dataclass
class TrainConfig(RuntimeConfig):
    """A run's settings: the runtime's (RuntimeConfig) and training's own, each a `g3 train` option (``setting``)."""

    epochs: int = setting(
        10, "Epochs (a full-graph strategy takes one optimizer step per epoch, a mini-batch one per batch)."
    )
    lr: float = setting(0.01, "Adam learning rate.")
    weight_decay: float = setting(0.0, "Adam weight decay.")
    workers: int | None = setting(
        None,
        "Local worker processes to spawn; must equal the plan's worker count [default: the plan's]. Under "
        "torchrun, RANK/WORLD_SIZE/MASTER_ADDR come from the environment instead.",
    )
    profile: str | None = setting(
        None,
        "Write PROFILE.json: compute seconds per arc, node and bin of each layer on this device, fitted from "
        "the last epoch's bins, the warmest (input of `g3 simulate --profile`).",
        path="output",
    )
    count_ops: bool = setting(
        False,
        "Count the aten operations one steady-state training step dispatches (the first step of the second "
        "epoch, its sampling included wherever it runs) and those that make the host wait for the device (a "
        "value read back, nonzero, unique, a boolean mask, a copy to the host; a copy from the host): "
        "ops_per_step, sync_ops_per_step, h2d_copies_per_step and each by operation name in that epoch's "
        "metrics record, per worker. What a GPU pays per step besides the arithmetic.",
    )
    eval_every: int | None = setting(
        None,
        "Evaluate train/valid/test accuracy every N epochs (0: never) [default: 1; with --resume: the run's].",
    )
    checkpoint_every: int | None = setting(
        None, "Write a checkpoint every N epochs (0: never) [default: 0; with --resume: the run's]."
    )
    resume: bool = setting(False, "Continue the run in RUN from its latest checkpoint.")
    logger: tuple[str, ...] = setting(
        (),
        "Also log every epoch's figures to RUN/metrics.csv (csv) or TensorBoard event files in "
        "RUN/tensorboard (tensorboard: pip install 'g3[tensorboard]'); repeatable. RUN/metrics.jsonl is always "
        "written.",
        choices=("csv", "tensorboard"),
    )
    live: bool = True  # rich live display on rank 0

    def check(self) -> None:
        """The settings' own checks, one line each (``g3 train`` and ``g3 bench``, before any work): the runtime's
        and training's."""
        check_runtime(self)
        if self.epochs < 1:
            raise G3InputError("--epochs must be >= 1")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise G3InputError("--lr must be a positive number")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise G3InputError("--weight-decay must be >= 0")
