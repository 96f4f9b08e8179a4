"""The ``bytegnn`` strategy's planner: DistDGL's sampling options (``distdgl.py``); its natural partition is
``g3 partition --method bytegnn`` (K-hop blocks, Algorithm 2).

ByteGNN's scheduler settings change how a run executes, not what it computes, so they are ``g3 train``
options (``--scheduler``, ``--sample-threads``, ``--max-dags``, ``--launch-sigma``, ``--task-nodes``), not
plan options: one plan runs with the scheduler on or off."""

from __future__ import annotations

from pathlib import Path

from stages.kits.plan.context import PlanContext
from stages.strategies.distdgl.plan import OPTIONS as DISTDGL_OPTIONS
from stages.strategies.distdgl.plan import plan as plan_distdgl

OPTIONS = DISTDGL_OPTIONS


def plan(tmp: Path, ctx: PlanContext) -> dict:
    return plan_distdgl(tmp, ctx)
