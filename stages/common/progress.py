"""Rich progress bars with ETA for long steps; quiet when not on a terminal or when asked."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console(stderr=True)


def quiet() -> bool:
    return os.environ.get("G3_QUIET", "") not in ("", "0")


def make_progress() -> Progress:
    """A progress display with description, bar, count, elapsed time and ETA (to stderr)."""
    return Progress(
        TextColumn("[bold blue]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("•"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        disable=quiet() or not sys.stderr.isatty() and os.environ.get("G3_PROGRESS") != "1",
    )
