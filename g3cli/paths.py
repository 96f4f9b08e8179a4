"""The click type of every option or argument a command writes to.

Declaring an output as :class:`OutputPath` is what lets tests/test_force.py find every command's outputs from
the CLI's own definition and run the data-loss cases against each (an output pointed at the command's input,
inside it, or at a folder of the user's own files, with ``--force``): a new command's outputs are covered the
day it is added. The guard itself is the bottom layer's (``stages.common.atomic``), which every writer calls.
"""

from __future__ import annotations

import click


class OutputPath(click.Path):
    """A path the command creates or replaces (``-o``, ``--plans``, ``--cache``, ``--plot``, …)."""

    name = "output path"


def out_option(help: str):
    """The ``-o/--out`` option of a command that writes a folder or file (an :class:`OutputPath`)."""
    return click.option("-o", "--out", type=OutputPath(), default=None, help=help)


def force_option(help: str):
    """The ``--force`` option: replace what ``--out`` names when it is this command's earlier output."""
    return click.option("--force", is_flag=True, help=help)
