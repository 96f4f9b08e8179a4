"""Compute rates of the real runtime (``g3 train --profile PROFILE.json``) and the cost model built from them.

**Recording.** At the profiled epoch (the run's last) the loop calls :func:`start_profile` (after ``tracer.start()``) and
``Profiler.finish`` (after ``tracer.stop()``). The profiler wraps the model's ``layer_forward`` and
``layer_forward_rows`` for that epoch only, so every call records the block it ran on (layer, destination
nodes, arcs, source rows); the calls are matched in order with the tracer's ``compute`` spans (one forward call per forward span; one per backward span
with ``--backward recompute``, none with ``keep``, where backward step s of a layer is the layer's forward bin
B-1-s). Every rank sends its samples to rank 0, which fits and writes PROFILE.json.

**Fit.** Per layer and phase (forward, backward), the span durations are fitted by non-negative least squares
to ``seconds = per_arc · arcs + per_node · nodes + per_bin``; gathers (forward ``gather`` spans, by their
``phase``) give seconds per source row (none for a layer whose forward reads its rows in place); what the
epoch spent outside spans, waits and the all-reduce is spread over the bins as ``overhead_per_bin`` (Python
bookkeeping, message packing, loss); ``step_seconds`` is the all-reduce + Adam step.
When the bins cannot separate the terms (equal node counts: no per-bin constant, ``fit: "nnls-no-intercept"``;
one or two bins: one rate per arc + node, ``fit: "ratio"``) the model is reduced.
The schema is described in docs/ARTIFACTS.md ("Profile").
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..common.errors import G3InputError
from ..plan.bins import LayerShape

PROFILE_SCHEMA = "g3.profile"
PROFILE_VERSION = 1


# ------------------------------------------------------------------------------------------------------------
# Cost model
# ------------------------------------------------------------------------------------------------------------


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
        fwd = PhaseRates(per_arc=2e-9 * s.edge_width, per_node=2e-9 * s.d_in * s.d_out * (2 if s.heads == 1 else 1),
                         per_bin=1e-4)
        layers.append(LayerRates(fwd, PhaseRates(3 * fwd.per_arc, 3 * fwd.per_node, 2e-4), 1e-9 * s.d_in))
    return Rates(layers, overhead_per_bin=0.0, step_seconds=1e-3, source="default (uncalibrated)",
                 notes=["no --profile: placeholder rates, not calibrated on this device"])


def load_rates(path: str | Path, shapes: list[LayerShape]) -> Rates:
    """Rates from PROFILE.json for a model of ``shapes``; other widths are rescaled (per arc by the aggregated
    width, per node by d_in × d_out), with a note."""
    path = Path(path)
    if not path.is_file():
        raise G3InputError("profile not found (write one with `g3 train PLAN --profile PROFILE.json`)", path=path)
    try:
        prof = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise G3InputError(f"invalid JSON: {exc}", path=path) from None
    if prof.get("schema") != PROFILE_SCHEMA or prof.get("schema_version") != PROFILE_VERSION:
        raise G3InputError(f"not a {PROFILE_SCHEMA} v{PROFILE_VERSION} file (re-run g3 train --profile)", path=path)
    layers_p = prof["layers"]
    if len(layers_p) != len(shapes):
        raise G3InputError(f"the profile has {len(layers_p)} layers, the plan {len(shapes)}: profile the same model",
                           path=path)
    notes, layers = [], []
    for li, (lp, s) in enumerate(zip(layers_p, shapes, strict=True)):
        arc_scale = s.edge_width / max(1, int(lp["edge_width"]))
        node_scale = (s.d_in * s.d_out) / max(1, int(lp["d_in"]) * int(lp["d_out"]))
        row_scale = s.d_in / max(1, int(lp["d_in"]))
        if arc_scale != 1 or node_scale != 1:
            notes.append(f"layer {li}: profiled at widths {lp['d_in']}→{lp['d_out']}, rescaled to {s.d_in}→{s.d_out}")
        ph = {}
        for phase in ("forward", "backward"):
            r = lp[phase]
            ph[phase] = PhaseRates(r["seconds_per_arc"] * arc_scale, r["seconds_per_node"] * node_scale,
                                   r["seconds_per_bin"])
        layers.append(LayerRates(ph["forward"], ph["backward"], lp["gather"]["seconds_per_row"] * row_scale))
    return Rates(layers, overhead_per_bin=float(prof.get("overhead_per_bin", 0.0)),
                 step_seconds=float(prof.get("step_seconds", 0.0)), source=str(path), notes=notes)


# ------------------------------------------------------------------------------------------------------------
# Fitting
# ------------------------------------------------------------------------------------------------------------


def fit_phase(arcs: np.ndarray, nodes: np.ndarray, seconds: np.ndarray) -> dict:
    """``seconds ≈ per_arc·arcs + per_node·nodes + per_bin`` by non-negative least squares over bins."""
    arcs, nodes, seconds = (np.asarray(a, dtype=np.float64) for a in (arcs, nodes, seconds))
    n = len(seconds)
    out = {"bins": int(n), "seconds": float(seconds.sum()), "arcs": int(arcs.sum()), "nodes": int(nodes.sum())}
    if n == 0:
        return {**out, "seconds_per_arc": 0.0, "seconds_per_node": 0.0, "seconds_per_bin": 0.0, "fit": "none", "r2": None}
    a = np.stack([arcs, nodes, np.ones(n)], axis=1)
    coef, fit = None, "ratio"
    # the richest model the bins can identify: with equal-size bins (--bin-size) the node count is constant and
    # indistinguishable from a per-bin constant, so it is attributed to the nodes (dense work grows with them)
    for cols, name in (([0, 1, 2], "nnls"), ([0, 1], "nnls-no-intercept")):
        sub = a[:, cols]
        if n >= len(cols) + 1 and np.linalg.matrix_rank(sub) == len(cols):
            from scipy.optimize import nnls

            scale = np.maximum(sub.max(axis=0), 1.0)  # columns of very different magnitudes
            c, _ = nnls(sub / scale, seconds)
            coef = np.zeros(3)
            coef[cols] = c / scale
            fit = name
            break
    if coef is None:  # one rate per unit of work (arc + node): exact in total, no per-bin constant
        unit = arcs + nodes
        r = float(seconds.sum() / unit.sum()) if unit.sum() > 0 else 0.0
        coef = np.array([r, r, 0.0])
    pred = a @ coef
    ss = float(((seconds - seconds.mean()) ** 2).sum())
    r2 = 1.0 - float(((seconds - pred) ** 2).sum()) / ss if ss > 0 and n > 2 else None
    return {**out, "seconds_per_arc": float(coef[0]), "seconds_per_node": float(coef[1]),
            "seconds_per_bin": float(coef[2]), "fit": fit, "r2": r2}


def fit_profile(samples: list[dict], shapes: list[LayerShape], meta: dict) -> dict:
    """PROFILE.json from every rank's samples (see :meth:`Profiler.samples`)."""
    layers = []
    for li, s in enumerate(shapes):
        entry = {"layer": li, "d_in": s.d_in, "d_out": s.d_out, "edge_width": s.edge_width, "heads": s.heads}
        for phase in ("forward", "backward"):
            rows = [b for r in samples for b in r["bins"] if b["layer"] == li and b["phase"] == phase]
            entry[phase] = fit_phase([b["arcs"] for b in rows], [b["nodes"] for b in rows], [b["seconds"] for b in rows])
        g_sec = sum(r["gather"].get(str(li), [0.0, 0])[0] for r in samples)
        g_rows = sum(r["gather"].get(str(li), [0.0, 0])[1] for r in samples)
        entry["gather"] = {"seconds": g_sec, "rows": int(g_rows), "seconds_per_row": g_sec / g_rows if g_rows else 0.0}
        layers.append(entry)
    bins = sum(len(r["bins"]) for r in samples)
    outside = sum(max(0.0, r["epoch_seconds"] - r["sync_seconds"] - r["wait_seconds"] - r["span_seconds"])
                  for r in samples)
    return {
        "schema": PROFILE_SCHEMA,
        "schema_version": PROFILE_VERSION,
        **meta,
        "layers": layers,
        "overhead_per_bin": outside / bins if bins else 0.0,
        "step_seconds": min(r["sync_seconds"] for r in samples),
        "epoch_seconds": max(r["epoch_seconds"] for r in samples),
        "ranks": [{k: r[k] for k in ("rank", "epoch_seconds", "sync_seconds", "wait_seconds", "span_seconds", "threads")}
                  | {"bins": len(r["bins"])} for r in samples],
        "samples": [[r["rank"], b["layer"], b["phase"], b["nodes"], b["arcs"], b["srcs"], round(b["seconds"], 7)]
                    for r in samples for b in r["bins"]],
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "host": socket.gethostname(),
        "load_average": list(os.getloadavg()),
    }


# ------------------------------------------------------------------------------------------------------------
# Recording in the training runtime
# ------------------------------------------------------------------------------------------------------------


class Profiler:
    """Records the blocks of one epoch (see the module docstring); ``finish`` writes PROFILE.json."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.model = strategy.model
        self.calls: list[tuple[int, int, int, int]] = []  # (layer, n_dst, arcs, n_src) per layer call
        for name in self.RECORDED:  # instance attributes: shadow the methods for this epoch only
            setattr(self.model, name, self._recording(getattr(self.model, name)))

    RECORDED = ("layer_forward", "layer_forward_rows", "layer_backward_rows", "layer_backward_static")  # one per bin

    def _recording(self, original):
        def recording(l, block, *args, **kwargs):  # noqa: E741 - the layer index
            self.calls.append((int(l), int(block.n_dst), int(block.nnz), int(block.n_src)))
            return original(l, block, *args, **kwargs)

        return recording

    def _restore(self) -> None:
        for name in self.RECORDED:
            self.model.__dict__.pop(name, None)

    def samples(self, epoch_seconds: float, sync_seconds: float) -> dict:
        """This rank's bins (layer, phase, nodes, arcs, seconds), gathers and unexplained time."""
        events = self.strategy.tracer.events
        keep = getattr(self.strategy.cfg, "backward", "recompute") == "keep"
        calls = iter(self.calls)
        fwd_blocks: dict[int, list] = {}
        bins, span_seconds = [], 0.0
        for e in events:
            if e["cat"] != "compute":
                continue
            a = e["args"]
            li, phase = int(a.get("layer", 0)), a.get("phase", "fwd")
            if phase in ("eval", "loss"):  # the loss stays in the unexplained per-epoch time the simulator adds
                continue
            if phase == "fwd" or not keep:
                call = next(calls, None)
                if call is None or call[0] != li:
                    raise RuntimeError("profile: compute spans and recorded blocks do not line up")
            else:  # keep: backward step s of layer li is forward bin B-1-s
                blocks = fwd_blocks.get(li, [])
                call = blocks[len(blocks) - 1 - int(a.get("bin", 0))]
            if phase == "fwd":
                fwd_blocks.setdefault(li, []).append(call)
            seconds = e["dur"] / 1e6
            span_seconds += seconds
            bins.append({"layer": li, "phase": "forward" if phase == "fwd" else "backward", "nodes": call[1],
                         "arcs": call[2], "srcs": call[3], "seconds": seconds})
        gather: dict[str, list] = {}
        gathers_by_layer: dict[int, list] = {}
        # the forward's gathers (backward's sit inside backward compute spans; a forward that reads its rows in
        # place, GNNModel.layer_forward_rows, has none)
        for e in events:
            if e["cat"] == "gather" and e["args"].get("phase") == "fwd":
                gathers_by_layer.setdefault(int(e["args"].get("layer", 0)), []).append(e)
        eager_gather = 0.0
        for li, fwd in gathers_by_layer.items():
            sec = sum(e["dur"] for e in fwd) / 1e6
            gather[str(li)] = [sec, sum(c[3] for c in fwd_blocks.get(li, []))]
            # gathered on the compute thread: not unexplained time (prefetched ones overlap compute spans)
            eager_gather += sum(e["dur"] for e in fwd if not e["args"].get("prefetched")) / 1e6
        import torch

        return {"rank": self.strategy.rank, "bins": bins, "gather": gather, "epoch_seconds": float(epoch_seconds),
                "sync_seconds": float(sync_seconds), "wait_seconds": float(self.strategy.ex.stats.wait_seconds),
                "span_seconds": span_seconds + eager_gather, "threads": torch.get_num_threads()}

    def finish(self, path: str | Path, epoch: int, epoch_seconds: float, sync_seconds: float) -> dict | None:
        """Gather every rank's samples on rank 0, fit and write PROFILE.json (collective: every rank calls it)."""
        import torch.distributed as dist

        self._restore()
        mine = self.samples(epoch_seconds, sync_seconds)
        world = dist.get_world_size() if dist.is_initialized() else 1
        everyone = [None] * world
        if dist.is_initialized():
            dist.all_gather_object(everyone, mine)
        else:
            everyone = [mine]
        if mine["rank"] != 0:
            return None
        plan_meta = self.strategy.data.plan.plan_meta
        shapes = [LayerShape(**s) for s in plan_meta["layers"]]
        cfg = self.strategy.cfg
        meta = {"epoch": int(epoch), "device": cfg.device_for(0).split(":")[0], "workers": world,
                "threads": mine["threads"],
                "pipeline": cfg.pipeline, "backward": cfg.backward, "dtype": cfg.dtype,
                "plan": str(self.strategy.data.plan.root.resolve()), "model": plan_meta["config"],
                "widths": plan_meta["widths"]}
        prof = fit_profile(everyone, shapes, meta)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(prof, indent=1))
        tmp.replace(path)
        return prof


def start_profile(strategy) -> Profiler:
    """Begin recording the blocks of this epoch (call right after ``strategy.tracer.start()``)."""
    return Profiler(strategy)


__all__ = ["Rates", "LayerRates", "PhaseRates", "default_rates", "load_rates", "fit_phase", "fit_profile",
           "start_profile", "Profiler", "PROFILE_SCHEMA", "PROFILE_VERSION"]
