"""`g3 simulate` of a neutrontp plan (stages/strategies/neutrontp/simulate.py): the collectives' bytes against the
plan's, chunk layouts derived for other worker counts against real plans, 4 collectives per epoch for the
decoupled variant whatever L, the inter-chunk pipeline (a hand-computed pass; never slower than bulk beyond
what cutting the collectives costs; equal with one chunk), K up to 16, and the command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stages.common.model_spec import LayerShape, ModelSpec
from stages.common.plan_artifact import load_plan_meta
from stages.kits.partition.feature import feature_columns
from stages.kits.simulate.engine import Network
from stages.kits.simulate.profile import default_rates
from stages.simulate import SimulateOptions, run_simulate
from stages.strategies.neutrontp import plan as planner
from stages.strategies.neutrontp.simulate import (
    ChunkPass,
    Collective,
    TPLayout,
    collectives,
    load_layout,
    run_program,
    simulate_tp,
)


def _plan(
    store: Path,
    out: Path,
    k: int,
    tp: str = "naive",
    model: str = "sage",
    layers: int = 2,
    chunk_size: str | None = "50",
    device_memory: str | None = None,
) -> Path:
    from stages.partition.run import PartitionOptions, run_partition
    from stages.plan.run import PlanConfig, run_plan

    part = out / f"part-{k}"
    if not (part / "partition.json").is_file():
        run_partition(store, PartitionOptions(workers=k, method="feature"), out=part)
    opts = {"tp": tp, "chunk_size": chunk_size or "auto", "device_memory": device_memory or "auto"}
    plan = out / f"plan-{k}-{tp}-{model}-{layers}-{chunk_size}-{device_memory}"
    run_plan(
        part, PlanConfig(model=model, layers=layers, hidden=6, strategy="neutrontp", options=opts), out=plan
    )
    return plan


def _load(plan: Path):
    meta = load_plan_meta(plan)
    return meta, ModelSpec.from_plan(meta), [LayerShape(**s) for s in meta["layers"]]


def _both(spec, shapes, lay, net):
    rates = default_rates(shapes)
    return (
        simulate_tp(spec, shapes, lay, rates, net, "x", pipelined=False),
        simulate_tp(spec, shapes, lay, rates, net, "x", pipelined=True),
    )


# ------------------------------------------------------------------------------------------------------------
# Bytes
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tp,model,layers", [("naive", "sage", 2), ("naive", "gcn", 3), ("decoupled", "gcn", 2)]
)
def test_bytes_per_collective_equal_the_plans(store, tmp_path, tp, model, layers):
    plan = _plan(store, tmp_path, 4, tp, model, layers)
    meta, spec, shapes = _load(plan)
    lay = load_layout(plan, meta)
    bulk, pipe = _both(spec, shapes, lay, Network(1.25e9, 50e-6))
    for r in (bulk, pipe):
        assert [c["name"] for c in r["collectives"]] == [c["name"] for c in meta["collectives"]]
        for sim, want in zip(r["collectives"], meta["collectives"], strict=True):
            assert sim["once"] == want["once"]
            assert sim["bytes_sent"] == [4 * e for e in want["elements_sent"]], sim["name"]
        # a steady-state epoch moves the collectives not marked once, pipelined or not
        steady = sum(4 * sum(c["elements_sent"]) for c in meta["collectives"] if not c["once"])
        assert r["bytes_per_epoch"] == steady
        assert sum(w["bytes_sent"] for w in r["workers"]) == steady
    # the per-chunk pieces add up to the bulk collective, received bytes = sent bytes over all workers
    for c in collectives(spec, lay):
        assert c.sent.shape == (lay.n_chunks, 4)
        assert c.bytes_sent.sum() == c.bytes_received.sum()
    assert pipe["collective_calls"] == lay.n_chunks * bulk["collective_calls"]


def test_collective_seconds_latency_plus_busier_direction_of_slowest_worker():
    c = Collective("x", 2, False, sent=np.array([[3, 1], [2, 2]]), recv=np.array([[1, 5], [2, 2]]))
    net = Network(bandwidth=8.0, latency=0.5)  # 2 elements per second
    # bulk: worker 0 sends 5, receives 3; worker 1 sends 3, receives 7 -> 7 elements = 28 bytes
    assert c.seconds(net, per_chunk=False) == pytest.approx(0.5 + 28 / 8)
    assert c.seconds(net, per_chunk=True) == pytest.approx([0.5 + 20 / 8, 0.5 + 8 / 8])
    one = Collective("x", 2, False, sent=np.array([[7]]), recv=np.array([[7]]))
    assert one.seconds(net, per_chunk=False) == 0.0  # one worker: nothing moves


@pytest.mark.parametrize("tp,model", [("naive", "sage"), ("decoupled", "gcn")])
def test_layouts_for_other_worker_counts_are_the_planners(store, tmp_path, tp, model):
    """Chunks sized by --device-memory depend on K: the derived layout and collectives for K = 3 and 5 are those
    of real plans for K = 3 and 5."""
    base = _plan(store, tmp_path, 4, tp, model, chunk_size=None, device_memory="40KB")
    meta, spec, _ = _load(base)
    for k in (3, 5):
        real = _plan(store, tmp_path, k, tp, model, chunk_size=None, device_memory="40KB")
        rmeta = load_plan_meta(real)
        lay = load_layout(base, meta, k)
        assert lay.n_chunks == rmeta["chunks"]["count"] > 1
        assert np.array_equal(lay.bounds, np.load(real / "chunks" / "bounds.npy"))
        assert np.array_equal(lay.owner_bounds, np.load(real / "chunks" / "owner_bounds.npy"))
        assert np.array_equal(lay.first_use, np.load(real / "chunks" / "first_use.npy"))
        got = collectives(spec, lay)
        assert [(c.name, c.once, c.elements_sent.tolist()) for c in got] == [
            (c["name"], c["once"], c["elements_sent"]) for c in rmeta["collectives"]
        ]


# ------------------------------------------------------------------------------------------------------------
# Decoupled: 4 collectives per epoch
# ------------------------------------------------------------------------------------------------------------


def test_decoupled_four_collectives_whatever_layers(store, tmp_path):
    net = Network(1.25e9, 50e-6)
    for layers in (1, 2, 4):
        plan = _plan(store, tmp_path, 4, "decoupled", "gcn", layers)
        meta, spec, shapes = _load(plan)
        lay = load_layout(plan, meta)
        bulk, pipe = _both(spec, shapes, lay, net)
        assert bulk["collectives_per_epoch"] == pipe["collectives_per_epoch"] == 4
        assert bulk["collective_calls"] == 4
        assert pipe["collective_calls"] == 4 * lay.n_chunks
        names = [c["name"] for c in bulk["collectives"] if not c["once"]]
        assert names == ["split", "gather", "bwd split", "bwd gather"]
    # naive TP: 4 per layer after the first (layer 0's gather runs once, with the layer-0 cache)
    for layers in (2, 3):
        plan = _plan(store, tmp_path, 4, "naive", "gcn", layers)
        meta, spec, shapes = _load(plan)
        bulk, _ = _both(spec, shapes, load_layout(plan, meta), net)
        assert bulk["collectives_per_epoch"] == bulk["collective_calls"] == 4 * (layers - 1)
        assert bulk["first_epoch_seconds"] > bulk["epoch_seconds"]


# ------------------------------------------------------------------------------------------------------------
# The inter-chunk pipeline
# ------------------------------------------------------------------------------------------------------------


def test_pipelined_pass_by_hand():
    """Two workers, 3 chunks of 1 s; a split piece of 4, 1, 1 elements, a gather piece of 1 element per worker
    and chunk; 2 elements per second, no latency. Communication lane: pre0 [0,2], pre1 [2,2.5], post0 waits for
    chunk 0 (done at 3): [3,3.5], pre2 [3.5,4], post1 [4,4.5], post2 waits for chunk 2: [5,5.5]. Chunks: 0 at
    [2,3], 1 at [3,4], 2 at [4,5]. Bulk: split 3 s, 3 chunks, gather 1.5 s = 7.5 s."""
    pre = Collective(
        "split", 2, False, sent=np.array([[4, 4], [1, 1], [1, 1]]), recv=np.array([[4, 4], [1, 1], [1, 1]])
    )
    post = Collective(
        "gather", 2, False, sent=np.ones((3, 2), dtype=np.int64), recv=np.ones((3, 2), dtype=np.int64)
    )
    p = ChunkPass(np.arange(3), np.ones((3, 2)), np.zeros(2), pre, post, "L1")
    net = Network(bandwidth=8.0, latency=0.0)
    piped = run_program([p], 2, net, pipelined=True)
    bulk = run_program([p], 2, net, pipelined=False)
    assert piped.t.tolist() == pytest.approx([5.5, 5.5])
    assert bulk.t.tolist() == pytest.approx([7.5, 7.5])
    assert piped.busy.tolist() == [3.0, 3.0]
    assert piped.comm_wait.tolist() == pytest.approx([2.5, 2.5])  # 2 before chunk 0, 0.5 after chunk 2
    assert piped.calls == 6 and bulk.calls == 2
    assert piped.sent.tolist() == bulk.sent.tolist() == [4 * 9, 4 * 9]
    # one worker: the runtime does not pipeline and nothing moves
    solo = ChunkPass(np.arange(3), np.ones((3, 1)), np.zeros(1), None, None, "L1")
    assert run_program([solo], 1, net, pipelined=True).t.tolist() == [3.0]


def _balanced_layout(k: int, chunk_sizes: list[int], arcs_per_node: int, feat_dim: int) -> TPLayout:
    """Chunks whose nodes are first read by their own chunk (self-loops, arcs within the chunk): every piece of
    every collective is balanced over the workers when the chunk sizes are multiples of K."""
    bounds = np.concatenate([[0], np.cumsum(chunk_sizes)]).astype(np.int64)
    first = np.repeat(np.arange(len(chunk_sizes)), chunk_sizes).astype(np.int32)
    arcs = np.asarray(chunk_sizes, dtype=np.int64) * arcs_per_node
    cols0 = [c["stop"] - c["start"] for c in feature_columns(feat_dim, k)]
    return TPLayout(k, bounds, planner.owner_bounds(bounds, k), first, arcs, cols0)


@pytest.mark.parametrize("kind,layers", [("gcn", 2), ("sage", 3), ("dgcn", 2)])
def test_pipelined_never_slower_when_cutting_is_free(kind, layers):
    """Balanced pieces and no latency: cutting a collective per chunk costs nothing, and the pipelined epoch is
    never slower than the bulk one, from compute-bound to network-bound."""
    spec = ModelSpec(kind, in_dim=16, hidden=12, num_classes=8, layers=layers)
    shapes = spec.layer_shapes()
    for k in (2, 4):
        lay = _balanced_layout(k, [40, 24, 32, 8], arcs_per_node=7, feat_dim=16)
        for bw in (1e3, 1e5, 1e7, 1e9, float("inf")):
            bulk, pipe = _both(spec, shapes, lay, Network(bw, 0.0))
            assert pipe["epoch_seconds"] <= bulk["epoch_seconds"] * (1 + 1e-12), (k, bw)
            assert pipe["bytes_per_epoch"] == bulk["bytes_per_epoch"]
        # network-bound: the pipeline hides the aggregation behind the collectives
        bulk, pipe = _both(spec, shapes, lay, Network(1e5, 0.0))
        assert pipe["epoch_seconds"] < bulk["epoch_seconds"]


@pytest.mark.parametrize("tp,model", [("naive", "sage"), ("naive", "gcn"), ("decoupled", "gcn")])
def test_pipelined_vs_bulk_on_plans(store, tmp_path, tp, model):
    """On real plans: with one chunk the pipelined epoch is the bulk one (any network); with several it is
    never slower than the bulk one beyond what cutting the collectives costs — a latency per extra call and
    each piece waiting for its own slowest worker (so with many small chunks and a high latency it can be
    slower: the runtime pays that latency too)."""
    one = _plan(store, tmp_path, 4, tp, model, chunk_size="1000")
    meta, spec, shapes = _load(one)
    lay = load_layout(one, meta)
    assert lay.n_chunks == 1
    for bw, lat in ((1e4, 0.0), (1.25e9, 50e-6), (1e7, 1e-2), (float("inf"), 1e-3)):
        bulk, pipe = _both(spec, shapes, lay, Network(bw, lat))
        assert pipe["epoch_seconds"] == pytest.approx(bulk["epoch_seconds"], rel=1e-12)
        assert pipe["first_epoch_seconds"] == pytest.approx(bulk["first_epoch_seconds"], rel=1e-12)
        assert pipe["collective_calls"] == bulk["collective_calls"]

    plan = _plan(store, tmp_path, 4, tp, model, chunk_size="30")
    meta, spec, shapes = _load(plan)
    for k in (2, 4, 8):
        lay = load_layout(plan, meta, k)
        steady = [c for c in collectives(spec, lay) if not c.once]
        for bw, lat in ((1e4, 0.0), (1e6, 50e-6), (1.25e9, 50e-6), (1.25e9, 1e-3), (float("inf"), 0.0)):
            bulk, pipe = _both(spec, shapes, lay, Network(bw, lat))
            cut = sum(
                (lay.n_chunks - 1) * lat + (c.chunk_link.max(axis=1).sum() - c.bulk_link.max()) / bw
                for c in steady
            )
            assert pipe["epoch_seconds"] <= bulk["epoch_seconds"] + cut + 1e-12, (k, bw, lat)
        # infinitely fast links, no latency: the same epoch
        bulk, pipe = _both(spec, shapes, lay, Network(float("inf"), 0.0))
        assert pipe["epoch_seconds"] == pytest.approx(bulk["epoch_seconds"], rel=1e-12)
    # 8 chunks, 1 ms a call, little compute: the extra latencies show
    bulk, pipe = _both(spec, shapes, load_layout(plan, meta), Network(1.25e9, 1e-3))
    assert pipe["epoch_seconds"] > bulk["epoch_seconds"]


# ------------------------------------------------------------------------------------------------------------
# Worker counts up to 16, and the command
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tp,model", [("naive", "sage"), ("decoupled", "gcn")])
def test_scaling_up_to_16_workers(store, tmp_path, tp, model):
    plan = _plan(store, tmp_path, 4, tp, model, chunk_size=None, device_memory="40KB")
    opts = SimulateOptions(
        workers=16, pipelines=("none", "multi"), scaling=(1, 2, 3, 4, 8, 16), cache=str(tmp_path / "cache")
    )
    res = run_simulate(plan, opts, out=tmp_path / "sim")
    names = [f"neutrontp-{tp}", f"neutrontp-{tp}+pipe"]
    assert [r["system"] for r in res["systems"]] == names
    assert res["workers"] == 16 and len(res["systems"][0]["workers"]) == 16
    assert [row["workers"] for row in res["scaling"]] == [1, 2, 3, 4, 8, 16]
    for row in res["scaling"]:
        assert set(row["systems"]) == set(names)
        for s in row["systems"].values():
            assert s["epoch_seconds"] > 0 and s["throughput"] > 0
    by_k = {row["workers"]: row["systems"][names[0]] for row in res["scaling"]}
    assert by_k[1]["bytes_per_epoch"] == 0
    assert by_k[1]["epoch_seconds"] == pytest.approx(res["scaling"][0]["systems"][names[1]]["epoch_seconds"])
    # the aggregation is E·⌈D/K⌉ per worker: more workers, less busy time each
    assert by_k[16]["busy_max"] < by_k[4]["busy_max"] < by_k[1]["busy_max"]
    # the scaling row of the simulated K is the main result
    assert by_k[16]["epoch_seconds"] == res["systems"][0]["epoch_seconds"]
    assert not (tmp_path / "cache").exists()  # no plans written for other K


def test_cli_simulate_neutrontp_plan(store, tmp_path):
    from click.testing import CliRunner

    from g3cli.main import cli

    plan = _plan(store, tmp_path, 4, "naive", "sage")
    out = tmp_path / "sim"
    r = CliRunner().invoke(cli, ["simulate", str(plan), "-o", str(out), "--scaling", "2,4,8,16"])
    assert r.exit_code == 0, r.output
    data = json.loads((out / "simulate.json").read_text())
    assert data["schema"] == "g3.simulate"
    assert [s["system"] for s in data["systems"]] == ["neutrontp-naive", "neutrontp-naive+pipe"]
    assert [row["workers"] for row in data["scaling"]] == [2, 4, 8, 16]
    assert (
        (out / "workers.png").is_file()
        and (out / "timeline.png").is_file()
        and (out / "scaling.png").is_file()
    )
    assert "neutrontp-naive+pipe" in r.output
    r = CliRunner().invoke(
        cli,
        [
            "simulate",
            str(plan),
            "-o",
            str(tmp_path / "sim2"),
            "--pipeline",
            "none",
            "--scaling",
            "none",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert [s["system"] for s in json.loads(r.output)["systems"]] == ["neutrontp-naive"]


@pytest.mark.parametrize("kind,layers", [("sage", 2), ("gcn", 3), ("dgcn", 1), ("dgcn", 3)])
def test_all_reduced_weights_are_the_models(kind, layers):
    """The all-reduce moves the model's weights; dgcn's are its MLP's (g3's simulator counted them wrongly)."""
    from stages.kits.runtime.models import model_from_spec
    from stages.strategies.neutrontp.simulate import num_params

    spec = ModelSpec(kind, in_dim=12, hidden=7, num_classes=5, layers=layers)
    model = model_from_spec(spec)
    assert num_params(spec) == sum(p.numel() for p in model.parameters())
