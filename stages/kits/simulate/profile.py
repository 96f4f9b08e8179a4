"""The cost model of ``g3 simulate``: compute rates per layer, from a PROFILE.json of the real runtime
(``g3 train --profile``, written by ``stages.kits.runtime.profile``) or uncalibrated placeholders.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from stages.common.errors import G3InputError
from stages.common.model_spec import LayerShape
from stages.kits.runtime.profile import PROFILE_SCHEMA, PROFILE_VERSION


@dataclass
class PhaseRates:
    per_arc: float
    per_node: float
    per_bin: float

    def cost(self, arcs, nodes, bins=1) -> float:
        return self.per_arc * float(arcs) + self.per_node * float(nodes) + self.per_bin * float(bins)


@dataclass
class LayerRates:
    forward: PhaseRates
    backward: PhaseRates  # includes the bin's gather and, with recompute, its forward
    gather_per_row: float  # seconds per source row gathered (forward)


@dataclass
class Rates:
    """Seconds per unit of work on one worker of the profiled device, per layer."""

    layers: list[LayerRates]
    overhead_per_bin: float = 0.0
    step_seconds: float = 0.0  # optimizer step (+ loss) per epoch, besides the all-reduce transfer
    source: str = "default"
    notes: list[str] = field(default_factory=list)

    def fwd(self, li: int, arcs, nodes, bins=1) -> float:
        return self.layers[li].forward.cost(arcs, nodes, bins)

    def bwd(self, li: int, arcs, nodes, bins=1) -> float:
        return self.layers[li].backward.cost(arcs, nodes, bins)

    def gather(self, li: int, rows) -> float:
        return self.layers[li].gather_per_row * float(rows)


def default_rates(shapes: list[LayerShape]) -> Rates:
    """Uncalibrated placeholder rates (about a 1 GFLOP/s core): use a profile for real predictions."""
    layers = []
    for s in shapes:
        fwd = PhaseRates(
            per_arc=2e-9 * s.edge_width,
            per_node=2e-9 * s.d_in * s.d_out * (2 if s.heads == 1 else 1),
            per_bin=1e-4,
        )
        layers.append(LayerRates(fwd, PhaseRates(3 * fwd.per_arc, 3 * fwd.per_node, 2e-4), 1e-9 * s.d_in))
    return Rates(
        layers,
        overhead_per_bin=0.0,
        step_seconds=1e-3,
        source="default (uncalibrated)",
        notes=["no --profile: placeholder rates, not calibrated on this device"],
    )


def load_rates(path: str | Path, shapes: list[LayerShape]) -> Rates:
    """Rates from PROFILE.json for a model of ``shapes``; other widths are rescaled (per arc by the aggregated
    width, per node by d_in × d_out), with a note."""
    path = Path(path)
    if not path.is_file():
        raise G3InputError(
            "profile not found (write one with `g3 train PLAN --profile PROFILE.json`)", path=path
        )
    try:
        prof = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise G3InputError(f"invalid JSON: {exc}", path=path) from None
    if prof.get("schema") != PROFILE_SCHEMA or prof.get("schema_version") != PROFILE_VERSION:
        raise G3InputError(
            f"not a {PROFILE_SCHEMA} v{PROFILE_VERSION} file (re-run g3 train --profile)", path=path
        )
    layers_p = prof["layers"]
    if len(layers_p) != len(shapes):
        raise G3InputError(
            f"the profile has {len(layers_p)} layers, the plan {len(shapes)}: profile the same model",
            path=path,
        )
    notes, layers = [], []
    for li, (lp, s) in enumerate(zip(layers_p, shapes, strict=True)):
        arc_scale = s.edge_width / max(1, int(lp["edge_width"]))
        node_scale = (s.d_in * s.d_out) / max(1, int(lp["d_in"]) * int(lp["d_out"]))
        row_scale = s.d_in / max(1, int(lp["d_in"]))
        if arc_scale != 1 or node_scale != 1:
            notes.append(
                f"layer {li}: profiled at widths {lp['d_in']}→{lp['d_out']}, rescaled to {s.d_in}→{s.d_out}"
            )
        ph = {}
        for phase in ("forward", "backward"):
            r = lp[phase]
            ph[phase] = PhaseRates(
                r["seconds_per_arc"] * arc_scale, r["seconds_per_node"] * node_scale, r["seconds_per_bin"]
            )
        layers.append(LayerRates(ph["forward"], ph["backward"], lp["gather"]["seconds_per_row"] * row_scale))
    return Rates(
        layers,
        overhead_per_bin=float(prof.get("overhead_per_bin", 0.0)),
        step_seconds=float(prof.get("step_seconds", 0.0)),
        source=str(path),
        notes=notes,
    )
