"""DistDGL's sampling service (`stages/kits/runtime/sampling_service.py`) and the distdgl strategy's use of it.

The service tests run K services in one process (threads for the workers, addresses exchanged through a
barrier instead of the process group): requests from several threads to several owners at once, CSR replies
sized by what was drawn (no padding: the bytes counted are the counts and picks themselves), a handler's error
named on the asker's side, a reply that does not come raising after the timeout, and a close that ends every
thread at once even with connections open both ways.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from stages.kits.runtime.neighbor_sampler import sample_key, sample_rows, signed64
from stages.kits.runtime.sampling_service import SamplingService
from stages.kits.runtime.trace import Tracer
from stages.kits.runtime.transport import CommStats
from stages.strategies.distdgl.runtime import regroup


def power_law_csr(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """In-neighbour lists (ascending global ids) with a heavy tail of degrees: a few rows hold most arcs."""
    rng = np.random.default_rng(seed)
    deg = np.minimum((rng.pareto(1.2, n) * 3).astype(np.int64), n - 1)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    nbrs = np.concatenate([np.sort(rng.choice(n, d, replace=False)) for d in deg]).astype(np.int64)
    return indptr, nbrs


def start_services(
    handlers_of, k: int, timeout: float = 10.0, serve_threads: int = 0
) -> list[SamplingService]:
    """K services in this process, worker w serving ``handlers_of(w)``."""
    addresses: list = [None] * k
    barrier = threading.Barrier(k)
    services: list = [None] * k

    def start(w: int) -> None:
        def exchange(own):
            addresses[w] = own
            barrier.wait()
            return list(addresses)

        services[w] = SamplingService(
            w,
            k,
            handlers_of(w),
            CommStats(),
            Tracer(w),
            timeout,
            exchange=exchange,
            serve_threads=serve_threads,
        )

    threads = [threading.Thread(target=start, args=(w,)) for w in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return services


def test_regroup_puts_answers_grouped_by_owner_back_in_the_nodes_order():
    indptr, nbrs = power_law_csr(200, 1)
    rng = np.random.default_rng(2)
    nodes = rng.integers(0, 200, 120)  # repeats allowed
    owner = rng.integers(0, 3, 120)
    key = sample_key(1, 2, 3, 1)
    order = np.argsort(owner, kind="stable")
    counts_sorted, picks_sorted = sample_rows(indptr, nbrs, nodes[order], nodes[order], 4, key)
    counts, picks = regroup(order, counts_sorted, picks_sorted)
    direct = sample_rows(indptr, nbrs, nodes, nodes, 4, key)
    assert np.array_equal(counts, direct[0]) and np.array_equal(picks, direct[1])


def test_owners_answer_requests_from_several_threads_with_replies_sized_by_the_draw():
    k, n = 3, 400
    indptr, nbrs = power_law_csr(n, 3)
    owner = np.arange(n) % k  # worker w serves the nodes v with v % k == w, from its own rows only

    def handlers_of(w: int):
        def sample(params, arrays):
            fanout, key = int(params[0]), int(params[1]) & ((1 << 64) - 1)
            ids = arrays[0].astype(np.int64)
            if (owner[ids] != w).any():
                raise ValueError(f"asked to sample nodes worker {w} does not own")
            c, p = sample_rows(indptr, nbrs, ids, ids, fanout, key)
            return [c.astype(np.int32), p.astype(np.int32)]

        return {"sample": sample}

    services = start_services(handlers_of, k)
    try:
        errors = []

        def ask(w: int, thread: int) -> None:
            try:
                for step in range(5):
                    key = sample_key(7, thread, step, 1)
                    for fanout in (3, -1):
                        ids = {
                            q: np.flatnonzero(owner == q)[thread::4][: 30 + step] for q in range(k) if q != w
                        }
                        pending = {
                            q: services[w].submit(q, "sample", [fanout, signed64(key)], [i.astype(np.int32)])
                            for q, i in ids.items()
                        }
                        for q, p in pending.items():
                            c, picks = p.result()
                            want = sample_rows(indptr, nbrs, ids[q], ids[q], fanout, key)
                            assert np.array_equal(c, want[0]) and np.array_equal(picks, want[1])
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=ask, args=(w, t)) for w in range(k) for t in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]

        def two_worker_sample(params, arrays):
            ids = arrays[0].astype(np.int64)
            c, p = sample_rows(indptr, nbrs, ids, ids, int(params[0]), int(params[1]))
            return [c.astype(np.int32), p.astype(np.int32)]

        # a reply is the counts and the picks themselves (4 bytes each) plus fixed headers: no padding to a width
        one = start_services(lambda w: handlers_of(w) if w == 0 else {"sample": two_worker_sample}, 2)
        try:
            mine = np.flatnonzero(np.arange(n) % 2 == 1)  # worker 1's nodes among two workers
            ids = mine[np.argsort(np.diff(indptr)[mine])[-3:]]  # its three largest rows, all neighbours asked
            c, picks = one[0].submit(1, "sample", [-1, 5], [ids.astype(np.int32)]).result()
            assert int(c.sum()) == len(picks) == int(np.diff(indptr)[ids].sum())
            headers = 1 + 4 + 2 * (8 + 8)  # status, array count, two 1-D array headers
            assert one[0].stats.per_phase_recv["sample"] == headers + 4 * len(ids) + 4 * len(picks)
            assert one[1].stats.per_phase_sent["sample"] == one[0].stats.per_phase_recv["sample"]
            assert one[1].stats.per_phase_recv["sample-ids"] == one[0].stats.per_phase_sent["sample-ids"]
        finally:
            for s in one:
                s.close()
        # the asker names the owner and the owner's error
        with pytest.raises(
            RuntimeError,
            match="worker 2 failed to answer a sample request: ValueError: asked to "
            "sample nodes worker 2 does not own",
        ):
            services[0].submit(2, "sample", [3, 1], [np.array([0], dtype=np.int32)]).result()
        with pytest.raises(RuntimeError, match="KeyError"):
            services[0].submit(1, "nothing", [], []).result()
    finally:
        for s in services:
            s.close()


def test_a_silent_owner_times_out_and_close_ends_every_thread_at_once():
    release = threading.Event()

    def handlers_of(w: int):
        def slow(params, arrays):
            release.wait(5)
            return [arrays[0]]

        return {"slow": slow, "echo": lambda params, arrays: [arrays[0]]}

    services = start_services(handlers_of, 2, timeout=0.5)
    try:
        before = time.perf_counter()
        with pytest.raises(RuntimeError, match="worker 1 did not answer a slow request .no reply within"):
            services[0].submit(1, "slow", [], [np.arange(3)]).result()
        assert time.perf_counter() - before < 3
        release.set()
        # connections open both ways, one request pending on worker 0's server
        assert services[1].submit(0, "echo", [], [np.arange(4)]).result()[0].tolist() == [0, 1, 2, 3]
        assert services[0].submit(1, "echo", [], [np.arange(2)]).result()[0].tolist() == [0, 1]
    finally:
        before = time.perf_counter()
        for s in services:
            s.close()
        assert time.perf_counter() - before < 3
    time.sleep(0.2)
    assert not any(t.is_alive() for s in services for t in s.threads)
    with pytest.raises(RuntimeError, match="cannot reach worker 1"):
        services[0].submit(1, "echo", [], [np.arange(2)])


@pytest.mark.parametrize("serve_threads", [0, 1])
def test_a_scheduling_owner_answers_queued_requests_by_priority(serve_threads):
    """ByteGNN's owners: with scheduled serving, requests queued while the serving thread is busy are answered
    smallest priority first (not in arrival order); without it, each connection's thread answers at once."""
    gate, started, order = threading.Event(), threading.Event(), []

    def handlers_of(w: int):
        def work(params, arrays):
            order.append(int(params[0]))
            if int(params[0]) == 0:
                started.set()
                gate.wait(5)
            return [arrays[0]]

        return {"work": work}

    services = start_services(handlers_of, 2, serve_threads=serve_threads)
    try:
        ask = services[0]
        first = ask.submit(1, "work", [0], [np.arange(1)], priority=(0, 0))
        assert started.wait(5)
        # arrival order 3, 1, 2 (priorities (step, cost)), while the owner's one serving thread is busy; each
        # sent once the one before is queued (separate connections: their reader threads could reorder them)
        later = []
        for n, i in enumerate((3, 1, 2), start=2):
            later.append(ask.submit(1, "work", [i], [np.arange(i)], priority=(i, 10 - i)))
            deadline = time.perf_counter() + 5
            while (
                serve_threads and services[1].schedule_stats["queued"] < n and time.perf_counter() < deadline
            ):
                time.sleep(0.005)
        if serve_threads:
            assert order == [0]  # the others wait in the queue
            gate.set()
            replies = [p.result() for p in later]
        else:  # each connection's thread answers at once: nobody waits for the busy one
            replies = [p.result() for p in later]
            gate.set()
        assert [r[0].tolist() for r in replies] == [list(range(i)) for i in (3, 1, 2)]
        assert first.result()[0].tolist() == [0]
        stats = services[1].schedule_stats
        if serve_threads:
            assert order == [0, 1, 2, 3]
            assert stats == {"queued_max": 3, "ahead": 2, "queued": 4}
        else:
            assert order[0] == 0 and sorted(order[1:]) == [1, 2, 3] and stats["queued"] == 0
    finally:
        gate.set()
        for s in services:
            s.close()


# --- local order: DistDGL's even split of the training set (001:205) ------------------------------------------
def even_split_by_hand(train: list[np.ndarray]) -> list[list[int]]:
    """The split written out node by node: shares N // K, one more for the N % K workers holding most (ties to
    the lower rank); a worker over its share gives its largest ids, handed in rank order to those under it."""
    k, n = len(train), sum(len(t) for t in train)
    by_size = sorted(range(k), key=lambda w: (-len(train[w]), w))
    share = [n // k + (1 if by_size.index(w) < n % k else 0) for w in range(k)]
    kept = [sorted(t.tolist())[: share[w]] for w, t in enumerate(train)]
    given = [v for w, t in enumerate(train) for v in sorted(t.tolist())[share[w] :]]
    for w in range(k):
        while len(kept[w]) < share[w]:
            kept[w].append(given.pop(0))
    assert not given
    return [sorted(x) for x in kept]


@pytest.mark.parametrize("sizes", [(5, 6), (10, 3, 0, 7), (4, 4, 4), (0, 9), (1, 1, 1, 9)])
def test_the_even_split_gives_every_worker_the_same_count_keeping_its_own_first(sizes):
    from stages.strategies.distdgl.runtime import balanced_split

    rng = np.random.default_rng(sum(sizes))
    ids = rng.permutation(100)[: sum(sizes)]
    train = [np.sort(part) for part in np.split(ids, np.cumsum(sizes)[:-1])]
    split = balanced_split(train)
    assert [s.tolist() for s in split] == even_split_by_hand(train)
    counts = [len(s) for s in split]
    assert max(counts) - min(counts) <= 1 and sum(counts) == sum(sizes)
    assert np.array_equal(np.sort(np.concatenate(split)), np.sort(ids))
    for t, s in zip(train, split, strict=True):  # as many of its own as its share allows
        assert len(np.intersect1d(t, s)) == min(len(t), len(s))


def test_local_order_trains_the_even_split_as_one_process_fed_the_union_batches(store, partitions, tmp_path):
    from helpers import DROPOUT, LR, SEED, weights
    from reference_minibatch import labelled_train, minibatch_train, permutation
    from test_minibatch import EPOCHS, run_distdgl
    from test_train import max_weight_diff, ref_graph

    part = partitions("random", 2)
    graph = ref_graph(store)
    assignment = np.load(part / "assignment.npy").astype(np.int64)
    train = labelled_train(graph)
    own = [np.sort(train[assignment[train] == w]) for w in range(2)]
    assert len(own[0]) != len(own[1])  # the precondition: the split moves training nodes between workers
    split = [np.array(s, dtype=np.int64) for s in even_split_by_hand(own)]
    batch = 15
    steps = -(-max(len(s) for s in split) // batch)

    def batches(epoch: int) -> list[np.ndarray]:
        perms = [permutation(s, SEED, epoch) for s in split]
        return [np.concatenate([p[i * batch : (i + 1) * batch] for p in perms]) for i in range(steps)]

    run = run_distdgl(part, tmp_path, "sage", order="local", batch=batch)
    init, final = weights(run)
    expected = minibatch_train("sage", init, graph, batches, [3, 2], EPOCHS, LR, DROPOUT, SEED)
    assert max_weight_diff(final, expected) <= 1e-5
    rec = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    per_worker = -(-len(train) // 2)  # ceil(N / K) targets per epoch on the fuller worker, one fewer at most
    assert rec[0]["steps"] == -(-per_worker // batch)


def test_scheduled_serving_does_not_hold_a_large_reply_the_asker_reads_later():
    """An owner answers queued requests in priority order, an asker reads its replies in its own order (ByteGNN's
    network thread: the order it sent them). A reply larger than the sockets' buffers, written by the serving
    thread, held that thread until the asker read it — while the reply the asker was waiting for sat queued
    behind it: a deadlock until the timeout (Facebook page-page's 4,714-wide feature rows). Replies are written
    off the serving thread now."""
    gate = threading.Event()
    big = np.ones(24 << 20, dtype=np.uint8)  # 24 MiB: far beyond a loopback socket's buffers

    def handlers_of(w: int):
        def gated(params, arrays):
            gate.wait(10)
            return [np.zeros(1, dtype=np.int64)]

        def large(params, arrays):
            return [big]

        return {"gated": gated, "large": large}

    services = start_services(handlers_of, 2, timeout=8.0, serve_threads=1)
    try:
        first = services[0].submit(1, "gated", [], [np.zeros(1, dtype=np.int64)], priority=(0,))
        time.sleep(0.3)  # the one serving thread of worker 1 is inside `gated` now: the next two queue
        later = services[0].submit(1, "large", [], [np.zeros(1, dtype=np.int64)], priority=(2,))
        earlier = services[0].submit(1, "large", [], [np.zeros(1, dtype=np.int64)], priority=(1,))
        time.sleep(0.3)
        gate.set()
        first.result()
        assert later.result()[0].nbytes == big.nbytes  # read before `earlier`, which was answered first
        assert earlier.result()[0].nbytes == big.nbytes
    finally:
        for s in services:
            s.close()
