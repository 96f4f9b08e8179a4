"""How a mini-batch step gets its inputs and orders its first layer, without changing what it computes: input rows
gathered into reused buffers, the first SAGE layer reading its sources in the feature table itself (one worker),
sampled blocks ordering projection and aggregation by their sizes. The model against the independent reference
is tests/test_minibatch.py's; here each fast path is checked bitwise against the plain one.
"""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import g3_plan

from stages.kits.runtime.block import Block, cheaper_to_project, project_first
from stages.kits.runtime.config import RuntimeConfig
from stages.kits.runtime.minibatch import RowBuffers


def test_row_buffers_are_reused_when_large_enough():
    pool = RowBuffers(3, torch.float32)
    a = pool.take(100)
    assert a.shape[0] >= 100 and a.shape[1] == 3
    pool.give(a)
    assert pool.take(90) is a  # a given-back buffer serves a smaller step
    pool.give(a)
    b = pool.take(a.shape[0] + 1)  # too small: a new one, and the old one stays free
    assert b is not a and pool.take(10) is a
    pool.give(None)  # a step without a buffer gives nothing back


def test_blocks_order_by_width_unless_asked_to_order_by_cost():
    def block(n_dst, n_src, nnz, by_cost):
        return Block(
            n_dst=n_dst,
            n_src=n_src,
            indptr=torch.zeros(n_dst + 1, dtype=torch.int64),
            indices=torch.zeros(nnz, dtype=torch.int64),
            src_out_degree=torch.zeros(n_src),
            dst_in_degree=torch.zeros(n_dst),
            dst_global=torch.arange(n_dst),
            order_by_cost=by_cost,
        )

    sampled = (22_000, 150_000, 220_000)  # a first layer of fanouts (25, 10): ~7 sources per destination
    assert project_first(block(*sampled, False), 100, 16)  # width: project what narrows
    assert not project_first(block(*sampled, True), 100, 16)  # cost: 22K mean rows beat 150K products
    assert not project_first(block(1000, 22_000, 25_000, True), 256, 47)  # the last layer at hidden 256, too
    full = (1000, 1000, 50_000)  # every neighbour of every node: projecting first is cheaper, as by width
    assert project_first(block(*full, True), 100, 16) and cheaper_to_project(*(1000, 1000, 50_000), 100, 16)


@pytest.mark.parametrize("hidden", [6, 24])
def test_one_worker_reads_its_first_layer_in_the_feature_table_bitwise(partitions, tmp_path, hidden):
    """distdgl at K = 1: the first layer aggregates its sources' rows where they lie in the feature table, and the
    step gathers only the destinations' rows — the same logits and weight gradients as over the gathered rows,
    bitwise; buffers come back to the pool once the next step is taken."""
    from stages.strategies.registry import open_plan_worker

    sampling = dict(strategy="distdgl", hidden=hidden, fanouts="3,2", batch_size=40)
    plan = g3_plan(partitions("metis", 1), tmp_path / "plan", **sampling)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    import numba

    threads = torch.get_num_threads(), numba.get_num_threads()  # open_worker sets both for the process
    worker = open_plan_worker(
        0,
        1,
        plan,
        RuntimeConfig(threads=1, knobs={"prefetch": "off"}, dtype="float64", heap="system"),
        f"tcp://127.0.0.1:{port}",
    )
    st = worker.strategy
    try:
        assert st.reuse_inputs and st.inputs_in_place
        results = []
        for in_place in (True, False):
            st.inputs_in_place = in_place
            prep = st.prepare(1, 2)
            first = prep.blocks[0]
            if in_place:
                assert prep.arc_rows is not None and prep.x0.shape[0] == len(first.dst) < len(first.src)
                assert np.array_equal(prep.arc_rows, st.book.local[first.src[first.indices]])
            else:
                assert prep.arc_rows is None and prep.x0.shape[0] == len(first.src)
            assert prep.buffer is not None and prep.x0.data_ptr() == prep.buffer.data_ptr()
            st.model.zero_grad()
            out = st.run_blocks(1, 2, prep)
            F.cross_entropy(out, st.target_labels(prep.blocks[-1].dst)).backward()
            results.append([out.detach().clone()] + [p.grad.clone() for p in st.model.parameters()])
            st.row_buffers.give(prep.buffer)
        assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))
    finally:
        st.close()
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        torch.set_num_threads(threads[0])
        numba.set_num_threads(threads[1])
