"""What each simulated system does in one epoch, as worker generators for :class:`.engine.Engine`.

**g3** (``--pipeline none|intra|inter|multi``) mirrors the runtime (stages/strategies/g3/runtime.py):

* forward, layer by layer (``none``, ``intra``): the plan's bins in priority order; after bin b of layer l the
  plan messages ``fwd_send_l`` of step b are sent (``none`` waits for each send); a layer starts when every
  message of the previous layer has arrived. ``intra`` gathers bin b+1 on a second lane while bin b computes.
* forward, eager (``inter``, ``multi``): fixed bins, each run once all its rows are ready (a row of layer l+1
  is ready once its own and all its in-neighbours' layer-l outputs are present), the lowest layer first.
  ``multi`` runs the plan's bins and gathers the next runnable bin on a second lane while one computes;
  ``inter`` runs bins of consecutive node ids packed up to the plan's limit, as the runtime builds them. A
  message leaves when its last node has been computed; arrived messages are taken between bins; with nothing
  to run the worker waits for the lowest layer's next message.
* backward, per layer in reverse: the plan's bins in plan order; after step s (= bin s) the ``bwd_send_l``
  messages of step s are sent; the layer ends when every ``bwd_recv_l`` message has arrived and its own sends have left.
* then the gradient all-reduce (a barrier) and the optimizer step.

**bns-gcn**, **sancus-broadcast**, **sancus-p2p**: their strategies' own workers (``bns_gcn_worker`` in
stages/strategies/bns_gcn/simulate.py, ``sancus_worker`` in stages/strategies/sancus/simulate.py), on the same
partitions, rates and per-peer bytes as g3.

**halo** (DistGNN / ROC style L-hop replication): every worker recomputes its L-hop in-neighbourhood — layer
l computes the nodes within L-1-l hops of its partition — so no embedding or gradient moves during the epoch
(input features are fetched once, as g3 caches them); then the all-reduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from stages.common.bin_memory import NO_LIMIT, pack_bins
from stages.common.model_spec import BinCost, bin_cost
from stages.kits.runtime.dataflow import (
    complete_messages,
    lowest_runnable_bin,
    node_messages,
    release_inputs,
    transpose_rows,
)
from stages.kits.simulate.profile import Rates
from stages.kits.simulate.systems import BinsSystem, SystemContext, compute
from stages.kits.simulate.workload import WorkerLoad, Workload
from stages.strategies.g3.pipeline import SCHEDULES, Schedule  # noqa: F401 - SCHEDULES: the systems simulated


def _by_step(table) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for step, peer, count in table.msgs:
        out.setdefault(int(step), []).append((int(peer), int(count)))
    return out


def _recv_keys(table, kind: str, li: int, me: int) -> list:
    return [(kind, li, int(peer), me, int(step)) for step, peer, _ in table.msgs]


def _overhead(rates: Rates, now: float):
    """A bin's fixed overhead (``rates.overhead_per_bin``), where there is one."""
    if rates.overhead_per_bin > 0:
        now = yield ("compute", rates.overhead_per_bin, "overhead", "overhead")
    return now


# ------------------------------------------------------------------------------------------------------------
# g3
# ------------------------------------------------------------------------------------------------------------


def g3_worker(wl: Workload, w: WorkerLoad, sched: Schedule, rates: Rates, engine):
    now = 0.0
    if sched.eager:
        now = yield from _forward_eager(wl, w, sched, rates, engine, now)
    else:
        now = yield from _forward_layerwise(wl, w, sched, rates, now)
    now = yield from _backward(wl, w, sched, rates, now)
    return now


def _send(wl: Workload, w: WorkerLoad, kind: str, li: int, step: int, peer: int, count: int, blocking: bool):
    """The engine's request: ``w`` sends ``count`` rows of layer ``li`` (``kind``: fwd or bwd) to ``peer``."""
    nbytes = wl.fwd_bytes(li, count) if kind == "fwd" else wl.bwd_bytes(li, count)
    return ("send", (kind, li, w.rank, peer, step), peer, nbytes, blocking)


def _send_step(wl: Workload, w: WorkerLoad, steps: dict, step: int, kind: str, li: int, blocking: bool):
    for peer, count in steps.get(step, ()):
        yield _send(wl, w, kind, li, step, peer, count, blocking)


def _forward_layerwise(wl: Workload, w: WorkerLoad, sched: Schedule, rates: Rates, now: float):
    L = wl.num_layers
    for li in range(L):
        lb = w.layers[li]
        steps = _by_step(w.table(f"fwd_send_{li}")) if li < L - 1 else {}
        nodes, arcs, srcs = lb.bin_nodes, lb.bin_arcs, lb.bin_srcs
        lane = now  # the gather lane (prefetch)
        next_ready = None
        if sched.prefetch and lb.num_bins:
            next_ready = lane = now + rates.gather(li, srcs[0])
        for b in range(lb.num_bins):
            if sched.prefetch:
                now = yield ("until", next_ready)
                if b + 1 < lb.num_bins:
                    next_ready = lane = max(now, lane) + rates.gather(li, srcs[b + 1])
                now = yield compute(rates.fwd(li, arcs[b], nodes[b]), f"L{li} bin {b}")
            else:
                now = yield compute(
                    rates.gather(li, srcs[b]) + rates.fwd(li, arcs[b], nodes[b]), f"L{li} bin {b}"
                )
            now = yield from _overhead(rates, now)
            for req in _send_step(wl, w, steps, b, "fwd", li, not sched.async_send):
                now = yield req
        if li < L - 1:
            now = yield ("wait_all", _recv_keys(w.table(f"fwd_recv_{li}"), "fwd", li, w.rank))
    now = yield ("wait_sends",)
    return now


def _bin_costs(wl: Workload) -> list[BinCost]:
    """What a bin of each layer holds on the device (:func:`bin_cost`, for the device kind the plan's bins were
    sized for, as the runtime packs them); dgcn's MLP widths from the plan's config."""
    mlp = None
    if wl.config.get("model") == "dgcn" and wl.shapes:
        layers, hidden = int(wl.config.get("layers", 1)), int(wl.config.get("hidden", 0))
        mlp = [wl.shapes[0].d_in] + [hidden] * (layers - 1) + [wl.shapes[0].d_out]
    return [bin_cost(s, mlp, wl.bins_for) for s in wl.shapes]


def _forward_bins(wl: Workload, w: WorkerLoad, sched: Schedule) -> list[list[tuple[np.ndarray, int, int]]]:
    """Per layer, the bins the eager forward runs, as (rows, distinct sources, arcs): the plan's (``multi``) or
    bins of consecutive node ids packed up to the plan's limit (``inter``), as the runtime builds them."""
    n_own, n_local = w.num_owned, w.num_owned + w.num_remote
    if sched.order == "priority":
        return [
            [
                (
                    np.arange(lb.bin_ptr[b], lb.bin_ptr[b + 1], dtype=np.int64),
                    int(lb.bin_srcs[b]),
                    int(lb.bin_arcs[b]),
                )
                for b in range(lb.num_bins)
            ]
            for lb in w.layers
        ]
    pos = np.empty(n_own, dtype=np.int64)
    pos[w.priority] = np.arange(n_own)  # shard owned id (ascending global id) -> row position
    out = []
    for li, cost in enumerate(_bin_costs(wl)):
        limit = w.bin_limit_bytes[li]
        limit_b = NO_LIMIT if limit is None else int(limit)
        packed = pack_bins(
            cost,
            w.row_ptr,
            w.edge_src,
            w.priority,
            n_local,
            limit_b,
            order=pos,
            max_rows=int(w.bin_limit_nodes[li]),
        )
        bins = []
        for b in range(packed.num_bins):
            rows = np.sort(pos[packed.bounds[b] : packed.bounds[b + 1]])
            arcs = int((w.row_ptr[rows + 1] - w.row_ptr[rows]).sum())
            bins.append((rows, int(packed.sources[b]), arcs))
        out.append(bins)
    return out


def _forward_eager(wl: Workload, w: WorkerLoad, sched: Schedule, rates: Rates, engine, now: float):
    L = wl.num_layers
    n_own, n_local = w.num_owned, w.num_owned + w.num_remote
    in_deg = np.diff(w.row_ptr).astype(np.int64)
    t_ptr, t_rows = transpose_rows(w.row_ptr, w.edge_src, n_local)
    pos = np.empty(n_own, dtype=np.int64)
    pos[w.priority] = np.arange(n_own)
    self_row = np.concatenate([pos, np.full(w.num_remote, -1, dtype=np.int64)])
    ready = [np.ones(n_own, dtype=np.bool_)] + [np.zeros(n_own, dtype=np.bool_) for _ in range(L - 1)]
    missing = [None] + [in_deg + 1 for _ in range(L - 1)]
    sends, recvs = [], []  # per layer: (send table, node_messages' pointers and ids, rows left); (key, nodes)
    for li in range(L - 1):
        t = w.table(f"fwd_send_{li}")
        sends.append((t, *node_messages(t.nodes, t.msgs[:, 2], n_own), t.msgs[:, 2].copy()))
        r = w.table(f"fwd_recv_{li}")
        recvs.append(
            [(("fwd", li, peer, w.rank, step), r.nodes[sl]) for step, peer, sl in r.message_slices()]
        )
    blocking = not sched.async_send
    bins = _forward_bins(wl, w, sched)
    row_bin = []  # rows of each bin not ready yet: a bin runs once none is left
    for layer_bins in bins:
        rb = np.empty(n_own, dtype=np.int64)
        for b, (rows, _, _) in enumerate(layer_bins):
            rb[rows] = b
        row_bin.append(rb)
    bin_wait = [np.bincount(rb, minlength=len(lb)) for rb, lb in zip(row_bin, bins, strict=True)]
    bin_wait[0][:] = 0
    ran = [np.zeros(len(lb), dtype=np.bool_) for lb in bins]
    left = [len(lb) for lb in bins]
    gathered: dict = {}  # (layer, bin) -> when its prefetched inputs are in
    lane = now  # the gather lane

    def release(li, rows):  # layer li's outputs of these rows are present: count layer li+1's rows now ready
        newly = release_inputs(rows, t_ptr, t_rows, self_row, missing[li + 1], no_other, ready[li + 1])
        if len(newly):
            bin_wait[li + 1] -= np.bincount(row_bin[li + 1][newly], minlength=len(bin_wait[li + 1]))

    def next_bin():
        return lowest_runnable_bin(bin_wait, ran, left)

    no_other = np.zeros(n_own, dtype=np.int64)  # one count per row (local and remote together)
    while any(left):
        for li in range(L - 1):  # take every message that has arrived by now
            if recvs[li]:
                keep = []
                for key, nodes in recvs[li]:
                    if engine.arrival.get(key, math.inf) <= now:
                        release(li, nodes + n_own)
                    else:
                        keep.append((key, nodes))
                recvs[li] = keep
        li, b = next_bin()
        if li is None:
            pending = next((k for k in range(L - 1) if recvs[k]), None)
            if pending is None:
                raise RuntimeError(
                    f"worker {w.rank}: eager schedule stalled (no ready rows, no message to wait for)"
                )
            now = yield ("wait_any", [key for key, _ in recvs[pending]])
            continue
        rows, n_src, arcs = bins[li][b]
        ran[li][b] = True
        left[li] -= 1
        gather = 0.0
        if (li, b) in gathered:  # prefetched while the previous bin computed
            now = yield ("until", gathered.pop((li, b)))
        else:  # gathered in line, before the next bin's prefetch starts
            gather = rates.gather(li, n_src)
        nl, nb = next_bin() if sched.prefetch and not gathered else (None, None)
        if nl is not None and nb is not None:
            lane = max(now + gather, lane) + rates.gather(nl, bins[nl][nb][1])
            gathered[(nl, nb)] = lane
        now = yield compute(gather + rates.fwd(li, arcs, len(rows)), f"L{li} bin {b}")
        now = yield from _overhead(rates, now)
        if li < L - 1:
            dst = w.priority[rows]
            release(li, dst)
            t, ptr, ids, left_msgs = sends[li]
            if len(t.msgs):
                for m in complete_messages(dst, ptr, ids, left_msgs):
                    step, peer, count = (int(x) for x in t.msgs[m])
                    now = yield _send(wl, w, "fwd", li, step, peer, count, blocking)
    now = yield ("wait_sends",)
    return now


def _backward(wl: Workload, w: WorkerLoad, sched: Schedule, rates: Rates, now: float):
    for li in reversed(range(wl.num_layers)):
        lb = w.layers[li]
        need = li > 0
        steps = _by_step(w.table(f"bwd_send_{li}")) if need else {}
        # plan order: the bins that read remote inputs come first, their gradients leave early (step s = bin s)
        for s in range(lb.num_bins):
            now = yield compute(rates.bwd(li, lb.bin_arcs[s], lb.bin_nodes[s]), f"L{li} bwd {s}")
            now = yield from _overhead(rates, now)
            for req in _send_step(wl, w, steps, s, "bwd", li, not sched.async_send):
                now = yield req
        if need:
            now = yield ("wait_all", _recv_keys(w.table(f"bwd_recv_{li}"), "bwd", li, w.rank))
            now = yield ("wait_sends",)
    return now


# ------------------------------------------------------------------------------------------------------------
# L-hop halo replication baseline
# ------------------------------------------------------------------------------------------------------------


@dataclass
class HaloLayer:
    nodes: int  # outputs computed (|H_{L-1-l}|)
    arcs: int  # their in-arcs
    srcs: int  # input rows gathered (at least |H_{L-l}|; bins re-gather shared in-neighbours, as in the plan)
    bins: int


@numba.njit(cache=True)
def _hop_sizes(indptr, indices, members, depth, seen, stamp):
    """|H_d| and the in-arcs of H_d for d = 0..depth, H_0 = members, H_d = H_{d-1} ∪ in-neighbours."""
    counts = np.zeros(depth + 1, dtype=np.int64)
    arcs = np.zeros(depth + 1, dtype=np.int64)
    frontier = members.copy()
    for v in frontier:
        seen[v] = stamp
    n, a = len(frontier), 0
    for v in frontier:
        a += indptr[v + 1] - indptr[v]
    counts[0], arcs[0] = n, a
    for d in range(1, depth + 1):
        buf = np.empty(max(16, len(frontier)), dtype=np.int64)
        m = 0
        for v in frontier:
            for j in range(indptr[v], indptr[v + 1]):
                u = indices[j]
                if seen[u] != stamp:
                    seen[u] = stamp
                    if m == len(buf):
                        buf = np.concatenate((buf, np.empty(len(buf), dtype=np.int64)))
                    buf[m] = u
                    m += 1
        nxt = buf[:m].copy()
        for u in nxt:
            a += indptr[u + 1] - indptr[u]
        n += m
        counts[d], arcs[d] = n, a
        frontier = nxt
    return counts, arcs


def _gather_ratio(lb) -> float:
    """Source rows gathered per (destination + arc) in a worker's plan bins of one layer."""
    denom = int(lb.bin_nodes.sum() + lb.bin_arcs.sum())
    return float(lb.bin_srcs.sum()) / denom if denom else 0.0


def halo_loads(indptr: np.ndarray, indices: np.ndarray, assignment: np.ndarray, k: int, wl: Workload) -> list:
    """Per worker, per layer: the replicated work of L-hop halo training (bins by the plan's limits)."""
    L = wl.num_layers
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices)
    seen = np.zeros(len(indptr) - 1, dtype=np.int64)
    costs = _bin_costs(wl)
    out = []
    for r in range(k):
        members = np.flatnonzero(assignment == r).astype(np.int64)
        counts, arcs = _hop_sizes(indptr, indices, members, L, seen, r + 1)
        layers = []
        for li in range(L):
            d = L - 1 - li
            nodes, a = int(counts[d]), int(arcs[d])
            w = wl.workers[r] if r < len(wl.workers) else None
            limit_b = w.bin_limit_bytes[li] if w is not None else None
            if limit_b is None:
                limit_n = w.bin_limit_nodes[li] if w is not None else max(1, nodes)
                bins = max(1, math.ceil(nodes / max(1, limit_n)))
            else:  # the layer's one bin: its nodes, their in-arcs and the (d+1)-hop set as its sources
                total = costs[li].bytes(nodes, int(counts[d + 1]), a)
                bins = max(1, math.ceil(total / limit_b))
            # gathered rows: bins read their sources separately, so shared in-neighbours are gathered once per bin
            # that reads them; the plan's bins of this worker give the ratio (1 when unknown)
            rho = _gather_ratio(w.layers[li]) if w is not None else 0.0
            srcs = max(int(counts[d + 1]), int(round(rho * (nodes + a))))
            layers.append(HaloLayer(nodes, a, srcs, bins))
        out.append(layers)
    return out


def halo_worker(wl: Workload, layers: list[HaloLayer], rates: Rates):
    now = 0.0
    for li, h in enumerate(layers):
        work = (
            rates.gather(li, h.srcs)
            + rates.fwd(li, h.arcs, h.nodes, h.bins)
            + rates.overhead_per_bin * h.bins
        )
        now = yield compute(work, f"L{li}")
    for li in reversed(range(len(layers))):
        h = layers[li]
        now = yield compute(
            rates.bwd(li, h.arcs, h.nodes, h.bins) + rates.overhead_per_bin * h.bins, f"L{li} bwd"
        )
    return now


# ------------------------------------------------------------------------------------------------------------
# The simulated systems: a name (or a name prefix and its variant) -> the worker generators of one epoch
# ------------------------------------------------------------------------------------------------------------


def g3_workers(c: SystemContext, pipeline: str) -> list:
    return [g3_worker(c.wl, w, SCHEDULES[pipeline], c.rates, c.engine) for w in c.wl.workers]


def _halo_workers(c: SystemContext, _variant: str) -> list:
    if c.halo is None:
        from stages.common.errors import G3InputError

        raise G3InputError("the halo baseline needs the plan's store and partition (not available)")
    return [halo_worker(c.wl, c.halo[r], c.rates) for r in range(c.wl.k)]


NAME = "g3"  # the strategy whose plans are the bins workload; its own systems are named by its --pipeline
HALO = "halo"  # the L-hop halo-replication baseline (no strategy of its own)


def systems() -> dict[str, BinsSystem]:
    """Every system the bins simulator runs, by family name: each registered strategy that declares how it runs
    on bins (its spec's ``bins_system``), and the halo baseline."""
    from stages.strategies.registry import STRATEGIES

    declared = {s.name: s.bins_system for s in STRATEGIES.values() if s.bins_system is not None}
    return {**declared, HALO: BinsSystem(_halo_workers)}


def baselines() -> list[str]:
    """The systems set beside g3's schedules: every other family, once per variant."""
    return [
        f"{family}-{v}" if v else family
        for family, system in systems().items()
        if family != NAME
        for v in system.variants or ("",)
    ]


def _family(system: str) -> tuple[str, BinsSystem, str]:
    """(family, its system, variant) of a system name: ``g3-multi`` -> g3's, multi; ``bns-gcn`` -> bns-gcn's."""
    known = systems()
    if system in known and not known[system].variants:
        return system, known[system], ""
    family, _, variant = system.partition("-")
    if family not in known or variant not in known[family].variants:
        raise ValueError(f"unknown system {system!r}")
    return family, known[family], variant


def system_workers(system: str, context: SystemContext) -> list:
    """The worker generators of one epoch of ``system`` (``g3-<pipeline>``, ``bns-gcn``, ``sancus-<layout>``,
    ``halo``)."""
    _, family, variant = _family(system)
    return family.workers(context, variant)


def skips_stale_sends(system: str) -> bool:
    """Whether ``system`` sends nothing in some epochs (sancus's epoch:N): its epoch is a mean over epochs."""
    return _family(system)[1].skips_stale_sends


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
