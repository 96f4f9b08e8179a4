"""The ``numba`` backend on the CPU: LLVM row intrinsics, the numba kernels built on them, the kernel thread
pool that runs them over chunks of rows, and the torch-facing wrappers (:func:`_nb_sum`, :func:`_nb_edge_dots`,
:func:`_nb_div_by_degree_of`).

Every kernel here is a serial function over chunks of rows taken from a shared counter; :func:`_run_chunks`
runs it on the calling thread and, for large enough work, on the pool's threads too
(:func:`use_serial_kernels_in_this_thread` keeps a helper thread's calls on that thread alone). Without numba
(``HAVE_NUMBA`` false) no kernel is defined and :func:`.backends.backend` never chooses ``numba``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading

import numpy as np
import torch

from stages.common import jit_cache
from stages.kits.runtime.dropout import (  # the mask's spec, shared with the fused kernel
    _F1,
    _F2,
    _K1,
    _K2,
    _M32,
)

# --- numba backend ---------------------------------------------------------------------------------------------
# One thread computes a whole output row, summing its edges in CSR order into vector registers, so results are
# bitwise reproducible (no atomics, a fixed summation order, independent of the thread count and schedule).
# The row accumulation is an LLVM intrinsic specialised on the tile width (a literal): width-F accumulators
# live in registers (``<16 x float>`` pieces), each edge costs one index load, a prefetch of the row
# ``_PREFETCH`` edges ahead and one vector load + add per 64 bytes of the row.
_PREFETCH = 32  # edges ahead (16-64 measured within noise on F=16 and 47); the gathers are latency-bound
_TILE_BYTES = 256  # widest tile kept in registers (64 float32 / 32 float64 columns); wider rows are tiled
_CHUNKS_PER_THREAD = 8  # rows are cut into this many equal-work chunks per thread, grabbed dynamically

# uint64 constants for numba (a Python int would be typed int64, and uint64 op int64 is float64 there)
_UF1, _UF2, _UK1, _UK2, _UM32 = (np.uint64(c) for c in (_F1, _F2, _K1, _K2, _M32))
_U15, _U16, _U32 = np.uint64(15), np.uint64(16), np.uint64(32)

try:  # numba is a dependency of g3; without it (or on exotic platforms) the CPU falls back to "sparse"
    import numba
    from llvmlite import ir
    from numba import njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    HAVE_NUMBA = False

if HAVE_NUMBA:

    def _literal(t):
        return t.literal_value if isinstance(t, (types.IntegerLiteral, types.BooleanLiteral)) else None

    def _prefetch_lines(builder, row, line_offsets) -> None:
        """Emit a prefetch (read, into every cache level) of each cache line at ``row`` + ``line_offsets`` bytes:
        the row an edge a few ahead will gather."""
        i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
        prefetch = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        )
        for off in line_offsets:
            p = builder.inttoptr(builder.add(row, ir.Constant(i64, off)), i8p)
            builder.call(prefetch, [p, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])

    def _pieces(width: int, vec: int) -> list[tuple[int, int]]:
        """(offset, length) vector pieces covering ``width`` columns: full ``vec``-wide ones, then 2^k tails."""
        out, off = [], 0
        while width - off >= vec:
            out.append((off, vec))
            off += vec
        p = vec // 2
        while p >= 1:
            if width - off >= p:
                out.append((off, p))
                off += p
            p //= 2
        return out

    def _load_index(builder, arr, pos):
        """``arr[pos]`` of an integer array, as i64."""
        val = builder.load(builder.gep(arr.data, [pos]))
        return builder.sext(val, ir.IntType(64)) if val.type.width < 64 else val

    @intrinsic
    def _row_tile(typingctx, x, idx, e0, e1, w, wcol, perm, out, v, c0, div, width, mode, ahead, head_w):
        """``out[v, c0:c0+W] = sum_{e0 <= e < e1} weight(e, col) * x[idx[e], c0:c0+W]`` (``/ (e1-e0)`` if ``div``).

        ``mode`` (literal): 0 — weight 1; 1 — ``w[e, wcol + j // head_w]`` for tile column ``j``; 2 — the same
        with ``perm[e]`` for ``e``. ``W``, ``head_w`` (literals): the tile's columns, the columns per weight
        (a tile spans ``W // head_w`` heads). ``x``/``out`` 2-D with unit column stride. Edges are added in
        order, one accumulator per column. The rows (and weights) of edge ``e + ahead`` (literal) are prefetched.
        """
        W, M, PF, HW = _literal(width), _literal(mode), _literal(ahead), _literal(head_w)
        if W is None or M is None or PF is None or HW is None:
            return None
        sig = types.void(x, idx, e0, e1, w, wcol, perm, out, v, c0, div, width, mode, ahead, head_w)

        def codegen(context, builder, signature, args):
            xt, it, e0t, e1t, wt, wct, pt, ot, vt, c0t = signature.args[:10]
            xa = context.make_array(xt)(context, builder, args[0])
            ia = context.make_array(it)(context, builder, args[1])
            wa = context.make_array(wt)(context, builder, args[4])
            pa = context.make_array(pt)(context, builder, args[6])
            oa = context.make_array(ot)(context, builder, args[7])
            i64 = ir.IntType(64)

            def as64(val, ty):
                return context.cast(builder, val, ty, types.int64)

            e_lo, e_hi = as64(args[2], e0t), as64(args[3], e1t)
            row, col0 = as64(args[8], vt), as64(args[9], c0t)
            elt = context.get_data_type(xt.dtype)
            isz = context.get_abi_sizeof(elt)
            vec = max(1, 64 // isz)
            if M and W:  # (offset, length, head within the tile): pieces never straddle two heads
                pieces = [(k * HW + off, n, k) for k in range(W // HW) for off, n in _pieces(HW, vec)]
            else:
                pieces = [(off, n, 0) for off, n in _pieces(W, vec)]
            xbase = builder.add(builder.ptrtoint(xa.data, i64), builder.mul(col0, ir.Constant(i64, isz)))
            xs0 = builder.extract_value(xa.strides, 0)
            nnz = builder.extract_value(ia.shape, 0)
            accs = [
                cgutils.alloca_once_value(builder, ir.Constant(ir.VectorType(elt, n), None))
                for _, n, _ in pieces
            ]
            i32 = ir.IntType(32)
            lines = (
                sorted({min(j * 64, W * isz - 1) for j in range((W * isz + 63) // 64)} | {W * isz - 1})
                if W
                else []
            )

            def splat(val, n):
                vty = ir.VectorType(elt, n)
                one = builder.insert_element(ir.Constant(vty, None), val, ir.Constant(i32, 0))
                return builder.shuffle_vector(
                    one, ir.Constant(vty, None), ir.Constant(ir.VectorType(i32, n), [0] * n)
                )

            with cgutils.for_range_slice(builder, e_lo, e_hi, ir.Constant(i64, 1), inc=True) as (e, _):
                ahead = builder.add(e, ir.Constant(i64, PF))
                with builder.if_then(builder.icmp_signed("<", ahead, nnz), likely=True):
                    _prefetch_lines(
                        builder, builder.add(xbase, builder.mul(_load_index(builder, ia, ahead), xs0)), lines
                    )
                    if M == 2:  # the weights are read through the permutation: random too
                        wa_ = builder.add(
                            builder.ptrtoint(wa.data, i64),
                            builder.mul(
                                _load_index(builder, pa, ahead), builder.extract_value(wa.strides, 0)
                            ),
                        )
                        _prefetch_lines(builder, wa_, [0])
                rowaddr = builder.add(xbase, builder.mul(_load_index(builder, ia, e), xs0))
                if M:
                    pe = _load_index(builder, pa, e) if M == 2 else e
                    ws0, ws1 = builder.extract_value(wa.strides, 0), builder.extract_value(wa.strides, 1)
                    wrow = builder.add(
                        builder.ptrtoint(wa.data, i64),
                        builder.add(builder.mul(pe, ws0), builder.mul(as64(args[5], wct), ws1)),
                    )
                    wvals = [
                        builder.load(
                            builder.inttoptr(
                                builder.add(wrow, builder.mul(ir.Constant(i64, k), ws1)), elt.as_pointer()
                            )
                        )
                        for k in range(W // HW)
                    ]
                for (off, n, k), acc in zip(pieces, accs, strict=True):
                    vty = ir.VectorType(elt, n)
                    ptr = builder.inttoptr(
                        builder.add(rowaddr, ir.Constant(i64, off * isz)), vty.as_pointer()
                    )
                    val = builder.load(ptr, align=isz)
                    if M:
                        val = builder.fmul(val, splat(wvals[k], n))
                    builder.store(builder.fadd(builder.load(acc), val), acc)
            cnt = builder.sub(e_hi, e_lo)
            scale = builder.and_(
                builder.icmp_signed(">", cnt, ir.Constant(i64, 0)),
                context.cast(builder, args[10], signature.args[10], types.boolean),
            )
            fcnt = builder.sitofp(cnt, elt)
            obase = builder.add(
                builder.add(
                    builder.ptrtoint(oa.data, i64), builder.mul(row, builder.extract_value(oa.strides, 0))
                ),
                builder.mul(col0, ir.Constant(i64, isz)),
            )
            for (off, n, _), acc in zip(pieces, accs, strict=True):
                val = builder.load(acc)
                val = builder.select(scale, builder.fdiv(val, splat(fcnt, n)), val)
                ptr = builder.inttoptr(
                    builder.add(obase, ir.Constant(i64, off * isz)), ir.VectorType(elt, n).as_pointer()
                )
                builder.store(val, ptr, align=isz)
            return context.get_dummy_value()

        return sig, codegen

    @njit(cache=True, nogil=True)
    def _nb_row_chunks(indptr, k):
        """``k + 1`` row boundaries cutting the rows into chunks of about equal work (edges + 2 per row)."""
        n = indptr.shape[0] - 1
        total = indptr[n] + 2 * n
        out = np.empty(k + 1, np.int64)
        out[0], out[k] = 0, n
        for i in range(1, k):
            target = (total * i) // k
            lo, hi = out[i - 1], n  # first row r with indptr[r] + 2 r >= target
            while lo < hi:
                mid = (lo + hi) // 2
                if indptr[mid] + 2 * mid < target:
                    lo = mid + 1
                else:
                    hi = mid
            out[i] = lo
        return out

    @intrinsic
    def _grab(typingctx, counter):
        """``counter[0] += 1`` as one atomic step, returning the value before: the next chunk, for one thread."""
        sig = types.int64(counter)

        def codegen(context, builder, signature, args):
            arr = context.make_array(signature.args[0])(context, builder, args[0])
            return builder.atomic_rmw("add", arr.data, ir.Constant(ir.IntType(64), 1), "monotonic")

        return sig, codegen

    @functools.cache
    def _nb_csr_sum(tile: int, tail: int, mode: int, ahead: int, hw: int, hw_tail: int):
        """The CSR sum specialised on its tiles (widths, columns per weight), weights, prefetch.

        A closure over compile-time constants (numba caches one machine-code version per value) rather than
        ``numba.literally``, whose dispatch re-types the function on every call (~50 ms). A serial function run
        by :func:`_run_on_row_chunks` on several threads, each taking chunks from a shared counter, rather than a
        ``prange`` loop: numba compiles a serial version several times faster, and a run needs dozens of widths.
        """

        @njit(cache=True, nogil=True)
        def kernel(
            counter, chunks, indptr, indices, x, out, w, perm, div, groups, group_w, n_tiles, tile_heads
        ):
            # every row of out: `groups` groups of `group_w` columns (weight column g), each n_tiles tiles of `tile`
            # columns (tile_heads weight columns further per tile) and a tail of `tail` columns
            c = _grab(counter)
            while c < chunks.shape[0] - 1:
                for v in range(chunks[c], chunks[c + 1]):
                    e0, e1 = indptr[v], indptr[v + 1]
                    for g in range(groups):
                        c0, h = g * group_w, g
                        for _t in range(n_tiles):
                            _row_tile(x, indices, e0, e1, w, h, perm, out, v, c0, div, tile, mode, ahead, hw)
                            c0 += tile
                            h += tile_heads
                        if tail > 0:
                            _row_tile(
                                x, indices, e0, e1, w, h, perm, out, v, c0, div, tail, mode, ahead, hw_tail
                            )
                c = _grab(counter)

        return jit_cache.compile_once(kernel)  # made at run time: adopt() at the end cannot see it

    @intrinsic
    def _row_dots(typingctx, a, b, idx, e0, e1, out, v, c0, hcol, width, ahead):
        """``out[e, hcol] = a[v, c0:c0+W] . b[idx[e], c0:c0+W]`` for ``e0 <= e < e1``.

        The products of a 64-byte piece are added by a fixed halving tree, the pieces left to right: a fixed
        order, so the result is reproducible; ``a``'s row stays in registers.
        """
        W, PF = _literal(width), _literal(ahead)
        if W is None or PF is None:
            return None
        sig = types.void(a, b, idx, e0, e1, out, v, c0, hcol, width, ahead)

        def codegen(context, builder, signature, args):
            at, bt, it, e0t, e1t, ot, vt, c0t, ht = signature.args[:9]
            aa = context.make_array(at)(context, builder, args[0])
            ba = context.make_array(bt)(context, builder, args[1])
            ia = context.make_array(it)(context, builder, args[2])
            oa = context.make_array(ot)(context, builder, args[5])
            i64, i32 = ir.IntType(64), ir.IntType(32)

            def as64(val, ty):
                return context.cast(builder, val, ty, types.int64)

            e_lo, e_hi = as64(args[3], e0t), as64(args[4], e1t)
            row, col0, hc = as64(args[6], vt), as64(args[7], c0t), as64(args[8], ht)
            elt = context.get_data_type(bt.dtype)
            isz = context.get_abi_sizeof(elt)
            pieces = _pieces(W, max(1, 64 // isz))
            colb = builder.mul(col0, ir.Constant(i64, isz))
            arow = builder.add(
                builder.add(
                    builder.ptrtoint(aa.data, i64), builder.mul(row, builder.extract_value(aa.strides, 0))
                ),
                colb,
            )
            avecs = [
                builder.load(
                    builder.inttoptr(
                        builder.add(arow, ir.Constant(i64, off * isz)), ir.VectorType(elt, n).as_pointer()
                    ),
                    align=isz,
                )
                for off, n in pieces
            ]
            bbase = builder.add(builder.ptrtoint(ba.data, i64), colb)
            bs0 = builder.extract_value(ba.strides, 0)
            nnz = builder.extract_value(ia.shape, 0)
            os0, os1 = builder.extract_value(oa.strides, 0), builder.extract_value(oa.strides, 1)
            obase = builder.add(builder.ptrtoint(oa.data, i64), builder.mul(hc, os1))
            lines = sorted({j * 64 for j in range((W * isz + 63) // 64)} | {W * isz - 1}) if W else []

            def tree(vecv, n):
                while n > 1:
                    h = n // 2
                    lo = builder.shuffle_vector(
                        vecv, vecv, ir.Constant(ir.VectorType(i32, h), list(range(h)))
                    )
                    hi = builder.shuffle_vector(
                        vecv, vecv, ir.Constant(ir.VectorType(i32, h), list(range(h, n)))
                    )
                    vecv, n = builder.fadd(lo, hi), h
                return builder.extract_element(vecv, ir.Constant(i32, 0))

            with cgutils.for_range_slice(builder, e_lo, e_hi, ir.Constant(i64, 1), inc=True) as (e, _):
                ahead = builder.add(e, ir.Constant(i64, PF))
                with builder.if_then(builder.icmp_signed("<", ahead, nnz), likely=True):
                    _prefetch_lines(
                        builder, builder.add(bbase, builder.mul(_load_index(builder, ia, ahead), bs0)), lines
                    )
                rowaddr = builder.add(bbase, builder.mul(_load_index(builder, ia, e), bs0))
                total = ir.Constant(elt, 0.0)
                for k, ((off, n), av) in enumerate(zip(pieces, avecs, strict=True)):
                    bv = builder.load(
                        builder.inttoptr(
                            builder.add(rowaddr, ir.Constant(i64, off * isz)),
                            ir.VectorType(elt, n).as_pointer(),
                        ),
                        align=isz,
                    )
                    part = tree(builder.fmul(av, bv), n)
                    total = part if k == 0 else builder.fadd(total, part)
                optr = builder.inttoptr(builder.add(obase, builder.mul(e, os0)), elt.as_pointer())
                builder.store(total, optr)
            return context.get_dummy_value()

        return sig, codegen

    @functools.cache
    def _nb_sddmm(width: int, ahead: int = _PREFETCH):
        """The per-edge dot products specialised on the head width; serial, run like the CSR sum (above)."""

        @njit(cache=True, nogil=True)
        def kernel(counter, chunks, indptr, indices, a, b, out, heads):
            # out[e, h] = a[row(e), head h] . b[indices[e], head h], heads of `width` columns
            c = _grab(counter)
            while c < chunks.shape[0] - 1:
                for v in range(chunks[c], chunks[c + 1]):
                    for h in range(heads):
                        _row_dots(a, b, indices, indptr[v], indptr[v + 1], out, v, h * width, h, width, ahead)
                c = _grab(counter)

        return jit_cache.compile_once(kernel)  # made at run time: adopt() at the end cannot see it

    # The kernels below have fixed signatures; they too are serial functions over chunks taken from a shared
    # counter (run by _run_on_row_chunks / _run_on_ranges), not prange loops: numba compiles them 3-5x faster, a
    # small call never wakes a thread pool, and helper threads run them as plain loops.

    @njit(cache=True, nogil=True, error_model="numpy")
    def _nb_softmax(counter, chunks, indptr, s, out):
        """Row-wise softmax of ``s [nnz, H]``, the row maximum subtracted."""
        c = _grab(counter)
        while c < chunks.shape[0] - 1:
            for v in range(chunks[c], chunks[c + 1]):
                e0, e1 = indptr[v], indptr[v + 1]
                for h in range(s.shape[1]):
                    m = -np.inf
                    for e in range(e0, e1):
                        m = max(m, s[e, h])
                    tot = out.dtype.type(0)
                    for e in range(e0, e1):
                        t = np.exp(s[e, h] - m)
                        out[e, h] = t
                        tot += t
                    for e in range(e0, e1):
                        out[e, h] = out[e, h] / tot
            c = _grab(counter)

    @njit(cache=True, nogil=True)
    def _nb_softmax_backward(counter, chunks, indptr, alpha, g, out):
        """``out = g*alpha - alpha * rowsum(g*alpha)``."""
        c = _grab(counter)
        while c < chunks.shape[0] - 1:
            for v in range(chunks[c], chunks[c + 1]):
                e0, e1 = indptr[v], indptr[v + 1]
                for h in range(alpha.shape[1]):
                    tot = out.dtype.type(0)
                    for e in range(e0, e1):
                        t = g[e, h] * alpha[e, h]
                        out[e, h] = t
                        tot += t
                    for e in range(e0, e1):
                        out[e, h] = out[e, h] - alpha[e, h] * tot
            c = _grab(counter)

    @njit(cache=True, nogil=True)
    def _nb_div_by_degree(counter, chunks, indptr, g, out):
        """``out[v] = g[v] / max(1, row length of v)`` (the gradient of a mean, before the transposed sum)."""
        k = _grab(counter)
        while k < chunks.shape[0] - 1:
            for v in range(chunks[k], chunks[k + 1]):
                d = out.dtype.type(max(1, indptr[v + 1] - indptr[v]))
                for c in range(g.shape[1]):
                    out[v, c] = g[v, c] / d
            k = _grab(counter)

    @njit(inline="always")
    def _nb_mix(h):
        """:func:`..dropout._mix` (lowbias32) on a uint64 below 2^32: products below 2^64, reduced mod 2^32."""
        h ^= h >> _U16
        h = (h * _UK1) & _UM32
        h ^= h >> _U15
        h = (h * _UK2) & _UM32
        return h ^ (h >> _U16)

    @njit(cache=True, nogil=True)
    def _nb_relu_dropout(counter, chunks, h, ids, k, col, threshold, scale, out):
        """``out = relu(h) * mask``: the mask entry is ``scale`` where ``final(node ^ col[c]) >= threshold``, else 0.

        ``node = mix(mix((id & M32) ^ k) ^ (id >> 32))`` and ``final`` (lowbias32's shape with the multipliers
        ``_F1``, ``_F2``) are :mod:`..dropout`'s per-node and per-entry rounds, on uint64 values below 2^32 so
        no product overflows; ``tests/test_models.py`` checks the result against ``dropout_mask`` bit for bit.
        """
        zero = out.dtype.type(0)
        t = _grab(counter)
        while t < chunks.shape[0] - 1:
            for v in range(chunks[t], chunks[t + 1]):
                i = ids[v]
                nv = _nb_mix(_nb_mix((i & _UM32) ^ k) ^ (i >> _U32))
                for c in range(h.shape[1]):
                    x = nv ^ col[c]
                    x ^= x >> _U16
                    x = (x * _UF1) & _UM32
                    x ^= x >> _U15
                    x = (x * _UF2) & _UM32
                    x ^= x >> _U16
                    r = h[v, c]
                    out[v, c] = (r if r > zero else zero) * scale if x >= threshold else zero
            t = _grab(counter)

    @njit(cache=True, nogil=True)
    def _nb_relu_dropout_backward(counter, chunks, y, g, scale, out):
        """``out = g * scale`` where ``y > 0`` (kept and positive before the ReLU), else 0."""
        zero = out.dtype.type(0)
        t = _grab(counter)
        while t < chunks.shape[0] - 1:
            for v in range(chunks[t], chunks[t + 1]):
                for c in range(y.shape[1]):
                    out[v, c] = g[v, c] * scale if y[v, c] > zero else zero
            t = _grab(counter)

    @njit(cache=True, nogil=True)
    def _nb_transpose(indptr, indices, t_indptr, t_indices, perm):
        """Counting sort of the edges by source, stable: fills the transposed CSR and the edge permutation."""
        n_src = t_indptr.shape[0] - 1
        cursor = np.zeros(n_src + 1, np.int64)
        for e in range(indices.shape[0]):
            cursor[indices[e] + 1] += 1
        for u in range(n_src):
            cursor[u + 1] += cursor[u]
        t_indptr[:] = cursor
        for v in range(indptr.shape[0] - 1):
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                p = cursor[u]
                t_indices[p] = v
                perm[p] = e
                cursor[u] = p + 1

    @njit(cache=True, nogil=True)
    def _nb_take_rows(counter, chunks, h, ids, rows):
        """``rows[i] = h[ids[i]]`` (``h`` only read: it may be a read-only memory-mapped file)."""
        t = _grab(counter)
        while t < chunks.shape[0] - 1:
            for i in range(chunks[t], chunks[t + 1]):
                r = ids[i]
                for c in range(h.shape[1]):
                    rows[i, c] = h[r, c]
            t = _grab(counter)

    @njit(cache=True, nogil=True)
    def _nb_scatter_rows(counter, chunks, h, ids, rows, add):
        """``h[ids[i]] += rows[i]`` (``add``) or ``= rows[i]`` for distinct ``ids`` (no two rows meet: no races)."""
        t = _grab(counter)
        while t < chunks.shape[0] - 1:
            for i in range(chunks[t], chunks[t + 1]):
                r = ids[i]
                if add:
                    for c in range(h.shape[1]):
                        h[r, c] += rows[i, c]
                else:
                    for c in range(h.shape[1]):
                        h[r, c] = rows[i, c]
            t = _grab(counter)


_thread_state = threading.local()


def use_serial_kernels_in_this_thread() -> None:
    """Called by the runtime's helper threads (prefetch, sender, receiving): the row kernels they call then run
    on the thread itself alone, never handing chunks to the kernel pool — a helper's single thread gains nothing
    from it and would compete with the compute thread."""
    _thread_state.serial = True


def _nb_threads() -> int:
    n = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    return n


# Below this much work (edges + 2 per row) a kernel runs on the calling thread alone: handing chunks to another
# thread costs tens of microseconds, more than such a kernel takes.
_PARALLEL_MIN_WORK = 1 << 15
_pool: tuple[int, int, concurrent.futures.ThreadPoolExecutor] | None = None  # (pid, threads, pool)


def _kernel_pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """This process's pool of ``threads`` kernel threads, made on first use: a forked child (the fork server's
    workers) inherits the parent's pool object without its threads, so a pool is tied to its pid. A larger pool
    replaces a smaller one without shutting it down: another thread may still be submitting to it, and its idle
    threads end once it is no longer referenced."""
    global _pool
    pid = os.getpid()
    if _pool is None or _pool[0] != pid or _pool[1] < threads:
        _pool = (pid, threads, concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="g3-kernel"))
    return _pool[2]


def _run_on_row_chunks(kernel, indptr: np.ndarray, *args) -> None:
    """``kernel(counter, chunks, indptr, *args)`` over all rows of ``indptr`` on :func:`_nb_threads` threads.

    The rows are cut into equal-work chunks (8 per thread); each thread — the caller and the pool's — runs the
    kernel, which takes chunks one at a time from the shared counter until none is left (a dynamic schedule:
    robust to skewed rows and a busy machine). A row is computed whole by one thread, so the result does not
    depend on the threads or the schedule. Helper threads (:func:`use_serial_kernels_in_this_thread`) and small
    kernels run on the calling thread alone."""
    n_rows = indptr.shape[0] - 1
    _run_chunks(
        kernel, n_rows, int(indptr[n_rows]) + 2 * n_rows, lambda k: _nb_row_chunks(indptr, k), (indptr, *args)
    )


def _run_on_ranges(kernel, n: int, width: int, *args) -> None:
    """``kernel(counter, chunks, *args)`` over ``range(n)`` cut into equal chunks (rows of ``width`` columns,
    the same work each), on :func:`_nb_threads` threads as :func:`_run_on_row_chunks`."""
    _run_chunks(kernel, n, n * max(1, width), lambda k: np.linspace(0, n, k + 1).astype(np.int64), args)


def _run_chunks(kernel, n: int, work: int, cut, args: tuple) -> None:
    """``kernel(counter, chunks, *args)`` over ``n`` items: on the calling thread alone for a helper thread, one
    thread or under :data:`_PARALLEL_MIN_WORK` units of ``work``; else cut into ``cut(k)`` chunk boundaries (k
    chunks) and run by the caller and ``threads - 1`` pool threads, each taking chunks from a shared counter."""
    threads = 1 if getattr(_thread_state, "serial", False) else _nb_threads()
    if threads == 1 or n < 2 or work < _PARALLEL_MIN_WORK:
        kernel(np.zeros(1, np.int64), np.array([0, n], np.int64), *args)
        return
    chunks = cut(min(n, threads * _CHUNKS_PER_THREAD))
    counter = np.zeros(1, np.int64)
    helpers = [_kernel_pool(threads - 1).submit(kernel, counter, chunks, *args) for _ in range(threads - 1)]
    kernel(counter, chunks, *args)
    for done in helpers:
        done.result()


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def _rows2d(t: torch.Tensor) -> torch.Tensor:
    """``t`` as ``[rows, cols]`` with unit column stride (a view when possible)."""
    t2 = t.reshape(t.shape[0], -1)
    return t2 if t2.stride(1) == 1 or t2.shape[1] <= 1 else t2.contiguous()


def _nb_sum(indptr, indices, x, n_out, weight=None, perm=None, mean=False) -> torch.Tensor:
    """``[n_out, *x.shape[1:]]`` CSR sum with the numba kernel; ``weight [nnz(, H)]`` optional (per-edge, per head)."""
    x2 = _rows2d(x)
    width = x2.shape[1]
    out = torch.empty((n_out, *x.shape[1:]), dtype=x.dtype)
    out2 = out.view(n_out, width)
    if n_out == 0 or width == 0:
        return out
    heads = 1 if weight is None or weight.dim() == 1 else weight.shape[1]
    head_w = width // heads
    budget = max(1, _TILE_BYTES // x.element_size())  # columns kept in registers at once
    if heads > 1 and head_w <= budget:  # narrow heads: several heads per tile, a weight per head
        per_tile = budget // head_w
        groups, group_w, tile_heads = 1, width, per_tile
        n_tiles, rem = divmod(heads, per_tile)
        tile, tail, hw, hw_tail = per_tile * head_w, rem * head_w, head_w, head_w
    else:  # one weight (or none) per group of columns, tiled
        groups, group_w, tile_heads = heads, head_w, 0
        tile = min(head_w, budget)
        n_tiles, tail = divmod(head_w, tile)
        hw, hw_tail = tile, tail
    if weight is None:
        w2, mode = np.zeros((1, 1), dtype=_np(x2).dtype), 0
    else:
        w2, mode = _np(weight.to(x.dtype).reshape(weight.shape[0], -1)), 1 if perm is None else 2
    p = _np(perm) if perm is not None else np.zeros(1, dtype=np.int64)
    _run_on_row_chunks(
        _nb_csr_sum(tile, tail, mode, _PREFETCH, hw, hw_tail),
        _np(indptr),
        _np(indices),
        _np(x2),
        out2.numpy(),
        w2,
        p,
        bool(mean),
        groups,
        group_w,
        n_tiles,
        tile_heads,
    )
    return out


def _nb_edge_dots(indptr, indices, g, x, weight) -> torch.Tensor:
    """Weight gradient of a weighted sum: ``[nnz(, H)]`` dot products of ``g[row(e)]`` and ``x[indices[e]]`` (per head)."""
    nnz = indices.numel()
    heads = 1 if weight.dim() == 1 else weight.shape[1]
    g2, x2 = _rows2d(g), _rows2d(x)
    out = torch.empty((nnz, heads), dtype=x.dtype)
    _run_on_row_chunks(
        _nb_sddmm(x2.shape[1] // heads), _np(indptr), _np(indices), _np(g2), _np(x2), out.numpy(), heads
    )
    return out.view(weight.shape)


def _nb_div_by_degree_of(indptr: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``g[v] / max(1, row length of v)`` (``g [n_dst, *feat]``), a new tensor."""
    scaled = torch.empty(g.shape, dtype=g.dtype)
    g2 = _rows2d(g)
    _run_on_ranges(
        _nb_div_by_degree, g2.shape[0], g2.shape[1], _np(indptr), _np(g2), scaled.view(g.shape[0], -1).numpy()
    )
    return scaled


jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
