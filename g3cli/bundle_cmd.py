"""`g3 bundle PLAN --nodes N`."""

from __future__ import annotations

import click

from g3cli.paths import force_option, out_option
from stages.bundle import run_bundle


@click.command("bundle")
@click.argument("plan", type=click.Path())
@click.option(
    "--nodes", type=int, required=True, help="Hosts of the run; each gets one self-contained folder."
)
@click.option(
    "--procs-per-node",
    type=int,
    default=None,
    help="Processes (ranks) per host; nodes x procs-per-node must be the plan's worker count "
    "[default: workers / nodes].",
)
@out_option("Bundle folder: node-00000 … node-<N-1>, bundle.json [default: PLAN.bundle-N beside PLAN].")
@force_option("Replace the bundle folder if it exists.")
def command(plan, nodes, procs_per_node, out, force):
    """Split PLAN into one folder per host for a multi-host run without a shared filesystem: node n's folder
    holds exactly what its ranks read — their shards and plan folders, the partition and plan JSONs,
    references relative to the folder — and a RUN.md with the torchrun command for that host (inside it,
    plan/ is the plan to give `g3 train`). Works for every strategy's plan. See docs/MULTINODE.md."""
    bundle = run_bundle(plan, nodes, procs_per_node, out=out, force=force)
    click.echo(
        f"bundle → {bundle['path']}: {bundle['nodes']} nodes x {bundle['procs_per_node']} processes "
        f"({bundle['strategy']} plan of {bundle['num_workers']} workers); each node-NNNNN/RUN.md says how to "
        "start it"
    )
