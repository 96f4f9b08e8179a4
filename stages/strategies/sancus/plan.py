"""The ``sancus`` strategy's planner: the whole-partition boundary exchange (``boundary.py``), the staleness
policy of SANCUS (seed 001 §4.3) and, for the broadcast layout, which rows of every peer's broadcast block
each worker keeps."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from stages.common.plan_options import PlanOption, choice_option
from stages.kits.plan.boundary import plan_boundary, save_table
from stages.kits.plan.context import PlanContext
from stages.kits.plan.residency import DEVICE_MEMORY_RECORDED
from stages.kits.plan.tables import assemble

POLICIES = {"epoch": "check E", "ask": "check A", "drift": "check H"}


def parse_staleness(text: str) -> dict:
    """``epoch:N`` / ``ask:N`` (N ≥ 0 epochs) or ``drift:X`` (X ≥ 0, a relative norm) → {policy, bound}."""
    m = re.fullmatch(r"\s*(epoch|ask|drift)\s*:\s*([^\s]+)\s*", str(text))
    if not m:
        raise ValueError("expected epoch:N, ask:N or drift:X (e.g. epoch:1, drift:0.02)")
    policy, value = m.group(1), m.group(2)
    if policy in ("epoch", "ask"):
        if not re.fullmatch(r"\d+", value):
            raise ValueError(f"{policy}:N needs a whole number of epochs >= 0")
        return {"policy": policy, "bound": int(value)}
    return {"policy": policy, "bound": _non_negative(value, "drift:X needs a number >= 0")}


def _non_negative(text: str, wrong: str) -> float:
    """A finite number >= 0 from ``text``; ValueError(``wrong``) otherwise."""
    try:
        x = float(text)
    except ValueError:
        raise ValueError(wrong) from None
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(wrong)
    return x


def _clip(text: str) -> float:
    return _non_negative(text, "expected a number >= 0 (0: off)")


OPTIONS = (
    choice_option(
        "sancus_comm",
        "broadcast",
        ("broadcast", "p2p"),
        "How embeddings move. 'broadcast' (the thesis's): per layer each worker in turn broadcasts "
        "its whole block of rows, or skips while stale, so every worker receives (K-1)/K x N rows per "
        "layer; 'p2p': g3's sparse peer-to-peer messages of the boundary rows, a stale owner's replaced by "
        "a one-word header.",
    ),
    PlanOption(
        "staleness",
        "--staleness",
        "epoch:1",
        parse=parse_staleness,
        metavar="POLICY:BOUND",
        help="When a worker resends its rows (per layer; otherwise the others use their cached copy). "
        "epoch:N (check E): when the receivers' copy would be more than N epochs old; ask:N (check A): "
        "the receivers decide - one whose copy was more than N epochs old after using it asks the "
        "owner, which sends at its next epoch (001 Fig. 14b), so copies get up to N+1 epochs old; "
        "in g3's lock-step runtime every receiver holds the same versions, so ask:N sends when "
        "epoch:N+1 does and adds the asks' traffic; drift:X (check H): when the relative change "
        "since the last send exceeds X (--drift-norm). epoch:0 = exact full-graph training. Layer-0 "
        "features are static and fetched once; backward gradients are exchanged every epoch.",
    ),
    choice_option(
        "drift_norm",
        "fro",
        ("fro", "max"),
        "For drift:X, the norm of the change, relative to the last sent rows: 'fro' = Frobenius "
        "(||H - H_sent||_F / ||H_sent||_F; the thesis leaves the norm open), 'max' = largest absolute "
        "change over the largest absolute value.",
    ),
    PlanOption(
        "grad_clip",
        "--grad-clip",
        "0",
        parse=_clip,
        metavar="TH",
        help="Clip the embedding gradients a worker returns to its peers (per layer, L2 norm over all "
        "its boundary rows) at TH/sqrt(K), the local share of a global threshold TH for K i.i.d. workers "
        "(the thesis's local-threshold rule); 0 = off (the default: the thesis does not say it is on).",
    ),
    DEVICE_MEMORY_RECORDED,
)


def _broadcast_picks(ctx: PlanContext, tmp: Path) -> None:
    """Per worker, table ``broadcast_pick``: for each peer j (message (0, j, count)), the positions in j's owned
    block (ascending global id) of this worker's remote nodes owned by j, in remote order."""
    for shard in ctx.shards:
        parts = []
        for j in range(ctx.num_workers):
            if j == shard.rank:
                continue
            remote_j = shard.remote[shard.remote_owner_ptr[j] : shard.remote_owner_ptr[j + 1]]
            positions = np.searchsorted(ctx.shards[j].owned, remote_j).astype(np.int64)
            parts.append((j, np.zeros(len(positions), dtype=np.int64), positions, None))
        save_table(tmp / f"worker-{shard.rank:05d}", "broadcast_pick", assemble(parts))


def plan(tmp: Path, ctx: PlanContext) -> dict:
    workers = plan_boundary(tmp, ctx, "planning workers (sancus)")
    if ctx.options["sancus_comm"] == "broadcast":
        _broadcast_picks(ctx, tmp)
    return {"workers": workers}
