"""NeutronTP (`g3 plan --strategy neutrontp`): naive tensor parallelism against the exact single-process
reference, decoupled TP and the g3 strategy's dgcn against the decoupled reference, the inter-chunk pipeline
bitwise equal to bulk exchanges, bytes counted against the plan's formulas (002 §3.2), resume, eval, and bad
input. Every run is real: `g3 partition --method feature`, `g3 plan`, `g3 train` with torch.distributed workers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import cut_and_resume, flags, g3_partition, g3_plan, invoke, ok, records, weights
from reference import reference_train
from test_eval import independent_accuracy
from test_multihost import TRAIN, finish, free_port, torchrun
from test_strategies import EPOCHS, run_strategy
from test_train import DROPOUT, LR, SEED, max_weight_diff, ref_graph

from stages.common.store import GraphStore

HIDDEN = 6  # run_strategy's


@pytest.fixture(scope="module")
def feature_parts(store, tmp_path_factory):
    root = tmp_path_factory.mktemp("feature")
    made = {}

    def get(k: int) -> Path:
        if k not in made:
            made[k] = g3_partition(store, root / f"feature-{k}", k, method="feature")
        return made[k]

    return get


def plan_and_train(
    part: Path,
    tmp: Path,
    model: str,
    plan_opts=(),
    train_opts=(),
    layers: int = 2,
    strategy: str = "neutrontp",
    epochs: int = EPOCHS,
) -> Path:
    """`g3 plan` + `g3 train` as the strategy tests run them (hidden 6, float64, dropout, K from the partition)."""
    return run_strategy(
        part, tmp, strategy, model, tuple(plan_opts), tuple(train_opts), epochs=epochs, layers=layers
    )


def against_reference(store: Path, run: Path, kind: str) -> float:
    init, final = weights(run)
    ref = reference_train(kind, init, ref_graph(store), EPOCHS, LR, 0.0, DROPOUT, SEED)
    return max_weight_diff(ref, final)


# K x model x chunks x pipeline: --chunk-size auto is one chunk of the whole graph (240 nodes here)
NAIVE = [
    (1, "sage", "auto", "none", 2),
    (1, "gcn", "50", "multi", 2),
    (2, "sage", "7", "multi", 2),
    (2, "gcn", "auto", "none", 2),
    (4, "sage", "50", "none", 3),
    (4, "gcn", "13", "multi", 3),
]


@pytest.mark.parametrize("k,model,chunk,pipeline,layers", NAIVE)
def test_naive_tp_equals_full_graph_training(
    store, feature_parts, tmp_path, k, model, chunk, pipeline, layers
):
    run = plan_and_train(
        feature_parts(k),
        tmp_path,
        model,
        ("--tp", "naive", "--chunk-size", chunk),
        ("--pipeline", pipeline),
        layers=layers,
    )
    assert against_reference(store, run, model) <= 1e-5


@pytest.mark.parametrize(
    "k,chunk,pipeline,layers", [(1, "auto", "none", 2), (2, "7", "multi", 1), (4, "50", "none", 3)]
)
def test_decoupled_tp_equals_its_reference(store, feature_parts, tmp_path, k, chunk, pipeline, layers):
    """--tp decoupled --model gcn trains dgcn (an MLP, then Â^L) exactly as the decoupled single-process
    reference does."""
    run = plan_and_train(
        feature_parts(k),
        tmp_path,
        "gcn",
        ("--tp", "decoupled", "--chunk-size", chunk),
        ("--pipeline", pipeline),
        layers=layers,
    )
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["config"]["model"] == "dgcn"
    assert against_reference(store, run, "dgcn") <= 1e-5
    if k == 2:  # g3 eval's exact inference of the decoupled model
        r = ok(["eval", run, "--json"])
        expected = independent_accuracy(store, weights(run)[1], "dgcn")
        assert json.loads(r.output)["accuracy"] == pytest.approx(expected, abs=1e-6)


def test_g3_strategy_trains_the_decoupled_model(store, tmp_path):
    """The same dgcn model under the g3 strategy (node partition, bins, P2P) equals the decoupled reference."""
    part = g3_partition(store, tmp_path / "part", 2, method="metis")
    run = plan_and_train(part, tmp_path / "g3", "dgcn", ("--bin-size", "40"), strategy="g3")
    assert against_reference(store, run, "dgcn") <= 1e-5


def test_pipeline_is_bitwise_the_bulk_exchange_and_bytes_match_the_plan(feature_parts, tmp_path):
    """Per-chunk collectives on the communication thread give bitwise the bulk run's weights and send the same
    bytes; every collective's bytes equal the plan's formula (002 §3.2), the layer-0 ones only in epoch 0."""
    part = feature_parts(4)
    opts = ("--tp", "naive", "--chunk-size", "30")
    bulk = plan_and_train(part, tmp_path / "bulk", "sage", opts, ("--pipeline", "none"))
    piped = plan_and_train(part, tmp_path / "piped", "sage", opts, ("--pipeline", "multi"))
    assert max_weight_diff(weights(bulk)[1], weights(piped)[1]) == 0.0
    plan = json.loads((tmp_path / "bulk" / "plan" / "plan.json").read_text())
    assert plan["chunks"]["count"] == 8
    for run in (bulk, piped):
        recs = records(run)
        for epoch, rec in enumerate(recs):
            for c in plan["collectives"]:
                counted = [w["bytes_sent_per_phase"].get(c["name"], 0) for w in rec["workers"]]
                expected = [8 * e if (epoch == 0 or not c["once"]) else 0 for e in c["elements_sent"]]
                assert counted == expected, (epoch, c["name"])
    # the closed form when the widths divide by K: each all-to-all moves (K-1)/K of a V x D tensor
    v = 240
    gather1 = next(c for c in plan["collectives"] if c["name"] == "gather L1")
    assert (
        sum(gather1["elements_sent"]) * 4 == 3 * v * HIDDEN
    )  # K = 4, hidden 6 cut 2,2,1,1: sum c_w(V - own_w)


def test_decoupled_sends_four_collectives_whatever_the_depth(feature_parts, tmp_path):
    part = feature_parts(2)
    run = plan_and_train(part, tmp_path, "gcn", ("--tp", "decoupled"), layers=3, epochs=2)
    phases = {p for w in records(run)[1]["workers"] for p, b in w["bytes_sent_per_phase"].items() if b}
    assert phases == {"split", "gather", "bwd split", "bwd gather"}


def test_resume_equals_uninterrupted_and_eval_is_exact(store, feature_parts, tmp_path):
    plan = g3_plan(feature_parts(2), tmp_path / "plan", strategy="neutrontp", chunk_size=50, hidden=6)
    common = flags(threads=1, seed=3, checkpoint_every=2, eval_every=0, workers=2)
    full_run, cut = cut_and_resume(plan, tmp_path, 5, 3, *common)
    full = weights(full_run)[1]
    assert max_weight_diff(full, weights(cut)[1]) == 0.0
    r = ok(["eval", full_run, "--json"])
    expected = independent_accuracy(store, full, "sage")
    assert json.loads(r.output)["accuracy"] == pytest.approx(expected, abs=1e-6)


def test_chunks_interleave_ownership_and_dedup_splits(feature_parts, tmp_path):
    part = feature_parts(4)
    plan = g3_plan(part, tmp_path / "plan", strategy="neutrontp", model="gcn", chunk_size=50)
    bounds = np.load(plan / "chunks" / "bounds.npy")
    ob = np.load(plan / "chunks" / "owner_bounds.npy")
    assert bounds.tolist() == [0, 50, 100, 150, 200, 240]
    assert ob[0].tolist() == [0, 12, 25, 37, 50]  # every chunk cut into K pieces
    owned = [np.load(plan / f"worker-{q:05d}" / "owned.npy") for q in range(4)]
    assert sorted(np.concatenate(owned).tolist()) == list(range(240))
    first = np.load(plan / "chunks" / "first_use.npy")
    assert (
        first <= np.searchsorted(bounds, np.arange(240), side="right") - 1
    ).all()  # GCN: own chunk at latest


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--method-node",), "runs on feature partitions"),
        (("--tp", "ring"), "--tp ring: expected naive or decoupled"),
        (("--chunk-size", "0"), "--chunk-size 0: the chunk size must be at least 1 node"),
        (("--model", "gat"), "does not train GAT"),
        (("--tp", "decoupled", "--model", "sage"), "--tp decoupled trains the decoupled GCN"),
        (("--model", "dgcn"), "runs under --tp decoupled"),
    ],
)
def test_bad_input_is_one_line(store, feature_parts, tmp_path, args, needle):
    if args == ("--method-node",):
        part = g3_partition(store, tmp_path / "chunk", 2, method="chunk")
        args = ()
    else:
        part = feature_parts(2)
    r = invoke(["plan", str(part), "--strategy", "neutrontp", *args, "-o", str(tmp_path / "plan")])
    assert r.exit_code == 2, r.output
    assert needle in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "plan").exists()


def test_profile_is_refused(feature_parts, tmp_path):
    plan = g3_plan(feature_parts(2), tmp_path / "plan", strategy="neutrontp")
    r = invoke(["train", plan, "--epochs", "1", "--profile", tmp_path / "p.json", "-o", tmp_path / "r"])
    assert r.exit_code == 2 and "--profile fits g3's per-bin rates" in r.output, r.output


def test_old_feature_shards_are_refused(store, tmp_path):
    part = g3_partition(store, tmp_path / "part", 2, method="feature")
    manifest = part / "part-00001" / "shard.json"
    meta = json.loads(manifest.read_text())
    meta.pop("content_sha256")  # version 1 shards were not sealed
    meta["schema_version"] = 1
    del meta["files"]["in_degree.npy"], meta["files"]["out_degree.npy"]
    manifest.write_text(json.dumps(meta))
    r = invoke(["plan", str(part), "--strategy", "neutrontp", "-o", str(tmp_path / "plan")])
    assert r.exit_code == 2 and "re-run `g3 partition STORE --method feature --force`" in r.output, r.output


def test_other_strategies_refuse_the_decoupled_model(store, tmp_path):
    part = g3_partition(store, tmp_path / "part", 2, method="metis")
    r = invoke(["plan", str(part), "--strategy", "bns-gcn", "--model", "dgcn", "-o", str(tmp_path / "plan")])
    assert r.exit_code == 2 and "strategy bns-gcn trains sage, gcn, gat, not dgcn" in r.output, r.output


def test_more_workers_than_columns(store, feature_parts, tmp_path):
    """K = 8 over 10 feature columns (slices of 2, the last three empty) and 6 hidden columns (two workers
    without any): workers without columns aggregate nothing and still own rows; the model is exact."""
    run = plan_and_train(feature_parts(8), tmp_path, "sage", ("--chunk-size", "100"), epochs=EPOCHS)
    assert against_reference(store, run, "sage") <= 1e-5


def test_the_plan_carries_the_topology_and_a_bundle_trains_without_the_store(store, tmp_path):
    """The plan holds the store's CSR (topology/, arcs in the store's order): a bundle of it trains under
    torchrun with the store, partition and plan moved away, bit for bit as `g3 train` of the plan beside them."""
    src = tmp_path / "src"
    shutil.copytree(store, src / "store")
    part = g3_partition(src / "store", src / "part", 2, method="feature")
    plan = g3_plan(part, src / "plan", strategy="neutrontp", chunk_size=50, hidden=6)
    indptr, indices = GraphStore.open(src / "store").load_csr()
    for name, want in (("indptr", np.asarray(indptr, dtype=np.int64)), ("indices", np.asarray(indices))):
        got = np.load(plan / "topology" / f"{name}.npy")
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    meta = json.loads((plan / "plan.json").read_text())
    assert meta["schema_version"] == 6 and meta["topology"]["num_arcs"] == len(indices)
    ok(["train", plan, "--workers", "2", "-o", tmp_path / "reference", *TRAIN])
    ok(["bundle", plan, "--nodes", "1", "-o", tmp_path / "bundle"])
    node = tmp_path / "bundle" / "node-00000"
    assert sorted(p.name for p in (node / "plan").iterdir()) == [
        "chunks",
        "plan.json",
        "topology",
        "worker-00000",
        "worker-00001",
    ]
    away = src.with_name("src-away")
    src.rename(away)  # the node folder is all there is: no store, partition or plan at their paths
    try:
        finish(torchrun(node, "plan", 1, 2, free_port()))
    finally:
        away.rename(src)
    assert max_weight_diff(weights(tmp_path / "reference")[1], weights(node / "run")[1]) == 0.0


def test_a_plan_without_its_topology_is_one_line(feature_parts, tmp_path):
    """A version 3 neutrontp plan (no topology/: its runtime read the store) must be re-planned; a damaged
    topology file is named."""
    plan = g3_plan(feature_parts(2), tmp_path / "plan", strategy="neutrontp")
    train = ["train", str(plan), "--workers", "2", "--epochs", "1", "--threads", "1", "--eval-every", "0"]
    indices = np.load(plan / "topology" / "indices.npy")
    np.save(plan / "topology" / "indices.npy", indices[:-1])
    r = invoke([*train, "-o", str(tmp_path / "damaged")])
    assert r.exit_code == 2 and "file indices.npy holds" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    meta = json.loads((plan / "plan.json").read_text())
    del meta["topology"], meta["content_sha256"]  # version 3 plans were not sealed
    (plan / "plan.json").write_text(json.dumps({**meta, "schema_version": 3}))
    shutil.rmtree(plan / "topology")
    r = invoke([*train, "-o", str(tmp_path / "old")])
    assert r.exit_code == 2 and "plan.json has no `topology`): re-run `g3 plan`" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def test_the_chunk_arrays_are_checked_where_they_are_read(feature_parts, tmp_path):
    """chunks/*.npy are covered by the plan's checksums (a truncated bounds.npy is one line, not an EOF in a
    worker) and their invariants are checked (a decreasing bound is refused even with the checksum made to
    match, as another tool or an edit-and-reseal would)."""
    import json
    import shutil

    from stages.common.errors import G3InputError
    from stages.common.npy import npy_manifest
    from stages.strategies.neutrontp.runtime import load_chunks

    plan = g3_plan(feature_parts(2), tmp_path / "plan", strategy="neutrontp", chunk_size=50)
    meta = json.loads((plan / "plan.json").read_text())
    assert set(meta["chunks"]["files"]) == {"bounds.npy", "owner_bounds.npy", "first_use.npy"}
    damaged = tmp_path / "damaged"
    shutil.copytree(plan, damaged)
    f = damaged / "chunks" / "bounds.npy"
    f.write_bytes(f.read_bytes()[:-8])
    r = invoke(["train", str(damaged), "--epochs", "1", "--threads", "1", "-o", str(tmp_path / "r")])
    assert r.exit_code == 2 and "bounds.npy" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    bounds = np.load(plan / "chunks" / "bounds.npy")
    bounds[2] = bounds[1] - 1  # decreasing, checksum recomputed
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    for name in ("owner_bounds", "first_use"):
        shutil.copy(plan / "chunks" / f"{name}.npy", wrong / f"{name}.npy")
    np.save(wrong / "bounds.npy", bounds)
    (tmp_path / "w").mkdir()
    shutil.move(wrong, tmp_path / "w" / "chunks")
    with pytest.raises(G3InputError, match="does not run from 0 to 240 without decreasing"):
        load_chunks(tmp_path / "w", {**meta, "chunks": {"files": npy_manifest(tmp_path / "w" / "chunks")}}, 2)
