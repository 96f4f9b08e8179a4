"""A deterministic generator of realistic graphs for tests, the demo and benchmarks.

Model (a degree-corrected stochastic block model with heavy tails everywhere):

* ``communities`` planted communities with log-normal sizes (a few giants, many small ones);
* every node gets a Pareto "activity" weight, so degrees are heavy-tailed inside each community;
* each undirected edge picks an endpoint ``u`` in proportion to activity, then its partner: with probability
  ``1 - cross_ratio`` inside ``u``'s community, else, half of the time inside a community of the same class
  (a sibling), otherwise anywhere in the graph — so a share of arcs crosses communities unevenly, and METIS
  leaves remote sets unbalanced as it does on real graphs;
* every community belongs to one class; a node's label is its community's class except for
  ``label_noise`` of nodes, which get a random class;
* features = class centroid (the signal) + community offset + Gaussian noise, so a model that aggregates
  neighbours beats one that only reads a node's own features, and accuracy is meaningful.

Node ids are shuffled (seeded) so that ids carry no community information, as with hashed ids.
Everything is a function of the seed alone: the same seed gives the same graph, chunk by chunk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numba
import numpy as np

from stages.common.errors import G3InputError
from stages.ingest.source import GraphSource

EDGE_CHUNK = 1 << 22
FEATURE_BLOCK = 1 << 16


@dataclass(frozen=True)
class SyntheticSpec:
    nodes: int
    avg_degree: float  # arcs per node after symmetrising (each undirected edge counts twice)
    feat_dim: int = 64
    num_classes: int = 16
    communities: int = 0  # 0: about one per 400 nodes
    cross_ratio: float = 0.25
    degree_exponent: float = 2.2  # Pareto tail of node activity
    community_sigma: float = 1.2  # log-normal sigma of community sizes
    label_noise: float = 0.1
    feature_signal: float = 0.25  # class-centroid scale relative to unit noise
    seed: int = 0


PRESETS: dict[str, SyntheticSpec] = {
    # ~2K nodes: unit tests
    "tiny": SyntheticSpec(nodes=2_000, avg_degree=12, feat_dim=32, num_classes=8, communities=24),
    # ~100K nodes, ~2.5M arcs: the demo
    "small": SyntheticSpec(nodes=100_000, avg_degree=25, feat_dim=64, num_classes=16),
    # ~500K nodes, ~25M arcs: the single-worker speed benchmark
    "medium": SyntheticSpec(nodes=500_000, avg_degree=50, feat_dim=100, num_classes=47),
    # the shape of ogbn-products: 2,449,029 nodes, ~123.7M arcs, 100 features, 47 classes
    "products": SyntheticSpec(nodes=2_449_029, avg_degree=50.5, feat_dim=100, num_classes=47),
}


def resolve_spec(preset: str | None, **overrides) -> SyntheticSpec:
    """A preset (or defaults), with the given non-None fields replaced."""
    if preset is not None:
        if preset not in PRESETS:
            raise G3InputError(f"unknown synthetic preset {preset!r} (choose from {', '.join(PRESETS)})")
        spec = PRESETS[preset]
    else:
        if overrides.get("nodes") is None or overrides.get("avg_degree") is None:
            raise G3InputError("synthetic without a preset needs --nodes and --avg-degree")
        spec = SyntheticSpec(nodes=int(overrides["nodes"]), avg_degree=float(overrides["avg_degree"]))
    fields = {k: v for k, v in overrides.items() if v is not None}
    spec = replace(spec, **fields)
    _validate(spec)
    return spec


def _validate(s: SyntheticSpec) -> None:
    if s.nodes < 2:
        raise G3InputError("synthetic graph needs at least 2 nodes")
    if not 0 < s.avg_degree < s.nodes:
        raise G3InputError("synthetic --avg-degree must be in (0, nodes)")
    if not 0.0 <= s.cross_ratio <= 1.0 or not 0.0 <= s.label_noise <= 1.0:
        raise G3InputError("synthetic --cross-ratio and label noise must be in [0, 1]")
    if s.num_classes < 2 or s.feat_dim < 1:
        raise G3InputError("synthetic graph needs >= 2 classes and >= 1 feature")
    if s.degree_exponent <= 1.0:
        raise G3InputError("synthetic degree exponent must be > 1")


class _Layout:
    """Per-node community, class and activity, laid out community by community (before id shuffling)."""

    def __init__(self, s: SyntheticSpec):
        rng = np.random.default_rng([s.seed, 1])
        n = s.nodes
        c = s.communities or max(s.num_classes, n // 400)
        c = min(c, n)
        # log-normal sizes with a floor that can hold a node's degree (tiny communities only make duplicates)
        floor = int(min(n // c, max(8, 3 * s.avg_degree)))
        sizes = rng.lognormal(0.0, s.community_sigma, size=c)
        sizes = floor + np.floor(sizes / sizes.sum() * (n - floor * c)).astype(np.int64)
        # fix the rounding so sizes sum to n (add/remove at the largest communities)
        diff = n - int(sizes.sum())
        order = np.argsort(-sizes)
        i = 0
        while diff != 0:
            j = order[i % c]
            step = 1 if diff > 0 else -1
            if sizes[j] + step >= 1:
                sizes[j] += step
                diff -= step
            i += 1
        self.num_communities = c
        self.comm_start = np.concatenate([[0], np.cumsum(sizes)])
        self.node_comm = np.repeat(np.arange(c), sizes)  # in layout order
        # classes: every class gets at least one community when possible
        comm_class = rng.integers(0, s.num_classes, size=c)
        comm_class[: min(c, s.num_classes)] = rng.permutation(s.num_classes)[: min(c, s.num_classes)]
        self.comm_class = comm_class
        # heavy-tailed activity, capped so that a hub asks for no more partners than its community has (it would
        # only make duplicate arcs)
        act = rng.pareto(s.degree_exponent - 1.0, size=n) + 1.0
        comm_size = sizes[self.node_comm]
        cap = np.maximum(2.0, comm_size / max(1.0, s.avg_degree) * 2.0)
        act = np.minimum(act, cap)
        self.cum_act = np.cumsum(act)
        self.comm_act_before = np.concatenate([[0.0], self.cum_act])[self.comm_start[:-1]]
        self.comm_act = np.concatenate([[0.0], self.cum_act])[self.comm_start[1:]] - self.comm_act_before
        # communities by class, for sibling (same-class) cross edges
        self.class_comms = [np.flatnonzero(comm_class == k) for k in range(s.num_classes)]
        # shuffled node ids: layout position -> node id
        self.perm = rng.permutation(n)
        labels_layout = comm_class[self.node_comm].copy()
        noisy = rng.random(n) < s.label_noise
        labels_layout[noisy] = rng.integers(0, s.num_classes, size=int(noisy.sum()))
        self.labels = np.empty(n, dtype=np.int64)
        self.labels[self.perm] = labels_layout
        self.comm_of_id = np.empty(n, dtype=np.int64)
        self.comm_of_id[self.perm] = self.node_comm

        self.guide = _guide(self.cum_act, max(1, n // GUIDE_SPAN))

    def node_at(self, target: np.ndarray) -> np.ndarray:
        """The node whose share of the cumulative activity holds each ``target``: ``np.searchsorted(cum_act,
        target, side="right")`` (capped at the last node), bit for bit, in a few steps from the guide table."""
        out = np.empty(len(target), dtype=np.int64)
        _count_at_most(self.cum_act, self.guide, target, out)
        return np.minimum(out, len(self.cum_act) - 1)

    def sample_any(self, u: np.ndarray) -> np.ndarray:
        """Nodes drawn in proportion to activity, one per uniform ``u`` in [0, 1)."""
        return self.node_at(u * self.cum_act[-1])

    def sample_in(self, comms: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.node_at(self.comm_act_before[comms] + u * self.comm_act[comms])


# nodes per guide-table bucket: a draw scans about this many activity sums (a binary search over 50 M nodes made
# ~26 cache-missing reads a draw and was most of a billion-arc graph's generation)
GUIDE_SPAN = 4


@numba.njit(cache=True, nogil=True)
def _guide(cum: np.ndarray, buckets: int) -> np.ndarray:
    """``guide[j]``: how many of the ascending ``cum`` are ≤ ``j · cum[-1] / buckets``, where a search for a
    value in bucket ``j`` starts; ``[buckets + 1]``."""
    guide = np.empty(buckets + 1, dtype=np.int64)
    step = cum[-1] / buckets
    p = 0
    for j in range(buckets + 1):
        while p < len(cum) and cum[p] <= j * step:
            p += 1
        guide[j] = p
    return guide


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_at_most(cum: np.ndarray, guide: np.ndarray, targets: np.ndarray, out: np.ndarray) -> None:
    """``out[i]``: how many of the ascending ``cum`` are ≤ ``targets[i]`` (``np.searchsorted(..., side="right")``):
    from the guide's count for the target's bucket, stepped back or forward until exact, so rounding in the
    bucket's index can cost steps but never the answer."""
    n, buckets = len(cum), len(guide) - 1
    scale = buckets / cum[-1]
    for i in numba.prange(len(targets)):
        t = targets[i]
        p = guide[min(max(int(t * scale), 0), buckets)]
        while p > 0 and cum[p - 1] > t:
            p -= 1
        while p < n and cum[p] <= t:
            p += 1
        out[i] = p


def _edges_drawn(s: SyntheticSpec) -> int:
    return int(round(s.nodes * s.avg_degree / 2 * 1.13))  # extra for the duplicates the builder drops


def _edge_chunks(s: SyntheticSpec, layout: _Layout):
    m = _edges_drawn(s)
    for k, start in enumerate(range(0, m, EDGE_CHUNK)):
        rng = np.random.default_rng([s.seed, 2, k])
        size = min(EDGE_CHUNK, m - start)
        a = layout.sample_any(rng.random(size))
        ca = layout.node_comm[a]
        kind = rng.random(size)
        inside = kind >= s.cross_ratio
        sibling = (kind < s.cross_ratio / 2) & ~inside
        target_comm = ca.copy()
        if sibling.any():
            cls = layout.comm_class[ca[sibling]]
            picks = np.empty(int(sibling.sum()), dtype=np.int64)
            r = rng.random(len(picks))
            for klass in np.unique(cls):
                sel = cls == klass
                options = layout.class_comms[klass]
                picks[sel] = options[np.minimum((r[sel] * len(options)).astype(np.int64), len(options) - 1)]
            target_comm[sibling] = picks
        b = layout.sample_in(target_comm, rng.random(size))
        anywhere = ~inside & ~sibling
        if anywhere.any():
            b[anywhere] = layout.sample_any(rng.random(int(anywhere.sum())))
        yield layout.perm[a].astype(np.int64), layout.perm[b].astype(np.int64)


def _feature_blocks(s: SyntheticSpec, layout: _Layout):
    rng = np.random.default_rng([s.seed, 3])
    class_centroids = rng.standard_normal((s.num_classes, s.feat_dim)).astype(np.float32) * s.feature_signal
    comm_offsets = rng.standard_normal((layout.num_communities, s.feat_dim)).astype(np.float32) * (
        s.feature_signal * 0.5
    )
    for k, start in enumerate(range(0, s.nodes, FEATURE_BLOCK)):
        ids = np.arange(start, min(s.nodes, start + FEATURE_BLOCK))
        brng = np.random.default_rng([s.seed, 4, k])
        x = brng.standard_normal((len(ids), s.feat_dim), dtype=np.float32)
        x += class_centroids[layout.labels[ids]]
        x += comm_offsets[layout.comm_of_id[ids]]
        yield x


def synthetic_source(spec: SyntheticSpec, name: str | None = None) -> GraphSource:
    """A GraphSource for the synthetic graph ``spec`` (undirected, stored once: the builder symmetrises)."""
    layout = _Layout(spec)
    return GraphSource(
        name=name or f"synthetic-{spec.nodes}",
        num_nodes=spec.nodes,
        arcs=lambda: _edge_chunks(spec, layout),
        path="synthetic",
        feat_dim=spec.feat_dim,
        feature_blocks=lambda: _feature_blocks(spec, layout),
        labels=layout.labels,
        num_classes=spec.num_classes,
        arcs_hint=_edges_drawn(spec),
        undirected_once=True,
        info={"format": "synthetic", "spec": asdict(spec), "communities": layout.num_communities},
    )
