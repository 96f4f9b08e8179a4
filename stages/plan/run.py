"""`g3 plan`: how a strategy will execute a partition, written to disk (one JSON plus one folder per worker).

Entry point: :func:`run_plan`. The strategy (``--strategy``, default ``g3``) and its options are recorded in
plan.json (``g3.plan`` v4, docs/ARTIFACTS.md); the strategy's planner (its spec's ``plan``) writes the worker
folders: bins and P2P tables for ``g3``, the boundary exchange for the layer-synchronous strategies, each other
strategy's own plan.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stages.common.artifact_json import reference
from stages.common.atomic import atomic_dir, check_target, write_json_atomic
from stages.common.cost import check_memory_floor, stage_cost
from stages.common.errors import G3InputError
from stages.common.model_spec import MODEL_KINDS, ModelSpec
from stages.common.npy import npy_manifest
from stages.common.partition_artifact import load_partition_meta, open_shard, partition_digest
from stages.common.plan_artifact import PLAN_SCHEMA, PLAN_VERSION
from stages.common.progress import make_progress
from stages.common.settings import setting
from stages.kits.plan.context import PlanContext
from stages.kits.plan.residency import auto_device_memory, residency
from stages.strategies.registry import LEGACY_STRATEGY, STRATEGIES, check_partition_method, strategy_spec

MODELS = MODEL_KINDS


@dataclass
class PlanConfig:
    """Everything `g3 plan` can be told (see ``g3 plan --help``): the model, the strategy and its options."""

    strategy: str = setting(
        LEGACY_STRATEGY,
        "The distributed training system that executes the plan (listed below). `g3 train` runs whatever the "
        "plan says.",
        choices=STRATEGIES,  # the registry itself: a strategy registered later (a test's) is a choice too
    )
    model: str = setting(
        "sage",
        "GNN model: GraphSAGE (mean), GCN (symmetric normalisation, self-loops), GAT, or dgcn, the decoupled GCN "
        "of NeutronTP (an MLP of L linear layers, then L propagation rounds of GCN's normalised adjacency; g3 and "
        "neutrontp --tp decoupled train it).",
        choices=tuple(MODELS),
    )
    layers: int = setting(2, "Number of GNN layers L (>= 1); dgcn: L linear layers and L propagation rounds.")
    hidden: int = setting(16, "Hidden width H (per head for GAT).")
    heads: int = setting(8, "GAT attention heads.")
    # the strategy's options by name (see its planner's OPTIONS): text as on the command line, or a value; an
    # option left out takes its default
    options: dict = field(default_factory=dict)


def parse_options(strategy: str, given: dict) -> dict:
    """Every option of ``strategy``, parsed (defaults for those not given); an option of another strategy, or a
    bad value, is bad input (one line)."""
    info = strategy_spec(strategy)
    own = {o.name: o for o in info.plan_options}
    for name, value in given.items():
        if name not in own and value is not None:
            owners = [s.name for s in STRATEGIES.values() if any(o.name == name for o in s.plan_options)]
            flag = next((o.flag for s in STRATEGIES.values() for o in s.plan_options if o.name == name), name)
            raise G3InputError(
                f"{flag} is an option of {', '.join(owners) or 'no strategy'}, not of {strategy}"
            )
    out = {}
    for name, opt in own.items():
        value = given.get(name)
        text = opt.default if value is None else value
        try:
            out[name] = opt.parse(text) if isinstance(text, str) or text is None else opt.parse(str(text))
        except ValueError as exc:
            raise G3InputError(f"{opt.flag} {text}: {exc}") from None
    return out


def default_out(part: Path, cfg: PlanConfig) -> Path:
    """PART.plan-MODEL beside the partition for g3 plans (as before strategies existed), else
    PART.plan-STRATEGY-MODEL."""
    suffix = cfg.model if cfg.strategy == LEGACY_STRATEGY else f"{cfg.strategy}-{cfg.model}"
    return part.parent / f"{part.name}.plan-{suffix}"


# A plan's floor, lower bounds measured: the planner's own memory once torch and numba are imported (202 MiB of
# anonymous memory planning synthetic:tiny, torch 2.13) and per arc of the graph (16-20 B measured from 150 M to 1 B
# arcs: docs/BENCHMARKS.md)
PLANNER_BYTES = 200 << 20
PLAN_BYTES_PER_ARC = 8


def run_plan(part: str | Path, cfg: PlanConfig, out: str | Path | None = None, force: bool = False) -> dict:
    """Entry point of `g3 plan`: write the plan of every worker of partition PART; returns plan.json."""
    part = Path(part)
    meta = load_partition_meta(part)
    info = strategy_spec(cfg.strategy)
    check_partition_method(info, meta.get("method"), part)
    store_ref = _store_reference(meta)
    options = parse_options(cfg.strategy, cfg.options)
    # a planner may name the model its options imply (neutrontp --tp decoupled --model gcn trains dgcn)
    model = info.model_kind(options, cfg.model) if info.model_kind else cfg.model
    if model not in info.models:
        raise G3InputError(f"strategy {info.name} trains {', '.join(info.models)}, not {model}")
    cfg = PlanConfig(**{**asdict(cfg), "model": model})
    spec = ModelSpec(
        model, int(store_ref["feat_dim"]), cfg.hidden, int(store_ref["num_classes"]), cfg.layers, cfg.heads
    )
    try:
        spec.check()
    except ValueError as exc:
        raise G3InputError(str(exc)) from None
    out = Path(out) if out else default_out(part, cfg)
    check_target(out, force, "plan", (part,))
    check_memory_floor(
        {
            "the planner (torch and numba imported)": PLANNER_BYTES,
            f"{PLAN_BYTES_PER_ARC} bytes per arc": PLAN_BYTES_PER_ARC * int(store_ref["num_arcs"]),
        },
        "this plan",
        "plan on a machine (or in a memory cgroup) with more memory",
    )
    k = int(meta["num_partitions"])
    shards = [open_shard(part, r, k) for r in range(k)]
    t0 = time.perf_counter()
    with atomic_dir(out, force=force, kind="plan", inputs=(part,)) as tmp, make_progress() as progress:
        ctx = PlanContext(
            part=part, partition=meta, shards=shards, spec=spec, options=options, progress_display=progress
        )
        for r in range(k):
            (tmp / f"worker-{r:05d}").mkdir()
        planned = info.plan(tmp, ctx)
        _record_residency(planned, shards, spec, options.get("device_memory") or auto_device_memory(k))
        for r in range(
            k
        ):  # every file of a worker's folder, with its shape and dtype, for the readers' checks
            wdir = tmp / f"worker-{r:05d}"
            worker = json.loads((wdir / "worker.json").read_text())
            write_json_atomic(wdir / "worker.json", {**worker, "files": npy_manifest(wdir)}, seal=True)
        shapes = spec.layer_shapes()
        plan = {
            "schema": PLAN_SCHEMA,
            "schema_version": PLAN_VERSION,
            "strategy": {"name": info.name, "options": options},
            "partition": {
                **reference(part, out),
                "digest": partition_digest(part),
                "method": meta.get("method"),
            },
            "store": store_ref,
            "num_workers": k,
            "config": {"model": cfg.model, "layers": cfg.layers, "hidden": cfg.hidden, "heads": cfg.heads},
            "layers": [asdict(s) for s in shapes],
            "widths": spec.widths,
            **planned,
            "seconds": round(time.perf_counter() - t0, 3),
            "cost": stage_cost(t0, out=tmp),  # every worker's files are written: plan.json is the rest
        }
        write_json_atomic(tmp / "plan.json", plan, seal=True)
    plan["path"] = str(out)
    return plan


def _record_residency(planned: dict, shards, spec: ModelSpec, device_memory: int) -> None:
    """Every worker's ``residency`` (:func:`.residency.residency`: whether its partition fits the device), where
    its planner, which knows its strategy's footprint better (neutrontp's column slices), did not write it."""
    for w, shard in zip(planned["workers"], shards, strict=True):
        if "residency" not in w:
            w["residency"] = residency(
                spec, shard.num_owned, shard.num_remote, len(shard.indices), device_memory
            )


def _store_reference(meta: dict) -> dict:
    """The partition's store reference, completed with the class count from the store when absent."""
    ref = dict(meta["store"])
    if "num_classes" not in ref:
        from stages.common.store import GraphStore

        ref["num_classes"] = GraphStore.open(ref["path"]).num_classes
    return ref
