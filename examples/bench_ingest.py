"""Ingest throughput benchmarks (docs/BENCHMARKS.md, "How fast is ingest?"): OGB CSV edge parsing and WebGraph BV decoding.

    .venv/bin/python examples/bench_ingest.py --edges 30000000 --nodes 2449029 [--bv ../shared/data/webgraph/cnr-2000]

Writes an OGB-layout folder with a random `raw/edge.csv.gz` (once, under --workdir), then times a full pass
over `read_ogb(...).arcs()`; and times `decode_bvgraph` on the given BV basename (JIT excluded, best of 5).
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv


def write_ogb_folder(folder: Path, edges: int, nodes: int) -> None:
    raw = folder / "raw"
    if (raw / "edge.csv.gz").is_file():
        return
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    with pa.CompressedOutputStream(str(raw / "edge.csv.gz"), "gzip") as f:
        writer = None
        for start in range(0, edges, 4_000_000):
            n = min(4_000_000, edges - start)
            table = pa.table({"a": rng.integers(0, nodes, n), "b": rng.integers(0, nodes, n)})
            if writer is None:
                writer = pacsv.CSVWriter(
                    f, table.schema, write_options=pacsv.WriteOptions(include_header=False)
                )
            writer.write_table(table)
        writer.close()
    for name, value in (("num-node-list", nodes), ("num-edge-list", edges)):
        with gzip.open(raw / f"{name}.csv.gz", "wt") as g:
            g.write(f"{value}\n")
    with gzip.open(raw / "node-label.csv.gz", "wt") as g:
        g.write("\n".join(str(x) for x in rng.integers(0, 47, nodes)) + "\n")


def bench_ogb(folder: Path) -> float:
    from stages.ingest.ogb import read_ogb

    source = read_ogb(folder)
    t0 = time.perf_counter()
    n = sum(len(s) for s, _ in source.arcs())
    seconds = time.perf_counter() - t0
    print(f"OGB CSV: {n:,} edges in {seconds:.2f} s = {n / seconds / 1e6:.1f} M edges/s")
    return n / seconds


def bench_bv(basename: str) -> float:
    from stages.ingest.webgraph import decode_bvgraph

    decode_bvgraph(basename)  # JIT warm-up
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        offsets, _succ = decode_bvgraph(basename)
        best = min(best, time.perf_counter() - t0)
    arcs = int(offsets[-1])
    print(f"BV {Path(basename).name}: {arcs:,} arcs in {best:.3f} s = {arcs / best / 1e6:.1f} M arcs/s")
    return arcs / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--edges", type=int, default=30_000_000)
    p.add_argument("--nodes", type=int, default=2_449_029)
    p.add_argument("--workdir", default="/tmp/g3-bench-ingest")
    p.add_argument("--bv", default=None, help="BV basename to decode (e.g. ../shared/data/webgraph/cnr-2000)")
    args = p.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f}")
    folder = Path(args.workdir) / f"ogb-{args.edges}"
    write_ogb_folder(folder, args.edges, args.nodes)
    bench_ogb(folder)
    if args.bv:
        bench_bv(args.bv)


if __name__ == "__main__":
    main()
