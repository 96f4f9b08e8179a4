"""`g3 plan PART`."""

from __future__ import annotations

import click

from stages.common.units import parse_size
from stages.plan import MODELS, PlanConfig, run_plan

from .output import print_plan_report


def _memory(ctx, param, value):
    if value is None or value == "auto":
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _bin_size(ctx, param, value):
    if value is None or value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise click.BadParameter(f"expected a node count or 'auto', got {value!r}") from None
    if n < 1:
        raise click.BadParameter("must be >= 1")
    return n


@click.command("plan")
@click.argument("part", type=click.Path())
@click.option("--model", type=click.Choice(MODELS), default="sage", show_default=True,
              help="GNN model: GraphSAGE (mean), GCN (symmetric normalisation, self-loops) or GAT.")
@click.option("--layers", type=int, default=2, show_default=True, help="Number of GNN layers L (>= 1).")
@click.option("--hidden", type=int, default=16, show_default=True, help="Hidden width H (per head for GAT).")
@click.option("--heads", type=int, default=8, show_default=True, help="GAT attention heads.")
@click.option("--device-memory", default="auto", show_default=True, callback=_memory,
              help="Memory of one worker's device, e.g. 24GiB; 'auto' reads GPU 0 (or RAM without CUDA). "
                   "Each bin uses at most half of it, so one bin computes while the next is copied in.")
@click.option("--bin-size", default="auto", show_default=True, callback=_bin_size,
              help="Fixed nodes per bin (the paper uses 1000 and 5000); 'auto' derives it per layer from "
                   "--device-memory and the layer's per-node memory.")
@click.option("-o", "--out", type=click.Path(), default=None,
              help="Plan folder [default: PART.plan-MODEL beside PART].")
@click.option("--force", is_flag=True, help="Replace the plan folder if it exists.")
@click.option("--report", is_flag=True, help="Print the per-worker, per-layer plan table (bins, compute, bytes).")
def command(part, model, layers, hidden, heads, device_memory, bin_size, out, force, report):
    """Plan the hybrid-parallel execution of partition PART: per worker a BFS priority list (nodes peers
    need first), per layer a bin limit and bins with their blocks, and the peer-to-peer send/receive tables
    of the forward (embeddings) and backward (gradients) passes. Each worker's folder is self-contained."""
    cfg = PlanConfig(model=model, layers=layers, hidden=hidden, heads=heads, device_memory=device_memory,
                     bin_size=bin_size)
    plan = run_plan(part, cfg, out=out, force=force)
    print_plan_report(plan, detailed=report)
