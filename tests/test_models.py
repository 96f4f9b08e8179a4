"""g3's GNN layers, kernels and dropout masks against the independent full-graph reference (tests/reference.py).

The central property (G3 §5.3): computing a layer bin by bin — any cut of the destinations into bins, each bin
with all its in-edges — and backpropagating bin by bin gives the same logits and the same weight gradients as
whole-graph training. That is exactly what the distributed runtime does, minus the communication.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import torch
from binexec import backward_bins, build_block, forward_bins, validate_block
from reference import RefGraph, reference_forward, reference_loss, reference_train

from stages.kits.runtime.block import Block
from stages.kits.runtime.dropout import dropout_mask, dropout_uniform_bits
from stages.kits.runtime.kernels import (
    BACKENDS,
    add_rows_at,
    add_self_loops,
    block_transpose,
    csr_mean,
    csr_sum,
    csr_transpose,
    edge_softmax,
    put_rows_at,
    relu_dropout,
    row_ids,
    take_rows_at,
    use_backend,
)
from stages.kits.runtime.models import GNNModel, build_model

CASES = [("sage", 8), ("gcn", 8), ("gat", 2), ("gat", 8)]  # (kind, heads); heads only matter for GAT
# (in_dim, hidden, num_classes): layer 0 widens / last layer narrows, and the reverse
DIMS = [(5, 8, 3), (12, 4, 10)]
LAYERS = 3  # two hidden layers (one hidden → hidden) and the last


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: OpenMP threads only add spin-waits, which take seconds on a loaded 2-core machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# --- graph and bin construction ---------------------------------------------------------------------------
def random_graph(
    n: int = 60, avg_deg: float = 3.0, in_dim: int = 5, classes: int = 3, seed: int = 0, dtype=torch.float64
) -> RefGraph:
    """A random directed graph with nodes of zero in-degree, a few self-loops and a few repeated arcs."""
    g = torch.Generator().manual_seed(seed)
    m = int(n * avg_deg)
    src = torch.randint(0, n, (m,), generator=g)
    dst = torch.randint(0, n, (m,), generator=g)
    no_in = torch.randperm(n, generator=g)[: n // 6]  # these nodes get no in-arcs
    keep = ~torch.isin(dst, no_in)
    src, dst = src[keep], dst[keep]
    extra = torch.randint(0, src.numel(), (4,), generator=g)  # repeated arcs
    loops = torch.randperm(n, generator=g)[:3]
    loops = loops[~torch.isin(loops, no_in)]
    src = torch.cat([src, src[extra], loops])
    dst = torch.cat([dst, dst[extra], loops])
    order = torch.argsort(dst * n + src)
    src, dst = src[order], dst[order]
    in_deg = torch.bincount(dst, minlength=n)
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(in_deg, 0)
    y = torch.randint(0, classes, (n,), generator=g)
    y[torch.randperm(n, generator=g)[: n // 10]] = -1
    train = torch.rand(n, generator=g) < 0.6
    return RefGraph(
        indptr=indptr,
        indices=src,
        in_degree=in_deg.to(dtype),
        out_degree=torch.bincount(src, minlength=n).to(dtype),
        x=torch.randn(n, in_dim, generator=g, dtype=dtype),
        y=y,
        train_mask=train,
    )


def random_bins(graph: RefGraph, num_bins: int, seed: int, dtype=torch.float64):
    """The nodes in random order cut into ``num_bins`` random-sized bins: ``[(block, src_ids, dst_ids)]``."""
    g = torch.Generator().manual_seed(seed)
    n = graph.num_nodes
    perm = torch.randperm(n, generator=g)
    cuts = torch.sort(torch.randperm(n - 1, generator=g)[: num_bins - 1] + 1).values.tolist()
    bins = []
    for dst in torch.tensor_split(perm, cuts):
        block, src_ids = build_block(
            graph.indptr, graph.indices, dst, graph.in_degree, graph.out_degree, dtype
        )
        bins.append((block, src_ids, dst))
    return bins


def whole_graph_block(graph: RefGraph, dtype=torch.float64) -> Block:
    block, src_ids = build_block(
        graph.indptr, graph.indices, torch.arange(graph.num_nodes), graph.in_degree, graph.out_degree, dtype
    )
    assert torch.equal(src_ids, torch.arange(graph.num_nodes))
    return block


def make_model(kind, heads, dims, dtype=torch.float64, seed=0) -> GNNModel:
    in_dim, hidden, classes = dims
    torch.manual_seed(seed)
    model = build_model(kind, in_dim, hidden, classes, LAYERS, heads=heads).to(dtype)
    # non-zero biases, so that a bias added in the wrong place is caught
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    return model


def binned_forward(model, graph, bins, *, epoch=0, dropout=0.0, seed=0, training=False):
    """Logits and the input of every layer, computed layer by layer and bin by bin."""
    h = graph.x.to(next(model.parameters()).dtype)
    inputs = []
    for layer in range(model.num_layers):
        inputs.append(h)
        h = forward_bins(
            model, layer, bins, h, graph.num_nodes, epoch=epoch, dropout=dropout, seed=seed, training=training
        )
    return h, inputs


def binned_grads(model, graph, bins, *, epoch, dropout, seed) -> dict[str, torch.Tensor]:
    """Parameter gradients of the training loss, backpropagated layer by layer and bin by bin."""
    model.zero_grad(set_to_none=True)
    logits, inputs = binned_forward(
        model, graph, bins, epoch=epoch, dropout=dropout, seed=seed, training=True
    )
    leaf = logits.detach().requires_grad_(True)
    reference_loss(leaf, graph).backward()
    grad = leaf.grad
    for layer in reversed(range(model.num_layers)):
        grad = backward_bins(
            model,
            layer,
            bins,
            inputs[layer],
            grad,
            epoch=epoch,
            dropout=dropout,
            seed=seed,
            need_input_grad=layer > 0,
        )
    return {k: p.grad.clone() for k, p in model.named_parameters()}


def reference_grads(kind, model, graph, *, epoch, dropout, seed, heads) -> dict[str, torch.Tensor]:
    params = {k: v.detach().clone().requires_grad_(True) for k, v in model.state_dict().items()}
    logits = reference_forward(
        kind, params, graph, epoch=epoch, dropout=dropout, seed=seed, training=True, heads=heads
    )
    reference_loss(logits, graph).backward()
    return {k: v.grad for k, v in params.items()}


# --- bins versus the whole-graph reference ----------------------------------------------------------------
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("kind,heads", CASES)
def test_bins_match_reference_forward(kind, heads, dims, dtype, tol):
    graph = random_graph(in_dim=dims[0], classes=dims[2], seed=1, dtype=dtype)
    model = make_model(kind, heads, dims, dtype)
    params = {k: v.detach() for k, v in model.state_dict().items()}
    for num_bins, training in [(1, False), (5, False), (7, True)]:
        bins = random_bins(graph, num_bins, seed=num_bins, dtype=dtype)
        kw = dict(epoch=2, dropout=0.4 if training else 0.0, seed=11, training=training)
        ours, _ = binned_forward(model, graph, bins, **kw)
        ref = reference_forward(kind, params, graph, heads=heads, **kw)
        assert ours.dtype == dtype and ours.shape == (graph.num_nodes, dims[2])
        torch.testing.assert_close(ours, ref, atol=tol, rtol=tol)


@pytest.mark.parametrize(
    "backend", [None, "sparse", "index"]
)  # the device default (CPU: numba) and the others
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("kind,heads", CASES)
def test_bins_match_reference_gradients(kind, heads, dims, backend):
    graph = random_graph(in_dim=dims[0], classes=dims[2], seed=2)
    model = make_model(kind, heads, dims)
    kw = dict(epoch=1, dropout=0.3, seed=5)
    ref = reference_grads(kind, model, graph, heads=heads, **kw)
    for num_bins in (1, 6):
        with use_backend(backend):
            ours = binned_grads(model, graph, random_bins(graph, num_bins, seed=10 + num_bins), **kw)
        assert ours.keys() == ref.keys()
        for name in ref:
            torch.testing.assert_close(ours[name], ref[name], atol=1e-10, rtol=1e-10, msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_add_rows_at_is_bitwise_index_add(dtype):
    """The numba scatter-add for distinct ids (float CPU) and its index_add_ fallback (other dtypes)."""
    g = torch.Generator().manual_seed(8)
    for n, m, width in ((1000, 300, 16), (50, 50, 3), (10, 0, 4)):
        h = (torch.randn(n, width, generator=g) * 100).to(dtype)
        ids = torch.randperm(n, generator=g)[:m]
        rows = (torch.randn(width, m, generator=g) * 100).to(dtype).t()  # not contiguous: rows are strided
        ref = h.clone().index_add_(0, ids, rows)
        add_rows_at(h, ids, rows)
        assert torch.equal(h, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_take_and_put_rows_at_are_bitwise_index_select_and_copy(dtype):
    """The numba row gather / row copy (float CPU) and their index_select / index_copy_ fallbacks (other dtypes,
    a non-contiguous h, a forced non-numba backend) give the same tensors, for any id order, int32 or int64."""
    g = torch.Generator().manual_seed(9)
    for n, m, width in ((1000, 300, 16), (50, 50, 3), (10, 0, 4), (7, 5, 1)):
        h = (torch.randn(n, width, generator=g) * 100).to(dtype)
        for ids in (torch.randperm(n, generator=g)[:m], torch.randperm(n, generator=g)[:m].to(torch.int32)):
            for base in (h, h.t().contiguous().t()):  # contiguous and column-major
                got = take_rows_at(base, ids)
                assert got.shape == (m, width) and torch.equal(got, base.index_select(0, ids))
                rows = (torch.randn(width, m, generator=g) * 100).to(dtype).t()  # strided rows
                out, ref = base.clone(), base.clone().index_copy_(0, ids.long(), rows)
                put_rows_at(out, ids, rows)
                assert torch.equal(out, ref)
    with use_backend("index"):
        h = torch.randn(20, 4, generator=g)
        ids = torch.tensor([3, 1, 7])
        assert torch.equal(take_rows_at(h, ids), h[ids])


def _bin_over_rows(g: torch.Generator, n_rows: int, n_dst: int, n_other: int, nnz: int) -> tuple:
    """A random bin whose sources are rows of h, destinations first (drawn from G): the rows, the bin's CSR
    (indptr, indices) and a function that makes its Block afresh."""
    src = torch.randperm(n_rows, generator=g)[: n_dst + n_other]
    indptr = torch.cat(
        [
            torch.zeros(1, dtype=torch.int64),
            torch.sort(torch.randint(0, nnz + 1, (n_dst - 1,), generator=g)).values,
            torch.tensor([nnz]),
        ]
    )
    indices = torch.randint(0, n_dst + n_other, (nnz,), generator=g)

    def block() -> Block:
        return Block(
            n_dst=n_dst,
            n_src=n_dst + n_other,
            indptr=indptr,
            indices=indices,
            src_out_degree=torch.ones(n_dst + n_other),
            dst_in_degree=torch.ones(n_dst),
            dst_global=src[:n_dst].clone(),
        )

    return src, indptr, indices, block


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sage_reading_rows_in_place_equals_the_gathered_forward(dtype):
    """layer_forward_rows (the aggregation reads h[src] through the arcs, no gathered copy) gives the forward of
    the gathered rows: the aggregation bitwise, the layer within rounding of the dense products; project-first
    layers and GCN/GAT do not offer it."""
    g = torch.Generator().manual_seed(12)
    n_rows, n_dst, n_other, nnz = 300, 40, 60, 500
    src, indptr, indices, make_block = _bin_over_rows(g, n_rows, n_dst, n_other, nnz)
    block = make_block()
    torch.manual_seed(3)
    model = build_model("sage", 6, 8, 8, 3).to(dtype)  # 6 → 8 → 8 → 8: every layer aggregates first
    h = torch.randn(n_rows, 8, generator=g, dtype=dtype)
    assert model.reads_rows(1) and model.reads_rows(2)
    assert not build_model("sage", 9, 4, 4, 2).reads_rows(0)  # 9 → 4 projects first
    assert not any(build_model(k, 4, 8, 8, 2).reads_rows(1) for k in ("gcn", "gat"))
    x_src = h.index_select(0, src)
    with torch.no_grad():
        for layer in (1, 2):
            for training in (False, True):
                ref = model.layer_forward(layer, block, x_src, 1, 0.3, 5, training)
                got = model.layer_forward_rows(layer, block, h, src, h[src[:n_dst]], 1, 0.3, 5, training)
                torch.testing.assert_close(got, ref, rtol=1e-6 if dtype == torch.float32 else 1e-13, atol=0)
        from stages.kits.runtime.models.sage import ROW_INDICES

        agg_rows = csr_mean(indptr, block.cached(ROW_INDICES, None), h, n_dst)
        assert torch.equal(agg_rows, csr_mean(indptr, indices, x_src, n_dst))


@pytest.mark.parametrize("kind,heads", [("sage", 8), ("gcn", 8), ("gat", 2)])
def test_full_graph_training_matches_reference(kind, heads):
    dims = (6, 5, 4)
    graph = random_graph(in_dim=dims[0], classes=dims[2], seed=3)
    model = make_model(kind, heads, dims)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    lr, wd, p, seed, epochs = 0.05, 5e-4, 0.25, 7, 3
    block = whole_graph_block(graph)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    for epoch in range(epochs):
        opt.zero_grad()
        logits = model(block, graph.x, epoch=epoch, dropout=p, seed=seed, training=True)
        reference_loss(logits, graph).backward()
        opt.step()
    ref = reference_train(kind, init, graph, epochs, lr, wd, p, seed, heads)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, ref[name], atol=1e-9, rtol=1e-9, msg=name)
        assert not torch.equal(value, init[name]), f"{name} did not train"


def test_eval_mode_ignores_dropout():
    graph = random_graph(seed=4)
    model = make_model("sage", 8, (5, 8, 3))
    block = whole_graph_block(graph)
    a = model(block, graph.x, epoch=0, dropout=0.5, seed=1, training=False)
    b = model(block, graph.x, epoch=3, dropout=0.0, seed=2, training=False)
    torch.testing.assert_close(a, b, atol=0, rtol=0)


# --- models: construction ----------------------------------------------------------------------------------
def test_parameter_names_and_widths():
    m = build_model("sage", 10, 16, 3, 2)
    assert [k for k, _ in m.named_parameters()] == [
        "layers.0.bias",
        "layers.0.lin_self.weight",
        "layers.0.lin_neigh.weight",
        "layers.1.bias",
        "layers.1.lin_self.weight",
        "layers.1.lin_neigh.weight",
    ]
    assert m.widths == [10, 16, 3]
    m = build_model("gcn", 10, 16, 3, 2)
    assert sorted(k for k, _ in m.named_parameters()) == [
        "layers.0.bias",
        "layers.0.lin.weight",
        "layers.1.bias",
        "layers.1.lin.weight",
    ]
    m = build_model("gat", 10, 16, 3, 3, heads=8)
    assert m.widths == [10, 128, 128, 3]
    shapes = {k: tuple(v.shape) for k, v in m.named_parameters()}
    assert shapes["layers.0.lin.weight"] == (128, 10)
    assert shapes["layers.0.att_src"] == (1, 8, 16) and shapes["layers.0.att_dst"] == (1, 8, 16)
    assert shapes["layers.0.bias"] == (128,) and shapes["layers.2.bias"] == (3,)
    assert shapes["layers.2.lin.weight"] == (24, 128)
    assert build_model("gat", 10, 16, 3, 1, heads=4).widths == [10, 3]
    with pytest.raises(ValueError):
        build_model("gin", 10, 16, 3, 2)


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_initialisation_is_deterministic(kind):
    def init(seed):
        torch.manual_seed(seed)
        return build_model(kind, 7, 6, 3, 2, heads=2).state_dict()

    a, b, c = init(0), init(0), init(1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if not k.endswith("bias"))
    assert all(not a[k].any() for k in a if k.endswith("bias"))  # zero biases


# --- blocks ------------------------------------------------------------------------------------------------
def test_build_block_maps_back_to_the_global_arcs():
    graph = random_graph(seed=5)
    dst = torch.tensor([7, 3, 41, 0, 12])
    block, src_ids = build_block(graph.indptr, graph.indices, dst, graph.in_degree, graph.out_degree)
    validate_block(block)
    assert torch.equal(src_ids[: block.n_dst], dst) and torch.equal(block.dst_global, dst)
    assert src_ids.unique().numel() == block.n_src
    for i, v in enumerate(dst.tolist()):
        local = block.indices[block.indptr[i] : block.indptr[i + 1]]
        expect = graph.indices[graph.indptr[v] : graph.indptr[v + 1]]
        assert torch.equal(src_ids[local], expect)
    torch.testing.assert_close(block.src_out_degree, graph.out_degree[src_ids].float())
    torch.testing.assert_close(block.dst_in_degree, graph.in_degree[dst].float())
    block.cached("derived", lambda: 1)
    assert block.to("cpu") is block and block.has_cached(
        "derived"
    )  # nothing to move: the same block and cache
    moved = block.pin_memory() if torch.cuda.is_available() else block.map_tensors(torch.clone)
    assert moved is not block and moved.n_dst == block.n_dst and torch.equal(moved.indices, block.indices)
    assert not moved.has_cached("derived")  # a moved block recomputes its derived structures where it lives
    calls = []
    assert (
        block.cached("k", lambda: calls.append(1) or 42) == 42 == block.cached("k", lambda: calls.append(1))
    )
    assert calls == [1]
    with pytest.raises(ValueError):
        build_block(graph.indptr, graph.indices, torch.tensor([1, 1]), graph.in_degree, graph.out_degree)


# --- kernels -----------------------------------------------------------------------------------------------
def random_csr(n_dst=9, n_src=14, seed=0):
    """Unsorted rows with repeated sources and empty rows."""
    g = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, 5, (n_dst,), generator=g)
    deg[[1, 4]] = 0
    indptr = torch.zeros(n_dst + 1, dtype=torch.int64)
    indptr[1:] = deg.cumsum(0)
    indices = torch.randint(0, n_src, (int(deg.sum()),), generator=g)
    indices[1] = indices[0]
    return indptr, indices, n_dst, n_src


def random_square_csr(n, nnz, g):
    """``n`` rows of random lengths summing to ``nnz`` (some empty), sources uniform in ``range(n)``."""
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.sort(torch.randint(0, nnz + 1, (n,), generator=g)).values
    indptr[-1] = nnz
    return indptr, torch.randint(0, n, (nnz,), generator=g)


def dense_adjacency(indptr, indices, n_dst, n_src, weight=None):
    """``[*w, n_dst, n_src]`` with repeated arcs summed (written with a Python loop on purpose: tiny inputs)."""
    w = torch.ones(indices.numel(), dtype=torch.float64) if weight is None else weight.detach()
    a = torch.zeros(*w.shape[1:], n_dst, n_src, dtype=torch.float64)
    for v in range(n_dst):
        for e in range(int(indptr[v]), int(indptr[v + 1])):
            a[..., v, int(indices[e])] += w[e]
    return a


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernels_gradcheck(backend):
    indptr, indices, n_dst, n_src = random_csr()
    nnz, heads = indices.numel(), 3
    g = torch.Generator().manual_seed(1)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(True)

    x, x3 = rnd(n_src, 4), rnd(n_src, heads, 2)
    w, w3, s = rnd(nnz), rnd(nnz, heads), rnd(nnz, heads)
    t = csr_transpose(indptr, indices, n_src)
    with use_backend(backend):
        for tr in (None, t):  # backward with and without the precomputed transpose
            assert torch.autograd.gradcheck(
                lambda x, tr=tr: csr_sum(indptr, indices, x, n_dst, transpose=tr), (x,)
            )
            assert torch.autograd.gradcheck(
                lambda x, w, tr=tr: csr_sum(indptr, indices, x, n_dst, w, tr), (x, w)
            )
            assert torch.autograd.gradcheck(
                lambda x, w, tr=tr: csr_sum(indptr, indices, x, n_dst, w, tr), (x3, w3)
            )
            assert torch.autograd.gradcheck(lambda x, tr=tr: csr_mean(indptr, indices, x, n_dst, tr), (x,))
        assert torch.autograd.gradcheck(lambda s: edge_softmax(indptr, s), (s,))
        # values against dense matrices
        a = dense_adjacency(indptr, indices, n_dst, n_src)
        torch.testing.assert_close(csr_sum(indptr, indices, x, n_dst), a @ x)
        deg = (indptr[1:] - indptr[:-1]).clamp(min=1).double()
        torch.testing.assert_close(csr_mean(indptr, indices, x, n_dst), (a @ x) / deg[:, None])
        a3 = dense_adjacency(indptr, indices, n_dst, n_src, w3)
        torch.testing.assert_close(
            csr_sum(indptr, indices, x3, n_dst, w3), torch.einsum("hvu,uhd->vhd", a3, x3)
        )
        alpha = edge_softmax(indptr, s)
        rows = row_ids(indptr)
        sums = torch.zeros(n_dst, heads, dtype=torch.float64).index_add_(0, rows, alpha)
        nonempty = indptr[1:] > indptr[:-1]
        torch.testing.assert_close(sums[nonempty], torch.ones_like(sums[nonempty]))


def test_kernel_backends_agree_and_handle_empty_input():
    indptr, indices, n_dst, n_src = random_csr(n_dst=50, n_src=80, seed=3)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n_src, 4, 6, generator=g)
    w = torch.rand(indices.numel(), 4, generator=g)
    results = {}
    for backend in BACKENDS:
        xi, wi = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        with use_backend(backend):
            out = csr_sum(indptr, indices, xi, n_dst, wi)
            out.backward(torch.ones_like(out))
        results[backend] = (out.detach(), xi.grad, wi.grad)
    for backend in ("sparse", "numba"):
        for a, b in zip(results[backend], results["index"], strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # a block without edges, and one without destinations
    empty = torch.zeros(1, dtype=torch.int64)
    for backend in BACKENDS:
        with use_backend(backend):
            xi = torch.randn(3, 2, requires_grad=True)
            out = csr_sum(torch.zeros(3, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), xi, 2)
            assert out.shape == (2, 2) and not out.any()
            out.sum().backward()
            assert not xi.grad.any()
            assert csr_sum(empty, torch.zeros(0, dtype=torch.int64), torch.randn(3, 2), 0).shape == (0, 2)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_numba_kernels_match_dense_reference(dtype, tol):
    """Widths around the register tiles (1, 16, 47, 65, 130 columns: one vector, vector pieces of every power of
    two, tiles plus tails), int32 and int64 indices, strided rows, per-head weights with head widths under and
    over a tile; forward and transposed backward. (Each width is a kernel specialisation: numba compiles it on
    first use and caches it in __pycache__, so the first run of this test takes a minute.)"""
    indptr, indices, n_dst, n_src = random_csr(n_dst=37, n_src=61, seed=4)
    nnz = indices.numel()
    g = torch.Generator().manual_seed(3)
    a = dense_adjacency(indptr, indices, n_dst, n_src).to(dtype)
    deg = (indptr[1:] - indptr[:-1]).clamp(min=1).to(dtype)[:, None]
    t = csr_transpose(indptr, indices, n_src)
    with use_backend("numba"):
        for width in (1, 16, 47, 65, 130):
            x = torch.randn(n_src, width, generator=g, dtype=dtype)
            gy = torch.randn(n_dst, width, generator=g, dtype=dtype)
            for idx in (indices, indices.int()) if width == 47 else (indices,):
                torch.testing.assert_close(csr_sum(indptr, idx, x, n_dst), a @ x, atol=tol, rtol=tol)
                xg = x.clone().requires_grad_(True)
                csr_mean(indptr, idx, xg, n_dst, t).backward(gy)
                torch.testing.assert_close(xg.grad, a.t() @ (gy / deg), atol=tol, rtol=tol)
            wide = torch.randn(n_src, width + 5, generator=g, dtype=dtype)[
                :, 2 : 2 + width
            ]  # row stride != width
            torch.testing.assert_close(
                csr_mean(indptr, indices, wide, n_dst), (a @ wide) / deg, atol=tol, rtol=tol
            )
        for heads, d in ((3, 5), (2, 70)):
            x3 = torch.randn(n_src, heads, d, generator=g, dtype=dtype, requires_grad=True)
            w3 = torch.randn(nnz, heads, generator=g, dtype=dtype, requires_grad=True)
            gy = torch.randn(n_dst, heads, d, generator=g, dtype=dtype)
            out = csr_sum(indptr, indices, x3, n_dst, w3, t)
            out.backward(gy)
            a3 = dense_adjacency(indptr, indices, n_dst, n_src, w3).to(dtype)
            torch.testing.assert_close(out, torch.einsum("hvu,uhd->vhd", a3, x3), atol=tol, rtol=tol)
            torch.testing.assert_close(x3.grad, torch.einsum("hvu,vhd->uhd", a3, gy), atol=tol, rtol=tol)
            rows = row_ids(indptr)
            expect_w = (gy[rows] * x3.detach()[indices]).sum(-1)
            torch.testing.assert_close(w3.grad, expect_w, atol=tol, rtol=tol)


def test_numba_kernels_are_deterministic():
    """Same inputs, bitwise the same outputs and gradients: run to run and for 1 or 2 threads."""
    g = torch.Generator().manual_seed(5)
    n, nnz, heads = 3000, 60000, 4
    indptr, indices = random_square_csr(n, nnz, g)
    x = torch.randn(n, heads, 8, generator=g)
    w = torch.rand(nnz, heads, generator=g)
    gy = torch.randn(n, heads, 8, generator=g)
    t = csr_transpose(indptr, indices, n)

    def run(threads):
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with use_backend("numba"):
                xi, wi = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
                alpha = edge_softmax(indptr, wi)
                out = csr_sum(indptr, indices, xi, n, alpha, t) + csr_mean(indptr, indices, xi, n, t)
                out.backward(gy)
            return out.detach(), xi.grad, wi.grad
        finally:
            torch.set_num_threads(old)

    first = run(2)
    for other in (run(2), run(1)):
        for a, b in zip(first, other, strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_relu_dropout_is_bitwise_the_spec(dtype):
    g = torch.Generator().manual_seed(6)
    ids = torch.cat([torch.randint(0, 2**40, (500,), generator=g), torch.arange(3)])
    for width, p in ((16, 0.5), (3, 0.1), (47, 0.9)):
        h = torch.randn(ids.numel(), width, generator=g, dtype=dtype, requires_grad=True)
        ref_h = h.detach().clone().requires_grad_(True)
        with use_backend("numba"):
            y = relu_dropout(h, 7, 3, 1, ids, p)
        ref = torch.relu(ref_h) * dropout_mask(7, 3, 1, ids, width, p, dtype=dtype)
        assert torch.equal(y, ref)
        gy = torch.randn(ids.numel(), width, generator=g, dtype=dtype)
        y.backward(gy)
        ref.backward(gy)
        assert torch.equal(h.grad, ref_h.grad)


@pytest.mark.parametrize("kind,heads", [("sage", 8), ("gcn", 8), ("gat", 2)])
def test_static_input_layer_matches_the_plain_one(kind, heads):
    """Layer 0 with ``static_input=True`` (inputs aggregated once per block, kept) computes the same outputs and
    weight gradients as the plain layer, on every call, and refuses inputs that need a gradient."""
    graph = random_graph(in_dim=12, classes=3, seed=8)
    model = make_model(kind, heads, (12, 4, 3))
    bins = random_bins(graph, 3, seed=2)
    for static in (False, True, True):  # the second static pass reads the kept aggregate
        model.zero_grad(set_to_none=True)
        outs = []
        for block, src, _dst in bins:
            y = model.layer_forward(0, block, graph.x[src], 1, 0.3, 5, True, static_input=static)
            y.backward(torch.ones_like(y))
            outs.append(y.detach())
        grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        if not static:
            ref_outs, ref_grads = outs, grads
        for a, b in zip(outs, ref_outs, strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
        assert grads.keys() == ref_grads.keys()
        for k in grads:
            torch.testing.assert_close(grads[k], ref_grads[k], atol=1e-12, rtol=1e-12, msg=k)
    if kind != "gat":
        block, src, _ = bins[0]
        with pytest.raises(ValueError):
            model.layer_forward(
                0, block, graph.x[src].requires_grad_(True), 1, 0.3, 5, True, static_input=True
            )


@pytest.mark.parametrize("kind", ["sage", "gcn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_static_layer_backward_without_recompute_is_bitwise_autograd(kind, dtype, dropout):
    """Layer 0's backward from its kept output and cached aggregation (no forward recomputed) accumulates
    bitwise the weight gradients autograd gives on the recomputed forward, bin after bin; before a block has
    its aggregation cached it declines, and GAT (no static path) always does."""
    graph = random_graph(in_dim=12, classes=3, seed=4)
    graph.x = graph.x.to(dtype)
    model = make_model(kind, 8, (12, 6, 3), dtype=dtype)
    bins = random_bins(graph, 3, seed=5, dtype=dtype)
    grads_out = [
        torch.randn(len(dst), 6, generator=torch.Generator().manual_seed(b), dtype=dtype)
        for b, (_blk, _src, dst) in enumerate(bins)
    ]
    block0, src0, _ = bins[0]
    y0 = model.layer_forward(0, block0, graph.x[src0], 2, dropout, 9, True, static_input=False).detach()
    assert not model.layer_backward_static(
        0, block0, graph.x[src0], y0, grads_out[0], dropout
    )  # nothing cached
    kept = []
    for (
        block,
        src,
        _dst,
    ) in bins:  # the forward the runtime ran: outputs kept, aggregation cached on the block
        with torch.no_grad():
            kept.append(model.layer_forward(0, block, graph.x[src], 2, dropout, 9, True, static_input=True))
    grads = {}
    for way in ("autograd", "static"):
        model.zero_grad(set_to_none=True)
        for (block, src, _dst), y, g in zip(bins, kept, grads_out, strict=True):
            if way == "autograd":
                with torch.enable_grad():
                    out = model.layer_forward(0, block, graph.x[src], 2, dropout, 9, True, static_input=True)
                out.backward(g)
                assert torch.equal(out.detach(), y)
            else:
                assert model.layer_backward_static(0, block, graph.x[src], y, g, dropout)
        grads[way] = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    assert grads["static"].keys() == grads["autograd"].keys() and grads["static"]
    for k in grads["static"]:
        assert torch.equal(grads["static"][k], grads["autograd"][k]), k
    gat = make_model("gat", 2, (12, 6, 3), dtype=dtype)
    assert not gat.layer_backward_static(0, block0, graph.x[src0], y0, grads_out[0], dropout)


def test_block_transpose_is_cached_per_backend():
    graph = random_graph(seed=7)
    block = whole_graph_block(graph)
    x = torch.randn(block.n_src, 3, dtype=torch.float64)
    with use_backend("numba"):
        t = block_transpose(block, x)
        assert block_transpose(block, x) is t and t.indices.dtype == torch.int32  # compact copy for numba
    with use_backend("sparse"):
        ts = block_transpose(block, x)
        assert ts.indices.dtype == torch.int64 and torch.equal(ts.indices, t.indices.long())
        assert torch.equal(ts.perm, t.perm.long()) and torch.equal(ts.indptr, t.indptr)
    with use_backend("index"):
        assert block_transpose(block, x) is None


def test_csr_transpose_lists_the_out_arcs_of_every_source():
    indptr, indices, n_dst, n_src = random_csr()
    t = csr_transpose(indptr, indices, n_src)
    rows = row_ids(indptr)
    assert torch.equal(t.indices, rows[t.perm]) and torch.equal(indices[t.perm], row_ids(t.indptr))
    assert torch.equal(t.indptr[-1], indptr[-1]) and t.indptr.numel() == n_src + 1


def test_add_self_loops_prepends_one_loop_per_row():
    indptr, indices, n_dst, _ = random_csr()
    new_indptr, new_indices = add_self_loops(indptr, indices, n_dst)
    for v in range(n_dst):
        row = new_indices[new_indptr[v] : new_indptr[v + 1]]
        assert int(row[0]) == v
        assert torch.equal(row[1:], indices[indptr[v] : indptr[v + 1]])


# --- dropout masks -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_keep_rate_and_values(p):
    m = dropout_mask(3, 1, 0, torch.arange(6250), 16, p)  # 100k entries
    kept = m != 0
    assert abs(kept.double().mean().item() - (1 - p)) < 0.02
    assert torch.all(m[kept] == torch.tensor(1 / (1 - p), dtype=torch.float32))
    # no column and no stretch of node ids is biased
    per_col = kept.double().mean(0)
    assert (per_col - (1 - p)).abs().max() < 0.05
    per_chunk = kept.reshape(10, -1).double().mean(1)
    assert (per_chunk - (1 - p)).abs().max() < 0.03


def test_dropout_uniform_bits_are_uniform_and_independent():
    u = dropout_uniform_bits(0, 0, 0, torch.arange(20000), 8).double() / 2**32
    hist = torch.histc(u.float(), bins=32, min=0, max=1)
    chi2 = (((hist - hist.mean()) ** 2) / hist.mean()).sum().item()
    assert chi2 < 80  # 31 degrees of freedom: p < 1e-5 of failing by chance
    c = torch.corrcoef(torch.stack([u[:-1, 0], u[1:, 0], u[:-1, 1]]))  # neighbouring nodes and columns
    assert c.sub(torch.eye(3, dtype=c.dtype)).abs().max() < 0.05


def test_dropout_is_deterministic_and_varies_with_every_key():
    ids = torch.arange(1000)
    base = dropout_mask(1, 2, 3, ids, 16, 0.5)
    assert torch.equal(base, dropout_mask(1, 2, 3, ids, 16, 0.5))
    for other in (
        dropout_mask(2, 2, 3, ids, 16, 0.5),
        dropout_mask(1, 3, 3, ids, 16, 0.5),
        dropout_mask(1, 2, 4, ids, 16, 0.5),
        dropout_mask(1, 2, 3, ids + 1000, 16, 0.5),
    ):
        agree = (other == base).double().mean().item()
        assert 0.4 < agree < 0.6  # independent masks agree on about half the entries at p = 0.5


def test_dropout_mask_of_a_node_does_not_depend_on_the_batch():
    ids = torch.arange(500)
    full = dropout_mask(9, 1, 0, ids, 12, 0.3, dtype=torch.float64)
    perm = torch.randperm(500, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(
        dropout_mask(9, 1, 0, perm[:37], 12, 0.3, dtype=torch.float64), full[perm[:37]], atol=0, rtol=0
    )
    # a wider layer extends the columns: column c of a node is the same whatever the width
    torch.testing.assert_close(
        dropout_mask(9, 1, 0, ids, 20, 0.3, dtype=torch.float64)[:, :12], full, atol=0, rtol=0
    )


def test_dropout_edge_cases_and_pinned_values():
    assert torch.equal(dropout_mask(0, 0, 0, torch.arange(4), 3, 0.0), torch.ones(4, 3))
    with pytest.raises(ValueError):
        dropout_mask(0, 0, 0, torch.arange(4), 3, 1.0)
    big = torch.tensor([2**33 + 5, 5, 2**40])  # ids beyond 32 bits hash their high half too
    bits = dropout_uniform_bits(0, 0, 0, big, 2)
    assert bits.min() >= 0 and bits.max() < 2**32
    assert not torch.equal(bits[0], bits[1])
    assert dropout_mask(-1, 0, 0, big, 2, 0.5).shape == (3, 2)
    # the hash is part of the model's definition: pin it so that a "faster" rewrite cannot change it silently
    assert dropout_uniform_bits(0, 0, 0, torch.tensor([0, 1, 2**33 + 5]), 3).tolist() == PINNED_BITS
    assert math.ceil(0.5 * 2**32) == 2**31


PINNED_BITS = [
    [2848107417, 3473198084, 4115811259],
    [3595065868, 3411409119, 4100023335],
    [2671566359, 1569279894, 4639920],
]


def _spec_bits(seed: int, epoch: int, layer: int, node: int, col: int) -> int:
    """The documented hash (stages/train/dropout.py) in plain Python integers, one entry at a time."""
    m = 0xFFFFFFFF

    def mix(h, k1=0x7FEB352D, k2=0x846CA68B):
        h ^= h >> 16
        h = (h * k1) & m
        h ^= h >> 15
        h = (h * k2) & m
        return h ^ (h >> 16)

    seed &= (1 << 64) - 1
    k = mix(mix(mix(mix((seed & m) ^ 0x9E3779B9) ^ (seed >> 32)) ^ epoch) ^ layer)
    node_h = mix(mix((node & m) ^ k) ^ (node >> 32))
    col_h = mix((col + mix(k ^ 0x85EBCA6B)) & m)
    return mix(node_h ^ col_h, 0x7FEB352D, 0x31848BAB)


def test_dropout_matches_its_documented_formula():
    ids = [0, 1, 77, 2**31 + 3, 2**33 + 5]
    for seed, epoch, layer in [(0, 0, 0), (12345, 7, 1), (-3, 99, 2), (2**40 + 1, 1, 0)]:
        bits = dropout_uniform_bits(seed, epoch, layer, torch.tensor(ids), 5)
        expect = [[_spec_bits(seed, epoch, layer, n, c) for c in range(5)] for n in ids]
        assert bits.tolist() == expect


# --- devices -----------------------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("kind,heads", CASES)
def test_cuda_matches_cpu(kind, heads):
    dims = (5, 8, 3)
    graph = random_graph(in_dim=dims[0], classes=dims[2], seed=6)
    model = make_model(kind, heads, dims)
    bins = random_bins(graph, 4, seed=1)
    kw = dict(epoch=1, dropout=0.3, seed=5)
    cpu = binned_grads(model, graph, bins, **kw)
    model.cuda()
    cuda_bins = [(b.to("cuda"), s.cuda(), d.cuda()) for b, s, d in bins]
    cuda_graph = RefGraph(
        graph.indptr,
        graph.indices,
        graph.in_degree,
        graph.out_degree,
        graph.x.cuda(),
        graph.y.cuda(),
        graph.train_mask.cuda(),
    )
    gpu = binned_grads(model, cuda_graph, cuda_bins, **kw)
    for name in cpu:
        torch.testing.assert_close(gpu[name].cpu(), cpu[name], atol=1e-10, rtol=1e-10, msg=name)
    ids = torch.arange(3000)
    assert torch.equal(dropout_mask(4, 2, 1, ids.cuda(), 16, 0.4).cpu(), dropout_mask(4, 2, 1, ids, 16, 0.4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sage_backward_reading_rows_equals_the_gathered_backward(dtype):
    """layer_backward_rows (the recomputation reads h[src] in place, the gradient of the sources is returned
    rather than left on a gathered leaf) gives bitwise the gradients of layer_forward on the gathered rows:
    the sources' (the aggregation's share and the self term's, added once) and every weight's."""
    g = torch.Generator().manual_seed(21)
    n_rows, n_dst, n_other, nnz = 300, 40, 60, 700
    src, _, _, block = _bin_over_rows(g, n_rows, n_dst, n_other, nnz)
    torch.manual_seed(4)
    model = build_model("sage", 6, 8, 8, 3).to(dtype)
    h = torch.randn(n_rows, 8, generator=g, dtype=dtype)
    for layer in (1, 2):  # a hidden layer (ReLU + dropout after it) and the last
        grad_out = torch.randn(n_dst, 8, generator=g, dtype=dtype)
        model.zero_grad()
        x_src = h.index_select(0, src).requires_grad_()
        torch.autograd.backward(model.layer_forward(layer, block(), x_src, 2, 0.3, 5, True), grad_out)
        ref_params = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        got = model.layer_backward_rows(layer, block(), h, src, h[src[:n_dst]], grad_out, 2, 0.3, 5)
        assert torch.equal(got, x_src.grad)
        got_params = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
        assert got_params.keys() == ref_params.keys() and len(got_params) == 3
        assert all(torch.equal(got_params[k], ref_params[k]) for k in ref_params)
        model.zero_grad()  # without the sources' gradient: the weights' only
        assert (
            model.layer_backward_rows(layer, block(), h, src, h[src[:n_dst]], grad_out, 2, 0.3, 5, False)
            is None
        )
        assert all(
            torch.equal(p.grad, ref_params[k]) for k, p in model.named_parameters() if p.grad is not None
        )


def _every_row_kernel(dtype):
    """Outputs and gradients of every numba row kernel on one small input (CSR sum/mean, SDDMM, edge softmax,
    ReLU-dropout, row gather / copy / add)."""
    g = torch.Generator().manual_seed(12)
    n, nnz, heads = 300, 2400, 2
    indptr, indices = random_square_csr(n, nnz, g)
    t = csr_transpose(indptr, indices, n)
    x = torch.randn(n, heads, 6, generator=g, dtype=dtype, requires_grad=True)
    s = torch.randn(nnz, heads, generator=g, dtype=dtype, requires_grad=True)
    with use_backend("numba"):
        alpha = edge_softmax(indptr, s)
        h = csr_sum(indptr, indices, x, n, alpha, t) + csr_mean(indptr, indices, x, n, t)
        y = relu_dropout(h.reshape(n, -1), 7, 3, 1, torch.arange(n), 0.3)
        y.backward(torch.randn(y.shape, generator=g, dtype=dtype))
        rows = torch.randn(n // 2, 12, generator=g, dtype=dtype)
        ids = torch.randperm(n, generator=g)[: n // 2]
        taken = take_rows_at(y.detach(), ids)
        put, added = y.detach().clone(), y.detach().clone()
        put_rows_at(put, ids, rows)
        add_rows_at(added, ids, rows)
    return [y.detach(), x.grad, s.grad, taken, put, added]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_kernels_on_the_kernel_pool_equal_one_thread_bitwise(dtype, monkeypatch):
    """Every numba row kernel split into chunks over two threads (the pool; forced here on a small input by a zero
    work threshold) gives bitwise what the calling thread gives alone; helper threads never use the pool."""
    from stages.kits.runtime import kernels
    from stages.kits.runtime.kernels import numba_cpu  # the pool and its threshold live (and are read) there

    alone = _every_row_kernel(dtype)
    monkeypatch.setattr(numba_cpu, "_PARALLEL_MIN_WORK", 0)
    used = []
    real_pool = numba_cpu._kernel_pool
    monkeypatch.setattr(numba_cpu, "_kernel_pool", lambda k: used.append(k) or real_pool(k))
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        pooled = _every_row_kernel(dtype)
        assert used, "the pool was never used"
        for a, b in zip(alone, pooled, strict=True):
            assert torch.equal(a, b)
        used.clear()
        result = []
        helper = threading.Thread(
            target=lambda: (
                kernels.use_serial_kernels_in_this_thread(),
                result.append(_every_row_kernel(dtype)),
            )
        )
        helper.start()
        helper.join()
        assert used == [] and all(torch.equal(a, b) for a, b in zip(alone, result[0], strict=True))
    finally:
        torch.set_num_threads(old)


def test_the_kernel_benchmark_script_runs(monkeypatch, capsys):
    """examples/bench_kernels.py (the kernel timings of docs/BENCHMARKS.md) on a small graph prints every line."""
    import runpy
    import sys

    script = Path(__file__).resolve().parents[1] / "examples" / "bench_kernels.py"
    monkeypatch.setattr(
        sys, "argv", [str(script), "--threads", "1", "--rows", "500", "--edges", "4000", "--repeat", "1"]
    )
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines()] == [
        "sum, 16 columns",
        "sum, 47 columns",
        "sum, 128 columns",
        "weighted sum, 8 heads of 8",
        "weighted sum forward + backward (SDDMM)",
        "tiny (300 rows, 1,200 edges)",
    ], out


def test_the_kernel_benchmark_counts_the_least_bytes_a_sum_moves():
    """The bandwidth estimate's arithmetic (docs/BENCHMARKS.md, "How close to memory bandwidth?"): per edge an
    index and the source row in whole 64-byte lines, per output row its pointer and its written row."""
    import runpy

    script = Path(__file__).resolve().parents[1] / "examples" / "bench_kernels.py"
    sum_bytes = runpy.run_path(str(script))["sum_bytes"]
    assert sum_bytes(2, 10, 16) == 10 * (8 + 64) + 2 * (8 + 64)
    assert sum_bytes(2, 10, 47, index_bytes=4) == 10 * (4 + 192) + 2 * (8 + 188)  # 188 bytes span 3 lines
