"""Time the synthetic generator's edge draws on a graph of N nodes: the guide-table search g3 uses against numpy's
binary search (the same nodes bit for bit), over the first CHUNKS chunks of edges.

    .venv/bin/python examples/bench_synthetic.py --nodes 50000000 --chunks 8
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from stages.ingest import synthetic


def timed(spec, layout, chunks: int) -> tuple[int, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    edges = sum(len(a) for a, _ in itertools.islice(synthetic._edge_chunks(spec, layout), chunks))
    return edges, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50_000_000)
    parser.add_argument("--avg-degree", type=float, default=20.0)
    parser.add_argument("--chunks", type=int, default=8)
    args = parser.parse_args()
    spec = synthetic.SyntheticSpec(nodes=args.nodes, avg_degree=args.avg_degree)
    layout = synthetic._Layout(spec)
    cum = layout.cum_act

    def binary_search(t: np.ndarray) -> np.ndarray:
        return np.minimum(np.searchsorted(cum, t, side="right"), len(cum) - 1)

    for name in ("guide table", "binary search"):
        if name == "binary search":
            layout.node_at = binary_search
        edges, wall, cpu = timed(spec, layout, args.chunks)
        print(
            f"{name}: {edges:,} edges, {wall:.1f} s wall, {cpu:.1f} s CPU, {wall / edges * 1e9:.0f} ns an edge"
        )


if __name__ == "__main__":
    main()
