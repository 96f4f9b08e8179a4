"""WebGraph BVGraph (Boldi–Vigna) reader, decoded in g3 itself with numba.

A BVGraph is ``BASENAME.properties`` (parameters), ``BASENAME.graph`` (the bit stream of successor lists) and,
optionally, ``BASENAME.offsets`` (the bit offset of every list). The format, as written by the Java
``it.unimi.dsi.webgraph.BVGraph`` (and the Rust ``webgraph`` crate, version 0, big-endian), is:

* bits are read MSB first within each byte; instantaneous codes are those of ``it.unimi.dsi.io``:
  unary (``x`` zeros then a one), gamma, delta, zeta_k, variable-length nibble and Golomb (modulus ``zetak``);
* per node ``x``: the outdegree ``d``; if ``d > 0`` and ``windowsize > 0`` a reference ``r <= windowsize``;
  if ``r > 0`` a block count and copy blocks over the list of ``x - r`` (copy, skip, copy, ...; every block
  but the first is stored minus one; with an even count the rest of the list is copied); if successors
  remain and ``minintervallength > 0`` an interval count (gamma) and the intervals (the first left extreme as
  ``int2nat(left - x)``, the next ones as ``left - previous_right - 2``; lengths minus ``minintervallength``);
  then the residuals (the first as ``int2nat(first - x)``, the next ones as gaps minus one);
* ``.offsets``: ``nodes + 1`` gamma (or delta) coded gaps between the bit offsets of consecutive lists, the
  first being 0.

``compressionflags`` (``|``-separated) picks the code of each field: ``OUTDEGREES_``, ``REFERENCES_``,
``BLOCKS_``, ``BLOCK_COUNT_``, ``INTERVALS_`` (a Rust ``webgraph`` extension; Java always uses gamma there),
``RESIDUALS_`` and ``OFFSETS_`` followed by ``GAMMA``, ``DELTA``, ``UNARY``, ``ZETA``, ``NIBBLE`` or ``GOLOMB``.
Java codes the block count with ``BLOCK_COUNT_`` (default gamma) and the blocks with ``BLOCKS_``; the Rust
crate codes both with ``BLOCKS_`` and writes an ``endianness`` property, which is how such files are told
apart here.

The numba kernels never read out of bounds: every read is clamped to the buffer, every stop reports a status
code and the node it stopped at, and the Python side turns that into a :class:`G3InputError`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba import njit, prange
from numba.cpython.unsafe.numbers import leading_zeros

from stages.common.errors import G3InputError
from stages.ingest.source import GraphSource

BV_GRAPH_CLASSES = ("it.unimi.dsi.webgraph.BVGraph", "it.unimi.dsi.big.webgraph.BVGraph")

# Code identifiers: the values of it.unimi.dsi.webgraph.CompressionFlags.
_DELTA, _GAMMA, _GOLOMB, _SKEWED_GOLOMB, _UNARY, _ZETA, _NIBBLE = 1, 2, 3, 4, 5, 6, 7
_CODE_BY_NAME = {
    "DELTA": _DELTA,
    "GAMMA": _GAMMA,
    "GOLOMB": _GOLOMB,
    "UNARY": _UNARY,
    "ZETA": _ZETA,
    "NIBBLE": _NIBBLE,
}
_CODE_NAME = {v: k for k, v in _CODE_BY_NAME.items()}
_FIELDS = ("OUTDEGREES", "REFERENCES", "BLOCKS", "BLOCK_COUNT", "INTERVALS", "RESIDUALS", "OFFSETS")
_DEFAULT_CODES = {**dict.fromkeys(_FIELDS, _GAMMA), "REFERENCES": _UNARY, "RESIDUALS": _ZETA}

# Kernel statuses.
_OK = 0  # reached the requested end node
_FULL = 1  # the output buffer is full (stopped before node `node`)
_PAST = 2  # a read went past the end of the available bits
_NEEDCAP = 3  # the first node of a chunk does not fit: `extra` = its outdegree
_NEEDSEQ = 4  # parallel decode: node `node` depends on a list this range could not resolve
_E_DEGREE = 10
_E_REF_WINDOW = 11
_E_REF_NODE = 12
_E_BLOCKS = 13
_E_COPY = 14
_E_INTERVALS = 15
_E_RANGE = 16
_E_DUP = 17
_E_VALUE = 18
_E_OFFSET = 19

_BAD = np.int64(1) << np.int64(62)  # position returned by a read whose value cannot be valid
_U1 = np.uint64(1)
_PAD_WORDS = 4
_MAX_ZETAK = 62
_MAX_GOLOMB = 1 << 20

# ---------------------------------------------------------------------------------------------------------
# Bit reading (numba). `words` holds the stream as big-endian 64-bit words with zero padding at the end;
# `pos` is a bit position; a read returns (value, new position). A read that crosses `nbits` returns a
# position beyond `nbits`; one whose value cannot be valid (>= 2**62) returns _BAD (also beyond `nbits`).
# ---------------------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _peek(words, pos):
    """The 64 bits starting at bit `pos` (clamped to the buffer: never reads out of bounds)."""
    i = pos >> 6
    last = words.shape[0] - 2
    if i > last:
        i = last
    s = np.uint64(pos & 63)
    return (words[i] << s) | ((words[i + 1] >> _U1) >> (np.uint64(63) - s))


@njit(cache=True, nogil=True)
def _read_unary(words, pos, nbits):
    w = _peek(words, pos)
    if w != 0:
        z = np.int64(leading_zeros(w))
        return z, pos + z + 1
    n = np.int64(0)
    while True:
        pos += 64
        n += 64
        if pos > nbits:
            return np.int64(0), pos
        w = _peek(words, pos)
        if w != 0:
            z = np.int64(leading_zeros(w))
            return n + z, pos + z + 1


@njit(cache=True, nogil=True)
def _read_gamma(words, pos, nbits):
    w = _peek(words, pos)
    z = np.int64(leading_zeros(w))
    if z < 32:
        n = 2 * z + 1
        return np.int64(w >> np.uint64(64 - n)) - 1, pos + n
    if z > 61:
        if pos + z + 1 > nbits:
            return np.int64(0), pos + z + 1
        return np.int64(0), _BAD
    pos += z + 1
    w2 = _peek(words, pos)
    return np.int64((_U1 << np.uint64(z)) | (w2 >> np.uint64(64 - z))) - 1, pos + z


@njit(cache=True, nogil=True)
def _read_delta(words, pos, nbits):
    m, pos = _read_gamma(words, pos, nbits)
    if pos > nbits:
        return np.int64(0), pos
    if m > 61:
        if pos + m > nbits:
            return np.int64(0), pos + m
        return np.int64(0), _BAD
    if m == 0:
        return np.int64(0), pos
    w = _peek(words, pos)
    return np.int64((_U1 << np.uint64(m)) | (w >> np.uint64(64 - m))) - 1, pos + m


@njit(cache=True, nogil=True)
def _read_zeta(words, pos, nbits, k):
    w = _peek(words, pos)
    h = np.int64(leading_zeros(w))
    if (h + 1) * k > 62:
        if pos + h + 1 > nbits:
            return np.int64(0), pos + h + 1
        return np.int64(0), _BAD
    hk = h * k
    nb = hk + k - 1
    left = np.int64(1) << hk
    if h + nb + 2 <= 64:  # the whole code word is in w
        rest = w << np.uint64(h + 1)
        m = np.int64((rest >> _U1) >> np.uint64(63 - nb))
        if m < left:
            return m + left - 1, pos + h + 1 + nb
        b = np.int64((rest << np.uint64(nb)) >> np.uint64(63))
        return ((m << 1) | b) - 1, pos + h + 2 + nb
    pos += h + 1
    m = np.int64((_peek(words, pos) >> _U1) >> np.uint64(63 - nb))
    if m < left:
        return m + left - 1, pos + nb
    b = np.int64(_peek(words, pos + nb) >> np.uint64(63))
    return ((m << 1) | b) - 1, pos + nb + 1


@njit(cache=True, nogil=True)
def _read_nibble(words, pos, nbits):
    v = np.int64(0)
    for _ in range(20):
        g = np.int64(_peek(words, pos) >> np.uint64(60))
        pos += 4
        v = (v << 3) | (g & 7)
        if g & 8:
            return v, pos
        if pos > nbits:
            return np.int64(0), pos
    return np.int64(0), _BAD


@njit(cache=True, nogil=True)
def _read_golomb(words, pos, nbits, b):
    q, pos = _read_unary(words, pos, nbits)
    if pos > nbits:
        return np.int64(0), pos
    if q > (np.int64(1) << 62) // b:
        return np.int64(0), _BAD
    log2b = 63 - np.int64(leading_zeros(np.uint64(b)))
    m = (np.int64(1) << (log2b + 1)) - b
    r = np.int64((_peek(words, pos) >> _U1) >> np.uint64(63 - log2b))
    if r >= m:
        r = ((r << 1) | np.int64(_peek(words, pos + log2b) >> np.uint64(63))) - m
        pos += log2b + 1
    else:
        pos += log2b
    return q * b + r, pos


@njit(cache=True, nogil=True)
def _read(words, pos, nbits, code, k):
    """Read one natural number in the given code (k: zeta's k, Golomb's modulus)."""
    if code == _GAMMA:
        return _read_gamma(words, pos, nbits)
    if code == _ZETA:
        return _read_zeta(words, pos, nbits, k)
    if code == _UNARY:
        return _read_unary(words, pos, nbits)
    if code == _DELTA:
        return _read_delta(words, pos, nbits)
    if code == _NIBBLE:
        return _read_nibble(words, pos, nbits)
    return _read_golomb(words, pos, nbits, k)


# ---------------------------------------------------------------------------------------------------------
# One successor list (numba).
# ---------------------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _decode_body(words, nbits, pos, x, d, ref_arr, rs, rl, out, os, tmpa, tmpb, codec):
    """Decode the part of node x's list after the outdegree `d` and the reference.

    The referenced list is ``ref_arr[rs:rs+rl]`` (``rl < 0``: no reference). The list goes to
    ``out[os:os+d]``; ``tmpa``/``tmpb`` hold at least ``d`` entries. Returns (status, position).
    """
    n_nodes, _window, min_int, _c_out, _c_ref, c_bcnt, c_blk, c_int, c_res, k = codec
    copied = np.int64(0)
    if rl >= 0:
        bc, pos = _read(words, pos, nbits, c_bcnt, k)
        if pos > nbits:
            return _PAST, pos
        if bc > rl + 1:
            return _E_BLOCKS, pos
        idx = np.int64(0)
        for i in range(bc):
            b, pos = _read(words, pos, nbits, c_blk, k)
            if pos > nbits:
                return _PAST, pos
            if i > 0:
                b += 1
            if b > rl - idx:
                return _E_BLOCKS, pos
            if (i & 1) == 0:
                if b > d - copied:
                    return _E_COPY, pos
                for j in range(b):
                    out[os + copied + j] = ref_arr[rs + idx + j]
                copied += b
            idx += b
        if (bc & 1) == 0:
            b = rl - idx
            if b > d - copied:
                return _E_COPY, pos
            for j in range(b):
                out[os + copied + j] = ref_arr[rs + idx + j]
            copied += b
    extra = d - copied
    if extra == 0:
        return _OK, pos

    ni = np.int64(0)
    if min_int > 0:
        ic, pos = _read(words, pos, nbits, c_int, k)
        if pos > nbits:
            return _PAST, pos
        if ic > extra:
            return _E_INTERVALS, pos
        prev = np.int64(0)
        for i in range(ic):
            v, pos = _read(words, pos, nbits, c_int, k)
            if pos > nbits:
                return _PAST, pos
            if i == 0:
                left = x + ((v >> 1) ^ -(v & 1))
            else:
                left = prev + v + 1
            ln, pos = _read(words, pos, nbits, c_int, k)
            if pos > nbits:
                return _PAST, pos
            ln += min_int
            if ln > extra - ni:
                return _E_INTERVALS, pos
            if left < 0 or left + ln > n_nodes:
                return _E_RANGE, pos
            for j in range(ln):
                tmpa[ni + j] = left + j
            ni += ln
            prev = left + ln

    nr = extra - ni
    direct = copied == 0 and ni == 0
    if direct:
        dst = out
        dp = os
    else:
        dst = tmpb
        dp = np.int64(0)
    if nr > 0:
        v, pos = _read(words, pos, nbits, c_res, k)
        if pos > nbits:
            return _PAST, pos
        cur = x + ((v >> 1) ^ -(v & 1))
        if cur < 0 or cur >= n_nodes:
            return _E_RANGE, pos
        dst[dp] = cur
        for j in range(1, nr):
            v, pos = _read(words, pos, nbits, c_res, k)
            if pos > nbits:
                return _PAST, pos
            cur += v + 1
            if cur >= n_nodes:
                return _E_RANGE, pos
            dst[dp + j] = cur
    if direct:
        return _OK, pos

    # Backward three-way merge of the copied part (already in out[os:os+copied]), the intervals (tmpa) and
    # the residuals (tmpb) into out[os:os+d]; writing from the end never overwrites an unread copied entry.
    i = copied - 1
    j = ni - 1
    q = nr - 1
    p = os + d - 1
    last = n_nodes
    while j >= 0 or q >= 0:
        a = np.int64(out[os + i]) if i >= 0 else np.int64(-1)
        b = np.int64(tmpa[j]) if j >= 0 else np.int64(-1)
        c = np.int64(tmpb[q]) if q >= 0 else np.int64(-1)
        if a >= b and a >= c:
            v = a
            i -= 1
        elif b >= c:
            v = b
            j -= 1
        else:
            v = c
            q -= 1
        if v >= last:
            return _E_DUP, pos
        out[p] = v
        last = v
        p -= 1
    if i >= 0 and out[os + i] >= last:
        return _E_DUP, pos
    return _OK, pos


# ---------------------------------------------------------------------------------------------------------
# Drivers (numba).
# ---------------------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _read_ref(words, pos, nbits, x, codec):
    """The reference of node x's list (0 when windowsize is 0), checked: (status, reference, position)."""
    window, c_ref, k = codec[1], codec[4], codec[9]
    if window == 0:
        return _OK, np.int64(0), pos
    r, pos = _read(words, pos, nbits, c_ref, k)
    if pos > nbits:
        return (_E_VALUE if pos >= _BAD else _PAST), np.int64(0), pos
    if r > window:
        return _E_REF_WINDOW, r, pos
    if r > x:
        return _E_REF_NODE, r, pos
    return _OK, r, pos


@njit(cache=True, nogil=True)
def _decode_seq(words, nbits, pos, x, x_end, li, li_first, offs, succ, codec):
    """Sequentially decode nodes x, x+1, ... < x_end, starting at bit `pos`.

    Node x goes to local index `li`: its list is ``succ[offs[li]:offs[li+1]]``; the lists of the (up to
    `window`) previous nodes must be at local indices li-1, li-2, ... Stops early when ``offs`` or ``succ``
    is full; if the first node of the chunk (local index `li_first`) does not fit, returns _NEEDCAP with its
    outdegree. Returns (status, node, position of that node's list, local index, extra).
    """
    n_nodes, window, min_int, c_out, c_ref, c_bcnt, c_blk, c_int, c_res, k = codec
    cap = succ.shape[0]
    tmpa = np.empty(16, succ.dtype)
    tmpb = np.empty(16, succ.dtype)
    while x < x_end:
        if li + 1 >= offs.shape[0]:
            return _FULL, x, pos, li, np.int64(0)
        start = offs[li]
        p0 = pos
        d, pos = _read(words, pos, nbits, c_out, k)
        if pos > nbits:
            return (_E_VALUE if pos >= _BAD else _PAST), x, p0, li, np.int64(0)
        if d > n_nodes:
            return _E_DEGREE, x, p0, li, d
        if d > cap - start:
            if li == li_first:
                return _NEEDCAP, x, p0, li, d
            return _FULL, x, p0, li, np.int64(0)
        if d == 0:
            offs[li + 1] = start
            x += 1
            li += 1
            continue
        if d > tmpa.shape[0]:
            sz = max(d, 2 * tmpa.shape[0])
            tmpa = np.empty(sz, succ.dtype)
            tmpb = np.empty(sz, succ.dtype)
        rs = np.int64(0)
        rl = np.int64(-1)
        st, r, pos = _read_ref(words, pos, nbits, x, codec)
        if st != _OK:
            return st, x, p0, li, r
        if r > 0:
            if r > li:  # the caller did not provide the window (cannot happen through the Python API)
                return _E_REF_NODE, x, p0, li, r
            rs = offs[li - r]
            rl = offs[li - r + 1] - rs
        st, pos = _decode_body(words, nbits, pos, x, d, succ, rs, rl, succ, start, tmpa, tmpb, codec)
        if st != _OK:
            if st == _PAST and pos >= _BAD:
                st = _E_VALUE
            return st, x, p0, li, np.int64(0)
        offs[li + 1] = start + d
        x += 1
        li += 1
    return _OK, x, pos, li, np.int64(0)


@njit(cache=True, nogil=True)
def _decode_offsets(words, nbits, n, code, k, limit, out):
    """Decode the n+1 offset gaps into cumulative bit offsets; returns (status, index reached)."""
    pos = np.int64(0)
    acc = np.int64(0)
    for i in range(n + 1):
        v, pos = _read(words, pos, nbits, code, k)
        if pos > nbits:
            return (_E_VALUE if pos >= _BAD else _PAST), i
        acc += v
        if acc > limit:
            return _E_OFFSET, i
        out[i] = acc
    return _OK, n


@njit(cache=True, nogil=True, parallel=True)
def _degrees_par(words, nbits, goffs, n_nodes, c_out, k, deg):
    """Outdegree of every node, read at its offset: -1 past the end or past the next offset, -2 too large."""
    for x in prange(n_nodes):
        d, pos = _read(words, goffs[x], nbits, c_out, k)
        if pos > goffs[x + 1]:
            deg[x] = -1
        elif d > n_nodes:
            deg[x] = -2
        else:
            deg[x] = d


@njit(cache=True, nogil=True)
def _decode_range(
    words, nbits, goffs, deg, csr, succ, x, e, final, scratch, valid, w0, base, tmpa, tmpb, codec
):
    """Decode nodes [x, e) into the CSR (csr/succ), checking that every list ends at the next offset.

    A reference to a node from `final` on resolves into ``succ``; one before it into ``scratch`` (the lists of
    nodes w0.., at csr offsets minus `base`) where ``valid``, else the range stops with _NEEDSEQ.
    Returns (status, node, extra).
    """
    while x < e:
        d, pos = _read(words, goffs[x], nbits, codec[3], codec[9])
        if d > 0:
            ref_arr = succ
            rs = np.int64(0)
            rl = np.int64(-1)
            st, ref, pos = _read_ref(words, pos, nbits, x, codec)
            if st != _OK:
                return st, x, ref
            if ref > 0:
                t = x - ref
                if t >= final:
                    rs = csr[t]
                elif t >= w0 and valid[t - w0]:
                    ref_arr = scratch
                    rs = csr[t] - base
                else:
                    return _NEEDSEQ, x, np.int64(0)
                rl = deg[t]
            st, pos = _decode_body(words, nbits, pos, x, d, ref_arr, rs, rl, succ, csr[x], tmpa, tmpb, codec)
            if st != _OK:
                return (_E_VALUE if (st == _PAST and pos >= _BAD) else st), x, np.int64(0)
        if pos != goffs[x + 1]:
            return _E_OFFSET, x, pos
        x += 1
    return _OK, x, np.int64(0)


@njit(cache=True, nogil=True, parallel=True)
def _decode_par(words, nbits, goffs, deg, csr, succ, starts, warm, codec, status):
    """Decode node ranges [starts[r], starts[r+1]) in parallel into the CSR (csr/succ).

    A range first decodes up to `warm` nodes before it into a scratch buffer, so that references into the
    previous range resolve (a chain no longer than warm/window steps always does). A node whose reference
    cannot be resolved stops its range with _NEEDSEQ; the caller finishes it sequentially.
    status[r] = (status, node, extra); the row of an empty range is left as the caller's zeros (_OK).
    """
    n_nodes, window, min_int, c_out, c_ref, c_bcnt, c_blk, c_int, c_res, k = codec
    n_ranges = starts.shape[0] - 1
    for r in prange(n_ranges):
        s = starts[r]
        e = starts[r + 1]
        if s >= e:
            continue
        w0 = max(np.int64(0), s - warm)
        base = csr[w0]
        scratch = np.empty(csr[s] - base, succ.dtype)
        valid = np.zeros(s - w0, np.bool_)
        maxd = max(np.int64(1), deg[w0:e].max())
        tmpa = np.empty(maxd, succ.dtype)
        tmpb = np.empty(maxd, succ.dtype)
        # Warm-up: lists of the nodes just before the range, where resolvable.
        for y in range(w0, s):
            d, pos = _read(words, goffs[y], nbits, c_out, k)
            if d == 0:
                valid[y - w0] = pos == goffs[y + 1]
                continue
            rs = np.int64(0)
            rl = np.int64(-1)
            st, ref, pos = _read_ref(words, pos, nbits, y, codec)
            if st != _OK:
                continue
            if ref > 0:
                t = y - ref
                if t < w0 or not valid[t - w0]:
                    continue
                rs = csr[t] - base
                rl = deg[t]
            st, pos = _decode_body(
                words, nbits, pos, y, d, scratch, rs, rl, scratch, csr[y] - base, tmpa, tmpb, codec
            )
            valid[y - w0] = st == _OK and pos == goffs[y + 1]
        st, x, extra = _decode_range(
            words, nbits, goffs, deg, csr, succ, s, e, s, scratch, valid, w0, base, tmpa, tmpb, codec
        )
        status[r, 0] = st
        status[r, 1] = x
        status[r, 2] = extra


@njit(cache=True, nogil=True)
def _finish_seq(words, nbits, goffs, deg, csr, succ, x, x_end, codec):
    """Sequentially decode nodes [x, x_end) into the CSR, all earlier lists being final. (status, node, extra)."""
    maxd = max(np.int64(1), deg[x:x_end].max())
    tmpa = np.empty(maxd, succ.dtype)
    tmpb = np.empty(maxd, succ.dtype)
    none = np.empty(0, succ.dtype)
    return _decode_range(
        words, nbits, goffs, deg, csr, succ, x, x_end, 0, none, np.zeros(0, np.bool_), 0, 0, tmpa, tmpb, codec
    )


# ---------------------------------------------------------------------------------------------------------
# Properties.
# ---------------------------------------------------------------------------------------------------------


def _paths(basename: str | os.PathLike) -> tuple[Path, Path, Path, Path]:
    """(base, .graph, .properties, .offsets) for a basename given with or without the .graph suffix."""
    s = re.sub(r"\.(graph|properties|offsets)\Z", "", os.fspath(basename))
    base = Path(s)
    return base, Path(s + ".graph"), Path(s + ".properties"), Path(s + ".offsets")


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_ESCAPED = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    """Java's escapes: ``\\uXXXX``, ``\\t``, ``\\n``, ``\\r``, ``\\f``; any other escaped character is itself."""
    return _ESCAPE.sub(lambda m: chr(int(m[1][1:], 16)) if len(m[1]) == 5 else _ESCAPED.get(m[1], m[1]), s)


def _parse_java_properties(text: str) -> dict[str, str]:
    """A Java .properties file: comments (# !), key=value / key:value / key value, backslash continuations."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        # a line ending in an odd number of backslashes continues on the next one
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        j = 0
        while j < len(line) and line[j] not in "=: \t\f":
            j += 2 if line[j] == "\\" else 1
        key = line[:j]
        rest = line[j:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


def _int_prop(
    raw: dict[str, str],
    key: str,
    path: Path,
    *,
    required: bool,
    minimum: int | None = 0,
    default: int | None = None,
) -> int | None:
    v = raw.get(key)
    if v is None or v.strip() == "":
        if required:
            raise G3InputError(f"missing property '{key}' (a BVGraph .properties file needs it)", path=path)
        return default
    try:
        n = int(v.strip())
    except ValueError:
        raise G3InputError(f"property '{key}' must be an integer, got {v!r}", path=path) from None
    if minimum is not None and n < minimum:
        raise G3InputError(f"property '{key}' must be >= {minimum}, got {n}", path=path)
    return n


def _parse_flags(flags: str, rust_style: bool, path: Path) -> dict[str, int]:
    codes = dict(_DEFAULT_CODES)
    given: set[str] = set()
    for part in flags.split("|"):
        name = part.strip().upper()
        if not name:
            continue
        field = next((f for f in sorted(_FIELDS, key=len, reverse=True) if name.startswith(f + "_")), None)
        if field is None:
            raise G3InputError(f"unknown compression flag {name!r} in compressionflags={flags!r}", path=path)
        code_name = name[len(field) + 1 :]
        if (
            code_name == "SKEWED_GOLOMB"
            or code_name.startswith("PI")
            or (code_name.startswith("ZETA") and code_name != "ZETA")
        ):
            raise G3InputError(
                f"unsupported compression flag {name!r} (supported codes: GAMMA, DELTA, UNARY, ZETA, NIBBLE, "
                f"GOLOMB)",
                path=path,
            )
        if code_name not in _CODE_BY_NAME:
            raise G3InputError(f"unknown compression flag {name!r} in compressionflags={flags!r}", path=path)
        codes[field] = _CODE_BY_NAME[code_name]
        given.add(field)
    if rust_style and "BLOCKS" in given and "BLOCK_COUNT" not in given:
        codes["BLOCK_COUNT"] = codes["BLOCKS"]  # the Rust crate codes block counts with the blocks' code
    return codes


def read_properties(basename: str | os.PathLike) -> dict[str, Any]:
    """Parse and check ``BASENAME.properties`` of a BVGraph.

    Returns every key of the file (values as strings) with the ones the decoder needs converted: ``nodes``,
    ``arcs``, ``version``, ``windowsize``, ``maxrefcount`` (None when absent), ``minintervallength``,
    ``zetak`` (default 3) as ints, ``graphclass`` and ``compressionflags`` as strings, plus ``codes``:
    ``{field: code name}`` for OUTDEGREES, REFERENCES, BLOCKS, BLOCK_COUNT, INTERVALS, RESIDUALS, OFFSETS.
    Raises :class:`G3InputError` naming the file for a missing file or a missing/invalid property.
    """
    _, _, ppath, _ = _paths(basename)
    if not ppath.is_file():
        raise G3InputError(
            "WebGraph properties file not found (a BVGraph needs BASENAME.properties)", path=ppath
        )
    try:
        text = ppath.read_bytes().decode("latin-1")
    except OSError as e:
        raise G3InputError(f"cannot read the properties file: {e}", path=ppath) from None
    raw = _parse_java_properties(text)
    props: dict[str, Any] = dict(raw)

    gclass = raw.get("graphclass", "").strip()
    if not gclass:
        raise G3InputError(
            "missing property 'graphclass' (expected it.unimi.dsi.webgraph.BVGraph)", path=ppath
        )
    gclass = gclass.removeprefix("class ").strip()
    if gclass not in BV_GRAPH_CLASSES:
        raise G3InputError(
            f"graphclass={gclass!r} is not a BVGraph (expected one of {', '.join(BV_GRAPH_CLASSES)})",
            path=ppath,
        )
    props["graphclass"] = gclass

    version = _int_prop(raw, "version", ppath, required=True)
    if version != 0:
        raise G3InputError(
            f"unsupported BVGraph format version={version} (only version 0 is supported)", path=ppath
        )
    props["version"] = version
    endianness = raw.get("endianness")
    if endianness is not None and endianness.strip().lower() not in ("big", "be", "big-endian"):
        raise G3InputError(
            f"unsupported endianness={endianness.strip()!r} (only big-endian is supported)", path=ppath
        )

    nodes = _int_prop(raw, "nodes", ppath, required=True)
    arcs = _int_prop(raw, "arcs", ppath, required=True)
    assert nodes is not None and arcs is not None
    if nodes >= 1 << 62:
        raise G3InputError(f"property 'nodes' is too large ({nodes})", path=ppath)
    if arcs > nodes * nodes:
        raise G3InputError(f"property 'arcs'={arcs} exceeds nodes^2 for nodes={nodes}", path=ppath)
    props["nodes"] = nodes
    props["arcs"] = arcs
    props["windowsize"] = _int_prop(raw, "windowsize", ppath, required=True)
    props["minintervallength"] = _int_prop(raw, "minintervallength", ppath, required=True)
    props["maxrefcount"] = _int_prop(raw, "maxrefcount", ppath, required=False, minimum=None)
    zetak = _int_prop(raw, "zetak", ppath, required=False, minimum=None, default=3)
    props["zetak"] = zetak
    flags = raw.get("compressionflags", "").strip()
    props["compressionflags"] = flags
    codes = _parse_flags(flags, "endianness" in raw, ppath)
    used = set(codes.values())
    assert zetak is not None
    if _ZETA in used and not 1 <= zetak <= _MAX_ZETAK:
        raise G3InputError(
            f"property 'zetak' must be in [1, {_MAX_ZETAK}] for zeta codes, got {zetak}", path=ppath
        )
    if _GOLOMB in used and not 1 <= zetak <= _MAX_GOLOMB:
        raise G3InputError(
            f"property 'zetak' (the Golomb modulus) must be in [1, {_MAX_GOLOMB}], got {zetak}", path=ppath
        )
    props["codes"] = {f: _CODE_NAME[c] for f, c in codes.items()}
    return props


@dataclass(frozen=True)
class _Params:
    base: Path
    graph: Path
    offsets: Path
    nodes: int
    arcs: int
    window: int
    min_int: int
    maxref: int | None
    k: int
    codes: dict[str, int]
    props: dict[str, Any]

    @property
    def succ_dtype(self) -> type:
        return np.int32 if self.nodes < 2**31 else np.int64


def _params(basename: str | os.PathLike) -> _Params:
    base, gpath, _, opath = _paths(basename)
    props = read_properties(basename)
    if not gpath.is_file():
        raise G3InputError("WebGraph graph file not found (a BVGraph needs BASENAME.graph)", path=gpath)
    codes = {f: _CODE_BY_NAME[n] for f, n in props["codes"].items()}
    numbers = (props[k] for k in ("nodes", "arcs", "windowsize", "minintervallength", "maxrefcount", "zetak"))
    return _Params(base, gpath, opath, *numbers, codes, props)


# ---------------------------------------------------------------------------------------------------------
# Python side: loading bits, error messages.
# ---------------------------------------------------------------------------------------------------------


def _load_words(path: Path, start: int = 0, count: int | None = None) -> tuple[np.ndarray, int]:
    """Bytes [start, start+count) of a file as big-endian uint64 words with zero padding at the end (the
    reads' look-ahead and clamping rely on it); returns (words, number of bytes read)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = max(0, size - start) if count is None else max(0, min(count, size - start))
            words = np.zeros((n + 7) // 8 + _PAD_WORDS, dtype=np.uint64)
            f.seek(start)
            got = f.readinto(memoryview(words.view(np.uint8)[:n])) if n else 0
    except OSError as e:
        raise G3InputError(f"cannot read the file: {e}", path=path) from None
    if sys.byteorder == "little":
        words.byteswap(inplace=True)
    return words, int(got or 0)


def _fail(p: _Params, st: int, node: int, extra: int) -> G3InputError:
    msgs = {
        _PAST: f"the bit stream ends inside the successor list of node {node} (truncated or corrupt file)",
        _E_VALUE: f"corrupt bit stream at node {node}: a code word is longer than any valid value",
        _E_DEGREE: f"corrupt bit stream: node {node} has outdegree {extra} > nodes={p.nodes}",
        _E_REF_WINDOW: f"corrupt bit stream: node {node} refers to the list {extra} nodes back, beyond "
        f"windowsize={p.window}",
        _E_REF_NODE: f"corrupt bit stream: node {node} refers to the list {extra} nodes back, before node 0",
        _E_BLOCKS: f"corrupt bit stream: the copy blocks of node {node} exceed the referenced list",
        _E_COPY: f"corrupt bit stream: node {node} copies more successors than its outdegree (negative count)",
        _E_INTERVALS: f"corrupt bit stream: the intervals of node {node} hold more successors than its "
        f"outdegree (negative residual count)",
        _E_RANGE: f"corrupt bit stream: a successor of node {node} is out of range [0, {p.nodes})",
        _E_DUP: f"corrupt bit stream: the successor list of node {node} repeats a successor",
        _E_OFFSET: f"the successor list of node {node} does not end where {p.offsets.name} says "
        f"(corrupt .graph or .offsets; without the .offsets file the graph is decoded sequentially)",
    }
    return G3InputError(msgs.get(st, f"decoding failed at node {node} (status {st})"), path=p.graph)


def _arc_mismatch(p: _Params, got: int, what: str = "decoded") -> G3InputError:
    return G3InputError(
        f"arc count mismatch: {what} {got} arcs, the properties say arcs={p.arcs}", path=p.graph
    )


def _read_offsets(p: _Params, graph_bits: int) -> np.ndarray:
    """The n+1 bit offsets from BASENAME.offsets, checked (raises on a bad file)."""
    words, nbytes = _load_words(p.offsets)
    nbits = nbytes * 8
    out = _alloc(p.nodes + 1, np.int64, p)
    st, i = _decode_offsets(words, nbits, p.nodes, p.codes["OFFSETS"], p.k, np.int64(1) << 62, out)
    if st != _OK:
        raise G3InputError(
            f"the offsets file ends or is corrupt at entry {i} of {p.nodes + 1} (without it the graph is "
            f"decoded sequentially)",
            path=p.offsets,
        )
    if out[0] != 0:
        raise G3InputError(f"the first offset is {int(out[0])}, not 0 (corrupt offsets file)", path=p.offsets)
    if out[-1] > graph_bits:
        raise G3InputError(
            f"the bit stream is truncated: {p.offsets.name} says it has {int(out[-1])} bits, the file has only "
            f"{graph_bits}",
            path=p.graph,
        )
    return out


# ---------------------------------------------------------------------------------------------------------
# Whole-graph decode.
# ---------------------------------------------------------------------------------------------------------


def _kernel_args(p: _Params) -> tuple[int, ...]:
    """The codec of the graph, as the decoding kernels take it (one tuple: n_nodes, window, min_int, the codes
    of outdegrees, references, block counts, blocks, intervals and residuals, and zeta's k)."""
    fields = ("OUTDEGREES", "REFERENCES", "BLOCK_COUNT", "BLOCKS", "INTERVALS", "RESIDUALS")
    return tuple(int(v) for v in (p.nodes, p.window, p.min_int, *(p.codes[f] for f in fields), p.k))


def _alloc(n: int, dtype, p: _Params) -> np.ndarray:
    try:
        return np.empty(n, dtype=dtype)
    except (MemoryError, ValueError):
        raise G3InputError(
            f"cannot allocate {n} entries for the whole graph (nodes={p.nodes}, arcs={p.arcs}); "
            f"use the streaming reader (iter_bvgraph_chunks)",
            path=p.graph,
        ) from None


def _decode_sequential(p: _Params, words: np.ndarray, nbits: int) -> tuple[np.ndarray, np.ndarray]:
    offs = _alloc(p.nodes + 1, np.int64, p)
    offs[0] = 0
    succ = _alloc(p.arcs, p.succ_dtype, p)
    st, x, _pos, _li, extra = _decode_seq(words, nbits, 0, 0, p.nodes, 0, 0, offs, succ, _kernel_args(p))
    if st in (_FULL, _NEEDCAP):
        raise _arc_mismatch(p, int(offs[x]) + int(extra), "the lists hold more than")
    if st != _OK:
        raise _fail(p, st, int(x), int(extra))
    if offs[-1] != p.arcs:
        raise _arc_mismatch(p, int(offs[-1]))
    return offs, succ


def _split_ranges(csr: np.ndarray, n_ranges: int) -> np.ndarray:
    n = csr.size - 1
    weight = csr + np.arange(n + 1, dtype=np.int64)  # arcs + nodes: both cost decoding time
    targets = np.linspace(0, weight[-1], n_ranges + 1)
    starts = np.searchsorted(weight, targets, side="left").astype(np.int64)
    starts[0], starts[-1] = 0, n
    return np.maximum.accumulate(starts)


def _decode_parallel(
    p: _Params, words: np.ndarray, nbits: int, n_ranges: int | None, warm: int | None
) -> tuple[np.ndarray, np.ndarray]:
    goffs = _read_offsets(p, nbits)
    n = p.nodes
    deg = _alloc(n, np.int64, p)
    c_out = p.codes["OUTDEGREES"]
    _degrees_par(words, nbits, goffs, n, c_out, p.k, deg)
    bad = np.flatnonzero(deg < 0)
    if bad.size:
        x = int(bad[0])
        if deg[x] == -2:
            d, _ = _read(words, goffs[x], nbits, c_out, p.k)
            raise _fail(p, _E_DEGREE, x, int(d))
        raise G3InputError(
            f"corrupt bit stream: the outdegree of node {x} does not fit before the next offset "
            f"(corrupt .graph or .offsets; without the .offsets file the graph is decoded sequentially)",
            path=p.graph,
        )
    csr = _alloc(n + 1, np.int64, p)
    csr[0] = 0
    np.cumsum(deg, out=csr[1:])
    if csr[-1] != p.arcs:
        raise _arc_mismatch(p, int(csr[-1]), "the outdegrees sum to")
    succ = _alloc(p.arcs, p.succ_dtype, p)
    if n_ranges is None:
        n_ranges = max(1, min(8 * numba.get_num_threads(), n // 1024))
    if warm is None:
        maxref = p.maxref if p.maxref is not None and p.maxref > 0 else 3
        warm = min(p.window * maxref, 1 << 14)
    starts = _split_ranges(csr, n_ranges)
    status = np.zeros((starts.size - 1, 3), dtype=np.int64)
    args = _kernel_args(p)
    _decode_par(words, nbits, goffs, deg, csr, succ, starts, warm, args, status)
    for r in range(starts.size - 1):
        st, x, extra = (int(v) for v in status[r])
        if st == _NEEDSEQ:
            st, x, extra = (
                int(v) for v in _finish_seq(words, nbits, goffs, deg, csr, succ, x, int(starts[r + 1]), args)
            )
        if st != _OK:
            raise _fail(p, st, x, extra)
    return csr, succ


def decode_bvgraph(
    basename: str | os.PathLike,
    *,
    parallel: bool | None = None,
    _n_ranges: int | None = None,
    _warm: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Decode a whole BVGraph into its out-adjacency CSR.

    Returns ``(offsets, successors)``: ``offsets`` int64 ``[nodes+1]``, ``successors`` int32 (int64 when
    nodes >= 2**31) holding the successors of node ``x`` in ``successors[offsets[x]:offsets[x+1]]`` in the
    stored (increasing) order. With ``BASENAME.offsets`` present the node ranges are decoded in parallel
    (``parallel=None``: when the graph is large enough and numba has several threads; ``True``: whenever the
    offsets exist, otherwise sequentially; ``False``: never). Raises :class:`G3InputError` for a bad or inconsistent input.
    """
    p = _params(basename)
    words, nbytes = _load_words(p.graph)
    nbits = nbytes * 8
    if nbits < p.nodes:  # every list takes at least one bit (its outdegree)
        raise G3InputError(
            f"the bit stream is truncated: {nbits} bits cannot hold nodes={p.nodes} lists", path=p.graph
        )
    use_par = p.offsets.is_file() and p.nodes > 0 and parallel is not False
    if parallel is None:
        use_par = use_par and numba.get_num_threads() > 1 and p.arcs >= 1 << 20
    if use_par:
        return _decode_parallel(p, words, nbits, _n_ranges, _warm)
    return _decode_sequential(p, words, nbits)


# ---------------------------------------------------------------------------------------------------------
# Streaming decode.
# ---------------------------------------------------------------------------------------------------------


class _Segment:
    """A window of the .graph file as words: bits [base, base + nbits) of the file."""

    def __init__(self, path: Path, file_bytes: int, start_bit: int, size_bytes: int):
        byte0 = start_bit >> 3
        self.words, got = _load_words(path, byte0, size_bytes)
        self.base = byte0 * 8
        self.nbits = got * 8
        self.at_eof = byte0 + got >= file_bytes
        self.size = size_bytes


def _chunks(p: _Params, max_arcs: int, segment_bytes: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    n, window = p.nodes, p.window
    dtype = p.succ_dtype
    file_bytes = p.graph.stat().st_size
    node_cap = max(1, max_arcs)
    args = _kernel_args(p)
    prev_offs = np.zeros(1, dtype=np.int64)  # the window: the lists of the last (up to) `window` nodes
    prev_succ = np.empty(0, dtype=dtype)
    total = 0
    x = 0
    pos = 0  # absolute bit position of node x's list
    seg = _Segment(p.graph, file_bytes, 0, segment_bytes)
    seg_first = 0
    while x < n:
        npref = prev_offs.size - 1
        pref_arcs = int(prev_offs[-1])
        offs = np.empty(npref + min(node_cap, n - x) + 1, dtype=np.int64)
        offs[: npref + 1] = prev_offs
        succ = np.empty(pref_arcs + max_arcs, dtype=dtype)
        succ[:pref_arcs] = prev_succ
        li = npref
        x_first = x
        while True:
            st, x, rel, li, extra = _decode_seq(
                seg.words, seg.nbits, pos - seg.base, x, n, li, npref, offs, succ, args
            )
            x, li = int(x), int(li)
            pos = seg.base + int(rel)
            if st in (_OK, _FULL):
                break
            if st == _PAST:
                if seg.at_eof:
                    raise _fail(p, _PAST, x, 0)
                grow = x == seg_first  # not a single list fitted in this segment: make it larger
                seg = _Segment(p.graph, file_bytes, pos, seg.size * 2 if grow else seg.size)
                seg_first = x
                continue
            if st == _NEEDCAP:
                assert li == npref
                if total + int(extra) > p.arcs:
                    raise _arc_mismatch(p, total + int(extra), "the lists hold more than")
                bigger = np.empty(pref_arcs + int(extra), dtype=dtype)
                bigger[:pref_arcs] = succ[:pref_arcs]
                succ = bigger
                continue
            raise _fail(p, st, x, int(extra))
        a0, a1 = int(offs[npref]), int(offs[li])
        total += a1 - a0
        if total > p.arcs:
            raise _arc_mismatch(p, total, "the lists hold more than")
        keep = min(window, li)
        prev_offs = offs[li - keep : li + 1] - offs[li - keep]
        prev_succ = succ[int(offs[li - keep]) : a1].copy()
        yield x_first, offs[npref : li + 1] - a0, succ[a0:a1]
    if total != p.arcs:
        raise _arc_mismatch(p, total)


def iter_bvgraph_chunks(
    basename: str | os.PathLike, max_arcs: int = 1 << 24, *, _segment_bytes: int = 64 << 20
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Stream a BVGraph as consecutive node ranges with bounded memory.

    Yields ``(first_node, offsets_local, successors)``: ``offsets_local`` int64 ``[k+1]`` starting at 0 for
    nodes ``first_node .. first_node+k-1``, whose successors are ``successors[offsets_local[i]:
    offsets_local[i+1]]``. A chunk holds at most ``max_arcs`` arcs and ``max_arcs`` nodes, except that a
    list longer than ``max_arcs`` gets a chunk where it is the only nonempty list. Memory: the chunk, the reference window of the last
    ``windowsize`` lists and a window of the .graph file (64 MiB, larger only for a longer list). The
    properties and files are checked when this is called; stream errors raise while iterating.
    """
    if max_arcs < 1:
        raise ValueError("max_arcs must be >= 1")
    p = _params(basename)
    return _chunks(p, int(max_arcs), max(64, int(_segment_bytes)))


# ---------------------------------------------------------------------------------------------------------
# GraphSource.
# ---------------------------------------------------------------------------------------------------------


# the properties (as read_properties checked them) a store's metadata records of its source
_INFO_PROPS = (
    "graphclass version nodes arcs windowsize maxrefcount minintervallength zetak compressionflags".split()
)


def read_webgraph(basename: str | os.PathLike, *, max_arcs: int = 1 << 24) -> GraphSource:
    """A :class:`GraphSource` for a BVGraph: directed arcs node -> successor, streamed chunk by chunk."""
    p = _params(basename)

    def arcs() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for first, offs, succ in iter_bvgraph_chunks(p.base, max_arcs):
            if succ.size == 0:
                continue
            deg = np.diff(offs)
            src = np.repeat(np.arange(first, first + deg.size, dtype=np.int64), deg)
            yield src, succ.astype(np.int64)

    info = {
        "format": "webgraph-bvgraph",
        **{k: p.props[k] for k in _INFO_PROPS},
        "has_offsets": p.offsets.is_file(),
    }
    return GraphSource(
        name=p.base.name,
        num_nodes=p.nodes,
        arcs=arcs,
        path=str(p.graph),
        expected_arcs=p.arcs,
        undirected_once=False,
        info=info,
    )


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
