"""Mini-batch strategies (`distdgl`, `bytegnn`, `clustergcn`): batch orders against an independent single-process
reference (which samples, permutes and clusters by itself from the specification), the exact special case
(fanout −1, one batch of every training node = full-graph training), prefetch and threads, resume, `g3 eval`
against the reference's accuracy, bad options.

Every run is real: `g3 partition` (METIS included), `g3 plan --strategy distdgl`, `g3 train` with
torch.distributed processes; remote neighbours are sampled by their owners and features fetched by id.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import flags, g3_partition, g3_plan, g3_train, invoke, minibatch_run, ok, records, weights
from reference import reference_train
from reference_minibatch import (
    cluster_batches,
    cluster_train,
    every_worker_clusters,
    global_batches,
    minibatch_train,
    union_of_local_batches,
)
from test_eval import assert_eval_is_independent
from test_train import DROPOUT, LR, SEED, max_weight_diff, ref_graph

from stages.kits.runtime.neighbor_sampler import build_blocks, sample_rows, sorted_rows_by_global

EPOCHS = 3


def run_distdgl(part: Path, tmp: Path, model: str = "sage", **kw) -> Path:
    """distdgl planned once into TMP/plan (hidden 6, fanouts 3,2, batches of 40 in global order unless KW says
    otherwise) and trained for EPOCHS unless KW says otherwise, into TMP/OUT."""
    kw.setdefault("epochs", EPOCHS)
    return minibatch_run(part, tmp, "distdgl", model, plan_name="plan", **kw)


# --- blocks (the sampler's draws are tested against the specification in tests/test_sampler_spec.py) ----------
def test_blocks_put_destinations_first_and_chain_layers():
    indptr = np.array([0, 2, 4, 5, 6, 6], dtype=np.int64)
    nbrs = sorted_rows_by_global(indptr, np.array([1, 2, 0, 3, 4, 0]), np.arange(5))
    blocks = build_blocks(
        np.array([0, 3]), [-1, -1], lambda nodes, f, h: sample_rows(indptr, nbrs, nodes, nodes, f, 0)
    )
    last, first = blocks[1], blocks[0]
    # in-neighbours: 0 <- 1, 2; 1 <- 0, 3; 2 <- 4; 3 <- 0; 4 <- none
    assert last.dst.tolist() == [0, 3] and last.src.tolist() == [0, 3, 1, 2]
    assert last.src[last.indices].tolist() == [1, 2, 0] and last.indptr.tolist() == [0, 2, 3]
    assert np.array_equal(first.dst, last.src)  # a layer's destinations are the next layer's sources
    assert first.src.tolist() == [0, 3, 1, 2, 4]
    assert first.src[first.indices].tolist() == [1, 2, 0, 0, 3, 4]


# --- against the single-process references -------------------------------------------------------------------
@pytest.mark.parametrize(
    "model,k,method", [("sage", 1, "metis"), ("sage", 2, "distdgl"), ("gcn", 4, "random")]
)
def test_global_order_is_the_reference_for_any_k(store, partitions, tmp_path, model, k, method):
    run = run_distdgl(partitions(method, k), tmp_path, model)
    init, final = weights(run)
    graph = ref_graph(store)
    expected = minibatch_train(
        model, init, graph, global_batches(graph, 40, SEED), [3, 2], EPOCHS, LR, DROPOUT, SEED
    )
    assert max_weight_diff(final, expected) <= 1e-5
    assert max_weight_diff(final, init) > 1e-3
    rec = records(run)
    assert rec[0]["steps"] == -(-int(graph.train_mask.sum()) // 40)
    if k > 1:  # remote neighbours sampled by their owners, remote features pulled from them
        phases = rec[0]["workers"][0]["bytes_sent_per_phase"]
        assert phases.get("sample", 0) > 0 and phases.get("features0", 0) > 0
        # pulled request by request (DistDGL's KVStore), not a collective every rank joins: no round of sizes,
        # and the rows every owner served are the rows the askers fetched: 10 float64 features (GCN: and two
        # int64 degrees) a row, each reply framed in 29 bytes (GCN: 53, a second array)
        assert not any(
            p.startswith("features0-sizes") for w in rec[0]["workers"] for p in w["bytes_sent_per_phase"]
        )
        row, frame = (10 * 8 + 16, 53) if model == "gcn" else (10 * 8, 29)
        served = sum(w["bytes_sent_per_phase"].get("features0", 0) for w in rec[0]["workers"])
        extra = served - sum(w["fetched_rows"] for w in rec[0]["workers"]) * row
        assert 0 <= extra <= frame * rec[0]["steps"] * k * (k - 1) and extra % frame == 0, extra
    if k == 2:
        assert_eval_is_independent(store, run, model)


@pytest.mark.parametrize("k", [2, 4])
def test_split_order_trains_globals_batches_anywhere_and_fetches_more(store, partitions, tmp_path, k):
    """`--batch-order split` (model-centric data parallelism): worker k computes positions k, k+K, … of global
    order's batches wherever their roots live. The same batches: the independent reference of global order;
    but roots away from home: more input rows fetched than global order, which computes every root at its
    owner, and a higher feature miss rate."""
    part = partitions("distdgl", k)
    run = run_distdgl(part, tmp_path / "split", "sage", order="split")
    init, final = weights(run)
    graph = ref_graph(store)
    expected = minibatch_train(
        "sage", init, graph, global_batches(graph, 40, SEED), [3, 2], EPOCHS, LR, DROPOUT, SEED
    )
    assert max_weight_diff(final, expected) <= 1e-5
    home = run_distdgl(part, tmp_path / "global", "sage", order="global")

    def rows(r: Path) -> tuple[int, float]:
        rec = records(r)[-1]
        fetched = sum(w["fetched_rows"] for w in rec["workers"])
        return fetched, fetched / sum(w["source_rows"] for w in rec["workers"])

    (split_rows, split_miss), (home_rows, home_miss) = rows(run), rows(home)
    assert split_rows > 1.2 * home_rows and split_miss > home_miss, (
        split_rows,
        home_rows,
        split_miss,
        home_miss,
    )
    rec = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert all(0.0 < w["feature_miss_rate"] < 1.0 for w in rec["workers"])


@pytest.mark.parametrize("k", [2, 4])
def test_local_order_equals_one_process_fed_the_union_batches(store, partitions, tmp_path, k):
    part = partitions("distdgl", k)
    run = run_distdgl(part, tmp_path, "sage", order="local", batch=15)
    init, final = weights(run)
    graph = ref_graph(store)
    assignment = np.load(part / "assignment.npy").astype(np.int64)
    batches = union_of_local_batches(graph, assignment, k, 15, SEED)
    expected = minibatch_train("sage", init, graph, batches, [3, 2], EPOCHS, LR, DROPOUT, SEED)
    assert max_weight_diff(final, expected) <= 1e-5


def test_every_neighbour_in_one_batch_is_full_graph_training(store, partitions, tmp_path):
    """Fanout −1 and one batch of every training node: the exact special case, dropout masks included."""
    run = run_distdgl(partitions("metis", 2), tmp_path, "gcn", fanouts="-1,-1", batch=100_000)
    init, final = weights(run)
    expected = reference_train("gcn", init, ref_graph(store), EPOCHS, LR, 0.0, DROPOUT, SEED)
    assert max_weight_diff(final, expected) <= 1e-5


def test_prefetch_and_threads_change_nothing_and_resume_equals_uninterrupted(partitions, tmp_path):
    """Sampled 3 steps ahead and stopped after epoch 2, then resumed: bitwise the uninterrupted run sampled in
    the step itself (the sampler keeps no state beyond the epoch and step it is asked for)."""
    part = partitions("distdgl", 2)
    base = run_distdgl(part, tmp_path, train=("--prefetch", "off"), epochs=4, out="base")
    ahead = ("--prefetch", "3", "--checkpoint-every", "2")
    cut = run_distdgl(part, tmp_path, train=ahead, epochs=2, out="cut")
    resumed = run_distdgl(part, tmp_path, train=(*ahead, "--resume"), epochs=4, out="cut")
    assert resumed == cut and max_weight_diff(weights(base)[1], weights(cut)[1]) == 0.0


# --- bad input -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,message",
    [
        (("--fanouts", ""), "fanout"),
        (("--fanouts", "25,0"), "positive integer or -1"),
        (("--fanouts", "10,-2"), "positive integer or -1"),
        (("--fanouts", "a,b"), "comma-separated"),
        (("--fanouts", "5,5,5"), "3 hops but the model has 2 layers"),
        (("--batch-size", "0"), "at least 1"),
        (("--batch-order", "random"), "local, global or split"),
    ],
)
def test_bad_sampling_options_are_one_line(partitions, tmp_path, args, message):
    r = invoke(
        ["plan", str(partitions("metis", 2)), "--strategy", "distdgl", *args, "-o", str(tmp_path / "p")]
    )
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "p").exists()


def test_local_order_gives_a_worker_without_training_nodes_its_share(tmp_path):
    """DistDGL splits the training set evenly over the trainers (001:205), so a worker owning no training node
    still trains (balanced_split is tested against a node-by-node split in test_distdgl_sampling.py)."""
    store, part = tmp_path / "s", tmp_path / "part"
    ok(["ingest", "synthetic:tiny", store, "--split", "0.004,0.1,0.896"])
    g3_partition(store, part, 8, method="chunk")
    trains = [len(np.load(part / f"part-{w:05d}" / "train.npy")) for w in range(8)]
    assert 0 in trains, trains  # the precondition: 8 training nodes over 8 chunks leave one without
    g3_plan(part, tmp_path / "p", strategy="distdgl")
    r = invoke(["train", str(tmp_path / "p"), "--prefetch", "2x", "-o", str(tmp_path / "r")])
    assert r.exit_code == 2 and "--prefetch 2x" in r.output


# --- clustergcn ----------------------------------------------------------------------------------------------
def run_clustergcn(part: Path, tmp: Path, model: str, clusters: int, per_batch: int) -> Path:
    options = flags(
        strategy="clustergcn", model=model, hidden=6, clusters=clusters, clusters_per_batch=per_batch
    )
    return g3_train(g3_plan(part, tmp / "plan", *options), tmp / "run", EPOCHS)


def test_clustergcn_one_worker_one_cluster_is_full_graph_training(store, partitions, tmp_path):
    run = run_clustergcn(partitions("metis", 1), tmp_path, "gcn", 1, 1)
    init, final = weights(run)
    expected = reference_train("gcn", init, ref_graph(store), EPOCHS, LR, 0.0, DROPOUT, SEED)
    assert max_weight_diff(final, expected) <= 1e-5


@pytest.mark.parametrize("model,k", [("sage", 2), ("gcn", 4)])
def test_clustergcn_equals_one_process_on_the_union_of_cluster_subgraphs(
    store, partitions, tmp_path, model, k
):
    part = partitions("metis", k)
    run = run_clustergcn(part, tmp_path, model, 6, 2)
    init, final = weights(run)
    graph, assignment = ref_graph(store), np.load(part / "assignment.npy").astype(np.int64)
    clusters = every_worker_clusters(graph, assignment, 6, 0)  # METIS here, with the planner's count and seed
    for w, c in enumerate(clusters):  # every owned node in exactly one of 6 clusters
        assert sorted(set(c.tolist())) == list(range(6))
        # METIS is deterministic for a given graph, part count and seed: the planner made these clusters too
        assert np.array_equal(c, np.load(tmp_path / "plan" / f"worker-{w:05d}" / "clusters.npy")), w
    expected = cluster_train(
        model, init, graph, cluster_batches(assignment, clusters, 2, SEED), EPOCHS, LR, DROPOUT, SEED
    )
    assert max_weight_diff(final, expected) <= 1e-5
    full = reference_train(model, init, graph, EPOCHS, LR, 0.0, DROPOUT, SEED)
    assert max_weight_diff(final, full) > 1e-4  # dropping arcs changed the model
    if k == 2:
        assert_eval_is_independent(store, run, model)


@pytest.mark.parametrize(
    "args,message",
    [
        (("--clusters", "0"), "cluster count must be at least 1"),
        (("--clusters-per-batch", "x"), "positive integer"),
    ],
)
def test_bad_cluster_options_are_one_line(partitions, tmp_path, args, message):
    r = invoke(
        ["plan", str(partitions("metis", 2)), "--strategy", "clustergcn", *args, "-o", str(tmp_path / "p")]
    )
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_replicated_topology_samples_the_same_without_asking_and_bundles(partitions, tmp_path):
    part = partitions("random", 2)
    asked = run_distdgl(part, tmp_path / "p", fanouts="3,2", epochs=2)
    sampling = flags(strategy="distdgl", hidden=6, fanouts="3,2", batch_size=40, batch_order="global")
    plan = g3_plan(part, tmp_path / "r" / "plan", *sampling, topology="replicated")
    here = run_distdgl(part, tmp_path / "r", fanouts="3,2", epochs=2)
    assert max_weight_diff(weights(asked)[1], weights(here)[1]) == 0.0  # the same samples, the same model
    rec = records(here)
    assert all("sample" not in w["bytes_sent_per_phase"] for w in rec[0]["workers"])
    assert rec[0]["workers"][0]["bytes_sent_per_phase"].get("features0", 0) > 0
    ok(["bundle", plan, "--nodes", "2", "-o", tmp_path / "b"])
    assert (tmp_path / "b" / "node-00001" / "plan" / "topology" / "nbrs.npy").is_file()
    (plan / "topology" / "nbrs.npy").write_bytes(b"garbage")
    r = invoke(["train", str(plan), "--workers", "2", "-o", str(tmp_path / "bad")])
    assert r.exit_code == 2 and "replicated topology" in r.output, r.output


# --- bytegnn -------------------------------------------------------------------------------------------------
def test_bytegnn_scheduler_on_off_and_distdgl_train_the_same_model(store, tmp_path):
    part = g3_partition(store, tmp_path / "part", 2, method="bytegnn")
    finals = {}
    for name, strategy, extra in [
        ("distdgl", "distdgl", ()),
        ("off", "bytegnn", ("--scheduler", "off")),
        (
            "on",
            "bytegnn",
            ("--launch-sigma", "0", "--sample-threads", "3", "--max-dags", "3", "--task-nodes", "5"),
        ),
    ]:
        sampling = flags(strategy=strategy, hidden=6, fanouts="3,2", batch_size=20, batch_order="local")
        run = g3_train(
            g3_plan(part, tmp_path / f"plan-{name}", *sampling),
            tmp_path / f"run-{name}",
            2,
            *extra,
            workers=2,
        )
        finals[name] = weights(run)[1]
        if strategy == "bytegnn":
            rec = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
            assert all(w["dag_launches"] == rec["steps"] for w in rec["workers"])  # one DAG per step
            if name == "on":  # sigma 0: DAGs launched while others run, up to --max-dags; chunks of 5 nodes
                assert max(w["dags_in_flight_max"] for w in rec["workers"]) >= 2, rec["workers"]
                assert max(w["ready_tasks_per_dag_max"] for w in rec["workers"]) >= 2, rec["workers"]
    for name in ("off", "on"):
        assert max_weight_diff(finals[name], finals["distdgl"]) == 0.0, name
    assert_eval_is_independent(store, tmp_path / "run-on", "sage")


def test_bytegnn_launch_score_follows_algorithm_1():
    from stages.strategies.bytegnn.runtime import launch_score

    # T_gap x f(C_util) x balance, no other scaling; balance = T_sample / (T_train x Q_size)
    assert launch_score(10, 0, 1.0, 1.0, 1) == pytest.approx(10 * 100 * 1.0)  # f(0) = 100
    assert launch_score(10, 100, 1.0, 1.0, 1) == pytest.approx(0.0)  # f(100) = 0: a busy CPU launches nothing
    assert launch_score(10, 50, 2.0, 1.0, 4) == pytest.approx(10 * (101 - 101**0.5) * 0.5)
    # nothing queued: Q_size taken as 1, so the score stays finite and a busy CPU still throttles
    assert launch_score(1, 50, 1.0, 1.0, 0) == pytest.approx(launch_score(1, 50, 1.0, 1.0, 1))
    assert launch_score(1e6, 100, 1.0, 1.0, 0) == pytest.approx(0.0)


# --- g3 simulate ---------------------------------------------------------------------------------------------
def test_simulate_models_a_sampling_strategy_from_its_run(partitions, tmp_path):
    part = partitions("metis", 2)
    run = run_distdgl(part, tmp_path, order="local", batch=15, epochs=2)
    plan = tmp_path / "plan"
    r = invoke(["simulate", str(plan), "-o", str(tmp_path / "s0")])
    assert r.exit_code == 2 and "give --run RUN" in r.output, r.output
    ok(["simulate", plan, "--run", run, "--scaling", "1,2,4,8", "-o", tmp_path / "s", "--json"])
    sim = json.loads((tmp_path / "s" / "simulate.json").read_text())
    assert sim["systems"][0]["system"] == "distdgl" and sim["workers"] == 2
    profile = sim["rates"]["profile"]
    assert profile["order"] == "local" and profile["batch_size"] == 15 and profile["fanouts"] == [3, 2]
    assert 0 < profile["remote_share"] < 1 and profile["num_train"] > 0
    by_k = {row["workers"]: row["systems"]["distdgl"] for row in sim["scaling"]}
    assert by_k[1]["bytes_per_epoch"] == 0  # one worker fetches nothing
    assert by_k[2]["bytes_per_epoch"] < by_k[4]["bytes_per_epoch"] < by_k[8]["bytes_per_epoch"]
    assert all(by_k[k]["epoch_seconds"] > 0 for k in by_k)
    # local order: ceil(N_train / (K B)) steps of the same per-worker work
    assert sim["systems"][0]["steps"] == -(-profile["num_train"] // (2 * 15))
    assert sim["systems"][0]["steps"] == records(run)[-1]["steps"]  # the model's step count is the run's
    other = run_distdgl(partitions("random", 2), tmp_path / "other", epochs=1)
    r = invoke(["simulate", str(plan), "--run", str(other), "-o", str(tmp_path / "s2")])
    assert r.exit_code == 2 and "not from this plan" in r.output, r.output
    g3_plan(part, tmp_path / "cplan", strategy="clustergcn")
    r = invoke(["simulate", str(tmp_path / "cplan"), "-o", str(tmp_path / "s3")])
    assert r.exit_code == 2 and "give --run RUN" in r.output, (
        r.output
    )  # modelled from a run of it, as distdgl
