"""Time g3's numba aggregation kernels on a synthetic power-law CSR (docs/BENCHMARKS.md, "How fast is one worker").

    .venv/bin/python examples/bench_kernels.py [--threads 2] [--rows 200000] [--edges 4000000] [--repeat 5]

Prints the best of ``--repeat`` runs (the first call, which may compile the kernel, is not counted) of: the
unweighted CSR sum forward and on the transposed CSR (backward) at 16, 47 and 128 columns; a per-head weighted
sum (GAT, 8 heads of 8); its forward + backward (the backward adds the SDDMM of the attention gradient); and one
call on a tiny graph (300 rows, 1,200 edges), where the cost is the call's overhead, not the work.

Beside each sum, the bytes it must move at the least and the rate that makes: ``sum_bytes`` below is the
estimate's arithmetic (docs/BENCHMARKS.md, "How close to memory bandwidth?"): per edge its source index and one
source row (gathered: whole 64-byte lines), per row its pointer and its written output row. ``--stream`` also
times a plain copy of a large array (torch), the machine's sequential bandwidth to compare with.
"""

from __future__ import annotations

import argparse
import time

import torch

from stages.kits.runtime.kernels import csr_sum, csr_transpose, use_backend


def best_ms(fn, repeat: int) -> float:
    fn()  # the first call compiles (or loads) the kernel version
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def power_law_csr(rows: int, edges: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Row lengths from a Pareto(1.5) law (capped at 5,000), sources uniform: a skewed in-degree CSR."""
    g = torch.Generator().manual_seed(seed)
    deg = torch.distributions.Pareto(1.0, 1.5).sample((rows,)).clamp(max=5000)
    deg = (deg / deg.sum() * edges).long()
    deg[0] += edges - deg.sum()
    indptr = torch.zeros(rows + 1, dtype=torch.int64)
    indptr[1:] = deg.cumsum(0)
    return indptr, torch.randint(0, rows, (edges,), generator=g)


def sum_bytes(rows: int, edges: int, width: int, index_bytes: int = 8, value_bytes: int = 4) -> int:
    """Least bytes an unweighted CSR sum moves: each edge reads its index and its source row (rounded up to whole
    64-byte cache lines: a gathered row costs its lines), each output row reads its pointer and writes ``width``
    values. Rows reused from cache make the real traffic smaller; lines pulled in by prefetch make it larger."""
    row = -(-width * value_bytes // 64) * 64
    return edges * (index_bytes + row) + rows * (8 + width * value_bytes)


def stream_gbs(repeat: int, mib: int = 512) -> float:
    """A copy of ``mib`` MiB (read + write), best of ``repeat``: the sequential rate the kernels compare with."""
    a = torch.empty(mib << 18, dtype=torch.float32).fill_(1.0)
    b = torch.empty_like(a)
    ms = best_ms(lambda: b.copy_(a), repeat)
    return 2 * a.numel() * 4 / (ms / 1e3) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=2, help="torch (and kernel) threads")
    parser.add_argument("--rows", type=int, default=200_000, help="rows (destinations = sources)")
    parser.add_argument("--edges", type=int, default=4_000_000, help="edges")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per kernel; the best is printed")
    parser.add_argument("--stream", action="store_true", help="also time a 512 MiB copy (sequential GB/s)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n = args.rows
    indptr, indices = power_law_csr(n, args.edges)
    t = csr_transpose(indptr, indices, n)
    with use_backend("numba"):
        for width in (16, 47, 128):
            x = torch.randn(n, width)
            fw = best_ms(lambda x=x: csr_sum(indptr, indices, x, n), args.repeat)
            bw = best_ms(lambda x=x: csr_sum(t.indptr, t.indices, x, n), args.repeat)
            gb = sum_bytes(n, args.edges, width, indices.element_size()) / 1e9
            print(
                f"sum, {width} columns: forward {fw:.1f} ms ({gb / (fw / 1e3):.1f} GB/s of {gb * 1e3:.0f} MB), "
                f"transposed {bw:.1f} ms ({gb / (bw / 1e3):.1f} GB/s)"
            )
        x3 = torch.randn(n, 8, 8)
        w = torch.rand(args.edges, 8)
        print(
            f"weighted sum, 8 heads of 8: {best_ms(lambda: csr_sum(indptr, indices, x3, n, w), args.repeat):.1f} ms"
        )
        x3g, wg = x3.clone().requires_grad_(True), w.clone().requires_grad_(True)

        def forward_backward():
            csr_sum(indptr, indices, x3g, n, wg, t).sum().backward()

        print(
            f"weighted sum forward + backward (SDDMM): {best_ms(forward_backward, max(1, args.repeat // 2)):.1f} ms"
        )
        ip, ix = torch.arange(0, 1201, 4), torch.randint(0, 300, (1200,))
        xs = torch.randn(300, 16)
        print(f"tiny (300 rows, 1,200 edges): {best_ms(lambda: csr_sum(ip, ix, xs, 300), 200) * 1e3:.1f} us")
    if args.stream:
        print(f"copy of 512 MiB (torch, {args.threads} threads): {stream_gbs(args.repeat):.1f} GB/s")


if __name__ == "__main__":
    main()
