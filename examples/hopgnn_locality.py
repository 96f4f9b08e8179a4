"""HopGNN's Table 1 in shape (paper 004 §4): how local a micrograph is against a whole-batch subgraph.

For each partition given (``g3 partition STORE --workers K --method metis``), the first ``--batches`` global
batches of epoch 0 (distdgl's and hopgnn's global order: one permutation of every training node) are sampled
with the runtime's counter-based sampler (stages/kits/runtime/neighbor_sampler.py, the draws ``g3 train`` makes for
those steps), per root: a root's micrograph is ``build_blocks([root])``'s vertices (the root, its sampled
neighbours, theirs ...), computed for all roots of a batch at once on (root, vertex) pairs. Reported per K:

* ``R_micro`` — the share of a micrograph's distinct vertices (root included, as in the paper's Figure 8
  example) that the root's server owns, mean over micrographs: what HopGNN reads locally when the model runs
  on the root's home server;
* ``R_sub`` — the share of a whole batch's subgraph (``build_blocks(batch)``) owned by the worker computing it,
  mean over the K workers (DGL trainers computing randomly drawn batches wherever they run: exactly 1/K, the
  paper's column) and the best worker's (max);
* ``R_owned`` — the share for the subgraph of the batch's roots a worker owns, owned by that worker, mean over
  workers: what g3's ``distdgl --batch-order global`` reads locally (each worker computes the batch's roots it
  owns), which already places every root at home.

    python examples/hopgnn_locality.py --store /tmp/bm/medium --part /tmp/bm/medium-metis-{2,4,8,16} \\
        --fanouts 10,5 --batch-size 1000 --batches 10

Every sampled micrograph of the first batch's first ``--check`` roots, and that batch's subgraph, are checked
against ``build_blocks`` itself before the figures are computed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.common.store import GraphStore  # noqa: E402
from stages.kits.runtime.minibatch import shuffled  # noqa: E402
from stages.kits.runtime.neighbor_sampler import ascending_rows, build_blocks, sample_key, sample_rows  # noqa: E402


class Sampler:
    """The runtime's draw on the whole in-edge CSR (neighbours ascending by id in every row)."""

    def __init__(self, store: GraphStore, seed: int):
        indptr, indices = store.load_csr()
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.nbrs = ascending_rows(self.indptr, np.asarray(indices, dtype=np.int64))
        self.seed = seed

    def __call__(self, nodes: np.ndarray, fanout: int, hop: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        return sample_rows(self.indptr, self.nbrs, nodes, nodes, fanout, sample_key(self.seed, 0, step, hop))


def micrographs(
    roots: np.ndarray, fanouts: list[int], sample: Sampler, step: int, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every root's micrograph as (root index, vertex) pairs, each pair once: hop h samples every vertex found
    so far (``build_blocks``: a hop's destinations are the previous block's sources) with hop h's key; a
    node's draw does not depend on who else is sampled, so one call per hop serves all roots."""
    r, v = np.arange(len(roots), dtype=np.int64), np.asarray(roots, dtype=np.int64)
    for hop, fanout in enumerate(fanouts):
        nodes, at = np.unique(v, return_inverse=True)
        counts, picks = sample(nodes, fanout, hop, step)
        offsets = np.cumsum(counts) - counts
        c = counts[at]
        within = np.arange(int(c.sum()), dtype=np.int64) - np.repeat(np.cumsum(c) - c, c)
        new_r, new_v = np.repeat(r, c), picks[np.repeat(offsets[at], c) + within]
        keys = np.unique(np.concatenate([r * n + v, new_r * n + new_v]))
        r, v = keys // n, keys % n
    return r, v


def check_against_build_blocks(
    roots: np.ndarray, fanouts: list[int], sample: Sampler, n: int, count: int
) -> None:
    """The pairs equal ``build_blocks``' vertices, per root and for the whole batch (or the script stops)."""
    r, v = micrographs(roots, fanouts, sample, 0, n)

    def blocks(targets):
        return build_blocks(targets, fanouts, lambda nodes, fanout, hop: sample(nodes, fanout, hop, 0))

    for i in range(min(count, len(roots))):
        expected = np.unique(blocks(roots[i : i + 1])[0].src)
        if not np.array_equal(np.unique(v[r == i]), expected):
            sys.exit(f"micrograph of root {roots[i]} differs from build_blocks'")
    if not np.array_equal(np.unique(v), np.unique(blocks(roots)[0].src)):
        sys.exit("the batch's union of micrographs differs from build_blocks' subgraph")


def locality(
    owner: np.ndarray, k: int, batches: list[np.ndarray], fanouts: list[int], sample: Sampler
) -> dict:
    """R_micro, R_sub (mean = 1/K, max) and R_owned over the batches (see the module's docstring)."""
    n = len(owner)
    micro, sub_max, owned = [], [], []
    for step, roots in enumerate(batches):
        r, v = micrographs(roots, fanouts, sample, step, n)
        home = owner[roots]
        at_home = owner[v] == home[r]
        micro.append(np.bincount(r, at_home, len(roots)) / np.bincount(r, minlength=len(roots)))
        subgraph = np.unique(v)
        sub_max.append(np.bincount(owner[subgraph], minlength=k).max() / len(subgraph))
        per_worker = np.unique(home[r] * n + v)  # (worker, vertex) of each worker's owned-root subgraph
        w, x = per_worker // n, per_worker % n
        size = np.bincount(w, minlength=k)
        local = np.bincount(w, owner[x] == w, k)
        owned.append(local[size > 0] / size[size > 0])
    return {
        "K": k,
        "R_micro": float(np.concatenate(micro).mean()),
        "R_sub_mean": 1.0 / k,
        "R_sub_max": float(np.mean(sub_max)),
        "R_owned": float(np.concatenate(owned).mean()),
        "roots": int(sum(len(b) for b in batches)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True)
    ap.add_argument("--part", nargs="+", required=True, help="partition folders (g3 partition -o ...)")
    ap.add_argument("--fanouts", default="10,5", help="per hop, the targets' first (as g3 plan --fanouts)")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=10, help="global batches of epoch 0 sampled per partition")
    ap.add_argument("--seed", type=int, default=0, help="g3 train --seed (the permutation and the draws)")
    ap.add_argument("--check", type=int, default=20, help="micrographs checked against build_blocks")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    fanouts = [int(f) for f in a.fanouts.split(",")]
    t0 = time.perf_counter()
    store = GraphStore.open(a.store)
    sample = Sampler(store, a.seed)
    perm = shuffled(store.split_index("train"), a.seed, 0)
    batches = [perm[s * a.batch_size : (s + 1) * a.batch_size] for s in range(a.batches)]
    batches = [b for b in batches if len(b)]
    check_against_build_blocks(batches[0], fanouts, sample, store.num_nodes, a.check)
    print(
        f"store {a.store}: {store.num_nodes:,} nodes, {store.num_arcs:,} arcs; fanouts {a.fanouts}, "
        f"batch {a.batch_size}, {len(batches)} batches ({time.perf_counter() - t0:.1f} s to load and check)"
    )
    print("| K | R_micro | R_owned (g3 distdgl global) | R_sub mean (= 1/K) | R_sub max | R_micro / R_sub |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows = []
    for part in a.part:
        k = int(json.loads((Path(part) / "partition.json").read_text())["num_partitions"])
        owner = np.asarray(np.load(Path(part) / "assignment.npy"), dtype=np.int64)
        row = {"partition": str(part), **locality(owner, k, batches, fanouts, sample)}
        rows.append(row)
        print(
            f"| {k} | {row['R_micro']:.1%} | {row['R_owned']:.1%} | {row['R_sub_mean']:.1%} | "
            f"{row['R_sub_max']:.1%} | {row['R_micro'] / row['R_sub_mean']:.2f}x |",
            flush=True,
        )
    print(f"({time.perf_counter() - t0:.1f} s)")
    if a.json:
        found = {"store": a.store, "fanouts": fanouts, "batch_size": a.batch_size, "batches": len(batches)}
        Path(a.json).write_text(json.dumps({**found, "seed": a.seed, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
