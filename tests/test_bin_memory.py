"""What a bin holds on the device (stages/common/model_spec.py ``bin_cost``) and the packing that counts each
bin's distinct sources (stages/common/bin_memory.py): the estimate bounds what the runtime's layers really
allocate for a bin, and the bins are the ones the estimate says."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from stages.common.bin_memory import NO_LIMIT, pack_bins, pack_within
from stages.common.errors import G3InputError
from stages.common.model_spec import BinCost, ModelSpec, bin_cost, bin_costs
from stages.kits.plan.bins import build_layer_bins


def random_rows(seed: int, n_own: int = 300, n_rem: int = 80, max_deg: int = 9):
    """In-arcs of ``n_own`` rows (sources: owned and remote local ids, repeats allowed) and a priority order."""
    g = np.random.default_rng(seed)
    deg = g.integers(0, max_deg, n_own)
    row_ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    edge_src = g.integers(0, n_own + n_rem, int(row_ptr[-1])).astype(np.int64)
    prio = g.permutation(n_own).astype(np.int64)
    return row_ptr, edge_src, prio, n_own, n_rem


def reference_pack(cost: BinCost, row_ptr, edge_src, prio, order, limit, max_rows):
    """The same greedy cut with Python sets: a bin grows row by row while its bytes stay within the limit."""
    bins, cur = [], []

    def nbytes(rows):
        srcs = {int(prio[p]) for p in rows} | {
            int(s) for p in rows for s in edge_src[row_ptr[p] : row_ptr[p + 1]]
        }
        arcs = sum(int(row_ptr[p + 1] - row_ptr[p]) for p in rows)
        return cost.bytes(len(rows), len(srcs), arcs), len(srcs)

    for p in order:
        if cur and (len(cur) == max_rows or nbytes([*cur, p])[0] > limit):
            bins.append(cur)
            cur = []
        cur.append(int(p))
    if cur:
        bins.append(cur)
    return bins, [nbytes(b) for b in bins]


@pytest.mark.parametrize(
    "seed,limit,max_rows", [(0, 40_000, 10**9), (1, 9_000, 10**9), (2, NO_LIMIT, 17), (3, 25_000, 30)]
)
def test_packing_counts_each_bins_distinct_sources(seed, limit, max_rows):
    row_ptr, edge_src, prio, n_own, n_rem = random_rows(seed)
    cost = BinCost(per_dst=40, per_src=100, per_arc=30, fixed=64)
    order = np.random.default_rng(seed + 10).permutation(n_own)
    packed = pack_bins(cost, row_ptr, edge_src, prio, n_own + n_rem, limit, order=order, max_rows=max_rows)
    bins, facts = reference_pack(cost, row_ptr, edge_src, prio, order, limit, max_rows)
    assert [list(order[a:b]) for a, b in zip(packed.bounds[:-1], packed.bounds[1:], strict=True)] == bins
    assert packed.bytes.tolist() == [f[0] for f in facts] and packed.sources.tolist() == [f[1] for f in facts]
    assert packed.num_bins > 1


def test_the_plans_blocks_have_the_sources_the_packing_counted():
    """Along the priority list (what the planner packs), each bin's sources are its block's: destinations
    first, then the other distinct in-neighbours (build_layer_bins)."""
    row_ptr, edge_src, prio, n_own, n_rem = random_rows(4)
    cost = bin_cost(ModelSpec("sage", 8, 6, 3, 2).layer_shapes()[0])
    limit = int(cost.bytes(n_own, n_own + n_rem, row_ptr[-1]) // 5)
    packed = pack_within(cost, row_ptr, edge_src, prio, n_own + n_rem, limit)
    lb = build_layer_bins(packed.bounds, prio, row_ptr, edge_src, n_own, n_own + n_rem)
    assert lb.num_bins >= 5 and np.diff(lb.src_ptr).tolist() == packed.sources.tolist()
    assert (packed.bytes <= limit).all()
    whole = pack_bins(cost, row_ptr, edge_src, prio, n_own + n_rem)  # no limit: one bin, every node read
    assert whole.num_bins == 1 and whole.sources[0] == len(np.union1d(prio, edge_src))


def test_a_node_alone_over_the_limit_is_refused():
    row_ptr, edge_src, prio, n_own, n_rem = random_rows(5)
    with pytest.raises(G3InputError, match="more than the bin limit"):
        pack_within(BinCost(per_dst=10, per_src=10, per_arc=10), row_ptr, edge_src, prio, n_own + n_rem, 25)


# --- the estimate against what a bin allocates ------------------------------------------------------------------
def _random_block(n_dst: int, n_src: int, arcs: int, seed: int = 0):
    from stages.kits.runtime.block import Block

    g = np.random.default_rng(seed)
    deg = g.multinomial(arcs, np.ones(n_dst) / n_dst)
    indices = g.integers(0, n_src, arcs)
    indices[:n_src] = np.arange(n_src)  # every source read
    g.shuffle(indices)
    return Block(
        n_dst=n_dst,
        n_src=n_src,
        indptr=torch.from_numpy(np.concatenate([[0], np.cumsum(deg)])),
        indices=torch.from_numpy(indices),
        src_out_degree=torch.ones(n_src),
        dst_in_degree=torch.ones(n_dst),
        dst_global=torch.arange(n_dst),
    )


def _peak_bytes(fn) -> int:
    """The most bytes of CPU tensors alive at once while ``fn`` runs (torch.profiler's memory timeline)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        fn()
    if not hasattr(prof, "_memory_profile"):
        pytest.skip("this torch has no profiler memory timeline")
    cur = top = 0
    for _, action, _, size in prof._memory_profile().timeline:
        if action.name == "CREATE":
            cur += size
        elif action.name == "DESTROY":
            cur -= size
        top = max(top, cur)
    return top


@pytest.mark.slow  # ~45 s: the profiler records every op of ~130 bins
@pytest.mark.parametrize("kind", ["sage", "gcn", "gat", "dgcn"])
@pytest.mark.parametrize("backend", ["index", "numba"])
def test_the_estimate_bounds_what_a_bin_allocates(kind, backend):
    """One bin as the runtime trains it (its block and gathered inputs made, the forward with gradients, the
    backward, the input gradient read): the most bytes alive at once never exceed ``bin_cost``'s — with
    arcs, sources or destinations dominating, projecting first or not, with and without dropout (the last
    layer), on the index backend (CUDA's: one message per arc) against the ``cuda`` estimate and on the fused
    numba kernels against the ``cpu`` one (no message rows)."""
    from stages.kits.runtime.block import Block
    from stages.kits.runtime.kernels import use_backend
    from stages.kits.runtime.models import model_from_spec

    for dims in [(60, 10, 7, 2), (10, 40, 7, 2)]:
        spec = ModelSpec(kind, *dims, heads=3)
        torch.manual_seed(0)
        model = model_from_spec(spec)
        # the numba kernels (the CPU's) against the estimate for bins sized for the CPU, the index backend
        # (CUDA's) against the one for CUDA
        costs = bin_costs(spec, "cpu" if backend == "numba" else "cuda")
        for li, (shape, cost) in enumerate(zip(spec.layer_shapes(), costs, strict=True)):
            for n_dst, n_src, arcs in [(100, 400, 4000), (100, 2000, 2000), (1500, 1500, 1500)]:
                proto = _random_block(n_dst, n_src, arcs)

                def one_bin(proto=proto, li=li, a=shape.d_in, model=model):
                    block = Block(
                        n_dst=proto.n_dst,
                        n_src=proto.n_src,
                        indptr=proto.indptr.clone(),
                        indices=proto.indices.clone(),
                        src_out_degree=proto.src_out_degree.clone(),
                        dst_in_degree=proto.dst_in_degree.clone(),
                        dst_global=proto.dst_global.clone(),
                    )
                    x = torch.randn(block.n_src, a).requires_grad_(li > 0)
                    y = model.layer_forward(li, block, x, 1, 0.5, 0, True)
                    torch.autograd.backward(y, torch.randn_like(y))
                    return x.grad

                with use_backend(backend):
                    one_bin()  # compiles the kernels
                    measured = _peak_bytes(one_bin)
                estimate = cost.bytes(n_dst, n_src, arcs)
                assert measured <= estimate, (
                    kind,
                    dims,
                    li,
                    backend,
                    (n_dst, n_src, arcs),
                    measured,
                    estimate,
                )


# --- the planner and the runtime --------------------------------------------------------------------------------
def test_a_partition_that_fits_is_one_bin_of_what_it_holds(tiny_store, tmp_path, cli_runner):
    """One worker under a device that holds its whole partition: every layer is one bin, of the bytes its
    nodes, distinct sources and arcs give (the same as the layer-synchronous plan's memory of the layer); under
    a third of the largest layer's bytes, that layer is cut into bins that each fit."""
    from g3cli.main import cli

    part = tmp_path / "part"
    assert cli_runner.invoke(cli, ["partition", str(tiny_store), "-w", "1", "-o", str(part)]).exit_code == 0
    # bns-gcn's layer memory is CUDA's (it has no --bins-for)
    r = cli_runner.invoke(
        cli, ["plan", str(part), "--device-memory", "1GiB", "--bins-for", "cuda", "-o", str(tmp_path / "g3")]
    )
    assert r.exit_code == 0, r.output
    r = cli_runner.invoke(cli, ["plan", str(part), "--strategy", "bns-gcn", "-o", str(tmp_path / "bns")])
    assert r.exit_code == 0, r.output
    g3 = json.loads((tmp_path / "g3" / "plan.json").read_text())
    bns = json.loads((tmp_path / "bns" / "plan.json").read_text())
    layers = g3["workers"][0]["layers"]
    assert all(layer["num_bins"] == 1 for layer in layers)
    assert [layer["max_bin_bytes"] for layer in layers] == [
        e["memory_bytes"] for e in bns["workers"][0]["estimate"]
    ]
    w = bns["workers"][0]
    assert all(layer["max_bin_sources"] == w["num_owned"] + w["num_remote"] for layer in layers)
    budget = 2 * max(layer["max_bin_bytes"] for layer in layers) // 3
    r = cli_runner.invoke(
        cli, ["plan", str(part), "--device-memory", str(budget), "-o", str(tmp_path / "bins")]
    )
    assert r.exit_code == 0, r.output
    cut = json.loads((tmp_path / "bins" / "plan.json").read_text())["workers"][0]["layers"]
    assert max(layer["num_bins"] for layer in cut) >= 3
    assert all(layer["max_bin_bytes"] <= layer["bin_limit_bytes"] == budget // 2 for layer in cut)


def test_bins_sized_for_the_cpu_count_no_message_rows(tiny_store, tmp_path, cli_runner):
    """``--bins-for cpu`` sizes bins without CUDA's per-arc message rows: never more bins than ``cuda``'s, and
    under a device memory between the two estimates of the whole layer, one bin where CUDA's needs several;
    plan.json records the kind (an old plan without it reads as cuda), and `g3 train --device cuda` refuses a
    plan sized for the CPU in one line."""
    from g3cli.main import cli
    from stages.common.model_spec import bins_device

    part = tmp_path / "part"
    assert cli_runner.invoke(cli, ["partition", str(tiny_store), "-w", "1", "-o", str(part)]).exit_code == 0

    def layers(name, *opts):
        r = cli_runner.invoke(cli, ["plan", str(part), *opts, "-o", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
        meta = json.loads((tmp_path / name / "plan.json").read_text())
        return meta["strategy"]["options"]["bins_for"], meta["workers"][0]["layers"]

    kind_cpu, cpu = layers("cpu", "--device-memory", "1GiB", "--bins-for", "cpu")
    kind_cuda, cuda = layers("cuda", "--device-memory", "1GiB", "--bins-for", "cuda")
    assert (kind_cpu, kind_cuda) == ("cpu", "cuda") and bins_device({}) == "cuda"
    assert all(a["num_bins"] == b["num_bins"] == 1 for a, b in zip(cpu, cuda, strict=True))
    li = max(range(len(cpu)), key=lambda i: cuda[i]["max_bin_bytes"] - cpu[i]["max_bin_bytes"])
    lo, hi = cpu[li]["max_bin_bytes"], cuda[li]["max_bin_bytes"]
    assert hi > 1.2 * lo  # tiny's per-arc message rows are a good part of the layer
    memory = str(lo + hi)  # bin limit (lo + hi) / 2: the cpu estimate of the layer fits, CUDA's does not
    _, cpu = layers("cpu-mid", "--device-memory", memory, "--bins-for", "cpu")
    _, cuda = layers("cuda-mid", "--device-memory", memory, "--bins-for", "cuda")
    assert cpu[li]["num_bins"] == 1 < cuda[li]["num_bins"]
    assert all(a["num_bins"] <= b["num_bins"] for a, b in zip(cpu, cuda, strict=True))
    r = cli_runner.invoke(cli, ["train", str(tmp_path / "cpu-mid"), "--device", "cuda", "--epochs", "1"])
    assert r.exit_code != 0 and "re-plan with --bins-for cuda" in r.output and "cpu-mid" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.slow  # trains
@pytest.mark.parametrize("fit", [True, False])
def test_backward_auto_keeps_one_bin_layers_only_where_they_fit_the_device_together(
    tiny_store, tmp_path, cli_runner, fit
):
    """`--backward auto` keeps a worker's activations where every layer is one bin — but kept, the layers' bins
    are on the device together: where their sum exceeds the device memory the plan sized them by (each within
    the bin limit, half of it), the worker recomputes instead (read from the trace's backward spans; layer 0
    never recomputes, its inputs are fixed)."""
    from g3cli.main import cli

    part, probe, plan, run = (tmp_path / n for n in ("part", "probe", "plan", "run"))
    assert cli_runner.invoke(cli, ["partition", str(tiny_store), "-w", "1", "-o", str(part)]).exit_code == 0
    model = ["--layers", "3", "--hidden", "6"]
    assert (
        cli_runner.invoke(
            cli, ["plan", str(part), *model, "--device-memory", "1GiB", "-o", str(probe)]
        ).exit_code
        == 0
    )
    sizes = [
        layer["max_bin_bytes"]
        for layer in json.loads((probe / "plan.json").read_text())["workers"][0]["layers"]
    ]
    assert sum(sizes) > 2 * max(sizes)  # some device holds each layer's bin, not all three
    memory = str(2 * sum(sizes)) if fit else str(2 * max(sizes))
    r = cli_runner.invoke(cli, ["plan", str(part), *model, "--device-memory", memory, "-o", str(plan)])
    assert r.exit_code == 0, r.output
    layers = json.loads((plan / "plan.json").read_text())["workers"][0]["layers"]
    assert all(layer["num_bins"] == 1 for layer in layers)
    r = cli_runner.invoke(
        cli,
        [
            "train",
            str(plan),
            "--epochs",
            "2",
            "--eval-every",
            "0",
            "--threads",
            "1",
            "--trace",
            "-o",
            str(run),
        ],
    )
    assert r.exit_code == 0, r.output
    spans = [
        e
        for e in json.loads((run / "trace" / "rank-00000.json").read_text())["traceEvents"]
        if e["ph"] == "X" and e["cat"] == "compute" and e["args"].get("phase") == "bwd"
    ]
    upper = [e["args"]["recomputed"] for e in spans if e["args"]["layer"] > 0]
    assert upper and all(r == (not fit) for r in upper), upper


@pytest.mark.parametrize("chunk_arcs", [1, 7, 50])
def test_blocks_built_a_run_of_bins_at_a_time_are_the_same(chunk_arcs):
    """The planner builds a worker's bins in runs of about ``chunk_arcs`` arcs (its memory bounded by the run):
    the same arrays as building every bin at once."""
    row_ptr, edge_src, prio, n_own, n_rem = random_rows(6)
    cost = bin_cost(ModelSpec("sage", 8, 6, 3, 2).layer_shapes()[0])
    limit = int(cost.bytes(n_own, n_own + n_rem, row_ptr[-1]) // 9)
    bounds = pack_within(cost, row_ptr, edge_src, prio, n_own + n_rem, limit).bounds
    whole = build_layer_bins(bounds, prio, row_ptr, edge_src, n_own, n_own + n_rem, chunk_arcs=1 << 40)
    runs = build_layer_bins(bounds, prio, row_ptr, edge_src, n_own, n_own + n_rem, chunk_arcs=chunk_arcs)
    assert whole.num_bins >= 9
    for name in ("bin_ptr", "src_ptr", "src", "indices"):
        assert np.array_equal(getattr(whole, name), getattr(runs, name)), name
        assert getattr(whole, name).dtype == getattr(runs, name).dtype


def reference_bins_of(bin_ptr, prio, row_ptr, edge_src, pos_of_owned, n_owned: int, n_local: int):
    """The blocks of the consecutive bins ``bin_ptr`` built with numpy set operations, independently of the
    planner's kernel: (src_ptr from 0, src, indices)."""
    nb = len(bin_ptr) - 1
    r0, r1 = int(bin_ptr[0]), int(bin_ptr[-1])
    e0, e1 = int(row_ptr[r0]), int(row_ptr[r1])
    local_ptr = bin_ptr - r0
    row_bin = np.repeat(np.arange(nb, dtype=np.int64), np.diff(local_ptr))
    deg = np.diff(row_ptr[r0 : r1 + 1])
    edge_bin = np.repeat(row_bin, deg)
    src = np.asarray(edge_src[e0:e1], dtype=np.int64)

    owned_src = src < n_owned
    # a source's position relative to this run of rows; one outside it is in another bin
    src_pos = np.where(owned_src, pos_of_owned[np.where(owned_src, src, 0)] - r0, -1)
    in_run = owned_src & (src_pos >= 0) & (src_pos < r1 - r0)
    same_bin = in_run & (row_bin[np.clip(src_pos, 0, max(r1 - r0 - 1, 0))] == edge_bin)

    # other sources: unique (bin, local id) pairs, sorted by bin then id
    key = edge_bin[~same_bin] * n_local + src[~same_bin]
    uniq = np.unique(key)
    uniq_bin = uniq // n_local
    other_count = np.bincount(uniq_bin, minlength=nb)
    other_off = np.concatenate([[0], np.cumsum(other_count)])
    n_dst = np.diff(local_ptr)
    src_ptr = np.concatenate([[0], np.cumsum(n_dst + other_count)])

    indices = np.empty(len(src), dtype=np.int64)
    indices[same_bin] = src_pos[same_bin] - local_ptr[edge_bin[same_bin]]
    eb = edge_bin[~same_bin]
    indices[~same_bin] = n_dst[eb] + (np.searchsorted(uniq, key) - other_off[eb])

    src_list = np.empty(int(src_ptr[-1]), dtype=np.int64)
    rows = np.arange(r1 - r0, dtype=np.int64)
    src_list[src_ptr[row_bin] + (rows - local_ptr[row_bin])] = prio[r0:r1]
    k = np.arange(len(uniq), dtype=np.int64)
    src_list[src_ptr[uniq_bin] + n_dst[uniq_bin] + (k - other_off[uniq_bin])] = uniq - uniq_bin * n_local
    return src_ptr, src_list, indices


@pytest.mark.parametrize("seed,id_type", [(6, np.int64), (7, np.int32), (8, np.int64)])
def test_the_bin_kernel_builds_what_set_operations_build(seed, id_type):
    """The planner's one-pass kernel gives every bin the sources and indices that numpy's unique/searchsorted
    formulation gives (destinations first, then the other sources ascending), bins of one row included."""
    from stages.kits.plan.bins import _bins_of

    row_ptr, edge_src, prio, n_own, n_rem = random_rows(seed)
    cost = bin_cost(ModelSpec("sage", 8, 6, 3, 2).layer_shapes()[0])
    for parts in (1, 9, n_own):
        if parts == n_own:
            bounds = np.arange(n_own + 1, dtype=np.int64)
        else:
            limit = int(cost.bytes(n_own, n_own + n_rem, row_ptr[-1]) // parts) + 1
            bounds = pack_within(cost, row_ptr, edge_src, prio, n_own + n_rem, limit).bounds
        pos = np.empty(n_own, dtype=np.int64)
        pos[prio] = np.arange(n_own)
        n_local = n_own + n_rem
        got = _bins_of(
            bounds.astype(np.int64),
            0,
            prio.astype(np.int64),
            row_ptr.astype(np.int64),
            edge_src.astype(id_type),  # the shard's ids: int32 where they fit
            pos,
            n_own,
            np.full(n_local, -1, dtype=np.int64),
            np.empty(n_local, dtype=np.int64),
        )
        want = reference_bins_of(bounds, prio, row_ptr, edge_src, pos, n_own, n_local)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b)
