"""`g3 partition`: incremental remote tracking, Algorithm 1, the five methods, shard invariants, CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import numba
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from g3cli.main import cli
from stages.common.errors import G3InputError
from stages.common.store import GraphStore
from stages.ingest.build import IngestOptions, build_store
from stages.ingest.source import GraphSource
from stages.ingest.synthetic import resolve_spec, synthetic_source
from stages.kits.partition.baselines import chunk_partition, random_partition
from stages.kits.partition.feature import feature_columns
from stages.kits.partition.graph import graphs_from_csr, load_graphs, symmetrize
from stages.kits.partition.metis import metis_partition
from stages.kits.partition.metrics import edge_cut, remote_sizes
from stages.partition.run import PartitionOptions, run_partition
from stages.strategies.g3.refine import (
    ROUND_SHARES,
    AnnealChain,
    anneal,
    needs_refinement,
    refine_cost,
    run_refine,
    seed_anneal,
)
from stages.strategies.g3.repartition import (
    Algorithm1Result,
    RemoteTracker,
    _move,
    _q_collect,
    _swap_delta,
    run_algorithm1,
    seen_before,
)

NODE_METHODS = ("g3", "metis", "random", "chunk")


# ------------------------------------------------------------------------------------------------------------
# fixtures: a symmetric synthetic store and a directed one with self-loops and repeated arcs
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stores") / "tiny"
    build_store(synthetic_source(resolve_spec("tiny")), path, IngestOptions())
    return path


def _directed_source(n: int = 300, m: int = 2400, feat_dim: int = 10, seed: int = 3) -> GraphSource:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = np.where(rng.random(m) < 0.7, (src + rng.integers(1, 20, m)) % n, rng.integers(0, n, m))
    src[:25] = dst[:25]  # self-loops
    feats = rng.standard_normal((n, feat_dim)).astype(np.float32)
    return GraphSource(
        name="directed",
        num_nodes=n,
        arcs=lambda: iter([(src, dst)]),
        path="test",
        feat_dim=feat_dim,
        feature_blocks=lambda: iter([feats]),
        labels=rng.integers(0, 4, n),
        num_classes=4,
    )


@pytest.fixture(scope="module")
def directed_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stores") / "directed"
    build_store(_directed_source(), path, IngestOptions(keep_self_loops=True, keep_duplicates=True))
    return path


def _partition(store: Path, out: Path, k: int, method: str = "g3", **kw) -> dict:
    return run_partition(store, PartitionOptions(workers=k, method=method, **kw), out=out)


# ------------------------------------------------------------------------------------------------------------
# symmetrised adjacency
# ------------------------------------------------------------------------------------------------------------


def _csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((src, dst))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return indptr, src[order].astype(np.int32)


def test_symmetrize_is_the_union_without_self_loops():
    rng = np.random.default_rng(0)
    n = 50
    src, dst = rng.integers(0, n, 400), rng.integers(0, n, 400)
    ptr, idx = symmetrize(*_csr(n, src, dst))
    expected = {(int(a), int(b)) for a, b in zip(src, dst, strict=True) if a != b}
    expected |= {(b, a) for a, b in expected}
    got = {(int(v), int(u)) for v in range(n) for u in idx[ptr[v] : ptr[v + 1]]}
    assert got == expected
    assert all(np.all(np.diff(idx[ptr[v] : ptr[v + 1]]) > 0) for v in range(n))


def test_symmetric_store_is_its_own_symmetrised_adjacency(tiny_store):
    graphs = load_graphs(GraphStore.open(tiny_store))
    assert graphs.symmetric
    ptr, idx = symmetrize(graphs.indptr, graphs.indices)
    np.testing.assert_array_equal(ptr, graphs.sym_indptr)
    np.testing.assert_array_equal(idx, graphs.sym_indices)


# ------------------------------------------------------------------------------------------------------------
# incremental tracking == recount (hypothesis)
# ------------------------------------------------------------------------------------------------------------


@st.composite
def tracker_cases(draw):
    n = draw(st.integers(4, 40))
    k = draw(st.integers(2, min(5, n)))
    m = draw(st.integers(0, 5 * n))
    seed = draw(st.integers(0, 2**32 - 1))
    symmetric = draw(st.booleans())
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    if symmetric:
        keep = src != dst
        pairs = np.unique(
            np.stack([np.concatenate([src[keep], dst[keep]]), np.concatenate([dst[keep], src[keep]])]), axis=1
        )
        src, dst = pairs[0], pairs[1]
    return n, k, src, dst, rng.integers(0, k, n).astype(np.int32), seed


def _recount(graphs, part, k):
    n = graphs.num_nodes
    dst = np.repeat(np.arange(n), np.diff(graphs.indptr))
    arc_cnt = np.zeros((n, k), dtype=np.int64)
    np.add.at(arc_cnt, (graphs.indices, part[dst]), 1)
    sym_dst = np.repeat(np.arange(n), np.diff(graphs.sym_indptr))
    nb_cnt = np.zeros((n, k), dtype=np.int64)
    np.add.at(nb_cnt, (sym_dst, part[graphs.sym_indices]), 1)
    outside = part[:, None] != np.arange(k)[None, :]
    remote = ((arc_cnt > 0) & outside).sum(axis=0)
    return arc_cnt, nb_cnt, remote


def _best(tr: RemoteTracker, p: int, x: int) -> int:
    """The top of queue Q[p][x] (-1 if p is empty): v_max of p if x == p, else the v_min of p towards x."""
    out = np.empty(1, dtype=np.int64)
    return int(out[0]) if _q_collect(p, x, tr.k, 1, tr.Q, out) else -1


def _move_to(tr: RemoteTracker, v: int, to: int) -> None:
    """Move node v to partition ``to`` (nothing to do if it is already there)."""
    if to != tr.part[v]:
        _move(v, int(tr.part[v]), to, tr.k, tr.G, tr.S, tr.Q, tr.shared)


def _check_tracker(tr: RemoteTracker, graphs, k: int) -> None:
    arc_cnt, nb_cnt, remote = _recount(graphs, tr.part, k)
    np.testing.assert_array_equal(tr.remote, remote)
    np.testing.assert_array_equal(tr.S[1], arc_cnt)
    np.testing.assert_array_equal(tr.S[2], nb_cnt)
    np.testing.assert_array_equal(tr.degree_sum, np.bincount(tr.part, weights=graphs.degree, minlength=k))
    np.testing.assert_array_equal(remote, remote_sizes(graphs.indptr, graphs.indices, tr.part, k))
    keys = graphs.degree[:, None] - nb_cnt  # keys[v, x] = d_v - nb_cnt[v, x]
    cap = tr.Q[4].reshape(k, k)
    for p in range(k):
        members = np.flatnonzero(tr.part == p)
        v = _best(tr, p, p)
        if len(members) == 0:
            assert v == -1
            continue
        assert tr.part[v] == p and keys[v, p] == keys[members, p].max()
        for a in range(k):
            if a != p:
                y = _best(tr, p, a)
                assert tr.part[y] == p
                assert min(keys[y, a], cap[p, a]) == min(keys[members, a].min(), cap[p, a])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tracker_cases())
def test_incremental_tracking_equals_recount_after_random_swaps(case):
    n, k, src, dst, part, seed = case
    graphs = graphs_from_csr(*_csr(n, src, dst))
    tr = RemoteTracker(graphs, part, k, min_key_cap=3)  # a small cap exercises the lumped top bucket
    _check_tracker(tr, graphs, k)
    rng = np.random.default_rng(seed + 1)
    for step in range(2000):
        x = int(rng.integers(n))
        if step % 2:
            _move_to(tr, x, int(rng.integers(k)))  # single moves change partition sizes too
            continue
        y = int(rng.integers(n))
        a, b = int(tr.part[x]), int(tr.part[y])
        if a == b:
            continue
        before = tr.remote.copy()
        da, db = _swap_delta(x, y, a, b, tr.G[0], tr.G[1], tr.part, tr.S[1])  # predicted, read-only
        _move_to(tr, x, b)
        _move_to(tr, y, a)
        assert (tr.remote[a] - before[a], tr.remote[b] - before[b]) == (da, db)
        others = np.setdiff1d(np.arange(k), [a, b])
        np.testing.assert_array_equal(tr.remote[others], before[others])
        if step % 500 == 0:
            _check_tracker(tr, graphs, k)
    _check_tracker(tr, graphs, k)


def test_cycle_table_detects_a_repeated_state():
    table = np.zeros(16, dtype=np.uint64)
    assert not seen_before(table, np.uint64(12345))
    assert not seen_before(table, np.uint64(99))
    assert seen_before(table, np.uint64(12345))


# ------------------------------------------------------------------------------------------------------------
# Algorithm 1
# ------------------------------------------------------------------------------------------------------------


def _metis_g3(graphs, k):
    weights = np.stack([np.full(graphs.num_nodes, 128, dtype=np.int64), graphs.degree], axis=1)
    return metis_partition(graphs, k, seed=0, vertex_weights=weights, ufactor=50)


@pytest.mark.parametrize("k", [2, 4])
def test_algorithm1_converges_and_never_worsens_the_largest_remote_set(tiny_store, k):
    graphs = load_graphs(GraphStore.open(tiny_store))
    first = _metis_g3(graphs, k)
    res = run_algorithm1(graphs, first, k, gamma=0.005, degree_tol=1.05)
    assert res.stop_reason == "converged"
    before = remote_sizes(graphs.indptr, graphs.indices, first, k)
    after = remote_sizes(graphs.indptr, graphs.indices, res.part, k)
    assert after.min() >= 0.995 * after.max()
    assert after.max() <= before.max()
    maxima = [t[1] for t in res.remote_trace]
    assert maxima == sorted(maxima, reverse=True)
    _check_balance(graphs, first, res.part, k, 1.05)


def _check_balance(graphs, first, final, k, tol):
    np.testing.assert_array_equal(np.bincount(final, minlength=k), np.bincount(first, minlength=k))  # 1-for-1
    limit = tol * graphs.degree.sum() / k
    deg_first = np.bincount(first, weights=graphs.degree, minlength=k)
    deg_final = np.bincount(final, weights=graphs.degree, minlength=k)
    assert np.all(deg_final <= np.maximum(limit, deg_first) + 1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tracker_cases())
def test_algorithm1_on_random_graphs_keeps_its_guarantees(case):
    n, k, src, dst, part, _ = case
    graphs = graphs_from_csr(*_csr(n, src, dst))
    res = run_algorithm1(graphs, part, k, gamma=0.005, degree_tol=1.05)
    before = remote_sizes(graphs.indptr, graphs.indices, part, k)
    after = remote_sizes(graphs.indptr, graphs.indices, res.part, k)
    assert after.max() <= before.max()
    assert res.stop_reason in (
        "converged",
        "stalled",
    )  # swaps strictly lower the largest remote set: no cycle
    if res.swaps:  # every swap lowers the largest remote set of its pair: the sorted sizes decrease
        assert sorted(after.tolist(), reverse=True) < sorted(before.tolist(), reverse=True)
    if res.stop_reason == "converged":
        assert after.max() == 0 or after.min() >= 0.995 * after.max()
    _check_balance(graphs, part, res.part, k, 1.05)


def _two_cliques(small: int = 10, big: int = 30):
    """Cliques of ``small`` and ``big`` nodes joined by one edge: cut 1 if the parts may be unequal."""
    n = small + big
    src, dst = [], []
    for lo, hi in ((0, small), (small, n)):
        a, b = np.meshgrid(np.arange(lo, hi), np.arange(lo, hi))
        keep = a != b
        src.append(a[keep])
        dst.append(b[keep])
    src = np.concatenate([*src, [0, small]])
    dst = np.concatenate([*dst, [small, 0]])
    return graphs_from_csr(*_csr(n, src, dst))


def test_metis_ubvec_sets_each_constraint_imbalance():
    graphs = _two_cliques()
    loose = metis_partition(graphs, 2, seed=0, ubvec=[1.6])  # 30/20 = 1.5 allowed: keep the cliques whole
    tight = metis_partition(graphs, 2, seed=0, ubvec=[1.001])
    assert (
        sorted(np.bincount(loose, minlength=2).tolist()) == [10, 30]
        and edge_cut(graphs.indptr, graphs.indices, loose) == 2
    )
    assert np.bincount(tight, minlength=2).tolist() == [20, 20]
    with pytest.raises(ValueError, match="ubvec"):
        metis_partition(graphs, 2, seed=0, ubvec=[1.1, 1.1])


def test_degree_tol_loosens_only_the_degree_constraint(tiny_store, tmp_path):
    graphs = load_graphs(GraphStore.open(tiny_store))
    weights = np.stack([np.full(graphs.num_nodes, 128, dtype=np.int64), graphs.degree], axis=1)
    same = metis_partition(graphs, 4, seed=0, vertex_weights=weights, ubvec=[1.05, 1.05])
    np.testing.assert_array_equal(same, _metis_g3(graphs, 4))  # default --degree-tol: the old ufactor call
    s = _partition(tiny_store, tmp_path / "p", 4, "g3", degree_tol=1.5)
    assert s["parameters"]["degree_tol"] == 1.5 and s["parameters"]["metis_ubvec"] == [1.05, 1.5]
    assert s["after"]["degree_sum_max_over_mean"] <= max(1.5, s["before"]["degree_sum_max_over_mean"]) + 1e-9
    assert s["balance"]["nodes"]["max_over_mean"] <= 1.05 + 1e-9
    d = _partition(tiny_store, tmp_path / "d", 4, "g3")
    assert d["parameters"]["degree_tol"] == 1.05 and d["parameters"]["metis_ubvec"] == [1.05, 1.05]


def test_algorithm1_watches_the_degree_limit_it_is_given(tiny_store):
    graphs = load_graphs(GraphStore.open(tiny_store))
    first = metis_partition(graphs, 4, seed=0, vertex_weights=np.ones((graphs.num_nodes, 1), dtype=np.int64))
    tight = run_algorithm1(graphs, first, 4, gamma=0.005, degree_tol=1.02)
    loose = run_algorithm1(graphs, first, 4, gamma=0.005, degree_tol=1.5)
    _check_balance(graphs, first, tight.part, 4, 1.02)
    _check_balance(graphs, first, loose.part, 4, 1.5)
    with pytest.raises(AssertionError):  # the looser limit let some swap through that 1.02 refused
        _check_balance(graphs, first, loose.part, 4, 1.02)


def test_swap_limit_stops_algorithm1(tiny_store):
    graphs = load_graphs(GraphStore.open(tiny_store))
    res = run_algorithm1(graphs, _metis_g3(graphs, 4), 4, gamma=0.005, degree_tol=1.05, max_swaps=2)
    assert (res.stop_reason, res.swaps) == ("swap limit", 2)


# ------------------------------------------------------------------------------------------------------------
# stage 3: annealing refinement
# ------------------------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tracker_cases())
def test_refinement_counters_equal_recount_after_thousands_of_moves(case):
    n, k, src, dst, part, seed = case
    graphs = graphs_from_csr(*_csr(n, src, dst))
    chain = AnnealChain(graphs, part, k)
    best_part = chain.part.copy()
    counters = np.zeros(3, dtype=np.int64)
    journal = np.empty(3 if seed % 2 else n, dtype=np.int64)  # a short journal overflows: full copies
    seed_anneal(seed % 2**31)
    # budget -1 can never be met: no early stop; a high temperature keeps many moves (accepted and undone)
    best, _ = anneal(
        0,
        5000,
        5000,
        4.0,
        0.0,
        10.0,
        50.0,
        5.0,
        chain.G,
        chain.S,
        graphs.symmetric,
        chain.node_cnt,
        np.inf,
        np.inf,
        0.005,
        -1.0,
        best_part,
        np.inf,
        counters,
        np.empty(n, dtype=np.int64),
        journal,
    )
    if np.isfinite(best):  # best_part is the assignment whose cost was recorded as the best
        best_remote = _recount(graphs, best_part, k)[2]
        assert refine_cost(best_remote, 4.0, 0.0, 0.005, -1.0, 10.0) == pytest.approx(best)
    arc_cnt, nb_cnt, remote = _recount(graphs, chain.part, k)
    np.testing.assert_array_equal(chain.remote, remote)
    np.testing.assert_array_equal(chain.S[1], arc_cnt)
    np.testing.assert_array_equal(chain.S[2], nb_cnt)
    np.testing.assert_array_equal(chain.S[4], np.bincount(chain.part, weights=graphs.degree, minlength=k))
    np.testing.assert_array_equal(chain.node_cnt, np.bincount(chain.part, minlength=k))
    sym_dst = np.repeat(np.arange(n), np.diff(graphs.sym_indptr))
    if (part[sym_dst] == part[graphs.sym_indices]).all():
        assert counters[0] == 0  # no boundary node: nothing to move
    else:
        assert counters[0] == 5000 and counters[1] > 0


def test_refinement_keeps_the_balance_limits_and_the_seed_decides(tiny_store):
    graphs = load_graphs(GraphStore.open(tiny_store))
    k = 4
    start = random_partition(graphs.num_nodes, k, 0)
    runs = [
        run_refine(graphs, start, k, 0.005, 1.05, 1.05, budget=1e9, steps=300_000, seed=s) for s in (7, 7, 8)
    ]
    np.testing.assert_array_equal(runs[0].part, runs[1].part)
    assert not np.array_equal(runs[0].part, runs[2].part)
    node_limit = max(1.05 * graphs.num_nodes / k, np.bincount(start, minlength=k).max())
    deg_start = np.bincount(start, weights=graphs.degree, minlength=k)
    deg_limit = max(1.05 * graphs.degree.sum() / k, deg_start.max())
    for res in runs:
        assert res.accepted > 0
        assert np.bincount(res.part, minlength=k).max() <= node_limit
        assert np.bincount(res.part, weights=graphs.degree, minlength=k).max() <= deg_limit
        assert res.final_remote == remote_sizes(graphs.indptr, graphs.indices, res.part, k).tolist()
        assert res.initial_remote == remote_sizes(graphs.indptr, graphs.indices, start, k).tolist()
        assert max(res.final_remote) < max(res.initial_remote)  # a random start is easy to improve


def test_refinement_reaches_the_goal_within_the_budget(directed_store):
    graphs = load_graphs(GraphStore.open(directed_store))  # directed, self-loops, repeated arcs
    k = 3
    start = chunk_partition(graphs.num_nodes, k)
    reference = remote_sizes(graphs.indptr, graphs.indices, metis_partition(graphs, k, 0), k).sum()
    res = run_refine(graphs, start, k, 0.005, 1.05, 1.05, budget=1.05 * reference, seed=0)
    after = remote_sizes(graphs.indptr, graphs.indices, res.part, k)
    assert res.converged and res.steps < 1000 * graphs.num_nodes  # stops once the goal is met
    assert after.min() >= 0.995 * after.max() and after.sum() <= 1.05 * reference
    again = run_refine(graphs, res.part, k, 0.005, 1.05, 1.05, budget=1.05 * reference)
    assert (again.converged, again.steps) == (True, 0)  # a converged start is returned untouched
    np.testing.assert_array_equal(again.part, res.part)


@pytest.mark.parametrize("k, steps, seed", [(8, 20_000, 0), (4, 200_000, 1), (4, 2_000, 2)])
def test_refinement_rounds_end_at_the_first_that_meets_the_goal_whatever_the_threads(
    directed_store, k, steps, seed
):
    graphs = load_graphs(GraphStore.open(directed_store))
    start = chunk_partition(graphs.num_nodes, k)
    budget = 1.05 * remote_sizes(graphs.indptr, graphs.indices, metis_partition(graphs, k, 0), k).sum()
    runs = [run_refine(graphs, start, k, 0.005, 1.05, 1.05, budget, steps, seed, threads=t) for t in (1, 3)]
    for res in runs:
        *missed, winner = res.rounds
        assert res.converged and winner["converged"] and not any(r["converged"] for r in missed)
        assert len(missed) > 0  # the first round missed: later rounds ran, some of them alongside it
        assert [r["steps"] for r in res.rounds] == _round_sizes(steps)[: len(res.rounds)]
        assert all(r["taken"] == r["steps"] for r in missed) and winner["taken"] <= winner["steps"]
        assert res.steps == sum(r["taken"] for r in res.rounds)
        after = remote_sizes(graphs.indptr, graphs.indices, res.part, k)
        assert after.tolist() == res.final_remote == winner["remote_after"]
        assert after.min() >= 0.995 * after.max() and after.sum() <= budget
    np.testing.assert_array_equal(runs[0].part, runs[1].part)  # threads change the wall time only
    assert runs[0].rounds == runs[1].rounds and runs[0].steps == runs[1].steps


def _round_sizes(steps: int) -> list[int]:
    sizes = [int(share * steps) for share in ROUND_SHARES[:-1]]
    return [size for size in sizes + [steps - sum(sizes)] if size > 0]


def test_refinement_that_never_meets_the_goal_runs_every_round_and_keeps_the_cheapest(directed_store):
    graphs = load_graphs(GraphStore.open(directed_store))
    k, start = 4, chunk_partition(graphs.num_nodes, 4)
    res = run_refine(graphs, start, k, 0.005, 1.05, 1.05, budget=10.0, steps=30_000, seed=0, threads=2)
    assert not res.converged and len(res.rounds) == len(ROUND_SHARES)
    assert res.steps == 30_000 == sum(r["steps"] for r in res.rounds) == sum(r["taken"] for r in res.rounds)
    costs = [refine_cost(np.asarray(r["remote_after"]), 0.0, 20.0, 0.005, 10.0, 100.0) for r in res.rounds]
    assert (
        res.final_remote == res.rounds[max(i for i, c in enumerate(costs) if c == min(costs))]["remote_after"]
    )
    one = run_refine(
        graphs, start, k, 0.005, 1.05, 1.05, budget=10.0, steps=30_000, seed=0, round_shares=(1.0,)
    )
    assert [r["steps"] for r in one.rounds] == [30_000]


def test_g3_refines_only_when_algorithm1_stops_short(tiny_store, tmp_path):
    converged = _partition(tiny_store, tmp_path / "c", 4, "g3")
    assert converged["stop_reason"] == "converged" and converged["refine"] is None
    assert "refine" not in converged["timing"]
    s = _partition(tiny_store, tmp_path / "r", 4, "g3", max_swaps=0)  # Algorithm 1 does nothing
    refine = s["refine"]
    assert s["stop_reason"] == "swap limit" and refine["converged"] and refine["kept"] == "refined"
    assert (
        refine["metis_total_remote"] == _partition(tiny_store, tmp_path / "m", 4, "metis")["totals"]["remote"]
    )
    assert s["after"]["remote_min_over_max"] >= 0.995
    assert (
        s["totals"]["remote"]
        == sum(refine["remote_after"])
        <= refine["budget"]
        == pytest.approx(1.05 * refine["metis_total_remote"], abs=1e-3)
    )
    assert {"metis_reference", "refine"} <= set(s["timing"])
    assignment = np.load(tmp_path / "r" / "assignment.npy")
    graphs = load_graphs(GraphStore.open(tiny_store))
    assert remote_sizes(graphs.indptr, graphs.indices, assignment, 4).tolist() == refine["remote_after"]
    off = _partition(tiny_store, tmp_path / "o", 4, "g3", max_swaps=0, refine_steps=0)
    assert off["refine"] is None and off["after"]["remote_min_over_max"] < 0.995


def test_g3_partition_does_not_depend_on_the_threads(tiny_store, tmp_path):
    before = numba.get_num_threads()
    try:
        runs = [_partition(tiny_store, tmp_path / f"t{t}", 4, "g3", max_swaps=3, threads=t) for t in (1, 2)]
    finally:
        numba.set_num_threads(before)
    assert runs[0]["refine"]["rounds"] == runs[1]["refine"]["rounds"]
    assert [r["parameters"]["threads"] for r in runs] == [1, min(2, numba.config.NUMBA_NUM_THREADS)]
    np.testing.assert_array_equal(
        np.load(tmp_path / "t1" / "assignment.npy"), np.load(tmp_path / "t2" / "assignment.npy")
    )


def test_refinement_also_runs_when_algorithm1_bought_the_ratio_with_communication():
    def result(reason, before, after):
        return Algorithm1Result(
            np.zeros(1, np.int32), reason, 1, 0.0, initial_remote=before, final_remote=after
        )

    assert needs_refinement(result("stalled", [10, 10], [9, 9]), 1.05)
    assert needs_refinement(result("swap limit", [10, 10], [10, 10]), 1.05)
    assert needs_refinement(result("converged", [10, 10], [20, 20]), 1.05)  # balanced, at twice the total
    assert not needs_refinement(result("converged", [10, 10], [10, 11]), 1.05)


def test_algorithm1s_balanced_assignment_stays_when_the_refinement_misses(tiny_store, tmp_path):
    plain = _partition(tiny_store, tmp_path / "g", 4, "g3")
    # a budget of half plain METIS's total cannot be met: the refinement runs and misses
    s = _partition(tiny_store, tmp_path / "b", 4, "g3", remote_budget=0.5, refine_steps=20_000)
    assert s["stop_reason"] == "converged" and not s["refine"]["converged"]
    assert s["refine"]["kept"] == "algorithm1" and "kept" in s["refine"]["explanation"]
    assert s["after"] == plain["after"]
    np.testing.assert_array_equal(
        np.load(tmp_path / "b" / "assignment.npy"), np.load(tmp_path / "g" / "assignment.npy")
    )


def test_a_refinement_that_misses_the_goal_never_raises_the_largest_remote_set(tiny_store, tmp_path):
    for steps, out in ((1, "short"), (50_000, "long")):
        s = _partition(tiny_store, tmp_path / out, 8, "g3", max_swaps=0, refine_steps=steps)
        refine = s["refine"]
        assert not refine["converged"]
        assert s["after"]["remote_max"] <= s["before"]["remote_max"]
        if refine["kept"] == "refined":
            assert max(refine["remote_after"]) < max(refine["remote_before"])
            assert s["totals"]["remote"] <= max(refine["budget"], sum(refine["remote_before"]))
        else:
            assert s["after"]["remote_max"] == s["before"]["remote_max"]
            assert s["totals"]["remote"] == sum(refine["remote_before"])


# ------------------------------------------------------------------------------------------------------------
# shards
# ------------------------------------------------------------------------------------------------------------


def _load(folder: Path, name: str) -> np.ndarray:
    return np.load(folder / f"{name}.npy")


@pytest.mark.parametrize("store_name", ["tiny_store", "directed_store"])
@pytest.mark.parametrize("method", NODE_METHODS)
def test_shards_cover_in_neighbourhoods_and_match_the_store(request, tmp_path, store_name, method):
    store_path = request.getfixturevalue(store_name)
    k = 3
    summary = _partition(store_path, tmp_path / "p", k, method)
    store = GraphStore.open(store_path)
    indptr, indices = store.load_csr()
    in_deg, out_deg = store.load_degrees()
    feats = np.asarray(store.features[:])
    labels = store.load_labels()
    assignment = np.load(tmp_path / "p" / "assignment.npy")
    assert assignment.dtype == np.int32 and assignment.shape == (store.num_nodes,)
    shards = [tmp_path / "p" / f"part-{i:05d}" for i in range(k)]
    owned = [_load(s, "owned") for s in shards]
    remote = [_load(s, "remote") for s in shards]
    ptr = [_load(s, "remote_owner_ptr") for s in shards]
    np.testing.assert_array_equal(np.sort(np.concatenate(owned)), np.arange(store.num_nodes))
    for i, s in enumerate(shards):
        o, r = owned[i], remote[i]
        assert np.all(np.diff(o) > 0) and np.all(assignment[o] == i)
        # owned + received = exactly the in-neighbourhood of the owned nodes
        sources = np.unique(np.concatenate([indices[indptr[v] : indptr[v + 1]] for v in o]))
        np.testing.assert_array_equal(np.sort(r), np.setdiff1d(sources, o))
        # grouped by owner, ascending ids within a group
        for q in range(k):
            group = r[ptr[i][q] : ptr[i][q + 1]]
            assert np.all(assignment[group] == q) and np.all(np.diff(group) > 0)
        # the local CSR reproduces the global rows
        local = np.concatenate([o, r])
        lp, li = _load(s, "indptr"), _load(s, "indices")
        assert li.dtype == np.int32 and lp[-1] == len(li)
        for row, v in enumerate(o):
            ids = li[lp[row] : lp[row + 1]]
            assert np.all(np.diff(ids) >= 0)
            np.testing.assert_array_equal(np.sort(local[ids]), indices[indptr[v] : indptr[v + 1]])
        np.testing.assert_array_equal(_load(s, "in_degree"), in_deg[local])
        np.testing.assert_array_equal(_load(s, "out_degree"), out_deg[local])
        np.testing.assert_array_equal(_load(s, "features"), feats[o])
        np.testing.assert_array_equal(_load(s, "labels"), labels[o])
        for split in ("train", "valid", "test"):
            ids = store.split_index(split)
            np.testing.assert_array_equal(o[_load(s, split)], ids[assignment[ids] == i])
        # every send list is exactly what the peer receives from me
        sp, send = _load(s, "send_ptr"), _load(s, "send")
        for q in range(k):
            np.testing.assert_array_equal(o[send[sp[q] : sp[q + 1]]], remote[q][ptr[q][i] : ptr[q][i + 1]])
        manifest = json.loads((s / "shard.json").read_text())
        for name, info in manifest["files"].items():
            arr = np.load(s / name, mmap_mode="r")
            assert list(arr.shape) == info["shape"] and str(arr.dtype) == info["dtype"]
        assert summary["partitions"][i]["remote"] == len(r)
        assert summary["partitions"][i]["send"] == len(send)
    graphs = load_graphs(store)
    assert summary["totals"]["edge_cut"] == edge_cut(graphs.indptr, graphs.indices, assignment)
    assert summary["totals"]["remote"] == sum(len(r) for r in remote)


def test_partition_json_records_the_run(tiny_store, tmp_path):
    s = _partition(tiny_store, tmp_path / "p", 4, "g3", hidden=32)
    on_disk = json.loads((tmp_path / "p" / "partition.json").read_text())
    assert on_disk["schema"] == "g3.partition" and on_disk["schema_version"] == 3
    assert on_disk["layouts"] == ["rows"]
    store = GraphStore.open(tiny_store)
    ref = on_disk["store"]
    assert ref["path"] == str(Path(tiny_store).resolve()) and ref["num_nodes"] == store.num_nodes
    assert ref["checksums"]["indptr"] == store.meta["checksums"]["indptr"]
    assert on_disk["stop_reason"] == s["stop_reason"] and on_disk["swaps"] == s["swaps"]
    assert on_disk["before"]["remote_max"] >= on_disk["after"]["remote_max"]
    p0 = on_disk["partitions"][0]
    assert p0["recv_bytes_per_layer"] == p0["remote"] * 32 * 4
    assert sum(p["send"] for p in on_disk["partitions"]) == on_disk["totals"]["remote"]
    assert {"load", "metis", "algorithm1", "shards", "total"} <= set(on_disk["timing"])


def test_k1_puts_everything_in_one_partition(tiny_store, tmp_path):
    s = _partition(tiny_store, tmp_path / "p", 1, "g3")
    assert s["stop_reason"] == "single partition"
    shard = tmp_path / "p" / "part-00000"
    assert len(_load(shard, "owned")) == GraphStore.open(tiny_store).num_nodes
    assert len(_load(shard, "remote")) == 0 and s["totals"]["edge_cut"] == 0


def test_feature_split_covers_every_column_once(tiny_store, tmp_path):
    k = 5
    s = _partition(tiny_store, tmp_path / "p", k, "feature")
    store = GraphStore.open(tiny_store)
    feats = np.asarray(store.features[:])
    f = store.feat_dim
    cols = feature_columns(f, k)
    assert sum(c["stop"] - c["start"] for c in cols) == f
    assert [c["start"] for c in cols] == sorted(c["start"] for c in cols)
    width = -(-f // k)
    seen = np.zeros(f, dtype=int)
    owned = []
    for w in range(k):
        shard = tmp_path / "p" / f"part-{w:05d}"
        manifest = json.loads((shard / "shard.json").read_text())
        c = manifest["feature_columns"]
        x = _load(shard, "features")
        assert x.shape == (store.num_nodes, width)
        np.testing.assert_array_equal(x[:, : c["stop"] - c["start"]], feats[:, c["start"] : c["stop"]])
        assert not x[:, c["stop"] - c["start"] :].any()  # zero padding
        seen[c["start"] : c["stop"]] += 1
        owned.append(_load(shard, "owned"))
        assert manifest["store"]["checksums"]["indices"] == store.meta["checksums"]["indices"]
    assert np.all(seen == 1)
    np.testing.assert_array_equal(np.concatenate(owned), np.arange(store.num_nodes))
    assert s["totals"]["remote"] == 0


def test_layouts_are_recorded_and_implied_for_version_1_partitions(tiny_store, tmp_path):
    from stages.common.partition_artifact import load_partition_meta

    _partition(tiny_store, tmp_path / "f", 2, "feature")
    assert load_partition_meta(tmp_path / "f")["layouts"] == ["columns"]
    _partition(tiny_store, tmp_path / "r", 2, "random")
    for folder, implied in (("f", ["columns"]), ("r", ["rows"])):  # the same partition as version 1 wrote it
        f = tmp_path / folder / "partition.json"
        old = json.loads(f.read_text())
        del old["layouts"], old["content_sha256"]  # version 1 partitions were neither sealed
        f.write_text(json.dumps({**old, "schema_version": 1}))
        assert load_partition_meta(tmp_path / folder)["layouts"] == implied


def test_a_method_with_two_layouts_writes_the_shards_of_both(tiny_store, tmp_path, monkeypatch):
    """A method declaring ("rows", "columns") (P3's need: hashed structure and column-split features at once)
    gets node shards in PART and column shards in PART/columns, and partition.json records both."""
    from stages.kits.partition import baselines
    from stages.kits.partition.methods import KIT_METHODS, PartitionMethod
    from stages.strategies import registry

    both = PartitionMethod(
        "both",
        "test: hashed rows and split columns",
        assign=baselines.assign_random,
        layouts=("rows", "columns"),
    )
    monkeypatch.setattr(registry, "KIT_METHODS", (*KIT_METHODS, both))
    k = 3
    s = _partition(tiny_store, tmp_path / "p", k, "both", seed=5)
    store = GraphStore.open(tiny_store)
    feats = np.asarray(store.features[:])
    part = random_partition(store.num_nodes, k, 5)
    assert s["layouts"] == ["rows", "columns"] and s["feature_split"]["columns"] == feature_columns(
        store.feat_dim, k
    )
    assert s["totals"]["remote"] > 0  # the primary layout's (rows') figures
    for w in range(k):
        rows = tmp_path / "p" / f"part-{w:05d}"
        np.testing.assert_array_equal(_load(rows, "owned"), np.flatnonzero(part == w))
        np.testing.assert_array_equal(_load(rows, "features"), feats[part == w])
        cols = tmp_path / "p" / "columns" / f"part-{w:05d}"
        c = json.loads((cols / "shard.json").read_text())["feature_columns"]
        np.testing.assert_array_equal(
            _load(cols, "features")[:, : c["stop"] - c["start"]], feats[:, c["start"] : c["stop"]]
        )
        assert json.loads((cols / "shard.json").read_text())["layout"] == "columns"


def test_an_unknown_method_is_one_line_naming_the_choices(tiny_store, tmp_path):
    with pytest.raises(
        G3InputError, match="unknown method 'nope' .*g3, metis, random, chunk, distdgl, bytegnn"
    ):
        _partition(tiny_store, tmp_path / "p", 2, "nope")


# ------------------------------------------------------------------------------------------------------------
# determinism and baselines
# ------------------------------------------------------------------------------------------------------------


def test_same_seed_same_partition(tiny_store, tmp_path):
    a = _partition(tiny_store, tmp_path / "a", 4, "g3", seed=7)
    b = _partition(tiny_store, tmp_path / "b", 4, "g3", seed=7)
    np.testing.assert_array_equal(
        np.load(tmp_path / "a" / "assignment.npy"), np.load(tmp_path / "b" / "assignment.npy")
    )
    assert a["swaps"] == b["swaps"]
    np.testing.assert_array_equal(random_partition(1000, 7, 3), random_partition(1000, 7, 3))
    assert not np.array_equal(random_partition(1000, 7, 3), random_partition(1000, 7, 4))


def test_baselines_are_balanced():
    counts = np.bincount(chunk_partition(1003, 4))
    assert counts.max() - counts.min() <= 1 and np.all(np.diff(chunk_partition(1003, 4)) >= 0)
    counts = np.bincount(random_partition(100_000, 8, 0), minlength=8)
    assert counts.max() / counts.mean() < 1.03


# ------------------------------------------------------------------------------------------------------------
# CLI: report, info, plot, errors
# ------------------------------------------------------------------------------------------------------------


def _invoke(args):
    return CliRunner().invoke(cli, args)


def test_cli_reports_and_info_prints_again(tiny_store, tmp_path):
    out, plot = tmp_path / "p", tmp_path / "remote.png"
    r = _invoke(["partition", str(tiny_store), "-w", "3", "-o", str(out), "--plot", str(plot)])
    assert r.exit_code == 0, r.output
    assert "remote" in r.output and "max/mean" in r.output and "Algorithm 1" in r.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = _invoke(["info", str(out)])
    assert r.exit_code == 0 and "balance" in r.output and "Algorithm 1" in r.output


def test_cli_default_output_beside_the_store(tiny_store):
    out = tiny_store.parent / f"{tiny_store.name}.part-chunk-2"
    r = _invoke(["partition", str(tiny_store) + "/", "-w", "2", "--method", "chunk"])
    assert r.exit_code == 0, r.output
    assert (out / "partition.json").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["-w", "2"], "no such store"),
        (["-w", "0"], "at least 1"),
        (["-w", "5000"], "more than the 2,000 nodes"),
        (["-w", "2", "--gamma", "1.5"], "--gamma"),
        (["-w", "2", "--degree-tol", "0.5"], "--degree-tol"),
        (["-w", "2", "--plot", "x.jpg"], ".png"),
        (["-w", "2", "--refine-steps", "-1"], "--refine-steps"),
        (["-w", "2", "--remote-budget", "0"], "--remote-budget"),
    ],
)
def test_cli_bad_inputs_are_one_line_errors(tiny_store, tmp_path, args, message):
    store = tmp_path / "missing" if message == "no such store" else tiny_store
    out = tmp_path / "out"
    before = set(tmp_path.iterdir())
    r = _invoke(["partition", str(store), *args, "-o", str(out)])
    assert r.exit_code == 2
    assert message in r.output and r.output.count("\n") == 1
    assert set(tmp_path.iterdir()) == before  # nothing written


def test_cli_refuses_another_schema_and_an_existing_output(tiny_store, tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    r = _invoke(["partition", str(fake), "-w", "2", "-o", str(tmp_path / "o1")])
    assert r.exit_code == 2 and "not a g3 store" in r.output and not (tmp_path / "o1").exists()
    out = tmp_path / "o2"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = _invoke(["partition", str(tiny_store), "-w", "2", "-o", str(out)])
    assert r.exit_code == 2 and "--force" in r.output and r.output.count("\n") == 1
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o2")]
    # --force replaces an earlier partition, not a folder of the user's files
    r = _invoke(["partition", str(tiny_store), "-w", "2", "-o", str(out), "--force", "--method", "random"])
    assert r.exit_code == 2 and "not a g3 partition" in r.output and (out / "keep.txt").is_file()
    (out / "keep.txt").unlink()
    r = _invoke(["partition", str(tiny_store), "-w", "2", "-o", str(out), "--force", "--method", "random"])
    assert r.exit_code == 0 and (out / "partition.json").is_file()
    r = _invoke(["partition", str(tiny_store), "-w", "2", "-o", str(out), "--force", "--method", "chunk"])
    assert r.exit_code == 0 and json.loads((out / "partition.json").read_text())["method"] == "chunk"
