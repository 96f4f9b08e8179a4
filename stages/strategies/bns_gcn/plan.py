"""The ``bns-gcn`` strategy's planner: the whole-partition boundary exchange (``boundary.py``) and the
boundary-node sampling ratio P of BNS-GCN (Wan et al., MLSys 2022)."""

from __future__ import annotations

import math
from pathlib import Path

from stages.common.errors import G3InputError
from stages.common.plan_options import PlanOption
from stages.kits.plan.boundary import plan_boundary
from stages.kits.plan.context import PlanContext
from stages.kits.plan.residency import DEVICE_MEMORY_RECORDED


def parse_fraction(text: str) -> float:
    try:
        p = float(text)
    except ValueError:
        raise ValueError("expected a number in (0, 1]") from None
    if not (math.isfinite(p) and 0.0 < p <= 1.0):
        raise ValueError("the sampling ratio must be in (0, 1]")
    return p


OPTIONS = (
    PlanOption(
        "boundary_sample",
        "--boundary-sample",
        "1",
        parse=parse_fraction,
        metavar="P",
        help="BNS-GCN's random boundary-node sampling. Each epoch every worker keeps a P-fraction of "
        "its boundary (remote) nodes, chosen by a hash of (seed, epoch, worker, node) so both ends agree "
        "without talking; dropped nodes send nothing and leave that epoch's aggregation, kept ones are "
        "scaled by 1/P (BNS-GCN's estimator: the mean still divides by the full in-degree). Applies to "
        "the hidden layers; layer 0 reads the input features, fetched once. 1 = exact full-graph "
        "training; GAT needs 1.",
    ),
    DEVICE_MEMORY_RECORDED,
)


def plan(tmp: Path, ctx: PlanContext) -> dict:
    p = ctx.options["boundary_sample"]
    if p < 1.0 and ctx.spec.kind == "gat":
        raise G3InputError(
            "--boundary-sample < 1 with GAT is not supported: attention over a sampled "
            "neighbourhood renormalises without the dropped nodes, which needs per-epoch blocks; "
            "use --boundary-sample 1 or --model sage/gcn"
        )
    return {"workers": plan_boundary(tmp, ctx, "planning workers (bns-gcn)")}
