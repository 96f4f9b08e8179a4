"""A model of the ``neutrontp`` strategy's epoch (NeutronTP, 002 §3–4): tensor parallelism on a feature split,
naive or decoupled, bulk or with the inter-chunk pipeline, for any worker count.

What one epoch runs (stages/strategies/neutrontp/runtime.py): every worker aggregates its column slice over
the whole graph, chunk by chunk, in the same order — the same sparse work on every worker, ``arcs × c_w``
per chunk with ``c_w`` its slice width (``⌈D/K⌉`` or ``⌊D/K⌋``) — and runs the dense update of the rows it
owns. All-to-alls move data between the two layouts (``split``: rows → column slices, ``gather``: slices →
rows). **Naive**, per layer l ≥ 1: split, aggregation pass, gather, dense update; backward: dense backward,
split of the aggregation's gradient, transposed pass (chunks in reverse), gather. Layer 0's aggregation of the
fixed features and its gather run in the first epoch only (the runtime's layer-0 cache); so does the
``features`` collective (the owned nodes' whole input rows). **Decoupled** (dgcn): the MLP on owned rows, one
split, L propagation passes, one gather; backward mirrors it: 4 collectives per epoch whatever L.

Cost model, with ``Rates`` (a profile of the runtime or the placeholders):

* a chunk's aggregation: ``arcs × c_w × per_arc / edge_width`` (seconds per arc and aggregated column — the
  rate the g3 model charges per arc of a layer's ``edge_width``; backward: the backward rate) + the layer's
  per-bin cost once per chunk (+ ``overhead_per_bin``);
* the dense update: ``owned rows × per_node`` of the layer (forward, and backward: ``per_node`` of the
  backward phase); dgcn's MLP is block 0's rate;
* a collective: a bulk all-to-all, ``latency + max over workers of max(bytes sent, bytes received) /
  bandwidth`` (every link full duplex; float32 elements). Every worker enters it together: it starts when the
  last worker arrives (the wait of the others is their idle time);
* without the pipeline (systems ``neutrontp-<tp>``) a pass is split, the chunks, gather: layer-synchronous;
* with it (``neutrontp-<tp>+pipe``, the runtime's ``--pipeline`` other than none) each collective is cut per
  chunk (chunk j's split: its first-read source rows, its gather: its destination rows) and runs on a
  communication lane in the runtime's order pre(0), pre(1), post(0), pre(2), post(1), …: chunk j's
  aggregation waits for its split, chunk j's gather for its aggregation — a two-stage pipeline with fill and
  drain. Each chunk's collective pays the latency and its own slowest worker, so many small chunks can make
  the pipelined epoch slower than the bulk one; with one chunk both are the same;
* then the gradient all-reduce of the (replicated) weights and the optimizer step, as for the other systems.

For another worker count the plan's chunking is derived again with the planner's own functions
(``chunk_bounds``, ``owner_bounds``, ``first_use``, the feature split's columns) and so are the collectives —
exactly what ``g3 plan`` would write — without writing a plan. Not modelled: contention (rates do not change
with K or with a concurrent collective), host↔device copies of the chunks' slices, the labels exchange and
evaluation, the loss.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from stages.common.errors import G3InputError
from stages.common.model_spec import LayerShape, ModelSpec
from stages.kits.simulate.engine import Network
from stages.kits.simulate.network import allreduce_seconds, network
from stages.kits.simulate.profile import Rates, default_rates, load_rates
from stages.kits.simulate.scaling import recorded_systems, summary

ELEM_BYTES = 4  # float32


# ------------------------------------------------------------------------------------------------------------
# Layout: chunks, ownership, first use
# ------------------------------------------------------------------------------------------------------------


@dataclass
class TPLayout:
    """The chunks of a neutrontp plan for ``k`` workers (the arrays of its ``chunks/`` folder)."""

    k: int
    bounds: np.ndarray  # int64 [C + 1]: destination ranges
    owner_bounds: np.ndarray  # int64 [C, K + 1]: worker q owns owner_bounds[j, q] .. owner_bounds[j, q + 1]
    first_use: np.ndarray  # int [N]: first chunk reading each node as a source (C: none)
    arcs: np.ndarray  # int64 [C]: in-arcs of each chunk
    layer0_columns: list[int]  # input feature columns of each worker's slice (padding dropped)

    @property
    def n_chunks(self) -> int:
        return len(self.bounds) - 1

    @property
    def n(self) -> int:
        return int(self.bounds[-1]) if len(self.bounds) else 0

    @cached_property
    def sizes(self) -> np.ndarray:
        """[C]: destination nodes per chunk."""
        return np.diff(self.bounds).astype(np.int64)

    @cached_property
    def pieces(self) -> np.ndarray:
        """[C, K]: rows of chunk j owned by worker q."""
        return np.diff(self.owner_bounds, axis=1).astype(np.int64)

    @cached_property
    def owned(self) -> np.ndarray:
        """[K]: rows owned by each worker."""
        return self.pieces.sum(axis=0)

    @cached_property
    def new(self) -> np.ndarray:
        """[C, K]: nodes owned by worker q that chunk j is the first to read (what chunk j's split moves)."""
        c, k = self.n_chunks, self.k
        fu = np.asarray(self.first_use, dtype=np.int64)
        nodes = np.flatnonzero(fu < c)
        if c == 0 or not len(nodes):
            return np.zeros((c, k), dtype=np.int64)
        starts = self.owner_bounds[:, :k].ravel()  # piece starts, non-decreasing (an empty piece repeats one)
        owner = (np.searchsorted(starts, nodes, side="right") - 1) % k
        return np.bincount(fu[nodes] * k + owner, minlength=c * k).reshape(c, k).astype(np.int64)


def _store(meta: dict, plan: Path):
    from stages.common.artifact_json import resolve_reference
    from stages.common.store import GraphStore

    return GraphStore.open(resolve_reference(meta["store"], plan, "zarr.json"))


def _layer0_columns(meta: dict, k: int) -> list[int]:
    from stages.common.tensor_parallel import feature_columns

    if k == int(meta["num_workers"]):
        from stages.common.partition_artifact import load_partition_meta

        split = load_partition_meta(meta["partition"]["path"]).get("feature_split")
        if split:
            return [int(c["stop"]) - int(c["start"]) for c in split["columns"]]
    return [c["stop"] - c["start"] for c in feature_columns(int(meta["store"]["feat_dim"]), k)]


def load_layout(plan: Path, meta: dict, k: int | None = None, csr_cache: dict | None = None) -> TPLayout:
    """The chunk layout of PLAN (``k`` = the plan's worker count: its ``chunks/`` arrays), or the one
    ``g3 plan`` would make of the same store and options for ``k`` workers (the planner's functions)."""
    from stages.common import tensor_parallel as layout

    plan = Path(plan)
    k_plan = int(meta["num_workers"])
    k = k or k_plan
    root = plan / "chunks"
    bounds_p = np.load(root / "bounds.npy").astype(np.int64)
    cache = csr_cache if csr_cache is not None else {}
    if "indptr" not in cache:
        cache["indptr"] = np.asarray(_store(meta, plan).read("indptr"), dtype=np.int64)
    indptr = cache["indptr"]
    spec = ModelSpec.from_plan(meta)
    if k == k_plan:
        bounds, ob = bounds_p, np.load(root / "owner_bounds.npy").astype(np.int64)
    else:
        opts = meta["strategy"]["options"]
        budget = meta.get("device_memory") or opts.get("device_memory")
        if not opts.get("chunk_size") and not budget:
            raise G3InputError("the plan records neither a chunk size nor a device memory budget", path=plan)
        bounds = layout.chunk_bounds(np.diff(indptr), spec, k, opts.get("chunk_size"), int(budget or 0))
        ob = layout.owner_bounds(bounds, k)
    if np.array_equal(bounds, bounds_p):  # first use depends on the chunks only
        first = np.load(root / "first_use.npy")
    else:
        if "indices" not in cache:
            cache["indices"] = _store(meta, plan).read("indices")
        first = layout.first_use(indptr, cache["indices"], bounds, self_loops=spec.kind in ("gcn", "dgcn"))
    arcs = np.diff(indptr[bounds]).astype(np.int64)
    return TPLayout(k, bounds, ob, first, arcs, _layer0_columns(meta, k))


# ------------------------------------------------------------------------------------------------------------
# Collectives, per chunk
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Collective:
    """One all-to-all of an epoch, cut per chunk: ``sent[j, w]`` / ``recv[j, w]`` elements worker w sends /
    receives in chunk j's piece (their sums over chunks are the bulk collective)."""

    name: str
    width: int
    once: bool
    sent: np.ndarray  # int64 [C, K]
    recv: np.ndarray  # int64 [C, K]

    @property
    def elements_sent(self) -> np.ndarray:
        return self.sent.sum(axis=0)

    @property
    def bytes_sent(self) -> np.ndarray:
        return self.elements_sent * ELEM_BYTES

    @property
    def bytes_received(self) -> np.ndarray:
        return self.recv.sum(axis=0) * ELEM_BYTES

    @cached_property
    def chunk_link(self) -> np.ndarray:
        """[C, K]: bytes each worker's busier link direction carries in each chunk's piece."""
        return np.maximum(self.sent, self.recv) * ELEM_BYTES

    @cached_property
    def bulk_link(self) -> np.ndarray:
        """[K]: the same for the whole (bulk) collective."""
        return np.maximum(self.sent.sum(axis=0), self.recv.sum(axis=0)) * ELEM_BYTES

    def seconds(self, net: Network, per_chunk: bool) -> np.ndarray | float:
        """Latency + the slowest worker's busier direction / bandwidth: [C] per chunk, else the bulk one. With
        per-worker links (a cluster of unlike hosts) each worker's bytes go to and come from its peers evenly,
        each part at the slower link of the pair, and the slowest worker ends the collective."""
        c, k = self.sent.shape
        if k <= 1:
            return np.zeros(c) if per_chunk else 0.0
        link = self.chunk_link if per_chunk else self.bulk_link[None, :]  # [C or 1, K]
        per_byte = _per_byte(net, k)
        if per_byte is not None:
            seconds = (link * per_byte[None, :]).max(axis=1, initial=0) + net.latency
        else:
            seconds = _transfer(link.max(axis=1, initial=0), net) + net.latency
        return seconds if per_chunk else float(seconds[0])


def _transfer(nbytes, net: Network) -> np.ndarray:
    """Seconds on a link of ``net`` for each of ``nbytes`` (vectorised :meth:`Network.transfer`)."""
    b = np.asarray(nbytes, dtype=np.float64)
    return b / net.bandwidth if net.bandwidth > 0 and np.isfinite(net.bandwidth) else np.zeros_like(b)


@lru_cache(maxsize=64)
def _per_byte(net: Network, k: int) -> np.ndarray | None:
    """[K]: seconds per byte of each worker's share of an all-to-all when the links differ or workers share
    hosts (its bytes spread evenly over its peers, each part at the slower link of the pair, free to a peer on
    its host: :meth:`Network.peer_transfer`); None with one link rate for all (then :func:`_transfer`)."""
    if (net.links is None and net.hosts is None) or k <= 1:
        return None
    return np.array([net.peer_transfer(1.0, w, k) for w in range(k)], dtype=np.float64)


def _link_seconds(nbytes: np.ndarray, net: Network) -> np.ndarray:
    """[K]: seconds each worker's link carries its ``nbytes`` [K]."""
    per_byte = _per_byte(net, len(nbytes))
    return _transfer(nbytes, net) if per_byte is None else np.asarray(nbytes, dtype=np.float64) * per_byte


def _to_rows(cols: np.ndarray, ids: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sent, received) of slices → rows of the nodes ``ids [C, K]`` (worker q's nodes of each chunk; ``total
    [C]`` their sum): w sends its ``cols[w]`` columns of every other worker's nodes, receives the other columns
    of its own. Rows → slices is the mirror (sent and received swap)."""
    width = int(cols.sum())
    return cols[None, :] * (total[:, None] - ids), ids * (width - cols[None, :])


def collectives(spec: ModelSpec, lay: TPLayout) -> list[Collective]:
    """Every collective of one training epoch, in the planner's order and with its names
    (``stages.common.tensor_parallel.collectives``), cut per chunk: a split moves, per chunk, the nodes it reads first
    (forward) or its destinations' gradient rows (backward); a gather its destinations' rows (forward) or the
    gradients of the nodes it reads first (backward)."""
    from stages.common.tensor_parallel import collective_schedule

    new = lay.new
    ids = {"dst": (lay.pieces, lay.sizes), "new": (new, new.sum(axis=1))}
    out = []
    for name, width, cols, split, nodes, once in collective_schedule(spec, lay.k, lay.layer0_columns):
        sent, recv = _to_rows(np.asarray(cols, dtype=np.int64), *ids[nodes])[:: -1 if split else 1]
        out.append(Collective(name, int(width), once, sent.astype(np.int64), recv.astype(np.int64)))
    return out


# ------------------------------------------------------------------------------------------------------------
# The epoch as a program: dense steps, bulk collectives and chunk passes
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Dense:
    seconds: np.ndarray  # [K]
    label: str


@dataclass
class Bulk:
    coll: Collective


@dataclass
class ChunkPass:
    """Chunks in ``order``; ``compute[j, w]`` seconds of chunk j on worker w (``overhead[w]`` of it per chunk
    is bookkeeping); ``pre`` is needed before a chunk's aggregation, ``post`` follows it."""

    order: np.ndarray
    compute: np.ndarray  # [C, K]
    overhead: np.ndarray  # [K] per chunk
    pre: Collective | None
    post: Collective | None
    label: str


def epoch_program(
    spec: ModelSpec,
    shapes: list[LayerShape],
    lay: TPLayout,
    rates: Rates,
    colls: list[Collective],
    first_epoch: bool = False,
    speed: np.ndarray | None = None,
) -> list:
    """The steps of one epoch on every worker (a steady-state one, or the first with the layer-0 work);
    ``speed`` [K]: each worker's compute speed (a cluster of unlike hosts: its seconds ÷ its speed)."""
    from stages.common.tensor_parallel import slice_widths

    k, by_name = lay.k, {c.name: c for c in colls}
    speed = np.ones(k) if speed is None else np.asarray(speed, dtype=np.float64)
    own = lay.owned.astype(np.float64)
    asc = np.arange(lay.n_chunks)
    desc = asc[::-1].copy()
    prog: list = []

    def chunk_pass(li, width_cols, phase, pre, post, label):
        """A pass over the chunks; backward: the collectives named "bwd <pre>", "bwd <post>"."""
        r = rates.layers[li].forward if phase == "fwd" else rates.layers[li].backward
        per_col = r.per_arc / max(1, shapes[li].edge_width)  # seconds per arc and aggregated column
        oh = np.full(k, rates.overhead_per_bin)  # the runtime's bookkeeping per chunk, as g3's per bin
        compute = (
            lay.arcs[:, None].astype(np.float64) * np.asarray(width_cols, dtype=np.float64)[None, :] * per_col
        )
        compute += r.per_bin + oh[None, :]
        pre, post = (by_name[("bwd " if phase == "bwd" else "") + c] if c else None for c in (pre, post))
        order, label = (asc, label) if phase == "fwd" else (desc, label + " bwd")
        prog.append(ChunkPass(order, compute / speed[None, :], oh / speed, pre, post, label))

    def dense(li, phase, label):
        r = rates.layers[li].forward if phase == "fwd" else rates.layers[li].backward
        prog.append(Dense(own * r.per_node / speed, label if phase == "fwd" else label + " bwd"))

    if first_epoch and "features" in by_name:
        prog.append(Bulk(by_name["features"]))
    if spec.kind == "dgcn":
        cols, L = slice_widths(spec.num_classes, k), spec.layers
        dense(0, "fwd", "MLP")
        for r in range(1, L + 1):
            chunk_pass(r, cols, "fwd", "split" if r == 1 else None, "gather" if r == L else None, f"P{r}")
        for r in range(L, 0, -1):
            chunk_pass(r, cols, "bwd", "split" if r == L else None, "gather" if r == 1 else None, f"P{r}")
        dense(0, "bwd", "MLP")
        return prog
    for li, width in enumerate(spec.widths[: spec.layers]):
        if li > 0 or first_epoch:
            cols = slice_widths(width, k) if li else lay.layer0_columns
            chunk_pass(li, cols, "fwd", f"split L{li}" if li else None, f"gather L{li}", f"L{li}")
        dense(li, "fwd", f"L{li} dense")
    for li in reversed(range(spec.layers)):
        dense(li, "bwd", f"L{li} dense")
        if li > 0:
            chunk_pass(li, slice_widths(spec.widths[li], k), "bwd", f"split L{li}", f"gather L{li}", f"L{li}")
    return prog
    for li, width in enumerate(spec.widths[: spec.layers]):
        if li == 0:
            if first_epoch:
                chunk_pass(0, lay.layer0_columns, "fwd", None, by_name["gather L0"], "L0")
        else:
            chunk_pass(
                li, slice_widths(width, k), "fwd", by_name[f"split L{li}"], by_name[f"gather L{li}"], f"L{li}"
            )
        dense(li, "fwd", f"L{li} dense")
    for li in reversed(range(spec.layers)):
        dense(li, "bwd", f"L{li} dense bwd")
        if li > 0:
            width = spec.widths[li]
            chunk_pass(
                li,
                slice_widths(width, k),
                "bwd",
                by_name[f"bwd split L{li}"],
                by_name[f"bwd gather L{li}"],
                f"L{li} bwd",
            )
    return prog


# ------------------------------------------------------------------------------------------------------------
# Running a program
# ------------------------------------------------------------------------------------------------------------


class _State:
    """Every worker's clock and tallies while a program runs (arrays over the K workers)."""

    def __init__(self, k: int, record: bool):
        self.k, self.record = k, record
        z = np.zeros(k)
        self.t, self.busy, self.overhead, self.comm_wait, self.idle, self.link = (z.copy() for _ in range(6))
        self.sent = np.zeros(k, dtype=np.int64)  # bytes
        self.messages = np.zeros(k, dtype=np.int64)
        self.calls = 0  # all-to-all calls (a bulk collective: 1; a pipelined one: 1 per chunk)
        self.coll_seconds: dict[str, float] = {}  # collective -> seconds its calls took, summed
        self.spans: list[list] = [[] for _ in range(k)]

    def span(self, w: int, t0: float, t1: float, kind: str, label: str) -> None:
        if not self.record or t1 <= t0:
            return
        s = self.spans[w]
        if s and s[-1][2] == kind and s[-1][3] == label and abs(s[-1][1] - t0) <= 1e-15 * max(1.0, t0):
            s[-1] = (s[-1][0], t1, kind, label)  # contiguous: one span
        else:
            s.append((t0, t1, kind, label))

    def spans_all(self, t0: np.ndarray, t1: np.ndarray, kind: str, label: str) -> None:
        if self.record:
            for w in range(self.k):
                self.span(w, float(t0[w]), float(t1[w]), kind, label)

    def account(self, coll: Collective, net: Network, per_chunk_index: int | None, seconds: float) -> None:
        """Bytes, link time and message count of one (piece of a) collective."""
        if self.k <= 1:
            return
        if per_chunk_index is None:
            sent, link = coll.sent.sum(axis=0), coll.bulk_link
        else:
            sent, link = coll.sent[per_chunk_index], coll.chunk_link[per_chunk_index]
        self.sent += sent * ELEM_BYTES
        self.link += _link_seconds(link, net)
        self.messages += self.k - 1
        self.calls += 1
        self.coll_seconds[coll.name] = self.coll_seconds.get(coll.name, 0.0) + float(seconds)


def _bulk(st: _State, coll: Collective, net: Network) -> None:
    dur = float(coll.seconds(net, per_chunk=False))
    start = float(st.t.max())
    st.idle += start - st.t
    st.spans_all(st.t, np.full(st.k, start), "barrier", coll.name)
    st.comm_wait += dur
    st.spans_all(np.full(st.k, start), np.full(st.k, start + dur), "wait", coll.name)
    st.t[:] = start + dur
    st.account(coll, net, None, dur)


def _compute(st: _State, seconds: np.ndarray, overhead: np.ndarray, label: str) -> None:
    st.busy += seconds
    st.overhead += overhead
    st.spans_all(st.t, st.t + seconds, "compute", label)
    st.t = st.t + seconds


def _pass_bulk(st: _State, p: ChunkPass, net: Network) -> None:
    if p.pre is not None:
        _bulk(st, p.pre, net)
    n = len(p.order)
    _compute(st, p.compute[p.order].sum(axis=0), p.overhead * n, p.label)
    if p.post is not None:
        _bulk(st, p.post, net)


def _pass_pipelined(st: _State, p: ChunkPass, net: Network) -> None:
    """The runtime's ``_run_chunks`` with its communication thread: collectives in the order pre(o0),
    pre(o1), post(o0), pre(o2), post(o1), …, post(o_last), one at a time; chunk o_i's aggregation after its
    pre; its post after its aggregation (on every worker: a collective starts when all have reached it)."""
    order = p.order
    n = len(order)
    if n == 0:
        return
    pre_s = p.pre.seconds(net, per_chunk=True) if p.pre is not None else None
    post_s = np.asarray(p.post.seconds(net, per_chunk=True)) if p.post is not None else np.zeros(0)
    tc = float(st.t.max())  # the communication lane (its collectives synchronise every worker)
    pre_end = {}

    def run_pre(j):
        nonlocal tc
        pre_end[j] = tc + float(pre_s[j])
        st.account(p.pre, net, int(j), pre_s[j])
        tc = pre_end[j]

    if p.pre is not None:
        run_pre(order[0])
    lane = st.t.copy()  # compute lanes
    for i, j in enumerate(order):
        start = np.maximum(lane, pre_end[j]) if p.pre is not None else lane
        st.comm_wait += start - lane
        st.spans_all(lane, start, "wait", p.pre.name if p.pre is not None else "")
        done = start + p.compute[j]
        st.busy += p.compute[j]
        st.overhead += p.overhead
        st.spans_all(start, done, "compute", p.label)
        lane = done
        if p.pre is not None and i + 1 < n:
            run_pre(order[i + 1])
        if p.post is not None:
            s = max(tc, float(done.max()))
            tc = s + float(post_s[j])
            st.account(p.post, net, int(j), post_s[j])
    end = np.maximum(lane, tc) if p.post is not None else lane
    st.comm_wait += end - lane
    st.spans_all(lane, end, "wait", p.post.name if p.post is not None else "")
    st.t = end


def run_program(prog: list, k: int, net: Network, pipelined: bool, record: bool = False) -> _State:
    st = _State(k, record)
    pipe = pipelined and k > 1  # the runtime pipelines only with peers
    for op in prog:
        if isinstance(op, Dense):
            _compute(st, op.seconds, np.zeros(k), op.label)
        elif isinstance(op, Bulk):
            _bulk(st, op.coll, net)
        elif pipe and (op.pre is not None or op.post is not None):
            _pass_pipelined(st, op, net)
        else:
            _pass_bulk(st, op, net)
    return st


# ------------------------------------------------------------------------------------------------------------
# Systems
# ------------------------------------------------------------------------------------------------------------


def num_params(spec: ModelSpec) -> int:
    """Weights the epoch all-reduces (replicated on every worker): as :func:`.workload.count_params`."""
    from stages.kits.simulate.workload import count_params

    return count_params(spec.layer_shapes(), spec.kind, spec.mlp_widths)


def simulate_tp(
    spec: ModelSpec,
    shapes: list[LayerShape],
    lay: TPLayout,
    rates: Rates,
    net: Network,
    tp: str,
    pipelined: bool,
    record: bool = False,
) -> dict:
    """One steady-state epoch of ``neutrontp-<tp>[+pipe]`` on the layout's K workers (a system entry of
    simulate.json), with the first epoch's time (the once-only collectives and layer-0 work) beside it."""
    k = lay.k
    colls = collectives(spec, lay)
    speed = np.array([net.speed(w) for w in range(k)], dtype=np.float64)
    st = run_program(epoch_program(spec, shapes, lay, rates, colls, speed=speed), k, net, pipelined, record)
    first = run_program(
        epoch_program(spec, shapes, lay, rates, colls, first_epoch=True, speed=speed), k, net, pipelined
    )
    ar = allreduce_seconds(num_params(spec), k, net)
    sync = ar + rates.step_seconds / net.slowest_speed()  # the optimizer step: the slowest worker's
    t_end = float(st.t.max()) if k else 0.0
    epoch = t_end + sync
    n = lay.n
    workers = [
        {
            "rank": w,
            "busy": float(st.busy[w]),
            "overhead": float(st.overhead[w]),
            "comm_wait": float(st.comm_wait[w]),
            "idle": float(st.idle[w] + (t_end - st.t[w])),
            "sync": sync,
            "end": float(st.t[w]),
            "bytes_sent": int(st.sent[w]),
            "messages": int(st.messages[w]),
            "link_seconds": float(st.link[w]),
            **({"spans": st.spans[w]} if record else {}),
        }
        for w in range(k)
    ]
    steady = [c for c in colls if not c.once]
    return {
        "system": f"neutrontp-{tp}" + ("+pipe" if pipelined else ""),
        "workers_count": k,
        "epoch_seconds": epoch,
        "first_epoch_seconds": float(first.t.max()) + sync if k else sync,
        "throughput": n / epoch if epoch > 0 else None,
        "allreduce_seconds": ar,
        "step_seconds": rates.step_seconds,
        "bytes_per_epoch": int(st.sent.sum()),
        "busy_max": float(st.busy.max()) if k else 0.0,
        "busy_mean": float(st.busy.mean()) if k else 0.0,
        "comm_wait_mean": float(st.comm_wait.mean()) if k else 0.0,
        "idle_mean": float(np.mean([x["idle"] for x in workers])) if workers else 0.0,
        "chunks": lay.n_chunks,
        "collectives_per_epoch": len(steady),
        "collective_calls": st.calls,
        "collectives": [
            {
                "name": c.name,
                "width": c.width,
                "once": c.once,
                "bytes_sent": [int(b) for b in c.bytes_sent],
                "bytes_received": [int(b) for b in c.bytes_received],
                "seconds": st.coll_seconds.get(c.name, first.coll_seconds.get(c.name, 0.0)),
            }
            for c in colls
        ],
        "workers": workers,
    }


def tp_systems(pipelines: tuple[str, ...]) -> list[bool]:
    """Which of bulk (``--pipeline none``) and pipelined (any other schedule) to simulate: both by default."""
    bulk = not pipelines or "none" in pipelines
    pipe = not pipelines or any(p != "none" for p in pipelines)
    return [False] * bulk + [True] * pipe


def simulate(plan: Path, meta: dict, options, out: Path, replan) -> tuple[dict, list[dict]]:
    """`g3 simulate PLAN` of a neutrontp plan (its spec's ``simulate``): its systems at ``--workers K`` (the
    plan's by default) and the scaling table. Returns simulate.json's body and the systems with their spans."""
    plan = Path(plan)
    spec = ModelSpec.from_plan(meta)
    tp = meta["strategy"]["options"]["tp"]
    shapes = [LayerShape(**s) for s in meta["layers"]]
    rates = load_rates(options.profile, shapes) if options.profile else default_rates(shapes)
    k = options.workers or int(meta["num_workers"])
    if k < 1:
        raise G3InputError("--workers must be >= 1")
    net = network(options, k)  # at K: a cluster's per-worker links and speeds
    uniform = Network(options.bandwidth, options.latency)
    which = tp_systems(options.pipelines)
    csr: dict = {}
    layouts = {k: load_layout(plan, meta, k, csr)}
    main = [simulate_tp(spec, shapes, layouts[k], rates, net, tp, p, record=True) for p in which]
    scaling = []
    for kk in options.scaling:
        if kk not in layouts:
            layouts[kk] = load_layout(plan, meta, kk, csr)
        res = (
            main
            if kk == k
            else [simulate_tp(spec, shapes, layouts[kk], rates, uniform, tp, p) for p in which]
        )
        scaling.append(
            {
                "workers": kk,
                "plan": str(plan.resolve()),
                "chunks": layouts[kk].n_chunks,
                "systems": {r["system"]: summary(r, extra=("first_epoch_seconds",)) for r in res},
            }
        )
    notes = list(rates.notes) + [
        f"neutrontp --tp {tp}: a steady-state epoch (layer-0 cache on: the once-only collectives and layer-0 "
        "aggregation in first_epoch_seconds); '+pipe' = the inter-chunk pipeline (--pipeline other than none)",
        "no contention model; host<->device copies of the chunks, the labels exchange and evaluation not modelled",
    ]
    if options.baselines:
        notes.append(
            "no baselines for a neutrontp plan (its feature split has no vertex partition): simulate a "
            "g3 plan of the same store for g3, bns-gcn, sancus and halo"
        )
    lay = layouts[k]
    return {
        "plan": str(plan.resolve()),
        "simulated_plan": str(plan.resolve())
        + ("" if k == int(meta["num_workers"]) else f" (chunks derived for K = {k})"),
        "workers": k,
        "num_nodes": lay.n,
        "model": meta["config"],
        "network": {"bandwidth_bytes_per_second": options.bandwidth, "latency_seconds": options.latency},
        "rates": {
            "source": rates.source,
            "notes": notes,
            "overhead_per_bin": rates.overhead_per_bin,
            "step_seconds": rates.step_seconds,
            "layers": [asdict(lr) for lr in rates.layers],
        },
        "tensor_parallel": {
            "tp": tp,
            "chunks": lay.n_chunks,
            "max_chunk_nodes": int(lay.sizes.max(initial=0)),
            "max_chunk_arcs": int(lay.arcs.max(initial=0)),
            "owned": [int(x) for x in lay.owned],
        },
        "systems": recorded_systems(main),
        "scaling": scaling,
    }, main
