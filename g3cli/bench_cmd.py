"""`g3 bench STORE`."""

from __future__ import annotations

import click

from g3cli.output import print_result, stdout_console
from g3cli.paths import force_option, out_option
from g3cli.settings import setting_options
from stages.bench import BenchOptions, print_bench, run_bench


@click.command("bench")
@click.argument("store", type=click.Path())
@setting_options(BenchOptions)
@out_option(
    "Output folder: bench.json, bench.png, graph.npz, g3's partitions/plans/runs, peer logs "
    "[default: STORE.bench beside the store]. Its partitions and plans are reused while they match."
)
@force_option("Replace the bench.json of an earlier benchmark in OUT.")
@click.option("--json", "as_json", is_flag=True, help="Print bench.json instead of the table.")
def command(store, out, force, as_json, **settings):
    """Compare training strategies side by side on STORE, next to DGL and PyG, in one invocation: each strategy
    with each worker count (its partition, plan and training run), single-process g3 full-graph, PyG and DGL
    full-graph training, all with the same model, optimizer, epochs and thread count. The table, bench.json
    and bench.png give the median epoch time, bytes sent per epoch, final test accuracy, peak memory per
    worker and the ratios. A peer that is not installed is reported as such. The peers read the graph from a
    neutral .npz exported once."""
    result = run_bench(store, BenchOptions(**settings), out=out, force=force)
    print_result(result, as_json, lambda r: print_bench(r, stdout_console()), indent=1)
