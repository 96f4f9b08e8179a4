"""The ``distdgl`` strategy's planner: the sampling options of a DistDGL run, and the boundary tables its exact
full-neighbour evaluation uses (``boundary.py``, as ``bns-gcn``'s)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stages.common.errors import G3InputError
from stages.common.plan_options import PlanOption, choice_option, positive_int
from stages.kits.plan.boundary import plan_boundary
from stages.kits.plan.context import PlanContext
from stages.kits.plan.residency import DEVICE_MEMORY_RECORDED


def parse_fanouts(text: str) -> list[int]:
    try:
        fanouts = [int(f) for f in text.split(",")]
    except ValueError:
        raise ValueError("expected comma-separated integers, e.g. 25,10") from None
    if not fanouts or any(f == 0 or f < -1 for f in fanouts):
        raise ValueError("every fanout must be a positive integer or -1 (all neighbours)")
    return fanouts


SAMPLING_OPTIONS = (
    PlanOption(
        "fanouts",
        "--fanouts",
        "25,10",
        parse=parse_fanouts,
        metavar="F1,F2,…",
        help="Neighbours sampled per node at each hop, the TARGETS' fanout FIRST (25,10: 25 neighbours of "
        "each target, then 10 of each of those), as G3 and P3 write it; one per layer; -1 = every "
        "neighbour. Uniform without replacement, min(fanout, degree), chosen by a hash of (seed, epoch, "
        "step, hop, node, position): the same neighbours whatever K, threads or prefetch.",
    ),
    PlanOption(
        "batch_size",
        "--batch-size",
        "1000",
        parse=positive_int("the batch size"),
        metavar="B",
        help="Target (training) nodes per batch: per worker with --batch-order local, in all with global.",
    ),
    choice_option(
        "batch_order",
        "local",
        ("local", "global", "split"),
        "local (DistDGL): the training nodes are split evenly, every worker the same count "
        "(N/K, own nodes first, the surplus of fuller workers moved to emptier ones), each shuffling "
        "its share every epoch. global: one permutation of all training nodes per epoch, global step "
        "s = batch s, each worker computing the targets it owns — the same batches for any K. split: "
        "global's batches, but worker k computes positions k, k+K, k+2K, … of each wherever the "
        "targets live, fetching what is not local (model-centric data parallelism, the baseline "
        "HopGNN and P3 compare against); the same model as global.",
    ),
    DEVICE_MEMORY_RECORDED,
)
OPTIONS = SAMPLING_OPTIONS + (
    choice_option(
        "topology",
        "partitioned",
        ("partitioned", "replicated"),
        "distdgl: partitioned (DistDGL: a node's in-edges live with its owner, so a worker asks "
        "the owners' sampling servers for its remote frontier nodes) or replicated "
        "(the plan holds the store's whole CSR once, topology/, memory-mapped by every worker: "
        "sampling needs no communication; features are still fetched). Same samples, same model.",
    ),
)


def check_sampling(ctx: PlanContext) -> list[int]:
    """The per-worker training node counts, after checking the options fit the model and the partition."""
    fanouts = ctx.options["fanouts"]
    if len(fanouts) != ctx.spec.layers:
        raise G3InputError(
            f"--fanouts {','.join(map(str, fanouts))} has {len(fanouts)} hops but the model has "
            f"{ctx.spec.layers} layers (give one fanout per layer)",
            path=ctx.part,
        )
    train = [int(len(np.asarray(s.load("train")))) for s in ctx.shards]
    if sum(train) == 0:
        raise G3InputError(
            "the partition has no training nodes: nothing to sample batches from", path=ctx.part
        )
    # --batch-order local splits the training nodes evenly over the trainers (the runtime's balanced_split), so
    # a worker that owns none still trains its share
    return train


def plan(tmp: Path, ctx: PlanContext) -> dict:
    train = check_sampling(ctx)
    workers = plan_boundary(tmp, ctx, "planning workers (distdgl: evaluation tables)")
    for w, n in zip(workers, train, strict=True):
        w["num_train"] = n
    out: dict = {"workers": workers}
    if ctx.options.get("topology") == "replicated":
        out["topology"] = write_topology(tmp / "topology", ctx)
    return out


def write_topology(folder: Path, ctx: PlanContext) -> dict:
    """The store's in-edge CSR, rows sorted by global source id (the order sampling positions refer to), as
    plain .npy files every worker memory-maps: ``indptr`` int64 [N+1], ``nbrs`` int32/int64 [arcs]."""
    from stages.common.artifact_json import resolve_reference
    from stages.common.store import GraphStore

    store = GraphStore.open(resolve_reference(ctx.partition["store"], ctx.part, "zarr.json"))
    indptr, indices = store.load_csr()
    indptr = np.asarray(indptr, dtype=np.int64)
    dtype = np.int32 if store.num_nodes < 2**31 else np.int64
    row = np.repeat(np.arange(store.num_nodes, dtype=np.int64), np.diff(indptr))
    nbrs = np.asarray(indices, dtype=dtype)
    nbrs = nbrs[np.lexsort((nbrs, row))]
    folder.mkdir()
    np.save(folder / "indptr.npy", indptr)
    np.save(folder / "nbrs.npy", nbrs)
    return {
        "path": "topology",
        "num_nodes": int(store.num_nodes),
        "num_arcs": int(len(nbrs)),
        "nbrs_dtype": str(nbrs.dtype),
    }
