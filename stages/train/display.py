"""The rich live display of rank 0: an epoch progress bar with ETA and the latest figures."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import TextColumn

from stages.common.progress import make_progress, quiet


class LiveDisplay:
    def __init__(self, world: int, epochs: int, start: int):
        self.console = Console(stderr=True)
        self.quiet = quiet()
        self.progress = make_progress(
            f"[bold blue]training ({world} worker{'s' if world > 1 else ''})",
            TextColumn("{task.fields[status]}"),
            console=self.console,
        )
        self.task = self.progress.add_task("train", total=epochs, completed=start, status="")
        self.progress.start()

    def update(self, r: dict) -> None:
        parts = [f"loss {r['loss']:.4f}", f"{r['epoch_seconds']:.2f}s/epoch"]
        for split in ("train", "valid", "test"):
            if r.get(f"{split}_acc") is not None:
                parts.append(f"{split} {100 * r[f'{split}_acc']:.1f}%")
        status = "  ".join(parts)
        self.progress.update(self.task, advance=1, status=status)
        if not self.quiet and not sys.stderr.isatty():
            print(f"epoch {r['epoch']:4d}  {status}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.progress.stop()
