"""`g3 advise STORE`."""

from __future__ import annotations

import click

from g3cli.output import print_result, stdout_console
from g3cli.paths import force_option, out_option
from g3cli.settings import setting_options
from stages.advise import AdviseOptions, print_advice, run_advise


@click.command("advise")
@click.argument("store", type=click.Path())
@setting_options(AdviseOptions)
@out_option("Output folder: advise.json [default: STORE.advise beside the store].")
@force_option("Replace the advise.json of an earlier call in OUT (its cache is reused).")
@click.option("--top", type=int, default=None, help="Print only the first N rows of the ranking.")
@click.option("--json", "as_json", is_flag=True, help="Print advise.json instead of the table.")
def command(store, out, force, top, as_json, **settings):
    """Which strategy, and how many workers, for this graph, model and cluster: every strategy (and its main
    options) at every K and link rate, partitioned, planned and predicted by `g3 simulate`'s models calibrated
    on this machine (a short profile run and a short run of each sampling strategy); epoch time, bytes per
    epoch, peak memory per worker against --device-memory, time to --target-epochs; ranked best first with
    the reason for each place, refusals with theirs. With --cluster FILE, a cluster of unlike hosts: each worker
    its host kind's link, compute speed and device memory. Writes OUT/advise.json."""
    result = run_advise(store, AdviseOptions(**settings), out=out, force=force)
    print_result(result, as_json, lambda r: print_advice(r, stdout_console(), top=top), indent=1)
