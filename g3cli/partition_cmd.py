"""`g3 partition STORE --workers K`."""

from __future__ import annotations

import click

from g3cli.output import console
from g3cli.paths import OutputPath, force_option, out_option
from g3cli.settings import setting_options
from stages.partition import PartitionOptions, print_partition_summary, run_partition


@click.command(name="partition")
@click.argument("store", type=click.Path())
@setting_options(PartitionOptions)
@out_option("Output folder. Default: STORE.part-<method>-<K> beside the store.")
@click.option(
    "--plot",
    type=OutputPath(),
    default=None,
    help="Also draw the per-partition remote-set sizes as bars into this PNG file.",
)
@force_option("Replace OUT if it exists.")
def command(store, out, plot, force, **settings):
    """Partition the nodes of STORE over K workers and write one shard folder per worker.

    \b
    OUT holds partition.json (method, parameters, timing, per-partition figures, balance ratios),
    assignment.npy (int32 node -> partition) and part-00000/ ... with plain .npy files: owned and remote
    nodes, the local in-edge CSR, degrees, features, labels, splits and send lists (docs/ARTIFACTS.md).
    A worker needs only its own folder and partition.json.

    \b
    Remote set of partition i = the distinct nodes outside i with an arc into i: what worker i receives per
    layer. g3 balances these sizes across workers while keeping their total near METIS's.
    """
    summary = run_partition(store, PartitionOptions(**settings), out=out, force=force, plot=plot)
    print_partition_summary(summary, console)
    if plot:
        console.print(f"plot: {plot}")
