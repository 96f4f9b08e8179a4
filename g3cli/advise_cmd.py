"""`g3 advise STORE`."""

from __future__ import annotations

import json

import click

from stages.advise import (
    CALIBRATION_EPOCHS,
    CONVERGENCE_MODELS,
    DEFAULT_BUDGET,
    DEFAULT_CONVERGENCE,
    DEFAULT_TARGET_EPOCHS,
    AdviseOptions,
    parse_links,
    parse_strategies,
    parse_workers,
    print_advice,
    run_advise,
)
from stages.common.errors import G3InputError
from stages.plan import MODELS

from .output import stdout_console
from .paths import OutputPath


@click.command("advise")
@click.argument("store", type=click.Path())
@click.option(
    "--workers",
    "-w",
    default="2",
    show_default=True,
    metavar="K[,K…]",
    help="Worker counts to consider, e.g. 2 or 2,4,8.",
)
@click.option(
    "--link",
    default="1gbit",
    show_default=True,
    metavar="RATE[,RATE…]",
    help="Link rates per host and direction to consider, as `g3 train --emulate-link` takes them "
    "(100mbit, 1gbit, 10gbit, …).",
)
@click.option(
    "--device-memory",
    default="16GiB",
    show_default=True,
    metavar="SIZE",
    help="Memory of one worker's device (24GiB, 512MiB, …): g3 and neutrontp size bins and chunks by it; "
    "every candidate's peak memory per worker is checked against it.",
)
@click.option(
    "--cluster",
    "cluster",
    type=click.Path(),
    default=None,
    metavar="FILE",
    help="A cluster of more than one kind of host (a g3.cluster JSON file: per host kind its count, "
    "workers_per_host, device_memory, link and speed relative to this machine; docs/ARTIFACTS.md "
    "'Cluster file'): K is its workers, each worker gets its host's link, speed and memory. "
    "Replaces --workers, --link and --device-memory.",
)
@click.option("--model", type=click.Choice(MODELS), default="sage", show_default=True, help="GNN model.")
@click.option("--layers", type=int, default=2, show_default=True, help="GNN layers L.")
@click.option("--hidden", type=int, default=16, show_default=True, help="Hidden width H (per head for GAT).")
@click.option("--heads", type=int, default=8, show_default=True, help="GAT attention heads.")
@click.option(
    "--strategies",
    default=None,
    metavar="S[,S…]",
    help="Only these strategies [default: every registered one, each with its main variants].",
)
@click.option(
    "--budget",
    type=float,
    default=DEFAULT_BUDGET,
    show_default=True,
    metavar="SECONDS",
    help="Seconds of calibration runs on this machine at most; strategies whose run would start after it "
    "are listed as not predicted.",
)
@click.option(
    "--calibration-epochs",
    type=int,
    default=CALIBRATION_EPOCHS,
    show_default=True,
    help="Epochs of each calibration run (the profile and each sampling strategy's run; the first is "
    "dropped by the models).",
)
@click.option(
    "--calibrate-link",
    default="auto",
    show_default=True,
    metavar="RATE|local|auto",
    help="Where the calibration runs run: on emulated hosts joined at RATE (`g3 train --emulate-link`: each "
    "host its own cores, as the cluster's hosts have; needs root), or 'local' processes sharing the "
    "machine's cores; 'auto': emulated hosts at 10gbit where this machine can build them, else local.",
)
@click.option(
    "--anchor/--no-anchor",
    default=True,
    show_default=True,
    help="Add to every prediction what its model missed on its own calibration run (measured minus "
    "modelled epoch there; per step for sampling models); --no-anchor: the bare model.",
)
@click.option(
    "--target-epochs",
    type=int,
    default=DEFAULT_TARGET_EPOCHS,
    show_default=True,
    help="Epochs exact full-graph training needs to your target accuracy (one optimizer step each).",
)
@click.option(
    "--convergence",
    type=click.Choice(list(CONVERGENCE_MODELS)),
    default=DEFAULT_CONVERGENCE,
    show_default=True,
    help="How the other candidates' epochs to the target follow: 'steps', the same optimizer steps "
    "(a mini-batch candidate with S steps an epoch needs target/S epochs), or 'epochs', the same "
    "epochs for all (checked on a real graph: docs/BENCHMARKS.md 'Time to target').",
)
@click.option(
    "--plans",
    type=OutputPath(),
    default=None,
    metavar="PLANS_DIR",
    help="Keep every candidate's partition and plan here; each ranking entry then names its plan and "
    "the `g3 train PLAN --emulate-link RATE` command that runs it as predicted.",
)
@click.option(
    "--cache",
    type=OutputPath(),
    default=None,
    help="Partitions, plans, the profile and calibration runs, reused by later calls while the store, "
    "model and options are unchanged [default: OUT/cache].",
)
@click.option(
    "-o",
    "--out",
    type=OutputPath(),
    default=None,
    help="Output folder: advise.json [default: STORE.advise beside the store].",
)
@click.option(
    "--force", is_flag=True, help="Replace the advise.json of an earlier call in OUT (its cache is reused)."
)
@click.option("--top", type=int, default=None, help="Print only the first N rows of the ranking.")
@click.option("--json", "as_json", is_flag=True, help="Print advise.json instead of the table.")
def command(
    store,
    workers,
    link,
    device_memory,
    cluster,
    model,
    layers,
    hidden,
    heads,
    strategies,
    budget,
    calibration_epochs,
    calibrate_link,
    anchor,
    target_epochs,
    convergence,
    plans,
    cache,
    out,
    force,
    top,
    as_json,
):
    """Which strategy, and how many workers, for this graph, model and cluster: every strategy (and its main
    options) at every K and link rate, partitioned, planned and predicted by `g3 simulate`'s models calibrated
    on this machine (a short profile run and a short run of each sampling strategy); epoch time, bytes per
    epoch, peak memory per worker against --device-memory, time to --target-epochs; ranked best first with
    the reason for each place, refusals with theirs. With --cluster FILE, a cluster of unlike hosts: each worker
    its host kind's link, compute speed and device memory. Writes OUT/advise.json."""
    if cluster is not None:
        from click.core import ParameterSource

        ctx = click.get_current_context()
        given = [
            f"--{name.replace('_', '-')}"
            for name in ("workers", "link", "device_memory")
            if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT
        ]
        if given:
            raise G3InputError(
                f"--cluster gives the workers, links and device memory: drop {', '.join(given)}"
            )
    opts = AdviseOptions(
        workers=parse_workers(workers),
        links=parse_links(link),
        device_memory=device_memory,
        model=model,
        layers=layers,
        hidden=hidden,
        heads=heads,
        strategies=parse_strategies(strategies),
        budget=budget,
        plans=plans,
        cache=cache,
        target_epochs=target_epochs,
        convergence=convergence,
        calibration_epochs=calibration_epochs,
        calibrate_link=calibrate_link,
        anchor=anchor,
        cluster=cluster,
    )
    result = run_advise(store, opts, out=out, force=force)
    if as_json:
        click.echo(json.dumps(result, indent=1, default=str))
    else:
        print_advice(result, stdout_console(), top=top)
