"""`g3 simulate PLAN`."""

from __future__ import annotations

import click

from g3cli.output import print_result, stdout_console
from g3cli.paths import force_option, out_option
from g3cli.settings import setting_options
from stages.simulate import SimulateOptions, print_simulation, run_simulate


@click.command("simulate")
@click.argument("plan", type=click.Path())
@setting_options(SimulateOptions)
@out_option("Output folder: simulate.json, workers.png, timeline.png, scaling.png [default: PLAN.sim].")
@force_option("Replace the simulate.json (and plots) of an earlier simulation in OUT.")
@click.option("--json", "as_json", is_flag=True, help="Print simulate.json instead of the tables.")
def command(plan, out, force, as_json, **settings):
    """Simulate one training epoch of PLAN on K workers (discrete events): the plan's exact bins and
    per-peer message bytes, compute rates from a profile of the real runtime, a network of full-duplex links.
    Reports per-worker busy / communication-wait / idle time and the epoch time of g3 with each --pipeline
    schedule and of the other strategies, and a scaling table over --scaling worker counts. A plan of
    another strategy is simulated through a g3 plan of its partition (the bins give the work); a mini-batch
    strategy's (distdgl, bytegnn, clustergcn, p3, hopgnn) by a per-step model calibrated on a run of it (--run); a neutrontp plan by
    its chunks and the plan's all-to-alls (naive or decoupled TP, bulk or pipelined)."""
    result = run_simulate(plan, SimulateOptions(**settings), out=out, force=force)
    print_result(result, as_json, lambda r: print_simulation(r, stdout_console()), indent=1)
