"""The ``bytegnn`` strategy's planner: DistDGL's sampling options (``distdgl.py``) plus ByteGNN's scheduler
settings; its natural partition is ``g3 partition --method bytegnn`` (K-hop blocks, Algorithm 2)."""

from __future__ import annotations

import math
from pathlib import Path

from ..common.strategies import PlanOption, positive_int
from .context import PlanContext
from .distdgl import OPTIONS as DISTDGL_OPTIONS
from .distdgl import plan as plan_distdgl


def parse_switch(text: str) -> str:
    if text not in ("on", "off"):
        raise ValueError("expected on or off")
    return text


def parse_sigma(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError("expected a number") from None
    if not (math.isfinite(v) and v >= 0):
        raise ValueError("the launch threshold must be a finite number >= 0")
    return v


OPTIONS = DISTDGL_OPTIONS + (
    PlanOption("scheduler", "--scheduler", "on", parse=parse_switch, metavar="on|off",
               help="bytegnn: ByteGNN's two-level scheduler (DAGs of sampling tasks on a thread pool, launched by "
                    "its launch-score); off = one DAG after another on one thread. Same model either way."),
    PlanOption("launch_sigma", "--launch-sigma", "5", parse=parse_sigma, metavar="SIGMA",
               help="bytegnn: σ of Algorithm 1: launch a DAG when T_gap[ms] x f(C_util)/100 x balance >= SIGMA "
                    "(docs/DESIGN.md)."),
    PlanOption("sample_threads", "--sample-threads", "2", parse=positive_int("the sampling threads"), metavar="N",
               help="bytegnn: threads of the sampling task pool (besides one communication thread)."),
    PlanOption("max_dags", "--max-dags", "4", parse=positive_int("the DAG limit"), metavar="N",
               help="bytegnn: at most N DAGs launched and not yet trained on."),
)


def plan(tmp: Path, ctx: PlanContext) -> dict:
    return plan_distdgl(tmp, ctx)
