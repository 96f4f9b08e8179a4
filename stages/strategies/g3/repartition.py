"""G3's partitioner (paper §4.2): one multi-constraint METIS call, then Algorithm 1 (iterative re-partitioning).

Algorithm 1 repeatedly takes the partition with the largest remote set ``V_max`` and the one with the
smallest ``V_min`` and swaps ``v_max`` (the node of ``V_max`` with the most neighbours outside its partition)
with ``v_min`` (the node of ``V_min`` with the fewest neighbours outside ``V_max``, i.e. that brings the
fewest new remote neighbours to ``V_max``: line 11, ``argmin |N(v) - V_max|``), until
``|V_min^remote| / |V_max^remote| >= 1 - gamma``.

Fast neighbour tracking (the paper's "in-partition degrees") — all updates are O(degree), never a recount:

* ``arc_cnt[u, i]`` = arcs from ``u`` into partition ``i``; ``u`` is in ``V_i^remote`` iff ``part[u] != i`` and
  ``arc_cnt[u, i] > 0``, so moving ``w`` from ``a`` to ``b`` touches only the counters of ``w``'s in-neighbours
  (and ``|V_a^remote|``, ``|V_b^remote|``: no other partition's remote set can change).
* ``nb_cnt[v, x]`` = neighbours of ``v`` (symmetrised graph) in partition ``x``. The number of remote
  neighbours of ``v`` is ``d_v - nb_cnt[v, part[v]]`` and what ``v`` brings to ``x`` is ``d_v - nb_cnt[v, x]``.
  For a symmetric store ``arc_cnt`` and ``nb_cnt`` are the same numbers and share one array.
* Priority structures: per partition ``p`` and target ``x`` a bucket queue ``Q[p][x]`` of the nodes of ``p``
  keyed by ``d_v - nb_cnt[v, x]`` (doubly linked lists per key). ``Q[p][p]`` gives ``v_max`` from its top
  bucket, ``Q[b][a]`` gives ``v_min`` from its bottom bucket, and a counter change re-buckets in O(1).

Safeguards the paper leaves implicit: a swap is kept only if ``|V_max^remote|`` strictly drops and
``|V_min^remote|`` stays below the old ``|V_max^remote|`` (so the largest remote set never grows), and no
partition's degree sum leaves ``tol x mean`` (``--degree-tol``, by default ``--balance-tol``; if METIS already
exceeded it, the sum may not grow further).
When the paper's pair is refused, the next candidates are tried in the same priority order (longer ``v_max``
and ``v_min`` lists, then the next-smallest partitions as ``V_min``).

Searching: the effect of a swap on the two remote sets is computed read-only from the counters (a merge of
the two in-rows). Single-move effects are superadditive, so the effects of moving each candidate alone —
computed for whole candidate lists in parallel (numba ``prange``) — prune the pairs before any exact
evaluation.

Cycles: every kept swap lowers the larger remote set of its pair below the old maximum, so the sorted vector
of remote-set sizes decreases lexicographically and no assignment can repeat (the paper's Algorithm 1 can
cycle: the hub it moves into ``V_min`` makes ``V_min`` the next ``V_max``, which hands it back). A hash of the
assignment is still checked after every swap; a repeated state would stop the loop with reason ``cycle``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numba
import numpy as np

from stages.kits.partition.graph import Graphs

MIN_KEY_CAP = 1024  # v_min keys above this are lumped together: such nodes are never the best v_min
CANDIDATE_ROUNDS = ((32, 8), (256, 32), (2048, 128))  # (v_max, v_min) candidates per widening
SWAPS_PER_CALL = 256  # swaps between progress updates
PARALLEL_MIN_NODES = 128  # candidate lists at least this long get their deltas computed on all cores

CONTINUE, CONVERGED, CYCLE, STALLED, SWAP_LIMIT = 0, 1, 2, 3, 4
STAT_PAIRS, STAT_SINGLE, STAT_WIDENED = 0, 1, 2  # counters of the candidate search
STOP_REASONS = {CONVERGED: "converged", CYCLE: "cycle", STALLED: "stalled", SWAP_LIMIT: "swap limit"}
STOP_EXPLANATIONS = {
    "converged": "min/max remote set ratio reached 1 - gamma",
    "cycle": "a swap returned the assignment to an earlier state (swaps started to cycle)",
    "stalled": "no candidate swap shrinks the largest remote set within the balance constraints",
    "swap limit": "the maximum number of swaps was reached",
    "single partition": "K = 1: nothing to balance",
}


# ------------------------------------------------------------------------------------------------------------
# bucket queues: Q[p][x] holds the nodes of partition p keyed by d_v - nb_cnt[v, x]
# ------------------------------------------------------------------------------------------------------------


@numba.njit(cache=True, inline="always")
def _key(v, p, x, k, deg, nb_cnt, qcap):
    return min(deg[v] - nb_cnt[v, x], qcap[p * k + x])


@numba.njit(cache=True)
def _q_insert(v, p, x, k, deg, nb_cnt, Q):
    nxt, prv, head, qoff, qcap, qext = Q
    q = p * k + x
    key = _key(v, p, x, k, deg, nb_cnt, qcap)
    h = qoff[q] + key
    first = head[h]
    nxt[v, x] = first
    prv[v, x] = -1
    if first >= 0:
        prv[first, x] = v
    head[h] = v
    if x == p:
        if key > qext[q]:
            qext[q] = key  # max-queue: highest non-empty bucket (lazily lowered on reads)
    elif key < qext[q]:
        qext[q] = key  # min-queue: lowest non-empty bucket (lazily raised on reads)


@numba.njit(cache=True)
def _q_remove(v, p, x, k, deg, nb_cnt, Q):
    nxt, prv, head, qoff, qcap, qext = Q
    q = p * k + x
    n = nxt[v, x]
    pr = prv[v, x]
    if pr >= 0:
        nxt[pr, x] = n
    else:
        head[qoff[q] + _key(v, p, x, k, deg, nb_cnt, qcap)] = n
    if n >= 0:
        prv[n, x] = pr


@numba.njit(cache=True)
def _q_collect(p, x, k, limit, Q, out):
    """Up to ``limit`` nodes of Q[p][x] in priority order (max first if x == p, else min first)."""
    nxt, prv, head, qoff, qcap, qext = Q
    q = p * k + x
    step, end = (-1, 0) if x == p else (1, qcap[q])  # a max-queue is read downwards, a min-queue upwards
    key = qext[q]
    while key != end and head[qoff[q] + key] < 0:
        key += step
    qext[q] = key
    m = 0
    while 0 <= key <= qcap[q] and m < limit:
        v = head[qoff[q] + key]
        while v >= 0 and m < limit:
            out[m] = v
            m += 1
            v = nxt[v, x]
        key += step
    return m


# ------------------------------------------------------------------------------------------------------------
# moves, deltas, hashing
# ------------------------------------------------------------------------------------------------------------


@numba.njit(cache=True)
def move_counts(w, a, b, G, S, shared):
    """Move node ``w`` from partition ``a`` to ``b``, updating the counters, ``R_a``, ``R_b`` and the degree
    sums in O(d_w); no other remote set can change. Algorithm 1's ``_move`` adds its priority queues around it;
    the refinement (refine.py) calls it alone."""
    indptr, indices, sym_indptr, sym_indices, deg = G
    part, arc_cnt, nb_cnt, remote, deg_sum = S
    if arc_cnt[w, b] > 0:
        remote[b] -= 1  # w had arcs into b: it was in V_b^remote and now belongs to b
    part[w] = b
    if arc_cnt[w, a] > 0:
        remote[a] += 1  # w now lies outside a and still points into a
    for e in range(sym_indptr[w], sym_indptr[w + 1]):
        u = sym_indices[e]
        nb_cnt[u, a] -= 1
        nb_cnt[u, b] += 1
        if shared:  # nb_cnt is arc_cnt: the in-neighbours are these same nodes
            pu = part[u]
            if nb_cnt[u, a] == 0 and pu != a:
                remote[a] -= 1
            if nb_cnt[u, b] == 1 and pu != b:
                remote[b] += 1
    if not shared:
        for e in range(indptr[w], indptr[w + 1]):
            # arc u -> w (u == w for a self-loop: part[w] is already b, which keeps this right)
            u = indices[e]
            c = arc_cnt[u, a] - 1
            arc_cnt[u, a] = c
            if c == 0 and part[u] != a:
                remote[a] -= 1
            c = arc_cnt[u, b] + 1
            arc_cnt[u, b] = c
            if c == 1 and part[u] != b:
                remote[b] += 1
    deg_sum[a] -= deg[w]
    deg_sum[b] += deg[w]


@numba.njit(cache=True)
def _move(w, a, b, k, G, S, Q, shared):
    """``move_counts`` plus the queues, in O(d_w + K): every queue entry whose key changes (w's, and its
    neighbours' towards a and b) leaves its bucket before the counters change and re-enters after, in the same
    order as before so that ties keep their priority."""
    sym_indptr, sym_indices, deg = G[2], G[3], G[4]
    part, nb_cnt = S[0], S[2]
    for x in range(k):
        _q_remove(w, a, x, k, deg, nb_cnt, Q)
    for e in range(sym_indptr[w], sym_indptr[w + 1]):
        u = np.int64(sym_indices[e])  # never w: the symmetrised adjacency has no self-loops
        _q_remove(u, np.int64(part[u]), a, k, deg, nb_cnt, Q)
        _q_remove(u, np.int64(part[u]), b, k, deg, nb_cnt, Q)
    move_counts(w, a, b, G, S, shared)
    for e in range(sym_indptr[w], sym_indptr[w + 1]):
        u = np.int64(sym_indices[e])
        _q_insert(u, np.int64(part[u]), a, k, deg, nb_cnt, Q)
        _q_insert(u, np.int64(part[u]), b, k, deg, nb_cnt, Q)
    for x in range(k):
        _q_insert(w, b, x, k, deg, nb_cnt, Q)


@numba.njit(cache=True, inline="always")
def _status_change(u, mx, my, x, y, a, b, part, arc_cnt):
    """Change of (u in V_a^remote, u in V_b^remote) when x moves a->b and y moves b->a; u has mx arcs to x, my to y."""
    pu = part[u]
    pu2 = b if u == x else (a if u == y else pu)
    ca = arc_cnt[u, a]
    cb = arc_cnt[u, b]
    ca2 = ca - mx + my
    cb2 = cb + mx - my
    da = int(pu2 != a and ca2 > 0) - int(pu != a and ca > 0)
    db = int(pu2 != b and cb2 > 0) - int(pu != b and cb > 0)
    return da, db


@numba.njit(cache=True)
def _swap_delta(x, y, a, b, indptr, indices, part, arc_cnt):
    """(change of |V_a^remote|, change of |V_b^remote|) if x (in a) and y (in b) swap, or x
    moves alone (y = -1); read-only.

    Only in-neighbours of x and y and the two nodes themselves can change status; the two sorted in-rows are
    merged so that a node pointing to both is counted once with both multiplicities.
    """
    rx = indices[indptr[x] : indptr[x + 1]]
    ry = indices[indptr[y] : indptr[y + 1]] if y >= 0 else rx[:0]
    i = j = 0
    da = db = 0
    seen_x = seen_y = False
    while i < len(rx) or j < len(ry):
        if j >= len(ry) or (i < len(rx) and rx[i] <= ry[j]):
            u = rx[i]
        else:
            u = ry[j]
        mx = 0
        while i < len(rx) and rx[i] == u:
            mx += 1
            i += 1
        my = 0
        while j < len(ry) and ry[j] == u:
            my += 1
            j += 1
        ea, eb = _status_change(u, mx, my, x, y, a, b, part, arc_cnt)
        da += ea
        db += eb
        seen_x = seen_x or u == x
        seen_y = seen_y or u == y
    # the moved nodes themselves, where no arc counted them
    for u, seen in ((x, seen_x), (y, seen_y)):
        if not seen and u >= 0:
            ea, eb = _status_change(u, 0, 0, x, y, a, b, part, arc_cnt)
            da += ea
            db += eb
    return da, db


@numba.njit(cache=True, inline="always")
def _node_hash(v):
    """splitmix64 of the node id: the random weight of v in the assignment hash."""
    z = np.uint64(v) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def _assignment_hash(part):
    h = np.uint64(0)
    for v in range(len(part)):
        h += _node_hash(v) * np.uint64(part[v])
    return h


@numba.njit(cache=True)
def seen_before(table, h):
    """Insert ``h`` into the open-addressing set ``table`` (0 = empty); True if it was already there."""
    key = np.uint64(h) if h != 0 else np.uint64(1)
    mask = np.uint64(len(table) - 1)
    i = key & mask
    while table[i] != np.uint64(0):
        if table[i] == key:
            return True
        i = (i + np.uint64(1)) & mask
    table[i] = key
    return False


# ------------------------------------------------------------------------------------------------------------
# Algorithm 1
# ------------------------------------------------------------------------------------------------------------


@numba.njit(cache=True, parallel=True)
def _single_deltas(nodes, m, src, dst, indptr, indices, part, arc_cnt, out_src, out_dst):
    """Single-move deltas of ``nodes[:m]`` moving src -> dst, on all cores."""
    for t in numba.prange(m):
        out_src[t], out_dst[t] = _swap_delta(nodes[t], -1, src, dst, indptr, indices, part, arc_cnt)


@numba.njit(cache=True)
def _deltas(nodes, m, src, dst, indptr, indices, part, arc_cnt, out_src, out_dst):
    """Single-move deltas of ``nodes[:m]`` moving src -> dst; small batches run serially: waking the worker
    threads would cost more than the work."""
    if m >= PARALLEL_MIN_NODES:
        _single_deltas(nodes, m, src, dst, indptr, indices, part, arc_cnt, out_src, out_dst)
    else:
        for t in range(m):
            out_src[t], out_dst[t] = _swap_delta(nodes[t], -1, src, dst, indptr, indices, part, arc_cnt)


@numba.njit(cache=True)
def _find_swap(a, b, xs, nx, xa, ys, ny, G, S, deg_limit, scratch, stats):
    """First acceptable (v_max, v_min) pair in priority order (v_max-major), or (-1, -1).

    A swap is acceptable when ``|V_a^remote|`` strictly drops, ``|V_b^remote|`` stays below the old
    ``|V_a^remote|`` and the degree sums stay balanced. Removal and insertion effects are superadditive
    (a node pointing to both x and y can only make the swap worse than the two moves alone, for both
    partitions), so with the single-move deltas ``xa``/``xb`` (x: a -> b) and ``ya``/``yb`` (y: b -> a) the
    exact merge-based delta is computed only for pairs where ``xa + ya < 0`` and ``R_b + xb + yb < R_a``.
    """
    indptr, indices, sym_indptr, sym_indices, deg = G
    part, arc_cnt, nb_cnt, remote, deg_sum = S
    ya, yb, sel, xsel, xb, xb_unused = scratch
    _deltas(ys, ny, b, a, indptr, indices, part, arc_cnt, yb, ya)
    stats[STAT_SINGLE] += ny
    best_ya = ya[:ny].min()
    best_yb = yb[:ny].min()
    # the allowed d_x - d_y: neither a's nor b's degree sum may rise above the limit (or, if already above it,
    # rise at all)
    lo = min(0.0, deg_sum[a] - deg_limit)
    hi = max(0.0, deg_limit - deg_sum[b])
    deg_y_min = deg[ys[:ny]].min()
    deg_y_max = deg[ys[:ny]].max()
    m = 0
    for i in range(nx):  # x worth pairing: some y could offset it and keep the degree sums balanced
        x = xs[i]
        if xa[i] + best_ya < 0 and deg[x] - hi <= deg_y_max and deg[x] - lo >= deg_y_min:
            sel[m] = i
            xsel[m] = x
            m += 1
    if m == 0:
        return -1, -1
    _deltas(xsel, m, a, b, indptr, indices, part, arc_cnt, xb_unused, xb)
    stats[STAT_SINGLE] += m
    for t in range(m):
        i = sel[t]
        x = xs[i]
        if remote[b] + xb[t] + best_yb >= remote[a]:
            continue
        for j in range(ny):
            if xa[i] + ya[j] >= 0 or remote[b] + xb[t] + yb[j] >= remote[a]:
                continue
            y = ys[j]
            gap = deg[x] - deg[y]
            if gap < lo or gap > hi:
                continue
            stats[STAT_PAIRS] += 1
            da, db = _swap_delta(x, y, a, b, indptr, indices, part, arc_cnt)
            if da < 0 and remote[b] + db < remote[a]:
                return x, y
    return -1, -1


@numba.njit(cache=True)
def _balance(k, G, S, Q, shared, gamma, deg_limit, max_calls_swaps, table, rounds, h, stats):
    """Run Algorithm 1 for at most ``max_calls_swaps`` swaps; returns (status, swaps done, assignment hash)."""
    indptr, indices, sym_indptr, sym_indices, deg = G
    part, arc_cnt, nb_cnt, remote, deg_sum = S
    width_x = rounds[-1][0]
    width_y = rounds[-1][1]
    xs = np.empty(width_x, dtype=np.int64)
    ys = np.empty(width_y, dtype=np.int64)
    xa = np.empty(width_x, dtype=np.int64)
    xa_other = np.empty(width_x, dtype=np.int64)
    scratch = (
        np.empty(width_y, dtype=np.int64),
        np.empty(width_y, dtype=np.int64),
        np.empty(width_x, dtype=np.int64),
        np.empty(width_x, dtype=np.int64),
        np.empty(width_x, dtype=np.int64),
        np.empty(width_x, dtype=np.int64),
    )
    swaps = 0
    while swaps < max_calls_swaps:
        order = np.argsort(remote, kind="mergesort")  # stable: ties broken by partition id
        a = order[k - 1]
        for t in range(k - 1, -1, -1):
            if remote[order[t]] == remote[a]:
                a = order[t]  # lowest id among the largest
        if remote[a] == 0 or remote[order[0]] >= (1.0 - gamma) * remote[a]:
            return CONVERGED, swaps, h
        found_x = -1
        found_y = -1
        for r in range(len(rounds)):  # widen the candidate lists only when the narrower ones had no swap
            nx = _q_collect(a, a, k, rounds[r][0], Q, xs)
            stats[STAT_SINGLE] += nx
            stats[STAT_WIDENED] += r > 0
            # x's effect on V_a^remote does not depend on where x goes: compute it once per round
            other = order[0] if order[0] != a else order[1]
            _deltas(xs, nx, a, other, indptr, indices, part, arc_cnt, xa, xa_other)
            for t in range(k):  # V_min first, then the next-smallest remote sets
                b = order[t]
                if b == a:
                    continue
                ny = _q_collect(b, a, k, rounds[r][1], Q, ys)
                if nx == 0 or ny == 0:
                    continue
                found_x, found_y = _find_swap(a, b, xs, nx, xa, ys, ny, G, S, deg_limit, scratch, stats)
                if found_x >= 0:
                    break
            if found_x >= 0:
                break
        if found_x < 0:
            return STALLED, swaps, h
        b = np.int64(part[found_y])
        _move(found_x, a, b, k, G, S, Q, shared)
        _move(found_y, b, a, k, G, S, Q, shared)
        hx = _node_hash(found_x)
        hy = _node_hash(found_y)
        h += hx * np.uint64(b) - hx * np.uint64(a) + hy * np.uint64(a) - hy * np.uint64(b)
        swaps += 1
        if seen_before(table, h):
            return CYCLE, swaps, h
    return CONTINUE, swaps, h


# ------------------------------------------------------------------------------------------------------------
# state construction
# ------------------------------------------------------------------------------------------------------------


@numba.njit(cache=True, parallel=True)
def _count_neighbour_parts(sym_indptr, sym_indices, part, k):
    n = len(sym_indptr) - 1
    cnt = np.zeros((n, k), dtype=np.int32)
    for v in numba.prange(n):
        for e in range(sym_indptr[v], sym_indptr[v + 1]):
            cnt[v, part[sym_indices[e]]] += 1
    return cnt


@numba.njit(cache=True)
def _count_arc_parts(indptr, indices, part, k):
    cnt = np.zeros((len(indptr) - 1, k), dtype=np.int32)
    for w in range(len(indptr) - 1):
        pw = part[w]
        for e in range(indptr[w], indptr[w + 1]):
            cnt[indices[e], pw] += 1
    return cnt


@numba.njit(cache=True, parallel=True)
def _count_remote(part, arc_cnt, k):
    n = len(part)
    remote = np.zeros(k, dtype=np.int64)
    for i in numba.prange(k):
        c = 0
        for u in range(n):
            if part[u] != i and arc_cnt[u, i] > 0:
                c += 1
        remote[i] = c
    return remote


@numba.njit(cache=True)
def _fill_queues(part, k, deg, nb_cnt, Q):
    for v in range(len(part)):
        for x in range(k):
            _q_insert(v, np.int64(part[v]), x, k, deg, nb_cnt, Q)


class CountedAssignment:
    """An assignment with its counters, counted from scratch: ``G`` = (in-CSR, symmetrised adjacency,
    degrees) and ``S`` = (assignment, arc_cnt, nb_cnt, remote sizes, degree sums) — the state every
    incremental move updates. Holds a copy of ``part``."""

    def __init__(self, graphs: Graphs, part: np.ndarray, k: int):
        n = graphs.num_nodes
        if len(part) != n or (n and (int(np.min(part)) < 0 or int(np.max(part)) >= k)):
            raise ValueError(f"assignment must hold {n} partition ids in [0, {k})")
        self.k = k
        self.shared = graphs.symmetric
        self.graphs = graphs
        deg = np.ascontiguousarray(graphs.degree, dtype=np.int64)
        self.part = np.array(part, dtype=np.int32)
        nb_cnt = _count_neighbour_parts(graphs.sym_indptr, graphs.sym_indices, self.part, k)
        arc_cnt = nb_cnt if self.shared else _count_arc_parts(graphs.indptr, graphs.indices, self.part, k)
        remote = _count_remote(self.part, arc_cnt, k)
        deg_sum = np.bincount(self.part, weights=deg, minlength=k).astype(np.int64)
        self.G = (graphs.indptr, graphs.indices, graphs.sym_indptr, graphs.sym_indices, deg)
        self.S = (self.part, arc_cnt, nb_cnt, remote, deg_sum)

    @property
    def remote(self) -> np.ndarray:
        return self.S[3]

    @property
    def degree_sum(self) -> np.ndarray:
        return self.S[4]


class RemoteTracker(CountedAssignment):
    """Incremental remote sets and v_max / v_min priority queues of one assignment (Algorithm 1's state); moved
    and queried by the kernels above (``_move``, ``_q_collect``, ``_swap_delta``)."""

    def __init__(self, graphs: Graphs, part: np.ndarray, k: int, min_key_cap: int = MIN_KEY_CAP):
        super().__init__(graphs, part, k)
        self.Q = _make_queues(graphs.num_nodes, k, int(self.G[4].max(initial=0)), min_key_cap)
        _fill_queues(self.part, k, self.G[4], self.S[2], self.Q)


def _make_queues(n: int, k: int, max_degree: int, min_key_cap: int):
    caps = np.full((k, k), min(max_degree, min_key_cap), dtype=np.int64)
    np.fill_diagonal(caps, max_degree)
    qcap = caps.ravel()
    qoff = np.zeros(k * k, dtype=np.int64)
    np.cumsum(qcap[:-1] + 1, out=qoff[1:])
    head = np.full(int(qoff[-1] + qcap[-1] + 1), -1, dtype=np.int32)
    qext = np.where(np.eye(k, dtype=bool).ravel(), 0, qcap).astype(np.int64)
    nxt = np.full((n, k), -1, dtype=np.int32)
    prv = np.full((n, k), -1, dtype=np.int32)
    return (nxt, prv, head, qoff, qcap, qext)


# ------------------------------------------------------------------------------------------------------------
# entry point
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Algorithm1Result:
    part: np.ndarray
    stop_reason: str
    swaps: int
    seconds: float
    remote_trace: list[list[int]] = field(default_factory=list)  # (swaps, max, min) samples
    initial_remote: list[int] = field(default_factory=list)  # |V_i^remote| of the starting assignment
    pairs_evaluated: int = 0  # candidate swaps whose exact effect was computed
    single_deltas: int = 0  # single-move effects computed to prune candidate pairs
    widened_searches: int = 0  # searches that needed longer candidate lists than the first round
    final_remote: list[int] = field(default_factory=list)  # |V_i^remote| of the returned assignment


def run_algorithm1(
    graphs: Graphs,
    part: np.ndarray,
    k: int,
    gamma: float,
    degree_tol: float,
    max_swaps: int | None = None,
    on_progress: Callable[[int, float], None] | None = None,
    min_key_cap: int = MIN_KEY_CAP,
) -> Algorithm1Result:
    """Balance the remote sets of ``part`` by one-for-one swaps; returns the new assignment and why it stopped.

    ``degree_tol`` bounds the degree sums: no swap pushes a partition's sum above ``degree_tol x mean``."""
    t0 = time.perf_counter()
    if k == 1:
        return Algorithm1Result(
            np.asarray(part, dtype=np.int32), "single partition", 0, 0.0, initial_remote=[0], final_remote=[0]
        )
    tracker = RemoteTracker(graphs, part, k, min_key_cap)
    initial_remote = tracker.remote.tolist()
    max_swaps = graphs.num_nodes if max_swaps is None else max_swaps
    deg_limit = degree_tol * float(tracker.degree_sum.sum()) / k
    # the cycle check's hash set: a power of two at least twice the states it may hold, and at least 1024
    table = np.zeros(max(1024, 1 << (2 * max_swaps + 1).bit_length()), dtype=np.uint64)
    h = np.uint64(_assignment_hash(tracker.part))  # numba returns a Python int: keep the uint64 signature
    seen_before(table, h)
    rounds = np.array(CANDIDATE_ROUNDS, dtype=np.int64)
    stats = np.zeros(3, dtype=np.int64)
    swaps, status = 0, CONTINUE
    trace = [[0, int(tracker.remote.max()), int(tracker.remote.min())]]
    while status == CONTINUE:
        if swaps >= max_swaps:
            status = SWAP_LIMIT
            break
        step = min(SWAPS_PER_CALL, max_swaps - swaps)
        status, done, h = _balance(
            k,
            tracker.G,
            tracker.S,
            tracker.Q,
            tracker.shared,
            gamma,
            deg_limit,
            step,
            table,
            rounds,
            h,
            stats,
        )
        h = np.uint64(h)
        swaps += int(done)
        trace.append([swaps, int(tracker.remote.max()), int(tracker.remote.min())])
        if on_progress is not None:
            on_progress(swaps, float(tracker.remote.min()) / max(1, int(tracker.remote.max())))
    return Algorithm1Result(
        tracker.part,
        STOP_REASONS[status],
        swaps,
        time.perf_counter() - t0,
        trace,
        initial_remote,
        int(stats[STAT_PAIRS]),
        int(stats[STAT_SINGLE]),
        int(stats[STAT_WIDENED]),
        tracker.remote.tolist(),
    )


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
