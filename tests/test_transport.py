"""The transport every strategy shares, between real gloo processes: rows fetched by global id through a
partition book, all-to-all with per-peer sizes, broadcast, flag all-reduce, and accumulation in table order
whatever the arrival order. Each worker checks its own results; a failed check fails the spawn."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from stages.common.plan_artifact import Table
from stages.kits.runtime.transport import PartitionBook, Transport

N, K, WIDTH = 60, 3, 4


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _global_rows() -> torch.Tensor:
    return torch.arange(N * WIDTH, dtype=torch.float64).reshape(N, WIDTH) / 7.0


def _assignment() -> np.ndarray:
    return np.random.default_rng(3).integers(0, K, N).astype(np.int32)


def _collectives(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=K)
    try:
        tr = Transport(dist.group.WORLD, rank, K)
        # fetch by global id: any owners, repeats, own nodes; served from the owner's local rows
        book = PartitionBook(_assignment(), K)
        owned = np.flatnonzero(book.owner == rank)
        assert (book.local[owned] == np.arange(len(owned))).all()  # owned nodes ascend by global id
        mine = _global_rows()[torch.from_numpy(owned)]
        ids = np.random.default_rng(10 + rank).integers(0, N, 25 + 5 * rank)
        got = tr.fetch(ids, book, lambda local: mine[torch.from_numpy(local)], WIDTH, torch.float64, "fetch")
        assert torch.equal(got, _global_rows()[torch.from_numpy(ids)])
        # all-to-all with rows per peer that the receiver knows: r sends q r+2q rows of value 10r+q
        chunks = [torch.full((rank + 2 * q, 2), 10.0 * rank + q) for q in range(K)]
        tr.stats.reset()
        parts = tr.all_to_all(chunks, [q + 2 * rank for q in range(K)], "a2a")
        for q, part in enumerate(parts):
            assert part.shape == (q + 2 * rank, 2) and bool((part == 10.0 * q + rank).all())
        assert tr.stats.bytes_sent == sum(c.numel() * 4 for q, c in enumerate(chunks) if q != rank)
        assert tr.stats.per_phase_sent == {"a2a": tr.stats.bytes_sent}
        # broadcast from every root; flags' maximum
        for root in range(K):
            buf = torch.full((3, 2), float(rank))
            tr.broadcast(buf, root, "bc")
            assert bool((buf == root).all())
        flags = torch.zeros(K, dtype=torch.int64)
        flags[rank] = rank % 2
        assert tr.all_reduce_max(flags, "flags").tolist() == [q % 2 for q in range(K)]
    finally:
        dist.destroy_process_group()


def _in_order(rank: int, port: int) -> None:
    """Rank 0 receives one message from each peer; peer 1 sends late. finish_in_order hands them over in table
    order (peer 1, then 2), poll in arrival order."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=K)
    try:
        tr = Transport(dist.group.WORLD, rank, K, timeout=30)
        if rank == 0:
            table = Table(
                np.array([0, 1, 2, 3], dtype=np.int64), np.array([[0, 1, 2], [0, 2, 2]], dtype=np.int64)
            )
            for method in ("finish_in_order", "poll"):
                rx = tr.receiver(table, "bwd", 1, 3, torch.float64)
                seen: list[int] = []
                record = seen.append
                if method == "poll":
                    rx.poll(lambda nodes, rows, m, record=record: record(m), block=True)
                else:
                    rx.finish_in_order(lambda nodes, rows, m, record=record: record(m))
                assert seen == ([0, 1] if method == "finish_in_order" else [1, 0]), (method, seen)
                dist.barrier()
        else:
            table = Table(np.array([0, 1], dtype=np.int64), np.array([[0, 0, 2]], dtype=np.int64))
            for _ in range(2):
                if rank == 1:
                    time.sleep(0.5)  # arrives second
                tx = tr.sender(table, "bwd", 1, 2)
                tx.send_all(torch.full((2, 3), float(rank), dtype=torch.float64))
                tx.wait()
                dist.barrier()
    finally:
        dist.destroy_process_group()


def _file_backed(rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """A ``[rows, width]`` array in a shared mapping of a temporary file, as a streamed worker's messages use."""
    import tempfile

    with tempfile.TemporaryFile() as f:
        f.truncate(rows * width * 8)
        return torch.from_numpy(np.memmap(f, dtype=np.float64, mode="r+", shape=(rows, width)))


def _into_given_buffers(rank: int, port: int) -> None:
    """``alloc``: a table's messages are packed into one buffer the caller made (rows at the table's positions)
    and received into one, each message a view of it — what reaches the receiver is unchanged."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=K)
    try:
        tr = Transport(dist.group.WORLD, rank, K, timeout=30)
        made: list[torch.Tensor] = []

        def alloc(rows, width, dtype):
            made.append(_file_backed(rows, width, dtype))
            return made[-1]

        rows = _global_rows()[:10] + rank
        if rank == 0:  # two messages from each peer; rows 0..9 of the receiving table
            table = Table(
                np.arange(10, dtype=np.int64), np.array([[0, 1, 3], [0, 2, 2], [1, 1, 2], [1, 2, 3]])
            )
            got = torch.zeros(10, WIDTH, dtype=torch.float64)
            rx = tr.receiver(table, "fwd", 0, WIDTH, torch.float64, alloc=alloc)
            rx.finish_in_order(lambda nodes, buf, _m: got.index_copy_(0, nodes, buf))
            assert len(made) == 1 and made[0].shape == (10, WIDTH)
            # peer q sends rows[[q, q + 4, q + 6]] of its rows in step 0, the first ones of its next two in step 1
            expected = [
                _global_rows()[i] + q for q, idx in ((1, [1, 5, 7, 2, 3]), (2, [2, 6, 3, 4, 5])) for i in idx
            ]
            order = [0, 1, 2, 5, 6, 3, 4, 7, 8, 9]  # table order: step, then peer
            assert torch.equal(got, torch.stack([expected[i] for i in order]))
            assert torch.equal(made[0], got)  # the rows arrived in the buffer itself
        else:
            step0, step1 = (3, 2) if rank == 1 else (2, 3)
            nodes = [rank, rank + 4, rank + 6][:step0] + [rank + 1, rank + 2, rank + 3][:step1]
            table = Table(np.array(nodes, dtype=np.int64), np.array([[0, 0, step0], [1, 0, step1]]))
            tx = tr.sender(table, "fwd", 0, 10, alloc=alloc)
            tx.send_all(rows)
            tx.wait()
            assert len(made) == 1 and torch.equal(made[0], rows[torch.tensor(nodes)])
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("fn", [_collectives, _in_order, _into_given_buffers])
def test_transport_between_processes(fn):
    mp.spawn(fn, args=(_port(),), nprocs=K, join=True)


def test_partition_book_maps_every_node_to_its_owner_and_local_id():
    a = np.array([2, 0, 2, 1, 0, 2], dtype=np.int32)
    book = PartitionBook(a, 3)
    assert book.owner.tolist() == [2, 0, 2, 1, 0, 2]
    assert book.local.tolist() == [0, 0, 1, 0, 1, 2]


def test_a_worker_keeps_the_threads_it_was_given():
    """numba's OpenMP layer, started by numba.set_num_threads, resets the OpenMP thread count torch reads; the
    worker's thread setting must survive it (torch and numba both at --threads), in a fresh interpreter."""
    import subprocess
    import sys

    code = (
        "from stages.kits.runtime.config import RuntimeConfig; from stages.kits.runtime.worker import set_threads; "
        "import torch, numba; from stages.kits.runtime import kernels; "
        "n = set_threads(RuntimeConfig(threads=1), 2); "
        "print(n, torch.get_num_threads(), numba.get_num_threads(), kernels._nb_threads())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["1", "1", "1", "1"]


def test_a_receive_that_failed_in_gloo_names_the_worker_and_what_to_change():
    """gloo's own words for a receive that timed out or whose peer went away become one line naming the peer
    and --timeout (a streamed layer on a few cores can outlast the default), the gloo text kept."""
    from stages.kits.runtime.transport import peer_failure

    timed_out = RuntimeError(
        "Application timeout caused pair closure. This is typically caused by a remote worker hanging"
    )
    err = peer_failure("fwd_recv_0", 3, 60.0, timed_out)
    assert "worker 3" in str(err) and "--timeout 60 s" in str(err) and "larger --timeout" in str(err)
    assert "[gloo: Application timeout caused pair closure.]" in str(err)
    reset = RuntimeError(
        "[../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:13749: Connection reset by peer. This is "
        "typically caused by a remote worker hanging or bugs in the application."
    )
    err = peer_failure("fwd_recv_0", 5, 60.0, reset)
    assert "worker 5 closed its connection" in str(err) and "see its log" in str(err)
    other = ValueError("something else")
    assert peer_failure("fwd_recv_0", 1, 60.0, other) is other
