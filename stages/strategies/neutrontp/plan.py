"""The ``neutrontp`` strategy's planner (NeutronTP, 002 §3–4): chunks over the whole graph, the interleaved
ownership of their rows, and the size of every collective of an epoch.

Chunks (002 §4.2.1) are contiguous destination ranges of the whole graph with all their in-arcs, sized like
G3's bins: at most half of ``--device-memory`` per chunk (one chunk aggregates while the next one's rows
move), or ``--chunk-size`` nodes. Every worker aggregates every chunk on its own column slice, in the same
order. Ownership of the rows — who runs the dense update of a node, holds its label and receives its slices in
the all-to-alls — is interleaved: chunk ``j``'s range is cut into K consecutive pieces, piece ``q`` owned by
worker ``q``, so every chunk's collective loads every worker alike (002 §4.2.2). A node's rows are sent once
per layer, with the first chunk that reads it as a source (``first_use``): the deduplicated split.

Artifact (docs/ARTIFACTS.md, "Plan: neutrontp"): ``chunks/bounds.npy`` int64 ``[n_chunks + 1]``,
``chunks/owner_bounds.npy`` int64 ``[n_chunks, K + 1]`` (absolute node ids), ``chunks/first_use.npy`` int32
``[N]`` (``n_chunks`` = never read as a source), per worker ``owned.npy`` (ascending global ids, int32 below 2^31 nodes), and
``topology/`` the store's whole in-edge CSR in the store's arc order (what every worker aggregates over: the
runtime reads it from the plan, never the store, so a bundled plan trains on hosts without the store).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stages.common.artifact_json import resolve_reference
from stages.common.atomic import write_json_atomic
from stages.common.errors import G3InputError
from stages.common.npy import narrow, npy_manifest
from stages.common.plan_options import PlanOption, choice_option, count_or_auto
from stages.common.plan_topology import write_csr
from stages.common.tensor_parallel import chunk_bounds, collectives, first_use, owner_bounds
from stages.kits.plan.context import PlanContext
from stages.kits.plan.residency import (
    DEVICE_MEMORY,
    auto_device_memory,
    residency_record,
    tensor_parallel_bytes,
)

OPTIONS = (
    choice_option(
        "tp",
        "naive",
        ("naive", "decoupled"),
        "neutrontp: naive = tensor parallelism per layer (aggregate the column slice over the whole "
        "graph, all-to-all to row blocks, the dense update on owned rows, all-to-all back; exact); "
        "decoupled = the decoupled GCN (an MLP on row blocks, one split, L propagation rounds on "
        "column slices, one gather: 4 collectives per epoch whatever L; a different model, dgcn).",
    ),
    DEVICE_MEMORY,
    PlanOption(
        "chunk_size",
        "--chunk-size",
        "auto",
        parse=count_or_auto("the chunk size"),
        metavar="N",
        help="neutrontp: destination nodes per chunk; 'auto' sizes chunks by --device-memory.",
    ),
)


def model_kind(options: dict, kind: str) -> str:
    """The model a neutrontp plan trains: ``--tp decoupled`` trains the decoupled GCN (``--model gcn`` or
    ``dgcn``); naive TP trains SAGE or GCN."""
    if options["tp"] == "decoupled":
        if kind not in ("gcn", "dgcn"):
            raise G3InputError(
                f"--tp decoupled trains the decoupled GCN (an MLP followed by Â^L): use --model gcn "
                f"or dgcn, not {kind}"
            )
        return "dgcn"
    if kind == "gat":
        raise G3InputError(
            "neutrontp --tp naive does not train GAT: its attention scores need whole rows of both "
            "ends of every arc, which a column slice does not hold (the per-node decomposition, an "
            "all-gather of 2·V·H scalars per layer, is not built); use --model sage or gcn"
        )
    if kind == "dgcn":
        raise G3InputError("the decoupled GCN runs under --tp decoupled (naive TP trains sage or gcn)")
    return kind


def check_shards(ctx: PlanContext) -> None:
    """Feature shards of schema version 1 lack the degrees the strategy reads."""
    for shard in ctx.shards:
        if "in_degree.npy" not in shard.manifest or "out_degree.npy" not in shard.manifest:
            raise G3InputError(
                "feature shard of an older schema (version 1, without in_degree/out_degree): "
                "re-run `g3 partition STORE --method feature --force`",
                path=shard.path,
            )


def plan(tmp: Path, ctx: PlanContext) -> dict:
    from stages.common.store import GraphStore

    check_shards(ctx)
    spec, k = ctx.spec, ctx.num_workers
    store = GraphStore.open(resolve_reference(ctx.partition["store"], ctx.part, "zarr.json"))
    indptr, indices = store.load_csr()
    indptr = np.asarray(indptr, dtype=np.int64)
    topology = write_csr(tmp / "topology", indptr, indices)  # the store's arc order: bitwise the same sums
    budget = ctx.options["device_memory"] or auto_device_memory(k)
    bounds = chunk_bounds(np.diff(indptr), spec, k, ctx.options["chunk_size"], budget)
    ob = owner_bounds(bounds, k)
    first = first_use(indptr, indices, bounds, self_loops=spec.kind in ("gcn", "dgcn"))
    n_chunks = len(bounds) - 1
    folder = tmp / "chunks"
    folder.mkdir()
    np.save(folder / "bounds.npy", bounds.astype(np.int64))
    np.save(folder / "owner_bounds.npy", ob.astype(np.int64))
    np.save(folder / "first_use.npy", first)
    owned = []
    for q in ctx.progress(range(k), "planning workers (neutrontp)"):
        pieces = [np.arange(a, b, dtype=np.int64) for a, b in zip(ob[:, q], ob[:, q + 1], strict=True)]
        ids = np.concatenate(pieces or [np.zeros(0, dtype=np.int64)])
        owned.append(ids)
        wdir = tmp / f"worker-{q:05d}"
        np.save(wdir / "owned.npy", narrow(ids, store.num_nodes - 1))
        write_json_atomic(wdir / "worker.json", {"rank": q, "num_owned": int(len(ids))})
    layer0_columns = [c["stop"] - c["start"] for c in (s.info["feature_columns"] for s in ctx.shards)]
    needed = first < n_chunks
    sizes = np.diff(bounds)
    return {
        "device_memory": budget,
        "topology": topology,
        "chunks": {
            "path": "chunks",
            "files": npy_manifest(folder),
            "count": n_chunks,
            "max_nodes": int(sizes.max()) if n_chunks else 0,
            "max_arcs": int(np.diff(indptr[bounds]).max()) if n_chunks else 0,
            "sources_read": int(needed.sum()),
        },
        "collectives": collectives(spec, owned, needed, layer0_columns, store.num_nodes),
        "workers": [
            {
                "rank": q,
                "num_owned": int(len(owned[q])),
                "residency": residency_record(
                    tensor_parallel_bytes(spec, store.num_nodes, len(indices), len(owned[q]), k), budget
                ),
            }
            for q in range(k)
        ],
    }


def summary_rows(plan: dict) -> list[tuple[str, str]]:
    """What `g3 info PLAN` / `g3 plan` say about a neutrontp plan: its chunks and every worker's owned rows."""
    ch = plan["chunks"]
    owned = ", ".join(f"{w['num_owned']:,}" for w in plan["workers"])
    return [
        ("chunks", f"{ch['count']:,} chunks of at most {ch['max_nodes']:,} nodes / {ch['max_arcs']:,} arcs"),
        ("owned rows", f"per worker {owned}"),
    ]


def summary_table(plan: dict) -> dict:
    """Every collective of one training epoch (float32 bytes), in place of the per-worker table."""
    from stages.common.units import human_bytes

    rows = [
        (
            c["name"],
            str(c["width"]),
            human_bytes(4 * max(c["elements_sent"])),
            human_bytes(4 * sum(c["elements_sent"])),
            "first epoch (cached)" if c["once"] else "every epoch",
        )
        for c in plan["collectives"]
    ]
    return {
        "title": "collectives of one training epoch (all-to-all; bytes sent at float32)",
        "columns": ("collective", "width", "per worker (max)", "all workers", "when"),
        "rows": rows,
    }
