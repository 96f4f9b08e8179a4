"""`g3 info PATH`."""

from __future__ import annotations

import click

from g3cli.output import print_result, print_summary
from stages.info import summarize


@click.command("info")
@click.argument("path", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON instead of a table.")
@click.option("--verify", is_flag=True, help="Stores: recompute every array checksum and report mismatches.")
def command(path, as_json, verify):
    """Summarise a g3 artifact: a store (nodes, arcs, degrees, features, classes, splits, size on disk),
    a partition (per-partition table and balance ratios), a plan or a run."""
    summary = summarize(path, verify=verify)
    print_result(summary, as_json, print_summary)
