"""`g3 plan`: per-worker priority lists, bins and peer-to-peer tables (G3 §5.3, §6.2), written to disk.

Entry point: :func:`run_plan`. The artifact is documented in docs/ARTIFACTS.md (``g3.plan`` v1).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..common.atomic import atomic_dir, check_target, write_json_atomic
from ..common.errors import G3InputError
from ..common.partition_artifact import load_partition_meta, open_shard
from ..common.progress import make_progress
from .artifact import PLAN_SCHEMA, PLAN_VERSION
from .bins import (
    LayerShape,
    build_layer_bins,
    last_use_bin,
    node_bytes,
    pack_by_bytes,
    pack_by_count,
    priority_list,
    rows_in_priority_order,
)
from .tables import Table, assemble

MODELS = ("sage", "gcn", "gat")


@dataclass
class PlanConfig:
    model: str = "sage"
    layers: int = 2
    hidden: int = 16
    heads: int = 8
    device_memory: int | None = None  # bytes; None = auto
    bin_size: int | None = None  # fixed nodes per bin; None = from memory


def layer_shapes(cfg: PlanConfig, feat_dim: int, num_classes: int) -> list[LayerShape]:
    """Input/output widths of every layer. GAT hidden layers concatenate heads; the last averages them."""
    shapes = []
    d_in = feat_dim
    for li in range(cfg.layers):
        last = li == cfg.layers - 1
        if cfg.model == "gat":
            per_head = num_classes if last else cfg.hidden
            d_out = per_head if last else per_head * cfg.heads
            shapes.append(LayerShape(d_in, d_out, heads=cfg.heads, attention=True, per_head=per_head))
        else:
            d_out = num_classes if last else cfg.hidden
            shapes.append(LayerShape(d_in, d_out))
        d_in = d_out
    return shapes


def auto_device_memory() -> int:
    """The memory of the device training will use: GPU 0 when CUDA is available, else system RAM."""
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(0).total_memory)
    except Exception:
        pass
    import psutil

    return int(psutil.virtual_memory().total)


def partition_digest(part: Path) -> str:
    return "sha256:" + hashlib.sha256((Path(part) / "partition.json").read_bytes()).hexdigest()


def run_plan(part: str | Path, cfg: PlanConfig, out: str | Path | None = None, force: bool = False) -> dict:
    """Entry point of `g3 plan`: write the plan of every worker of partition PART; returns plan.json."""
    part = Path(part)
    meta = load_partition_meta(part)
    _check_config(cfg)
    if meta.get("method") == "feature":
        raise G3InputError(
            "the feature-dimension split has no bins or P2P tables to plan: every worker holds the whole "
            "topology (train it with the feature-parallel strategy)",
            path=part,
        )
    out = Path(out) if out else part.parent / f"{part.name}.plan-{cfg.model}"
    check_target(out, force)
    k = int(meta["num_partitions"])
    store_ref = _store_reference(meta)
    feat_dim, num_classes = int(store_ref["feat_dim"]), int(store_ref["num_classes"])
    shapes = layer_shapes(cfg, feat_dim, num_classes)
    budget = cfg.device_memory or auto_device_memory()
    bin_limit_bytes = budget // 2  # two bins fit: one computes while the next is copied in (§5.2)
    shards = [open_shard(part, r, k) for r in range(k)]

    t0 = time.perf_counter()
    workers = []
    with atomic_dir(out, force=force) as tmp, make_progress() as progress:
        task = progress.add_task("planning workers", total=k)
        sends = {r: {} for r in range(k)}  # per worker: table name -> list of parts
        recvs = {r: {} for r in range(k)}
        per_worker_bins = []
        for shard in shards:
            info, bins_state = _plan_worker(tmp, shard, shapes, cfg, bin_limit_bytes)
            workers.append(info)
            per_worker_bins.append(bins_state)
            progress.advance(task)
        _collect_tables(shards, per_worker_bins, len(shapes), sends, recvs)
        for r in range(k):
            wdir = tmp / f"worker-{r:05d}"
            stats = _write_tables(wdir, sends[r], recvs[r], k)
            workers[r]["tables"] = stats
            _estimate(workers[r], shapes)
            write_json_atomic(wdir / "worker.json", workers[r])
        plan = {
            "schema": PLAN_SCHEMA,
            "schema_version": PLAN_VERSION,
            "partition": {"path": str(part.resolve()), "digest": partition_digest(part), "method": meta.get("method")},
            "store": store_ref,
            "num_workers": k,
            "config": asdict(cfg),
            "device_memory": budget,
            "bin_limit_bytes": None if cfg.bin_size else bin_limit_bytes,
            "layers": [asdict(s) for s in shapes],
            "widths": [shapes[0].d_in] + [s.d_out for s in shapes],
            "workers": [_worker_summary(w) for w in workers],
            "seconds": round(time.perf_counter() - t0, 3),
        }
        write_json_atomic(tmp / "plan.json", plan)
    plan["path"] = str(out)
    return plan


def _store_reference(meta: dict) -> dict:
    """The partition's store reference, completed with the class count from the store when absent."""
    ref = dict(meta["store"])
    if "num_classes" not in ref:
        from ..common.store import GraphStore

        ref["num_classes"] = GraphStore.open(ref["path"]).num_classes
    return ref


def _check_config(cfg: PlanConfig) -> None:
    if cfg.model not in MODELS:
        raise G3InputError(f"unknown model {cfg.model!r} (choose from {', '.join(MODELS)})")
    if cfg.layers < 1 or cfg.hidden < 1 or cfg.heads < 1:
        raise G3InputError("--layers, --hidden and --heads must be >= 1")
    if cfg.bin_size is not None and cfg.bin_size < 1:
        raise G3InputError("--bin-size must be >= 1")


def _plan_worker(tmp: Path, shard, shapes: list[LayerShape], cfg: PlanConfig, limit: int):
    """Priority list and bins of one worker; writes its block arrays and returns what the tables need."""
    n_own, n_rem = shard.num_owned, shard.num_remote
    indptr, indices = shard.indptr, shard.indices
    prio = priority_list(indptr, indices, n_own, shard.send)
    row_ptr, edge_src = rows_in_priority_order(indptr, indices, prio)
    pos = np.empty(n_own, dtype=np.int64)
    pos[prio] = np.arange(n_own)
    wdir = tmp / f"worker-{shard.rank:05d}"
    wdir.mkdir()
    np.save(wdir / "priority.npy", prio)
    np.save(wdir / "row_ptr.npy", row_ptr)
    in_deg = np.diff(row_ptr)
    layers, state = [], {"pos": pos, "row_bin": [], "last_use": [], "num_bins": []}
    for li, shape in enumerate(shapes):
        cost = node_bytes(in_deg, shape)
        if cfg.bin_size:
            bin_ptr = pack_by_count(n_own, cfg.bin_size)
        else:
            bin_ptr = pack_by_bytes(cost, limit)
        lb = build_layer_bins(bin_ptr, prio, row_ptr, edge_src, n_own, n_own + n_rem)
        ldir = wdir / f"layer-{li}"
        ldir.mkdir()
        for name in ("bin_ptr", "src_ptr", "src", "indices"):
            np.save(ldir / f"{name}.npy", getattr(lb, name))
        cum = np.concatenate([[0], np.cumsum(cost)])
        bin_bytes = cum[bin_ptr[1:]] - cum[bin_ptr[:-1]]
        bin_nodes = np.diff(bin_ptr)
        layers.append({
            "num_bins": lb.num_bins,
            "bin_limit_nodes": int(cfg.bin_size) if cfg.bin_size else int(limit // max(1, int(cost.mean()) if n_own else 1)),
            "bin_limit_bytes": None if cfg.bin_size else int(limit),
            "max_bin_nodes": int(bin_nodes.max()) if n_own else 0,
            "max_bin_bytes": int(bin_bytes.max()) if n_own else 0,
            "max_bin_sources": int(np.diff(lb.src_ptr).max()) if n_own else 0,
            "arcs": int(row_ptr[-1]),
        })
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
    bucket.setdefault(name, []).append((peer, np.asarray(steps, dtype=np.int64), np.asarray(nodes, dtype=np.int64), None))


def _write_tables(wdir: Path, sends: dict, recvs: dict, k: int) -> dict:
    stats = {}
    for bucket in (sends, recvs):
        for name, parts in bucket.items():
            table = assemble(parts)
            np.save(wdir / f"{name}_nodes.npy", table.nodes)
            np.save(wdir / f"{name}_msgs.npy", table.msgs)
            stats[name] = {"messages": len(table.msgs), "nodes": table.total}
    return stats


def _estimate(w: dict, shapes: list[LayerShape]) -> None:
    """Per-layer compute (arcs × aggregated width) and communication bytes per epoch, forward."""
    est = []
    for li, s in enumerate(shapes):
        recv_nodes = w["tables"].get(f"fwd_recv_{li - 1}", {}).get("nodes", 0) if li else w["num_remote"]
        send_nodes = w["tables"].get(f"fwd_send_{li}", {}).get("nodes", 0) if li < len(shapes) - 1 else 0
        est.append({
            "layer": li,
            "compute": int(w["num_arcs"] * s.edge_width),
            "recv_bytes": int(recv_nodes * s.d_in * 4),
            "send_bytes": int(send_nodes * s.d_out * 4),
            "recv_is_static_features": li == 0,
        })
    w["estimate"] = est


def _worker_summary(w: dict) -> dict:
    return {k: w[k] for k in ("rank", "num_owned", "num_remote", "num_arcs", "layers", "estimate")}


__all__ = ["run_plan", "PlanConfig", "PLAN_SCHEMA", "PLAN_VERSION", "Table", "layer_shapes"]
