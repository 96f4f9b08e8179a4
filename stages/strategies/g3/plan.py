"""The ``g3`` strategy's planner (G3 §5.3, §6.2): per worker a BFS priority list (nodes peers need first), per
layer the bin limit and bins with their blocks, and the peer-to-peer tables of the forward (embeddings) and
backward (gradients) passes. The artifact is documented in docs/ARTIFACTS.md ("Plan").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stages.common.atomic import write_json_atomic
from stages.common.bin_memory import pack_within
from stages.common.model_spec import BIN_DEVICES, BinCost, LayerShape, ModelSpec, bin_costs, bins_device
from stages.common.npy import narrow
from stages.common.plan_options import PlanOption, count_or_auto
from stages.kits.plan.bins import (
    build_layer_bins,
    last_use_bin,
    pack_by_count,
    priority_list,
    rows_in_priority_order,
)
from stages.kits.plan.boundary import save_table
from stages.kits.plan.context import PlanContext
from stages.kits.plan.residency import DEVICE_MEMORY, auto_device_memory
from stages.kits.plan.tables import assemble


def _bins_for(text: str) -> str:
    """``--bins-for``: the device kind bins are sized for; ``auto``: this machine's (cuda if torch sees CUDA)."""
    if text in (None, "auto"):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if text not in BIN_DEVICES:
        raise ValueError(f"expected one of {', '.join(BIN_DEVICES)} or auto")
    return text


OPTIONS = (
    DEVICE_MEMORY,
    PlanOption(
        "bin_size",
        "--bin-size",
        "auto",
        parse=count_or_auto("the bin size"),
        metavar="N",
        help="Fixed nodes per bin (the paper uses 1000 and 5000); 'auto' derives it per layer from "
        "--device-memory and the layer's per-node memory.",
    ),
    PlanOption(
        "bins_for",
        "--bins-for",
        "auto",
        parse=_bins_for,
        metavar="cpu|cuda",
        help="The device kind the bins are sized for: cuda counts the per-arc message rows of CUDA's "
        "gather/scatter kernels, cpu the fused numba kernels' (none), so its bins are larger. "
        "'auto': cuda if this machine has CUDA, else cpu. Auto device memory is this machine's too "
        "(host RAM on a CPU machine): to plan for a GPU cluster on a CPU machine give --device-memory "
        "and --bins-for cuda. g3 train --device cuda refuses a plan sized for cpu.",
    ),
)


def plan(tmp: Path, ctx: PlanContext) -> dict:
    """Write every worker's folder into ``tmp``; returns plan.json's ``workers`` and the g3 fields."""
    shapes = ctx.spec.layer_shapes()
    costs = bin_costs(ctx.spec, bins_device(ctx.options))
    bin_size = ctx.options["bin_size"]
    k = ctx.num_workers
    budget = ctx.options["device_memory"] or auto_device_memory(k)
    bin_limit_bytes = budget // 2  # two bins fit: one computes while the next is copied in (§5.2)
    workers, per_worker_bins = [], []
    sends: dict[int, dict[str, list]] = {r: {} for r in range(k)}  # per worker: table name -> list of parts
    recvs: dict[int, dict[str, list]] = {r: {} for r in range(k)}
    for shard in ctx.progress(ctx.shards, "planning workers"):
        info, bins_state = _plan_worker(tmp, shard, costs, bin_size, bin_limit_bytes)
        workers.append(info)
        per_worker_bins.append(bins_state)
    _collect_tables(ctx.shards, per_worker_bins, len(shapes), sends, recvs)
    for r in range(k):
        wdir = tmp / f"worker-{r:05d}"
        workers[r]["tables"] = _write_tables(wdir, sends[r], recvs[r])
        _estimate(workers[r], shapes)
        workers[r]["scratch_bytes"] = _scratch_bytes(workers[r], ctx.spec)
        write_json_atomic(wdir / "worker.json", workers[r])
    keys = ("rank", "num_owned", "num_remote", "num_arcs", "layers", "estimate", "scratch_bytes")
    return {
        "device_memory": budget,
        "bin_limit_bytes": None if bin_size else bin_limit_bytes,
        "workers": [{key: w[key] for key in keys} for w in workers],
    }


def _scratch_bytes(w: dict, spec) -> int:
    """The most the worker holds in ``TMPDIR`` at once when training streams its bins, in float32 (the runtime's own
    estimate, which its TMPDIR check refuses by, from the same rows and tables)."""
    from stages.strategies.g3.runtime import spilled_parts

    def rows(name: str) -> int:
        return int(w["tables"].get(name, {}).get("nodes", 0))

    return sum(spilled_parts(w["num_owned"], w["num_remote"], spec.in_dim, rows, spec.widths, 4).values())


def _plan_worker(tmp: Path, shard, costs: list[BinCost], bin_size: int | None, limit: int):
    """Priority list and bins of one worker; writes its block arrays and returns what the tables need.

    Bins by bytes: runs of the priority list while what the bin holds on the device (:func:`bin_cost`: its
    destinations, in-arcs and distinct sources) stays within ``limit``."""
    n_own, n_rem = shard.num_owned, shard.num_remote
    indptr, indices = shard.indptr, shard.indices
    prio = priority_list(indptr, indices, n_own, shard.send)
    row_ptr, edge_src = rows_in_priority_order(indptr, indices, prio)
    pos = np.empty(n_own, dtype=np.int64)
    pos[prio] = np.arange(n_own)
    wdir = tmp / f"worker-{shard.rank:05d}"
    wdir.mkdir(exist_ok=True)
    # ids and pointers int32 where they fit (docs/ARTIFACTS.md, "`g3` plans"); the readers widen them at load
    np.save(wdir / "priority.npy", narrow(prio, n_own - 1))
    np.save(wdir / "row_ptr.npy", narrow(row_ptr))
    layers: list = []
    state: dict[str, Any] = {"pos": pos, "row_bin": [], "last_use": [], "num_bins": []}
    for li, cost in enumerate(costs):
        if bin_size:
            bin_ptr = pack_by_count(n_own, bin_size)
        else:
            bin_ptr = pack_within(cost, row_ptr, edge_src, prio, n_own + n_rem, limit).bounds
        lb = build_layer_bins(bin_ptr, prio, row_ptr, edge_src, n_own, n_own + n_rem)
        ldir = wdir / f"layer-{li}"
        ldir.mkdir()
        np.save(ldir / "bin_ptr.npy", narrow(lb.bin_ptr))
        np.save(ldir / "src_ptr.npy", narrow(lb.src_ptr))
        np.save(ldir / "src.npy", lb.src)  # local ids, built narrow (build_layer_bins)
        np.save(ldir / "indices.npy", lb.indices)
        bin_nodes = np.diff(bin_ptr)
        bin_srcs = np.diff(lb.src_ptr)
        bin_bytes = cost.bytes(bin_nodes, bin_srcs, row_ptr[bin_ptr[1:]] - row_ptr[bin_ptr[:-1]])
        per_node = max(1, int(bin_bytes.sum()) // n_own) if n_own else 1  # the layer's mean bytes per node
        layers.append(
            {
                "num_bins": lb.num_bins,
                "bin_limit_nodes": int(bin_size) if bin_size else int(limit // per_node),
                "bin_limit_bytes": None if bin_size else int(limit),
                "max_bin_nodes": int(bin_nodes.max()) if n_own else 0,
                "max_bin_bytes": int(bin_bytes.max()) if n_own else 0,
                "max_bin_sources": int(bin_srcs.max()) if n_own else 0,
                "arcs": int(row_ptr[-1]),
            }
        )
        state["row_bin"].append(np.repeat(np.arange(lb.num_bins, dtype=np.int64), bin_nodes))
        state["num_bins"].append(lb.num_bins)
        state["last_use"].append(last_use_bin(edge_src.astype(np.int64), row_ptr, bin_ptr, n_own, n_rem))
    info = {
        "rank": shard.rank,
        "num_owned": n_own,
        "num_remote": n_rem,
        "num_arcs": int(row_ptr[-1]),
        "num_needed_by_peers": int(len(np.unique(shard.send))),
        "layers": layers,
    }
    return info, state


def _collect_tables(shards, states, num_layers: int, sends: dict, recvs: dict) -> None:
    """Forward, backward and feature tables of every worker pair (both ends from the same ordering)."""
    k = len(shards)
    for i, si in enumerate(shards):
        st = states[i]
        for q in range(k):
            if q == i:
                continue
            sq = shards[q]
            out_nodes = si.send_to(q)  # owned-local at i, aligned with q's remote group from i
            q_offsets = sq.recv_from(i)
            zeros = np.zeros(len(out_nodes), dtype=np.int64)
            _add(sends[i], "features_send", q, zeros, out_nodes)
            _add(recvs[q], "features_recv", i, zeros, q_offsets)
            for li in range(num_layers - 1):  # outputs of layer li feed layer li+1 at peers
                steps = st["row_bin"][li][st["pos"][out_nodes]]
                order = np.lexsort((st["pos"][out_nodes], steps))
                _add(sends[i], f"fwd_send_{li}", q, steps[order], out_nodes[order])
                _add(recvs[q], f"fwd_recv_{li}", i, steps[order], q_offsets[order])
            in_offsets = si.recv_from(q)  # remote offsets at i owned by q, aligned with q's send list to i
            q_nodes = sq.send_to(i)
            for li in range(1, num_layers):  # gradients of layer li's inputs return to their owners
                steps = st["last_use"][li][in_offsets]
                order = np.lexsort((in_offsets, steps))
                _add(sends[i], f"bwd_send_{li}", q, steps[order], in_offsets[order])
                _add(recvs[q], f"bwd_recv_{li}", i, steps[order], q_nodes[order])


def _add(bucket: dict, name: str, peer: int, steps: np.ndarray, nodes: np.ndarray) -> None:
    bucket.setdefault(name, []).append(
        (peer, np.asarray(steps, dtype=np.int64), np.asarray(nodes, dtype=np.int64), None)
    )


def _write_tables(wdir: Path, sends: dict, recvs: dict) -> dict:
    stats = {}
    for bucket in (sends, recvs):
        for name, parts in bucket.items():
            stats[name] = save_table(wdir, name, assemble(parts))
    return stats


def _estimate(w: dict, shapes: list[LayerShape]) -> None:
    """Per-layer compute (arcs × aggregated width) and communication bytes per epoch, forward."""
    est = []
    for li, s in enumerate(shapes):
        recv_nodes = w["tables"].get(f"fwd_recv_{li - 1}", {}).get("nodes", 0) if li else w["num_remote"]
        send_nodes = w["tables"].get(f"fwd_send_{li}", {}).get("nodes", 0) if li < len(shapes) - 1 else 0
        est.append(
            {
                "layer": li,
                "compute": int(w["num_arcs"] * s.edge_width),
                "recv_bytes": int(recv_nodes * s.d_in * 4),
                "send_bytes": int(send_nodes * s.d_out * 4),
                "recv_is_static_features": li == 0,
            }
        )
    w["estimate"] = est


def summary_rows(plan: dict) -> list[tuple[str, str]]:
    """What `g3 info PLAN` / `g3 plan` say about a g3 plan beyond the common fields: how its bins are sized."""
    from stages.common.units import human_bytes

    opts = plan["strategy"]["options"]
    bins = (
        f"bins of {opts['bin_size']} nodes"
        if opts.get("bin_size")
        else f"bin limit {human_bytes(plan['bin_limit_bytes'])} (half of the device memory), sized for "
        f"{bins_device(opts)}"
    )
    rows = [("bins", bins)]
    workers = [w for w in plan["workers"] if "scratch_bytes" in w]  # older plans: none
    if workers:
        most = max(workers, key=lambda w: w["scratch_bytes"])
        features = most["num_remote"] * ModelSpec.from_plan(plan).in_dim * 4
        rows.append(
            (
                "streamed",
                f"a worker streaming its bins writes up to {human_bytes(most['scratch_bytes'])} to TMPDIR "
                f"(float32), {human_bytes(features)} of it remote input features "
                "(none with g3 train --remote-features bin)",
            )
        )
    return rows
