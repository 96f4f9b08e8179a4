"""The fixture strategy's planner: the kit's boundary exchange, and one option that only plan.json records."""

from __future__ import annotations

from pathlib import Path

from stages.common.plan_options import choice_option
from stages.kits.plan.boundary import plan_boundary
from stages.kits.plan.context import PlanContext
from stages.kits.plan.residency import DEVICE_MEMORY_RECORDED

OPTIONS = (
    choice_option(
        "fixture_note", "plain", ("plain", "loud"), "fixture: a note plan.json keeps.", layout=False
    ),
    DEVICE_MEMORY_RECORDED,
)


def plan(tmp: Path, ctx: PlanContext) -> dict:
    return {"workers": plan_boundary(tmp, ctx, "planning workers (fixture)")}
