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


def make_progress(
    description: str = "[bold blue]{task.description}",
    *extra: TextColumn,
    console: Console = console,
    show_always: bool = False,
) -> Progress:
    """A progress display to stderr: description, bar, count, elapsed time, ETA and ``extra`` columns; shown on a
    terminal (or with G3_PROGRESS=1, or ``show_always``), never with G3_QUIET."""
    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("•"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        *extra,
        console=console,
        transient=False,
        disable=quiet() or not (show_always or sys.stderr.isatty() or os.environ.get("G3_PROGRESS") == "1"),
    )
