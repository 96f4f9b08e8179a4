"""What a strategy's planner gets from ``run_plan``: the partition, its shards, the model and the options."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress

from stages.common.model_spec import ModelSpec
from stages.common.partition_artifact import Shard


@dataclass
class PlanContext:
    part: Path
    partition: dict  # partition.json
    shards: list[Shard]
    spec: ModelSpec
    options: dict  # the strategy's options, parsed
    progress_display: Progress

    @property
    def num_workers(self) -> int:
        return len(self.shards)

    def progress(self, items: Iterable, description: str) -> Iterator:
        """``items`` with a progress bar (ETA) while they are worked through."""
        items = list(items)
        task = self.progress_display.add_task(description, total=len(items))
        for item in items:
            yield item
            self.progress_display.advance(task)
