"""distdgl in `g3 simulate`: each step's sampling, feature fetch, compute and gradient all-reduce, calibrated on a
run of the plan and carried to any worker count (the mini-batch step model of :mod:`stages.kits.simulate.minibatch`,
which the other sampling strategies' models extend)."""

from __future__ import annotations

from pathlib import Path

from stages.kits.simulate.minibatch import run_minibatch_simulation


def simulate(plan: Path, meta: dict, options, out: Path, replan) -> tuple[dict, None]:
    """`g3 simulate PLAN --run RUN` of a distdgl plan."""
    return run_minibatch_simulation(plan, meta, options, out), None
