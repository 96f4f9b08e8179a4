"""The runtime's random choices against the specification (tests/reference_minibatch.py, plain numpy): keys,
neighbour draws, batch permutations and dropout keys equal draw by draw; and the specified draw is what it
claims to be: min(fanout, degree) distinct neighbours, uniform over subsets (chi-square tests on fixed keys,
shown to reject biased samplers), a permutation that changes with the epoch.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from reference_minibatch import ascending_rows, draw, dropout_epoch, key_of, mix, permutation
from scipy.stats import chi2

from stages.kits.runtime.minibatch import shuffled, step_key
from stages.kits.runtime.neighbor_sampler import sample_key, sample_rows, sorted_rows_by_global

# keys that exercise the 64-bit edges: zero, the sign bit, the top, negative ints taken mod 2^64
KEY_PARTS = [
    (0, 0, 0, 0),
    (7, 3, 12, 1),
    (2**63, 1, 2**32 + 5, 2),
    (2**64 - 1, 99, 0, 0),
    (-1, 5, 7, 1),
    (123456789, 2**40, 3, 0xBA7C4),
]
FANOUTS = [1, 2, 3, 8, 39, 40, 100, -1]


@pytest.fixture(scope="module")
def graph():
    """300 nodes, degrees 0..44 (isolated nodes included), distinct neighbours listed in random order."""
    rng = np.random.default_rng(0)
    n = 300
    degree = rng.integers(0, 45, n)
    degree[:3] = (0, 1, 44)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    indices = np.concatenate([rng.choice(n, d, replace=False) for d in degree]).astype(np.int64)
    return indptr, indices, ascending_rows(indptr, indices)


def test_mix_is_splitmix64():
    """The published splitmix64 stream from state 0 (Vigna's generator: output i = mix(i * golden)):
    E220A8397B1DCDAF, 6E789E6AA1B965F4, 06C45D188009454F."""
    golden = 0x9E3779B97F4A7C15
    states = np.array([0, golden, 2 * golden % 2**64], dtype=np.uint64)
    assert [hex(int(z)) for z in mix(states)] == [
        "0xe220a8397b1dcdaf",
        "0x6e789e6aa1b965f4",
        "0x6c45d188009454f",
    ]


@pytest.mark.parametrize("parts", KEY_PARTS)
def test_keys_are_the_specified_ones(parts):
    assert sample_key(*parts) == key_of(*parts)


def test_dropout_keys_are_the_specified_ones():
    pairs = [(e, s) for e in range(40) for s in (0, 1, 2, 17, 1000, 2**31 + 3)]
    assert [step_key(e, s) for e, s in pairs] == [dropout_epoch(e, s) for e, s in pairs]
    assert step_key(9, 0) == 9  # step 0's dropout masks are the epoch's


def test_neighbours_are_sorted_by_global_id_the_specified_way(graph):
    indptr, indices, nbrs = graph
    assert np.array_equal(sorted_rows_by_global(indptr, indices, np.arange(len(indptr) - 1)), nbrs)


@pytest.mark.parametrize("fanout", FANOUTS)
def test_the_runtime_draws_exactly_the_specified_neighbours(graph, fanout):
    """Every node, several keys, asked in the CSR's own row order and by "another worker" whose CSR holds the
    nodes in another order (rows differ from ids): the runtime's picks are the specification's, pick by pick."""
    indptr, _, nbrs = graph
    n = len(indptr) - 1
    nodes = np.arange(n)
    order = np.random.default_rng(fanout + 2).permutation(n)  # another worker's row order
    local_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.diff(indptr)[order], out=local_indptr[1:])
    local_nbrs = np.concatenate([nbrs[indptr[v] : indptr[v + 1]] for v in order])
    for parts in KEY_PARTS:
        key = key_of(*parts)
        expected = draw(indptr, nbrs, nodes, fanout, key)
        got = sample_rows(indptr, nbrs, nodes, nodes, fanout, key)
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]), parts
        asked = order[::-1][:120]  # a subset, in yet another order
        rows = np.argsort(order)[asked]
        want = draw(indptr, nbrs, asked, fanout, key)
        other = sample_rows(local_indptr, local_nbrs, rows, asked, fanout, key)
        assert np.array_equal(other[0], want[0]) and np.array_equal(other[1], want[1]), parts


@pytest.mark.parametrize("fanout", FANOUTS)
def test_a_draw_is_min_fanout_degree_distinct_neighbours_ascending(graph, fanout):
    indptr, _, nbrs = graph
    n = len(indptr) - 1
    degree = np.diff(indptr)
    counts, picks = sample_rows(indptr, nbrs, np.arange(n), np.arange(n), fanout, key_of(1, 2, 3, 0))
    assert np.array_equal(counts, degree if fanout < 0 else np.minimum(degree, fanout))
    row = np.repeat(np.arange(n), counts)
    assert np.isin(row * n + picks, np.repeat(np.arange(n), degree) * n + nbrs).all()  # real neighbours
    same_row = row[1:] == row[:-1]
    assert (np.diff(picks)[same_row] > 0).all()  # ascending global id, hence no neighbour twice
    whole = degree <= fanout if fanout >= 0 else np.ones(n, dtype=bool)
    assert np.array_equal(picks[np.repeat(whole, counts)], nbrs[np.repeat(whole, degree)])  # all of them
    if not whole.all():  # another key, another draw
        assert not np.array_equal(
            picks, sample_rows(indptr, nbrs, np.arange(n), np.arange(n), fanout, key_of(1, 2, 3, 1))[1]
        )


# --- uniformity ----------------------------------------------------------------------------------------------
DEGREE, FANOUT, DRAWS = 7, 3, 7000  # C(7, 3) = 35 subsets, 200 draws each expected
SUBSETS = np.array([sum(p * DEGREE**i for i, p in enumerate(c)) for c in combinations(range(DEGREE), FANOUT)])
P_VALUE = 1e-4  # fixed keys make the test deterministic; a correct sampler's statistic sits far below


def runtime_draws(key: int) -> np.ndarray:
    """DRAWS independent draws of FANOUT of one DEGREE-neighbour list: the same list under DRAWS node ids (the
    node id enters every position's hash), picks as positions ``[DRAWS, FANOUT]``."""
    indptr = np.arange(DRAWS + 1, dtype=np.int64) * DEGREE
    nbrs = np.tile(np.arange(DEGREE, dtype=np.int64), DRAWS)
    nodes = np.arange(DRAWS, dtype=np.int64) * 7919 + 11
    counts, picks = sample_rows(indptr, nbrs, np.arange(DRAWS), nodes, FANOUT, key)
    assert (counts == FANOUT).all()
    return picks.reshape(DRAWS, FANOUT)


def first_neighbours(key: int) -> np.ndarray:
    """Biased: always the first FANOUT neighbours."""
    return np.tile(np.arange(FANOUT), (DRAWS, 1))


def random_window(key: int) -> np.ndarray:
    """Biased but with uniform marginals: FANOUT cyclically consecutive neighbours from a random start."""
    start = np.random.default_rng(key % 2**32).integers(0, DEGREE, DRAWS)
    return np.sort((start[:, None] + np.arange(FANOUT)) % DEGREE, axis=1)


def with_replacement(key: int) -> np.ndarray:
    """Biased: FANOUT independent uniform picks, repeats kept (each row a multiset)."""
    return np.sort(np.random.default_rng(key % 2**32).integers(0, DEGREE, (DRAWS, FANOUT)), axis=1)


def marginal_statistic(picks: np.ndarray) -> float:
    """Chi-square of how often each neighbour is picked against DRAWS * FANOUT / DEGREE."""
    seen = np.bincount(picks.ravel(), minlength=DEGREE)
    expected = DRAWS * FANOUT / DEGREE
    return float(((seen - expected) ** 2 / expected).sum())


def subset_statistic(picks: np.ndarray) -> float:
    """Chi-square of how often each FANOUT-subset is drawn against uniform over all C(DEGREE, FANOUT) of them;
    infinite when a draw is no subset (a neighbour twice)."""
    codes = (np.sort(picks, axis=1) * DEGREE ** np.arange(FANOUT)).sum(1)
    seen = (codes[:, None] == SUBSETS[None, :]).sum(0)
    if seen.sum() < DRAWS:
        return float("inf")
    expected = DRAWS / len(SUBSETS)
    return float(((seen - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("key_parts", [(0, 0, 0, 0), (7, 4, 2, 1)])
def test_draws_are_uniform_over_subsets(key_parts):
    key = key_of(*key_parts)
    picks = runtime_draws(key)
    marginal_limit = chi2.isf(P_VALUE, DEGREE - 1)
    subset_limit = chi2.isf(P_VALUE, len(SUBSETS) - 1)
    assert marginal_statistic(picks) < marginal_limit
    assert subset_statistic(picks) < subset_limit
    # the same thresholds reject biased samplers, even one whose every neighbour is equally likely
    assert marginal_statistic(first_neighbours(key)) > 100 * marginal_limit
    assert (
        marginal_statistic(random_window(key))
        < marginal_limit
        < 10 * subset_limit
        < subset_statistic(random_window(key))
    )
    assert subset_statistic(with_replacement(key)) > 10 * subset_limit


# --- batch permutations --------------------------------------------------------------------------------------
def test_batch_permutations_are_the_specified_permutations():
    rng = np.random.default_rng(3)
    ids = rng.choice(10_000, 500, replace=False)
    for seed, epoch, stream in [(0, 0, 0), (7, 3, 0), (7, 3, 1), (2**63 + 1, 11, 5)]:
        perm = shuffled(ids, seed, epoch, stream)
        assert np.array_equal(perm, permutation(ids, seed, epoch, stream))
        assert np.array_equal(np.sort(perm), np.sort(ids))  # a permutation
        assert np.array_equal(
            shuffled(rng.permutation(ids), seed, epoch, stream), perm
        )  # whatever the input order
    by_epoch = [shuffled(ids, 7, e) for e in range(5)]
    assert all(not np.array_equal(a, b) for i, a in enumerate(by_epoch) for b in by_epoch[i + 1 :])
    assert not np.array_equal(shuffled(ids, 7, 0, stream=1), by_epoch[0])  # another stream, another order
    assert not np.array_equal(shuffled(ids, 8, 0), by_epoch[0])  # another seed, another order


def test_batch_permutations_put_every_id_first_equally_often():
    ids = np.arange(10)
    first = np.array([shuffled(ids, 7, e)[0] for e in range(2000)])
    seen = np.bincount(first, minlength=10)
    assert float(((seen - 200) ** 2 / 200).sum()) < chi2.isf(P_VALUE, 9)


@pytest.mark.parametrize("fanout", FANOUTS + [0])
def test_the_device_sampler_draws_exactly_the_specified_neighbours(graph, fanout):
    """The torch sampler (the device path's, stages/kits/runtime/device/sampler.py) draws the specification's picks
    too, pick by pick, for every key and rows asked in any order: a run sampling on a GPU equals one sampling
    on the host."""
    import torch

    from stages.kits.runtime.device.sampler import sample_rows as device_sample_rows

    indptr, _, nbrs = graph
    n = len(indptr) - 1
    asked = np.random.default_rng(fanout + 5).permutation(n)[:200]
    for parts in KEY_PARTS:
        key = key_of(*parts)
        counts, picks = draw(indptr, nbrs, asked, fanout, key)
        got = device_sample_rows(
            torch.from_numpy(indptr),
            torch.from_numpy(nbrs),
            torch.from_numpy(asked),
            torch.from_numpy(asked),
            fanout,
            key,
        )
        assert np.array_equal(got[0].numpy(), counts) and np.array_equal(got[1].numpy(), picks), parts


def test_the_device_finds_floyds_repeats_without_running_the_rounds():
    """Which of Floyd's rounds find their candidate taken (worked out at once on the device) is what running the
    rounds one after the other finds, also where candidates repeat often (degrees just above the fanout) and
    chains of repeats are long (fanouts up to 64)."""
    import torch

    from stages.kits.runtime.device.sampler import floyd_repeats

    rng = np.random.default_rng(11)
    for fanout in (1, 2, 3, 7, 25, 64):
        degree = rng.integers(fanout + 1, fanout + 6, size=(300, 1))
        j = degree - fanout + np.arange(fanout)
        t = (rng.random((300, fanout)) * (j + 1)).astype(np.int64)
        taken = t.copy()
        for i in range(1, fanout):
            taken[:, i] = np.where((taken[:, :i] == t[:, i, None]).any(axis=1), j[:, i], t[:, i])
        repeats = floyd_repeats(torch.from_numpy(t), torch.from_numpy(j[:, :1])).numpy()
        assert np.array_equal(np.where(repeats, j, t), taken), fanout
        assert repeats.any() == (fanout > 1), fanout  # the case is exercised (one round never repeats)


def test_the_device_relabel_numbers_sources_as_the_host_does():
    """A hop's block on the device: destinations first, then the other picks in order of first appearance,
    exactly the host's block (checked here against the rule, written out with a dict)."""
    import torch

    from stages.kits.runtime.device.sampler import block_arrays

    rng = np.random.default_rng(3)
    for _ in range(30):
        dst = rng.choice(400, int(rng.integers(1, 40)), replace=False).astype(np.int64)
        counts = rng.integers(0, 7, len(dst)).astype(np.int64)
        picks = rng.integers(0, 400, int(counts.sum())).astype(np.int64)
        where = {int(v): i for i, v in enumerate(dst)}
        for v in picks:
            where.setdefault(int(v), len(where))
        scratch = torch.full((400,), -1, dtype=torch.int64)
        src, indptr, indices = block_arrays(
            torch.from_numpy(dst), torch.from_numpy(counts), torch.from_numpy(picks), scratch
        )
        assert src.tolist() == list(where) and indices.tolist() == [where[int(v)] for v in picks]
        assert indptr.tolist() == [0, *np.cumsum(counts).tolist()] and bool((scratch == -1).all())


def test_a_device_hop_reads_back_two_numbers(graph):
    """The device sampler's cost in host synchronisations: a hop reads back how many picks it made and how many
    new sources they bring (the output sizes), nothing else."""
    import torch

    from stages.kits.runtime.device.op_counter import OpCounter
    from stages.kits.runtime.device.sampler import block_arrays
    from stages.kits.runtime.device.sampler import sample_rows as device_sample_rows

    indptr, _, nbrs = (torch.from_numpy(a) for a in graph)
    nodes = torch.arange(50)
    scratch = torch.full((len(indptr) - 1,), -1, dtype=torch.int64)
    with OpCounter("cpu") as c:
        counts, picks = device_sample_rows(indptr, nbrs, nodes, nodes, 10, key_of(1, 2, 3, 0))
        block_arrays(nodes, counts, picks, scratch)
    assert c.count.sync_ops == 2, c.count.sync_by_name
