"""The plan of a layer-synchronous, whole-partition strategy (``bns-gcn``, ``sancus``): per worker the boundary
exchange with every peer and what one layer over the whole partition costs.

Each layer, worker i sends every peer q the rows of its nodes in q's remote set (the shard's send list to q)
in one message, and receives from every peer the rows of its own remote nodes that peer owns; backward sends
the gradients of those remote rows back the same way. Two tables per worker hold it, in the P2P table format
of ``stages.common.plan_artifact`` with one message per peer (step 0):

* ``boundary_send``: owned-local ids sent to each peer (ascending global id: the peer's remote group order);
* ``boundary_recv``: remote offsets received from each peer (the shard's remote nodes grouped by owner).

The same tables carry the layer-0 input features (fetched once) and, reversed, backward's gradients.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stages.common.atomic import write_json_atomic
from stages.common.model_spec import ELEM_BYTES, bin_costs
from stages.common.npy import narrow
from stages.kits.plan.context import PlanContext
from stages.kits.plan.tables import assemble


def boundary_tables(shard, k: int) -> tuple:
    """(send, recv) tables of one worker: one message per peer, step 0."""
    send_parts, recv_parts = [], []
    for q in range(k):
        if q == shard.rank:
            continue
        out = np.asarray(shard.send_to(q), dtype=np.int64)
        send_parts.append((q, np.zeros(len(out), dtype=np.int64), out, None))
        inc = shard.recv_from(q)
        recv_parts.append((q, np.zeros(len(inc), dtype=np.int64), inc, None))
    return assemble(send_parts), assemble(recv_parts)


def save_table(wdir: Path, name: str, table) -> dict:
    """``NAME_nodes.npy`` and ``NAME_msgs.npy``, each int32 where its values fit (``WorkerPlan.table`` widens
    them at load); the table's figures for worker.json."""
    np.save(wdir / f"{name}_nodes.npy", narrow(table.nodes))
    np.save(wdir / f"{name}_msgs.npy", narrow(table.msgs))
    return {"messages": len(table.msgs), "nodes": table.total}


def plan_boundary(tmp: Path, ctx: PlanContext, description: str) -> list[dict]:
    """Write every worker's boundary tables and worker.json; returns the per-worker summaries of plan.json."""
    shapes = ctx.spec.layer_shapes()
    costs = bin_costs(
        ctx.spec, "cuda"
    )  # no --bins-for here: CUDA's kernels, the larger (per-arc message rows)
    workers = []
    for shard in ctx.progress(ctx.shards, description):
        wdir = tmp / f"worker-{shard.rank:05d}"
        send, recv = boundary_tables(shard, ctx.num_workers)
        tables = {
            "boundary_send": save_table(wdir, "boundary_send", send),
            "boundary_recv": save_table(wdir, "boundary_recv", recv),
        }
        n_own, n_rem, arcs = shard.num_owned, shard.num_remote, int(len(shard.indices))
        estimate = []
        for li, s in enumerate(shapes):
            estimate.append(
                {
                    "layer": li,
                    "compute": int(arcs * s.edge_width),
                    # layer 0 reads the input features, fetched once; later layers receive the peers' rows each epoch
                    "recv_bytes": int(recv.total * s.d_in * ELEM_BYTES),
                    "send_bytes": int(send.total * s.d_in * ELEM_BYTES),
                    "recv_is_static_features": li == 0,
                    # the whole partition at once: the layer's memory as one bin holding every owned node, its
                    # sources every owned and remote node (bin_cost: what the layer holds on the device)
                    "memory_bytes": int(costs[li].bytes(n_own, n_own + n_rem, arcs)),
                }
            )
        info = {
            "rank": shard.rank,
            "num_owned": n_own,
            "num_remote": n_rem,
            "num_arcs": arcs,
            "send_rows": send.per_peer_total(ctx.num_workers).tolist(),
            "recv_rows": recv.per_peer_total(ctx.num_workers).tolist(),
            "tables": tables,
            "estimate": estimate,
            # training keeps every layer's activations for backward (no recomputation)
            "memory_bytes": int(sum(e["memory_bytes"] for e in estimate)),
        }
        write_json_atomic(wdir / "worker.json", info)
        workers.append(
            {
                key: info[key]
                for key in (
                    "rank",
                    "num_owned",
                    "num_remote",
                    "num_arcs",
                    "send_rows",
                    "recv_rows",
                    "estimate",
                    "memory_bytes",
                )
            }
        )
    return workers
