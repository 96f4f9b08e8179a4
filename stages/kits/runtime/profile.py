"""PROFILE.json: the compute rates of this device, fitted from a traced epoch of the real runtime
(``g3 train --profile``); ``g3 simulate --profile`` reads it (``stages.kits.simulate.profile.load_rates``).

**Recording.** Nothing is wrapped or patched: every strategy's ``compute`` spans carry the work they did
(``layer``, ``phase``, ``nodes``, ``arcs``, ``srcs``: destination nodes, in-arcs and source rows of the bin,
or of the whole partition for a layer-synchronous strategy), and ``gather`` spans the rows they gathered. At
the profiled epoch (the run's last, the warmest) the loop traces the epoch and calls :func:`write_profile`:
every rank turns its spans into samples (:func:`samples_from_trace`), rank 0 fits and writes.

**Fit.** Per layer and phase (forward, backward), the span durations are fitted by non-negative least squares
to ``seconds = per_arc · arcs + per_node · nodes + per_bin`` (only where the bins span sizes: the largest at least
1.5× the smallest in arcs; else one rate per arc + node); forward gathers give seconds per source row;
what the epoch spent outside spans, waits and the all-reduce is spread over the bins as ``overhead_per_bin``
(Python bookkeeping, message packing, loss); ``step_seconds`` is the all-reduce + optimizer step. When the
bins cannot separate the terms (equal node counts: no per-bin constant, ``fit: "nnls-no-intercept"``; one or
two bins: one rate per arc + node, ``fit: "ratio"``) the model is reduced. Schema: docs/ARTIFACTS.md
("Profile").
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np

from stages.common.atomic import write_json_atomic
from stages.common.model_spec import LayerShape

PROFILE_SCHEMA = "g3.profile"
PROFILE_VERSION = 1
MIN_SPREAD = 1.5  # largest / smallest bin (in arcs) below which a per-bin constant cannot be separated


# ------------------------------------------------------------------------------------------------------------
# Fitting
# ------------------------------------------------------------------------------------------------------------


def fit_phase(arcs: np.ndarray, nodes: np.ndarray, seconds: np.ndarray) -> dict:
    """``seconds ≈ per_arc·arcs + per_node·nodes + per_bin`` by non-negative least squares over bins."""
    arcs, nodes, seconds = (np.asarray(a, dtype=np.float64) for a in (arcs, nodes, seconds))
    n = len(seconds)
    out = {
        "bins": int(n),
        "seconds": float(seconds.sum()),
        "arcs": int(arcs.sum()),
        "nodes": int(nodes.sum()),
    }
    a = np.stack([arcs, nodes, np.ones(n)], axis=1)
    coef, fit = None, "ratio" if n else "none"  # no bins: every rate 0
    # the richest model the bins can identify: with equal-size bins (--bin-size) the node count is constant and
    # indistinguishable from a per-bin constant, so it is attributed to the nodes (dense work grows with them);
    # bins of nearly one size (one bin per layer and worker of a balanced partition, or a whole-partition
    # strategy's layers) cannot tell size-dependent work from a constant at all: nnls then put everything in the
    # constant and predicted the same time at any worker count, so they get one rate per unit of work
    spread = float(arcs.max() / max(arcs.min(), 1.0)) if n else 1.0
    models = (([0, 1, 2], "nnls"), ([0, 1], "nnls-no-intercept")) if spread >= MIN_SPREAD else ()
    for cols, name in models:
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
    ss = float(((seconds - seconds.mean()) ** 2).sum()) if n > 2 else 0.0
    r2 = 1.0 - float(((seconds - pred) ** 2).sum()) / ss if ss > 0 else None
    return {
        **out,
        "seconds_per_arc": float(coef[0]),
        "seconds_per_node": float(coef[1]),
        "seconds_per_bin": float(coef[2]),
        "fit": fit,
        "r2": r2,
    }


def fit_profile(samples: list[dict], shapes: list[LayerShape], meta: dict) -> dict:
    """PROFILE.json from every rank's samples (see :meth:`Profiler.samples`)."""
    layers = []
    for li, s in enumerate(shapes):
        entry = {"layer": li, "d_in": s.d_in, "d_out": s.d_out, "edge_width": s.edge_width, "heads": s.heads}
        for phase in ("forward", "backward"):
            rows = [b for r in samples for b in r["bins"] if b["layer"] == li and b["phase"] == phase]
            entry[phase] = fit_phase(
                [b["arcs"] for b in rows], [b["nodes"] for b in rows], [b["seconds"] for b in rows]
            )
        g_sec = sum(r["gather"].get(str(li), [0.0, 0])[0] for r in samples)
        g_rows = sum(r["gather"].get(str(li), [0.0, 0])[1] for r in samples)
        entry["gather"] = {
            "seconds": g_sec,
            "rows": int(g_rows),
            "seconds_per_row": g_sec / g_rows if g_rows else 0.0,
        }
        layers.append(entry)
    bins = sum(len(r["bins"]) for r in samples)
    outside = sum(
        max(0.0, r["epoch_seconds"] - r["sync_seconds"] - r["wait_seconds"] - r["span_seconds"])
        for r in samples
    )
    return {
        "schema": PROFILE_SCHEMA,
        "schema_version": PROFILE_VERSION,
        **meta,
        "layers": layers,
        "overhead_per_bin": outside / bins if bins else 0.0,
        "step_seconds": min(r["sync_seconds"] for r in samples),
        "epoch_seconds": max(r["epoch_seconds"] for r in samples),
        "ranks": [
            {
                k: r[k]
                for k in ("rank", "epoch_seconds", "sync_seconds", "wait_seconds", "span_seconds", "threads")
            }
            | {"bins": len(r["bins"])}
            for r in samples
        ],
        "samples": [
            [r["rank"], b["layer"], b["phase"], b["nodes"], b["arcs"], b["srcs"], round(b["seconds"], 7)]
            for r in samples
            for b in r["bins"]
        ],
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "host": socket.gethostname(),
        "load_average": list(os.getloadavg()),
    }


# ------------------------------------------------------------------------------------------------------------
# Recording
# ------------------------------------------------------------------------------------------------------------


def samples_from_trace(
    events: list[dict],
    rank: int,
    epoch_seconds: float,
    sync_seconds: float,
    wait_seconds: float,
    threads: int,
) -> dict:
    """One rank's bins (layer, phase, nodes, arcs, source rows, seconds), forward gathers per layer and the
    time its spans explain, from the spans of a traced training epoch."""
    bins, span_seconds = [], 0.0
    gather: dict[str, list] = {}
    for e in events:
        a = e["args"]
        if e["cat"] == "compute" and a.get("phase") in ("fwd", "bwd"):  # the loss stays in the overhead
            seconds = e["dur"] / 1e6
            span_seconds += seconds
            bins.append(
                {
                    "layer": int(a["layer"]),
                    "phase": "forward" if a["phase"] == "fwd" else "backward",
                    "nodes": int(a["nodes"]),
                    "arcs": int(a["arcs"]),
                    "srcs": int(a["srcs"]),
                    "seconds": seconds,
                }
            )
        elif e["cat"] == "gather" and a.get("phase") == "fwd":  # backward's sit inside its compute spans
            g = gather.setdefault(str(int(a["layer"])), [0.0, 0])
            g[0] += e["dur"] / 1e6
            g[1] += int(a.get("rows", 0))
            if not a.get("prefetched"):  # on the compute thread: explained time (prefetched ones overlap)
                span_seconds += e["dur"] / 1e6
    return {
        "rank": rank,
        "bins": bins,
        "gather": gather,
        "epoch_seconds": float(epoch_seconds),
        "sync_seconds": float(sync_seconds),
        "wait_seconds": float(wait_seconds),
        "span_seconds": span_seconds,
        "threads": threads,
    }


def write_profile(path: str | Path, everyone: list[dict], shapes: list[LayerShape], meta: dict) -> dict:
    """Fit every rank's samples and write PROFILE.json atomically; returns it."""
    prof = fit_profile(everyone, shapes, meta)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, prof)
    return prof
