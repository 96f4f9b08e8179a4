"""Training settings: the runtime's (``stages.runtime.config.RuntimeConfig``) plus what only training needs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..common.errors import G3InputError
from ..runtime.config import RuntimeConfig, check_runtime, takes_knob_keywords


@takes_knob_keywords
@dataclass
class TrainConfig(RuntimeConfig):
    epochs: int = 10
    lr: float = 0.01
    weight_decay: float = 0.0
    workers: int | None = None  # None: the plan's worker count
    eval_every: int | None = None  # 0: never; None: 1, or the run's own when resuming
    checkpoint_every: int | None = None  # 0: never; None: 0, or the run's own when resuming
    logger: tuple[
        str, ...
    ] = ()  # where epoch figures also go: csv (RUN/metrics.csv), tensorboard (RUN/tensorboard)
    resume: bool = False
    profile: str | None = None  # write PROFILE.json (compute rates, for `g3 simulate`) from the last epoch
    live: bool = True  # rich live display on rank 0
    count_ops: bool = (
        False  # count one steady-state step's aten operations and synchronisations (metrics.jsonl)
    )

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
