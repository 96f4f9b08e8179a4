"""`g3 simulate PLAN`."""

from __future__ import annotations

import json

import click

from stages.simulate import (
    LINK_SHARE,
    SCHEDULES,
    SimulateOptions,
    parse_bandwidth,
    parse_latency,
    parse_workers_list,
    print_simulation,
    run_simulate,
)

from .output import stdout_console
from .paths import OutputPath
from .values import parsed


def _pipelines(ctx, param, value):
    out = []
    for v in value or ("none,intra,inter,multi",):
        for p in v.split(","):
            p = p.strip()
            if p not in SCHEDULES:
                raise click.BadParameter(f"{p!r} is not one of {', '.join(SCHEDULES)}")
            if p not in out:
                out.append(p)
    return tuple(out)


@click.command("simulate")
@click.argument("plan", type=click.Path())
@click.option(
    "--workers",
    "-w",
    type=int,
    default=None,
    help="Worker count K to simulate [default: the plan's]. Another K partitions and plans the plan's "
    "store again (same method, model and bins) into the --cache folder.",
)
@click.option(
    "--bandwidth",
    default="10Gbit",
    show_default=True,
    callback=parsed(parse_bandwidth),
    help="Link bandwidth per worker and direction, e.g. 10Gbit, 100Gbit, 1.25GB (bytes/s), inf.",
)
@click.option(
    "--latency",
    default="100us",
    show_default="100us: a gloo message on this machine, calibration.py",
    callback=parsed(parse_latency),
    help="One-way latency per message, e.g. 50us, 0.2ms, 0.",
)
@click.option(
    "--link-share",
    type=float,
    default=LINK_SHARE,
    show_default="0.956: TCP over Ethernet, MTU 1500",
    help="Share of each link's bytes that carry payload (headers take the rest; "
    "stages/simulate/calibration.py).",
)
@click.option(
    "--hosts",
    type=int,
    default=None,
    help="Hosts the K workers run on, K/H consecutive ranks each, talking over the host's loopback and "
    "sharing its link, as `g3 train --emulate-link --hosts` [default: one per worker; full-graph "
    "plans only].",
)
@click.option(
    "--profile",
    type=click.Path(),
    default=None,
    help="PROFILE.json from `g3 train PLAN --profile PROFILE.json` (seconds per arc / node / bin per "
    "layer on the real runtime). Without it, placeholder rates (not calibrated).",
)
@click.option(
    "--pipeline",
    "pipelines",
    multiple=True,
    callback=_pipelines,
    help="g3 schedules to simulate (repeat or comma-separate): none, intra, inter, multi "
    "[default: all four]. A neutrontp plan: 'none' simulates the bulk collectives, any other value "
    "the inter-chunk pipeline (neutrontp-TP and neutrontp-TP+pipe; both by default).",
)
@click.option(
    "--baselines/--no-baselines",
    default=True,
    show_default=True,
    help="Also simulate the other strategies on the same partitions and rates — bns-gcn (layer-synchronous, "
    "whole partition: BNS-GCN, NeutronStar as G3 ran it), sancus-broadcast and sancus-p2p (SANCUS, "
    "--staleness epoch:N) — and the L-hop halo-replication baseline (DistGNN/ROC). Not beside a "
    "neutrontp plan (a feature split has no vertex partition: simulate a g3 plan of the store).",
)
@click.option(
    "--boundary-sample",
    type=float,
    default=1.0,
    show_default=True,
    help="bns-gcn's sampling ratio P: the hidden layers' boundary rows (and their gradients) scale by P.",
)
@click.option(
    "--staleness-epochs",
    type=int,
    default=1,
    show_default=True,
    help="sancus's epoch:N: hidden layers' rows move every N+1 epochs; the epoch reported is the mean of a "
    "sending epoch and N skipping ones.",
)
@click.option(
    "--scaling",
    default="2,4,8,16",
    show_default=True,
    callback=parsed(parse_workers_list),
    help="Worker counts of the scaling table (like the paper's Figs. 7-11, 16, 17): a list, a range "
    "of powers of two (2-16), or 'none'. Each K is partitioned and planned once into --cache.",
)
@click.option(
    "--run",
    "run",
    type=click.Path(),
    default=None,
    help="A mini-batch strategy's plan (distdgl, bytegnn, clustergcn, p3, hopgnn): a run of PLAN whose "
    "metrics calibrate the model of a step (seconds per sampled arc and per source row, remote "
    "share; docs/DESIGN.md 'Simulator').",
)
@click.option(
    "--cache",
    type=OutputPath(),
    default=None,
    help="Folder for the partitions and plans of other worker counts [default: PLAN.simcache].",
)
@click.option(
    "-o",
    "--out",
    type=OutputPath(),
    default=None,
    help="Output folder: simulate.json, workers.png, timeline.png, scaling.png [default: PLAN.sim].",
)
@click.option(
    "--force", is_flag=True, help="Replace the simulate.json (and plots) of an earlier simulation in OUT."
)
@click.option("--json", "as_json", is_flag=True, help="Print simulate.json instead of the tables.")
def command(
    plan,
    workers,
    bandwidth,
    latency,
    link_share,
    hosts,
    profile,
    pipelines,
    baselines,
    boundary_sample,
    staleness_epochs,
    scaling,
    run,
    cache,
    out,
    force,
    as_json,
):
    """Simulate one training epoch of PLAN on K workers (discrete events): the plan's exact bins and
    per-peer message bytes, compute rates from a profile of the real runtime, a network of full-duplex links.
    Reports per-worker busy / communication-wait / idle time and the epoch time of g3 with each --pipeline
    schedule and of the other strategies, and a scaling table over --scaling worker counts. A plan of
    another strategy is simulated through a g3 plan of its partition (the bins give the work); a mini-batch
    strategy's (distdgl, bytegnn, clustergcn, p3, hopgnn) by a per-step model calibrated on a run of it (--run); a neutrontp plan by
    its chunks and the plan's all-to-alls (naive or decoupled TP, bulk or pipelined)."""
    opts = SimulateOptions(
        workers=workers,
        bandwidth=bandwidth,
        latency=latency,
        profile=profile,
        pipelines=pipelines,
        baselines=baselines,
        boundary_sample=boundary_sample,
        staleness_epochs=staleness_epochs,
        scaling=scaling,
        cache=cache,
        run=run,
        link_share=link_share,
        hosts=hosts,
    )
    result = run_simulate(plan, opts, out=out, force=force)
    if as_json:
        click.echo(json.dumps(result, indent=1, default=str))
    else:
        print_simulation(result, stdout_console())
