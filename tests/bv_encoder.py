"""A small, plain-Python WebGraph BVGraph encoder: a test utility for the numba decoder in
:mod:`stages.ingest.webgraph`.

It follows the Java ``it.unimi.dsi.webgraph.BVGraph`` compressor (``diffComp``/``intervalize``): for every
node it tries the references ``0..windowsize`` (skipping empty lists and lists whose reference chain already
has ``maxrefcount`` links) and keeps the one with the fewest bits; references can also be forced per node to
build edge cases (chains longer than ``maxrefcount``, references to empty lists, the window limit).

Bits are built as ``'0'``/``'1'`` strings, MSB first, and packed at the end (zero padding to a byte).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

CODES = ("GAMMA", "DELTA", "UNARY", "ZETA", "NIBBLE", "GOLOMB")
FIELDS = ("OUTDEGREES", "REFERENCES", "BLOCKS", "BLOCK_COUNT", "INTERVALS", "RESIDUALS", "OFFSETS")
DEFAULT_CODES = {
    "OUTDEGREES": "GAMMA",
    "REFERENCES": "UNARY",
    "BLOCKS": "GAMMA",
    "BLOCK_COUNT": "GAMMA",
    "INTERVALS": "GAMMA",
    "RESIDUALS": "ZETA",
    "OFFSETS": "GAMMA",
}


# ------------------------------------------------------------------------------------------------ codes


def bits(v: int, n: int) -> str:
    """The n low bits of v, MSB first."""
    assert 0 <= v < (1 << n) or (n == 0 and v == 0), (v, n)
    return format(v, f"0{n}b") if n else ""


def unary(x: int) -> str:
    return "0" * x + "1"


def gamma(x: int) -> str:
    x += 1
    msb = x.bit_length() - 1
    return "0" * msb + format(x, "b")


def delta(x: int) -> str:
    x += 1
    msb = x.bit_length() - 1
    return gamma(msb) + format(x, "b")[1:]


def zeta(x: int, k: int) -> str:
    x += 1
    msb = x.bit_length() - 1
    h = msb // k
    left = 1 << (h * k)
    if x - left < left:
        return unary(h) + bits(x - left, h * k + k - 1)
    return unary(h) + bits(x, h * k + k)


def nibble(x: int) -> str:
    if x == 0:
        return "1000"
    h = (x.bit_length() - 1) // 3
    return "".join(("1" if i == 0 else "0") + bits((x >> (3 * i)) & 7, 3) for i in range(h, -1, -1))


def minimal_binary(x: int, b: int) -> str:
    log2b = b.bit_length() - 1
    m = (1 << (log2b + 1)) - b
    return bits(x, log2b) if x < m else bits(m + x, log2b + 1)


def golomb(x: int, b: int) -> str:
    return unary(x // b) + minimal_binary(x % b, b)


@lru_cache(maxsize=1 << 16)
def _small(code: str, x: int, k: int) -> str:
    return _encode(code, x, k)


def _encode(code: str, x: int, k: int) -> str:
    assert x >= 0, x
    if code == "GAMMA":
        return gamma(x)
    if code == "DELTA":
        return delta(x)
    if code == "UNARY":
        return unary(x)
    if code == "ZETA":
        return zeta(x, k)
    if code == "NIBBLE":
        return nibble(x)
    if code == "GOLOMB":
        return golomb(x, k)
    raise ValueError(code)


def encode(code: str, x: int, k: int = 3) -> str:
    """The code word of the natural number x."""
    return _small(code, x, k) if x < 4096 else _encode(code, x, k)


def int2nat(x: int) -> int:
    return 2 * x if x >= 0 else -2 * x - 1


def pack(bitstring: str) -> bytes:
    """'0'/'1' string -> bytes (MSB first, zero padded to a byte)."""
    if not bitstring:
        return b""
    pad = (-len(bitstring)) % 8
    s = bitstring + "0" * pad
    return int(s, 2).to_bytes(len(s) // 8, "big")


# ------------------------------------------------------------------------------------------------ lists


def intervalize(extras: Sequence[int], min_interval: int) -> tuple[list[int], list[int], list[int]]:
    """Java's BVGraph.intervalize: maximal runs of consecutive integers of length >= min_interval."""
    left: list[int] = []
    length: list[int] = []
    residuals: list[int] = []
    n = len(extras)
    i = 0
    while i < n:
        j = 1
        while i + j < n and extras[i + j - 1] + 1 == extras[i + j]:
            j += 1
        if j >= min_interval and j > 1:
            left.append(extras[i])
            length.append(j)
            i += j
        else:
            residuals.append(extras[i])
            i += 1
    return left, length, residuals


def copy_blocks(cur: Sequence[int], ref: Sequence[int]) -> tuple[list[int], list[int]]:
    """Java's diffComp block construction: (blocks, extras) of cur with respect to ref."""
    blocks: list[int] = []
    extras: list[int] = []
    j = k = block_len = 0
    copying = True
    while j < len(cur) and k < len(ref):
        if copying:
            if cur[j] > ref[k]:
                blocks.append(block_len)
                copying = False
                block_len = 0
            elif cur[j] < ref[k]:
                extras.append(cur[j])
                j += 1
            else:
                j += 1
                k += 1
                block_len += 1
        elif cur[j] < ref[k]:
            extras.append(cur[j])
            j += 1
        elif cur[j] > ref[k]:
            k += 1
            block_len += 1
        else:
            blocks.append(block_len)
            copying = True
            block_len = 0
    if copying and k < len(ref):
        blocks.append(block_len)
    extras.extend(cur[j:])
    return blocks, extras


class Encoder:
    """Encodes successor lists with fixed parameters and codes."""

    def __init__(
        self,
        windowsize: int = 7,
        maxrefcount: int = 3,
        minintervallength: int = 4,
        zetak: int = 3,
        codes: dict[str, str] | None = None,
        rust_style: bool = False,
    ):
        self.w = windowsize
        self.maxref = maxrefcount
        self.minint = minintervallength
        self.k = zetak
        self.codes = dict(DEFAULT_CODES)
        self.codes.update(codes or {})
        if rust_style and codes and "BLOCKS" in codes and "BLOCK_COUNT" not in codes:
            self.codes["BLOCK_COUNT"] = self.codes["BLOCKS"]

    def code(self, field: str, x: int) -> str:
        return encode(self.codes[field], x, self.k)

    def tail(self, x: int, ref: int, ref_list: Sequence[int], cur: Sequence[int]) -> str:
        """Everything of node x's list after the outdegree, with reference `ref` (Java's diffComp)."""
        out: list[str] = []
        if ref:
            blocks, extras = copy_blocks(cur, ref_list)
        else:
            blocks, extras = [], list(cur)
        if self.w > 0:
            out.append(self.code("REFERENCES", ref))
        if ref:
            out.append(self.code("BLOCK_COUNT", len(blocks)))
            for i, b in enumerate(blocks):
                out.append(self.code("BLOCKS", b if i == 0 else b - 1))
        if extras:
            if self.minint:
                left, length, residuals = intervalize(extras, self.minint)
                out.append(self.code("INTERVALS", len(left)))
                prev = 0
                for i, (lo, ln) in enumerate(zip(left, length, strict=True)):
                    out.append(self.code("INTERVALS", int2nat(lo - x) if i == 0 else lo - prev - 1))
                    out.append(self.code("INTERVALS", ln - self.minint))
                    prev = lo + ln
            else:
                residuals = extras
            if residuals:
                out.append(self.code("RESIDUALS", int2nat(residuals[0] - x)))
                for a, b in zip(residuals, residuals[1:], strict=False):
                    out.append(self.code("RESIDUALS", b - a - 1))
        return "".join(out)

    def encode_lists(
        self,
        lists: Sequence[Sequence[int]],
        refs: Sequence[int | None] | Callable[[int], int | None] | None = None,
    ) -> list[str]:
        """The bit string of every node's list. refs[x] (or refs(x)) forces node x's reference when not None."""
        out: list[str] = []
        refcount: list[int] = []
        for x, cur in enumerate(lists):
            cur = list(cur)
            s = self.code("OUTDEGREES", len(cur))
            if not cur:
                out.append(s)
                refcount.append(0)
                continue
            forced = refs(x) if callable(refs) else (refs[x] if refs is not None else None)
            if forced is not None:
                assert 0 <= forced <= self.w and forced <= x, (x, forced)
                best_ref = forced
                best = self.tail(x, forced, list(lists[x - forced]) if forced else [], cur)
            else:
                best_ref, best = 0, None
                for r in range(0, self.w + 1):
                    if r > x:
                        break
                    if r and (not len(lists[x - r]) or refcount[x - r] >= self.maxref):
                        continue
                    t = self.tail(x, r, list(lists[x - r]) if r else [], cur)
                    if best is None or len(t) < len(best):
                        best, best_ref = t, r
            assert best is not None
            refcount.append(refcount[x - best_ref] + 1 if best_ref else 0)
            out.append(s + best)
        return out


def to_lists(adj) -> list[list[int]]:
    """Accepts a list of successor lists or a CSR pair (offsets, successors)."""
    if isinstance(adj, tuple) and len(adj) == 2 and isinstance(adj[0], np.ndarray):
        offs, succ = adj
        return [succ[offs[i] : offs[i + 1]].tolist() for i in range(len(offs) - 1)]
    return [sorted(set(int(v) for v in lst)) for lst in adj]


def write_bvgraph(
    basename: str | os.PathLike,
    adj,
    *,
    num_nodes: int | None = None,
    windowsize: int = 7,
    maxrefcount: int = 3,
    minintervallength: int = 4,
    zetak: int = 3,
    codes: dict[str, str] | None = None,
    refs=None,
    write_offsets: bool = True,
    rust_style: bool = False,
    arcs: int | None = None,
    extra_properties: dict[str, str] | None = None,
) -> dict[str, str]:
    """Write BASENAME.graph/.properties (and .offsets) for the given successor lists; returns the properties.

    ``codes``: {field: code} for the fields of FIELDS (missing = WebGraph defaults); every field given is
    written to ``compressionflags``. ``rust_style``: write an ``endianness`` property and code block counts
    with the blocks' code, as the Rust crate does. ``arcs`` overrides the arc count written (for tests).
    """
    lists = to_lists(adj)
    n = len(lists) if num_nodes is None else num_nodes
    assert len(lists) == n
    enc = Encoder(windowsize, maxrefcount, minintervallength, zetak, codes, rust_style)
    chunks = enc.encode_lists(lists, refs)
    graph_bits = "".join(chunks)
    base = os.fspath(basename)
    Path(base + ".graph").write_bytes(pack(graph_bits))
    if write_offsets:
        gaps = [0] + [len(c) for c in chunks]
        Path(base + ".offsets").write_bytes(
            pack("".join(encode(enc.codes["OFFSETS"], g, zetak) for g in gaps))
        )
    m = sum(len(lst) for lst in lists)
    flags = "|".join(f"{f}_{c}" for f, c in (codes or {}).items())
    props = {
        "graphclass": "it.unimi.dsi.webgraph.BVGraph",
        "version": "0",
        "nodes": str(n),
        "arcs": str(m if arcs is None else arcs),
        "windowsize": str(windowsize),
        "maxrefcount": str(maxrefcount),
        "minintervallength": str(minintervallength),
        "zetak": str(zetak),
        "compressionflags": flags,
        "length": str(len(graph_bits)),
    }
    if rust_style:
        props["endianness"] = "big"
    props.update(extra_properties or {})
    write_properties(base + ".properties", props)
    return props


def write_properties(path: str | os.PathLike, props: dict[str, str]) -> None:
    text = "#BVGraph properties\n" + "".join(f"{k}={v}\n" for k, v in props.items())
    Path(path).write_text(text, encoding="latin-1")


def tile_bvgraph(dst_basename: str | os.PathLike, base_lists, copies: int, **kw) -> dict[str, str]:
    """A graph made of `copies` shifted copies of `base_lists` (node x + t*n -> s + t*n), written fast.

    BV codes are relative (references, first residual and interval relative to the node, gaps), so every
    copy has the same bit string; the base is padded with isolated nodes until its stream is a whole number
    of bytes (gamma outdegrees only: an isolated node is 1 bit), and the stream is repeated byte-wise.
    """
    codes = kw.get("codes") or {}
    assert codes.get("OUTDEGREES", "GAMMA") == "GAMMA"
    lists = to_lists(base_lists)
    enc = Encoder(
        kw.get("windowsize", 7),
        kw.get("maxrefcount", 3),
        kw.get("minintervallength", 4),
        kw.get("zetak", 3),
        codes,
    )
    chunks = enc.encode_lists(lists)
    nbits = sum(len(c) for c in chunks)
    while nbits % 8:
        lists.append([])
        chunks.append(enc.code("OUTDEGREES", 0))
        nbits += 1
    n = len(lists)
    graph = pack("".join(chunks)) * copies
    base = os.fspath(dst_basename)
    Path(base + ".graph").write_bytes(graph)
    gap_bits = "".join(encode(enc.codes["OFFSETS"], len(c), enc.k) for c in chunks)
    Path(base + ".offsets").write_bytes(pack(encode(enc.codes["OFFSETS"], 0) + gap_bits * copies))
    m = sum(len(lst) for lst in lists) * copies
    props = {
        "graphclass": "it.unimi.dsi.webgraph.BVGraph",
        "version": "0",
        "nodes": str(n * copies),
        "arcs": str(m),
        "windowsize": str(enc.w),
        "maxrefcount": str(enc.maxref),
        "minintervallength": str(enc.minint),
        "zetak": str(enc.k),
        "compressionflags": "|".join(f"{f}_{c}" for f, c in codes.items()),
    }
    write_properties(base + ".properties", props)
    return props


# ------------------------------------------------------------------------------------------------ synthetic


def synthetic_lists(
    n: int, avg_degree: float = 12.0, seed: int = 0, web_like: bool = True
) -> list[list[int]]:
    """Random successor lists. web_like: locality, runs of consecutive successors and lists similar to
    recent ones (what BV compresses well); otherwise uniform random successors (residuals only)."""
    rng = np.random.default_rng(seed)
    lists: list[list[int]] = []
    degs = np.minimum(rng.geometric(1.0 / avg_degree, size=n) - 1, n)
    for x in range(n):
        d = int(degs[x])
        if not web_like:
            lists.append(sorted(set(rng.integers(0, n, size=d).tolist())))
            continue
        s: set[int] = set()
        if lists and rng.random() < 0.6:  # similar to a recent list
            src = lists[max(0, x - 1 - int(rng.integers(0, 4)))]
            s.update(v for v in src if rng.random() < 0.85)
        if rng.random() < 0.3:  # a run of consecutive nodes near x
            lo = min(max(0, x + int(rng.integers(-50, 50))), n - 1)
            s.update(range(lo, min(n, lo + int(rng.integers(2, 20)))))
        while len(s) < d:
            if rng.random() < 0.8:
                v = x + int(rng.geometric(0.01)) * (1 if rng.random() < 0.5 else -1)
            else:
                v = int(rng.integers(0, n))
            if 0 <= v < n:
                s.add(v)
        lists.append(sorted(s))
    return lists


def _bench(argv: Sequence[str] | None = None) -> None:
    """Decode-speed benchmark on a large tiled synthetic graph (run from the repository root)."""
    import argparse
    import time

    from stages.ingest.webgraph import decode_bvgraph, iter_bvgraph_chunks

    ap = argparse.ArgumentParser(description=_bench.__doc__)
    ap.add_argument("--dir", default="/tmp/g3-bv-bench")
    ap.add_argument("--base-nodes", type=int, default=100_000)
    ap.add_argument("--copies", type=int, default=25)
    ap.add_argument("--random", action="store_true", help="uniform random lists instead of web-like ones")
    ap.add_argument("--graph", help="benchmark an existing BVGraph basename instead")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    if a.graph:
        basename = a.graph
    else:
        Path(a.dir).mkdir(parents=True, exist_ok=True)
        basename = str(Path(a.dir) / ("random" if a.random else "weblike"))
        if not Path(basename + ".graph").exists():
            t = time.perf_counter()
            lists = synthetic_lists(a.base_nodes, seed=1, web_like=not a.random)
            tile_bvgraph(basename, lists, a.copies)
            print(f"encoded {basename} in {time.perf_counter() - t:.1f}s")

    def timed(fn) -> tuple[int, float, float]:
        fn()  # JIT compile (cached on disk)
        wall = cpu = float("inf")
        for _ in range(a.repeat):
            t, c = time.perf_counter(), time.process_time()
            m = fn()
            wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
        return m, wall, cpu

    print(f"load average before: {os.getloadavg()[0]:.2f} (other processes share the cores)")
    runs = {
        "decode_bvgraph sequential": lambda: decode_bvgraph(basename, parallel=False)[1].size,
        "decode_bvgraph parallel": lambda: decode_bvgraph(basename, parallel=True)[1].size,
        "iter_bvgraph_chunks": lambda: sum(s.size for _, _, s in iter_bvgraph_chunks(basename)),
    }
    for name, fn in runs.items():
        m, wall, cpu = timed(fn)
        print(
            f"{name:26s}: {m:,} arcs in {wall:.3f}s wall = {m / wall / 1e6:.1f}M arcs/s "
            f"(best of {a.repeat}; CPU time {cpu:.3f}s = {m / cpu / 1e6:.1f}M arcs per CPU-second)"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    _bench()
