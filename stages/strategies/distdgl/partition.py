"""The ``distdgl`` method of `g3 partition`: METIS with DistDGL's five balance constraints.

``dgl.distributed.partition_graph`` with ``balance_ntypes`` = the train/valid/test masks and ``balance_edges``
gives METIS five vertex weights (ncon = 5): every node 1, its membership of the train, valid and test splits,
and its in-degree (the arcs it owns), so METIS balances each across the parts.
"""

from __future__ import annotations

import numpy as np

from stages.kits.partition.metis import metis_partition

UBVEC = 1.05  # METIS's default imbalance (ufactor 30 = 1.03 for k-way) loosened as DGL's partitioner does


def distdgl_weights(store, n: int) -> np.ndarray:
    """DistDGL's multi-constraint vertex weights int64 ``[n, 5]``: 1, train, valid, test membership, in-degree."""
    in_degree, _ = store.load_degrees()
    w = np.zeros((n, 5), dtype=np.int64)
    w[:, 0] = 1
    for c, split in enumerate(("train", "valid", "test"), start=1):
        w[store.split_index(split), c] = 1
    w[:, 4] = np.asarray(in_degree, dtype=np.int64)
    return w


def assign(graphs, store, o, timing: dict, progress) -> tuple[np.ndarray, dict]:
    task = progress.add_task("METIS (5 constraints: nodes, train, valid, test, arcs)", total=None)
    part = metis_partition(
        graphs, o.workers, o.seed, vertex_weights=distdgl_weights(store, graphs.num_nodes), ubvec=[UBVEC] * 5
    )
    progress.update(task, total=1, completed=1)
    return part, {}
