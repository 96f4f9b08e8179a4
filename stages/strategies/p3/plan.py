"""The ``p3`` strategy's planner: DistDGL's sampling options (P3 trains the same mini-batches), the structure's
placement (``--topology``), and the boundary tables of the exact full-neighbour evaluation (as ``distdgl``'s).

P3 (paper 003, OSDI '21) runs on its own independent partitioning (``g3 partition --method p3``): the
structure hash-partitioned by node with each arc stored at its destination (the ``rows`` layout) and the
features split by column (the ``columns`` layout: worker ``w`` holds columns ``[w·W, min((w+1)·W, F))`` of every
node, ``W = ceil(F / K)``, so the first workers get the full width and the last the remainder)."""

from __future__ import annotations

from pathlib import Path

from stages.common.errors import G3InputError
from stages.common.partition_artifact import partition_layouts
from stages.common.plan_options import choice_option
from stages.common.tensor_parallel import feature_columns
from stages.kits.plan.context import PlanContext
from stages.strategies.distdgl.plan import SAMPLING_OPTIONS
from stages.strategies.distdgl.plan import plan as plan_distdgl

OPTIONS = SAMPLING_OPTIONS + (
    choice_option(
        "topology",
        "partitioned",
        ("partitioned", "replicated"),
        "p3 (P3 §3.1): partitioned = a node's in-edges live with its hash owner, whose sampling server "
        "answers for it (structure only: P3 never moves features); replicated = the plan holds the "
        "whole CSR once (topology/), memory-mapped by every worker, so sampling needs no "
        "communication (P3's choice when the structure fits in memory). Same samples, same model.",
    ),
)


def plan(tmp: Path, ctx: PlanContext) -> dict:
    if "columns" not in partition_layouts(ctx.partition):
        raise G3InputError(
            "p3 needs the features split by column beside the hash-partitioned structure: "
            "partition with g3 partition --method p3",
            path=ctx.part,
        )
    out = plan_distdgl(tmp, ctx)  # checks the sampling options first
    feat_dim = int(ctx.spec.in_dim)
    out["feature_columns"] = feature_columns(feat_dim, ctx.num_workers)
    return out


def summary_rows(plan: dict) -> list[tuple[str, str]]:
    """What `g3 info PLAN` / `g3 plan` say about a p3 plan: who computes which columns of layer 1."""
    cols = plan.get("feature_columns") or []
    widths = ", ".join(f"{c['stop'] - c['start']}" for c in cols)
    opts = plan["strategy"]["options"]
    return [
        ("layer 1", f"model-parallel over feature columns ({widths} per worker); layers 2+ data-parallel"),
        ("structure", opts.get("topology", "partitioned")),
    ]
