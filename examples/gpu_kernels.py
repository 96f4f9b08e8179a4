"""Which aggregation kernel is fastest on the device: g3's ``index`` path against CSR products, measured.

A GraphSAGE layer's cost on a GPU is its mean aggregation, forward and backward. g3's device path computes it
with ``index_select`` + ``index_add_`` (``stages/kits/runtime/kernels/autograd.py``, backend ``index``), which materialises
one message row per arc ([nnz, F]); a CSR product (``torch.sparse.mm``, cuSPARSE SpMM on CUDA) does not, but
cuSPARSE is specified for rows with sorted, duplicate-free columns. This script times, per graph size, one
forward + backward of ``mean_{u in N(v)} x[u]`` by

* ``index``      — g3's ``csr_mean`` as the device path runs it (gather, ``index_add_``, divide);
* ``csr``        — ``torch.sparse.mm`` with the CSR built once, backward by the transposed CSR (built once);
* ``csr-unsorted`` — the same on rows left unsorted and with repeated sources, against ``index``'s result
  (``max_diff``): whether cuSPARSE needs the sort at all;
* ``index-compiled`` — ``index`` under ``torch.compile`` (first size only; where it compiles within
  ``--compile-timeout``);

on random graphs (uniform sources, ``--sizes`` nodes:degree:features), float32, each timed by CUDA events
over ``--repeat`` steps after 3 warm-up steps (median), with the device's peak memory per variant.

    python examples/gpu_kernels.py --out gpu-kernels.json      # on a GPU; --device cpu runs it on the CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.kits.runtime.kernels import csr_mean  # noqa: E402


def random_graph(n: int, deg: int, device: str, seed: int = 0, sort: bool = True):
    """A CSR of ``n`` rows with ``n * deg`` arcs from uniform sources (rows by a uniform destination)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    nnz = n * deg
    dst = torch.randint(0, n, (nnz,), generator=g)
    src = torch.randint(0, n, (nnz,), generator=g)
    key = dst * n + src if sort else dst
    order = torch.argsort(key, stable=True)
    dst, src = dst[order], src[order]
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst, minlength=n), 0, out=indptr[1:])
    return indptr.to(device), src.to(device)


class CsrMean(torch.autograd.Function):
    """``A @ x / deg`` with ``A`` and ``A^T`` as CSR tensors built once."""

    @staticmethod
    def forward(ctx, a, a_t, inv_deg, x):
        ctx.a_t, ctx.inv_deg = a_t, inv_deg
        return torch.sparse.mm(a, x) * inv_deg

    @staticmethod
    def backward(ctx, g):
        return None, None, None, torch.sparse.mm(ctx.a_t, (g * ctx.inv_deg).contiguous())


def csr_pair(indptr, indices, n):
    vals = torch.ones(indices.numel(), device=indices.device)
    a = torch.sparse_csr_tensor(indptr, indices, vals, (n, n), check_invariants=False)
    a_t = a.t().to_sparse_csr()
    deg = (indptr[1:] - indptr[:-1]).clamp(min=1).to(torch.float32)
    return a, a_t, (1.0 / deg).unsqueeze(1)


def timed(step, device: str, repeat: int) -> dict:
    """Median seconds of ``step()`` (forward + backward) and the peak device memory it took."""
    for _ in range(3):
        step()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeat):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    out = {"median_s": statistics.median(times), "min_s": min(times)}
    if cuda:
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
    return out


def measure(n: int, deg: int, feat: int, device: str, repeat: int, compile_timeout: float | None) -> dict:
    indptr, indices = random_graph(n, deg, device)
    x = torch.randn(n, feat, device=device, requires_grad=True)
    g = torch.randn(n, feat, device=device)
    res: dict = {"nodes": n, "arcs": n * deg, "features": feat}

    def index_step(fn=csr_mean):
        x.grad = None
        fn(indptr, indices, x, n).backward(g)

    res["index"] = timed(index_step, device, repeat)
    ref_out = csr_mean(indptr, indices, x, n).detach()
    x.grad = None
    csr_mean(indptr, indices, x, n).backward(g)
    ref_grad = x.grad.detach().clone()

    a, a_t, inv = csr_pair(indptr, indices, n)

    def csr_step():
        x.grad = None
        CsrMean.apply(a, a_t, inv, x).backward(g)

    res["csr"] = timed(csr_step, device, repeat)
    x.grad = None
    out = CsrMean.apply(a, a_t, inv, x)
    out.backward(g)
    res["csr"]["max_diff"] = max((out - ref_out).abs().max().item(), (x.grad - ref_grad).abs().max().item())
    a = a_t = None  # freed before the next graph is built

    # the same graph with each row's sources unsorted and one source repeated per row: does cuSPARSE still sum
    # every arc once?
    ui, us = random_graph(min(n, 200_000), deg, device, seed=1, sort=False)
    m = ui.numel() - 1
    us[ui[:-1][ui[1:] - ui[:-1] >= 2] + 1] = us[ui[:-1][ui[1:] - ui[:-1] >= 2]]  # a repeated source per row
    xu = torch.randn(m, feat, device=device)
    au, _, invu = csr_pair(ui, us, m)
    res["csr-unsorted"] = {
        "nodes": m,
        "max_diff": (torch.sparse.mm(au, xu) * invu - csr_mean(ui, us, xu, m)).abs().max().item(),
    }
    del au

    if compile_timeout is None:
        return res
    t0 = time.perf_counter()
    try:
        compiled = torch.compile(csr_mean, dynamic=False)
        index_step(compiled)
        if time.perf_counter() - t0 > compile_timeout:
            raise TimeoutError(f"compiling took {time.perf_counter() - t0:.0f} s")
        res["index-compiled"] = timed(lambda: index_step(compiled), device, repeat)
        res["index-compiled"]["compile_s"] = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported, not fatal
        res["index-compiled"] = {"status": "failed", "note": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-kernels.json")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument(
        "--sizes",
        default="100000:25:64,100000:25:16,2400000:50:100,2400000:50:64",
        help="graphs as nodes:degree:features, comma-separated",
    )
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--compile-timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu-kernels: no CUDA device (torch {torch.__version__}); nothing run.")
        return 0
    env = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
    }
    rows = []
    for i, spec in enumerate(a.sizes.split(",")):
        n, deg, feat = (int(v) for v in spec.split(":"))
        try:  # compiling takes tens of seconds per shape: the first size only
            rows.append(measure(n, deg, feat, a.device, a.repeat, a.compile_timeout if i == 0 else None))
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory on the largest size: say so, go on
            rows.append(
                {
                    "nodes": n,
                    "arcs": n * deg,
                    "features": feat,
                    "status": "failed",
                    "note": f"{type(exc).__name__}: {str(exc)[:200]}",
                }
            )
        if a.device == "cuda":
            torch.cuda.empty_cache()
        r = rows[-1]
        line = " ".join(
            f"{k}={r[k]['median_s'] * 1e3:.2f}ms"
            for k in ("index", "csr", "index-compiled")
            if isinstance(r.get(k), dict) and "median_s" in r[k]
        )
        print(f"gpu-kernels {spec}: {line} {r.get('note', '')}", flush=True)
        Path(a.out).write_text(
            json.dumps({"schema": "g3.gpu-kernels/1", "environment": env, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
