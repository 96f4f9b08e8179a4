"""`g3 report RUN [RUN ...]`."""

from __future__ import annotations

import click

from g3cli.output import print_report, print_result
from g3cli.paths import out_option
from stages.report import run_report


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@out_option(
    "Folder for the PNGs, summary.json and index.html: new, empty or an earlier report (whose files "
    "are replaced), never a run or a folder of other files [default: RUN/report for one run, "
    "./g3-report for several]."
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    help="Name of a run in legends and tables; repeat once per RUN, in the same order "
    "[default: the run folder's name, with parent folders when names clash].",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print summary.json (runs, plots, notes) instead of tables."
)
def command(runs, out, labels, as_json):
    """Plots and a summary comparing one or several training RUNs (folders written by `g3 train`).

    \b
    Writes into OUT:
      time_to_accuracy.png   valid/test accuracy against training time after epoch 0 (JIT compile)
      throughput.png         throughput of every epoch: sum over workers of owned nodes / epoch time
      scaling.png            median throughput against the worker count (runs with several counts)
      workers*.png           per run: compute / communication wait / all-reduce + step / idle per worker
      partition*.png         per partition: remote-set size and arcs of every part
      timeline*.png          per run with a RUN/trace/ folder: bin timeline of the traced epoch, per rank
      summary.json, index.html   the summary table and every plot on one page

    Throughput is the G3 paper's (§7): the sum of all workers' average throughput, a worker's being its owned
    nodes / its epoch time (owned counts from the run's plan, else its partition, else the store's node count).

    Prints a summary table (epochs, median epoch time, throughput, final/best accuracy, bytes sent per epoch)
    and says which plots were skipped and why. See docs/ARTIFACTS.md, "Report".
    """
    result = run_report(list(runs), out=out, labels=list(labels) or None)
    print_result(result, as_json, print_report)
