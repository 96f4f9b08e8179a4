"""The ``hopgnn`` strategy's planner: DistDGL's sampling options (``--fanouts``, ``--batch-size``), HopGNN's
batch order, pre-gathering, merging and migration, and the boundary tables of its exact full-neighbour
evaluation (as ``distdgl``'s). HopGNN (paper 004, published as LeapGNN) reuses DGL's partitioning, so it runs
on METIS partitions (``distdgl``'s balanced METIS first)."""

from __future__ import annotations

import dataclasses

from stages.common.plan_options import PlanOption, choice_option
from stages.kits.plan.residency import DEVICE_MEMORY_RECORDED
from stages.strategies.distdgl.plan import SAMPLING_OPTIONS

BATCH_ORDERS = ("global", "local-only")


def parse_batch_order(text: str) -> str:
    if text not in BATCH_ORDERS:
        raise ValueError("hopgnn takes global or local-only (distdgl and bytegnn: local or global)")
    return text


def parse_merge(text: str) -> str | int:
    """``auto`` (kept as the text), ``off`` (0) or a number of time steps to merge away (>= 1)."""
    if text == "auto":
        return "auto"
    if text == "off":
        return 0
    try:
        n = int(text)
    except ValueError:
        raise ValueError("expected auto, off or a number of time steps to merge away") from None
    if n < 0:
        raise ValueError("the number of merged time steps must be at least 0")
    return n


_FANOUTS, _BATCH_SIZE = (o for o in SAMPLING_OPTIONS if o.name in ("fanouts", "batch_size"))

OPTIONS = (
    _FANOUTS,
    DEVICE_MEMORY_RECORDED,
    dataclasses.replace(
        _BATCH_SIZE,
        help="Target (training) nodes per batch: per worker with distdgl's --batch-order local, in all "
        "(the global batch, which hopgnn's K models share) otherwise.",
    ),
    PlanOption(
        "batch_order",
        "--batch-order",
        "global",
        parse=parse_batch_order,
        metavar="local|global|local-only",
        help="distdgl, bytegnn (default local): local (DistDGL: each worker shuffles its own training "
        "nodes every epoch; every rank runs the largest batch count, a rank out of batches adds zero "
        "gradient) or global (one permutation of all training nodes per epoch, global step s = batch "
        "s, each worker computing the targets it owns — the same batches for any K) or split (global's "
        "batches, worker k computing positions k, k+K, … of each wherever the targets live). hopgnn (default "
        "global): global (distdgl's global batches, each of the K models taking a 1/K share; exactly "
        "distdgl --batch-order global) or local-only (HopGNN's 'locality-optimised' variant: each "
        "server trains only its own training nodes, a per-epoch shuffle of them cut into batches of "
        "ceil(B/K): a different model).",
    ),
    choice_option(
        "pregather",
        "on",
        ("on", "off"),
        "hopgnn: on (HopGNN §5.2): each server fetches the deduplicated remote features of all of "
        "an iteration's micrographs in one request per peer before its first time step; off: every "
        "time step fetches its own (a row needed at two steps is fetched twice). Same model.",
    ),
    PlanOption(
        "merge",
        "--merge",
        "auto",
        parse=parse_merge,
        metavar="auto|off|N",
        help="hopgnn (§5.3): N = drop the N time steps with the fewest roots (one at a time), spreading "
        "each dropped step's roots evenly over the same model's other steps (at most K-1); auto = "
        "merge one more step each epoch from the third on (the second, unmerged, is the baseline; the first is a warm-up) while the epoch time (the slowest "
        "rank's) falls, then go back one and freeze; off = K time steps. Same model.",
    ),
    choice_option(
        "migrate",
        "on",
        ("on", "off"),
        "hopgnn: on = between time steps every model moves to its next server with its parameters "
        "and accumulated gradients (what HopGNN sends; counted as the 'migrate' phase); off = each "
        "server keeps accumulating its own gradients (the replicas are identical within an "
        "iteration, so the sum is the same). Same model.",
    ),
)


def summary_rows(plan: dict) -> list[tuple[str, str]]:
    """What `g3 info PLAN` / `g3 plan` say about a hopgnn plan: its time steps, pre-gathering and merging."""
    opts, k = plan["strategy"]["options"], int(plan["num_workers"])
    if opts["batch_order"] == "local-only":
        return [
            (
                "batches",
                f"local-only: each server its own training nodes, {-(-opts['batch_size'] // k)} "
                "per batch, no migration",
            )
        ]
    merge = opts["merge"]
    merged = (
        "auto (measured from the second epoch, merging from the third)"
        if merge == "auto"
        else f"{min(int(merge), k - 1)} merged away"
    )
    return [
        (
            "time steps",
            f"{k} per iteration, {merged}; pre-gathering {'on' if opts['pregather'] else 'off'}, "
            f"migration {'on' if opts['migrate'] else 'off'}",
        )
    ]
