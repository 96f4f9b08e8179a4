"""`g3 simulate` of a clustergcn plan (stages/strategies/clustergcn/simulate.py): the modelled steps, times and all-reduce
against the formulas worked by hand step by step, a slower link adding exactly the all-reduce terms the model
reports, the clusters of another worker count equal to what `g3 plan` writes for it, and `g3 simulate PLAN --run
RUN` on a real two-worker run counting the run's own batches, steps and bytes (and refusing a run whose recorded
batches are not the plan's)."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from helpers import flags, g3_plan, invoke, ok, records, weights

from stages.common.artifact_json import sealed
from stages.common.plan_artifact import load_plan_meta
from stages.kits.runtime.minibatch import shuffled
from stages.simulate.replan import replanner
from stages.strategies.clustergcn.simulate import (
    ClusterProfile,
    WorkerClusters,
    batches,
    clusters_for_workers,
    plan_clusters,
    simulate_clustergcn,
)

INF = math.inf


def profile(**kw) -> ClusterProfile:
    base = dict(
        workers=2,
        clusters=3,
        clusters_per_batch=1,
        cluster_seed=0,
        seed=7,
        epochs=[1],
        layers=[(4, 32)],
        num_blocks=1,
        num_train=6,
        num_params=100,
        t_unit=1e-3,
        t_scan=1e-4,
        t_row=2e-4,
        t_opt=0.01,
        prefetch=True,
        measured_epoch_seconds=1.0,
        updates_per_epoch=[3],
    )
    return ClusterProfile(**{**base, **kw})


def table(nodes, train, scanned, arcs) -> WorkerClusters:
    return WorkerClusters(np.array(nodes), np.array(train), np.array(scanned), np.array(arcs))


W0 = table([10, 20, 30], [1, 0, 2], [15, 25, 35], [[4, 1, 3], [1, 6, 2], [5, 2, 9]])
W1 = table([5, 40], [0, 3], [8, 60], [[2, 7], [1, 12]])


def by_hand(
    p: ClusterProfile, workers: list[WorkerClusters], allreduce: float, scalar: float
) -> tuple[float, int]:
    """The epoch, step by step: each worker's clusters in the runtime's order, the slowest worker per step."""
    steps = max(math.ceil(len(w.nodes) / p.clusters_per_batch) for w in workers)
    orders = [shuffled(np.arange(len(w.nodes)), p.seed, p.epochs[0], stream=r) for r, w in enumerate(workers)]
    total, updates = 0.0, 0
    for s in range(steps):
        slowest, targets = 0.0, 0
        for w, order in zip(workers, orders, strict=True):
            chosen = [int(c) for c in order[s * p.clusters_per_batch : (s + 1) * p.clusters_per_batch]]
            nodes = sum(int(w.nodes[c]) for c in chosen)
            arcs = sum(int(w.arcs[a][b]) for a in chosen for b in chosen)
            train = sum(int(w.train[c]) for c in chosen)
            prepare = sum(int(w.scanned[c]) for c in chosen) * p.t_scan + nodes * p.t_row
            compute = (arcs * 4 + nodes * 32) * p.t_unit if train else 0.0
            slowest = max(slowest, max(prepare, compute) if p.prefetch else prepare + compute)
            targets += train
        total += slowest + scalar + ((allreduce + scalar + p.t_opt) if targets else 0.0)
        updates += targets > 0
    return total, updates


@pytest.mark.parametrize("prefetch", [True, False])
def test_the_epoch_follows_the_formulas_step_by_step(prefetch):
    p = profile(prefetch=prefetch)
    r = simulate_clustergcn(p, [W0, W1], INF, 0.0)
    want, updates = by_hand(p, [W0, W1], 0.0, 0.0)
    assert r["steps"] == 3 and r["optimizer_steps"] == updates
    assert r["epoch_seconds"] == pytest.approx(want, rel=1e-12)
    # nothing but the all-reduce crosses the network; its ring bytes are reported apart
    assert r["bytes_per_epoch"] == 0 and r["bytes_per_step"]["allreduce"] == 2 * 1 / 2 * 100 * 4
    assert r["allreduce_bytes_per_epoch"] == updates * 2 * 400
    # two clusters per step: the arcs between two chosen clusters count, the rest do not
    p2 = profile(clusters_per_batch=2, prefetch=prefetch)
    assert simulate_clustergcn(p2, [W0, W1], INF, 0.0)["epoch_seconds"] == pytest.approx(
        by_hand(p2, [W0, W1], 0.0, 0.0)[0], rel=1e-12
    )


def test_latency_and_bandwidth_add_exactly_the_allreduce_terms():
    p = profile()
    fast = simulate_clustergcn(p, [W0, W1], INF, 0.0)
    # 1 ms a message: a ring of K = 2 is 2 latencies, per update for the gradients, per step and per update for
    # the two scalars (the target count, the loss)
    slow = simulate_clustergcn(p, [W0, W1], INF, 1e-3)
    steps, updates = slow["steps"], slow["optimizer_steps"]
    assert slow["step_parts"]["allreduce"] == pytest.approx(2e-3)
    assert slow["allreduce_seconds"] == pytest.approx(updates * 2e-3)
    assert slow["comm_wait_mean"] == pytest.approx((steps + updates) * 2e-3)
    assert slow["epoch_seconds"] - fast["epoch_seconds"] == pytest.approx(
        slow["allreduce_seconds"] + slow["comm_wait_mean"], rel=1e-9
    )
    assert slow["epoch_seconds"] == pytest.approx(by_hand(p, [W0, W1], 2e-3, 2e-3)[0], rel=1e-12)
    # 400 B/s: the 400 ring bytes of 100 float32 gradients take a second per update; a scalar (8 bytes) 20 ms
    narrow = simulate_clustergcn(p, [W0, W1], 400.0, 0.0)
    assert narrow["allreduce_seconds"] == pytest.approx(updates * 1.0)
    assert narrow["epoch_seconds"] - fast["epoch_seconds"] == pytest.approx(
        updates * 1.0 + (steps + updates) * 0.02, rel=1e-9
    )
    # one worker: no all-reduce at all
    one = simulate_clustergcn(p, [W0], 400.0, 1e-3)
    assert (
        one["allreduce_seconds"] == 0.0
        and one["comm_wait_mean"] == 0.0
        and one["bytes_per_step"]["allreduce"] == 0
    )


def test_a_step_without_a_training_node_computes_nothing_and_takes_no_update():
    # one worker, one cluster a step: only the cluster holding training nodes computes and updates
    w = table([10, 20, 30], [0, 0, 5], [15, 25, 35], np.diag([4, 6, 9]))
    p = profile(workers=1)
    r = simulate_clustergcn(p, [w], INF, 0.0)
    assert r["steps"] == 3 and r["optimizer_steps"] == 1 and r["step_seconds"] == pytest.approx(0.01)
    prepares = [15e-4 + 20e-4, 25e-4 + 40e-4, 35e-4 + 60e-4]
    assert r["busy_max"] == pytest.approx((9 * 4 + 30 * 32) * 1e-3)
    assert r["epoch_seconds"] == pytest.approx(prepares[0] + prepares[1] + (9 * 4 + 30 * 32) * 1e-3 + 0.01)


def _plan(part, out, clusters=6, per_batch=2):
    return g3_plan(
        part, out, strategy="clustergcn", hidden=6, clusters=clusters, clusters_per_batch=per_batch
    )


def test_clusters_of_another_worker_count_are_what_g3_plan_writes(partitions, tmp_path):
    plan2 = _plan(partitions("metis", 2), tmp_path / "plan2")
    plan4 = _plan(partitions("metis", 4), tmp_path / "plan4")
    cache = tmp_path / "cache"
    replan = replanner(load_plan_meta(plan2), cache)
    got = clusters_for_workers(plan2, load_plan_meta(plan2), 4, replan)
    want = plan_clusters(plan4, load_plan_meta(plan4))
    assert len(got) == 4
    for g, w in zip(got, want, strict=True):
        for name in ("nodes", "train", "scanned", "arcs"):
            assert np.array_equal(getattr(g, name), getattr(w, name)), name
    # every node in one worker's cluster
    assert sum(int(w.nodes.sum()) for w in got) == load_plan_meta(plan4)["store"]["num_nodes"]
    # reused from the cache: the same tables without partitioning or planning again
    made = [
        (cache / name / f"{kind}.json").stat().st_mtime_ns
        for name, kind in (("part-metis-4", "partition"), ("part-metis-4.plan-clustergcn-sage", "plan"))
    ]
    again = clusters_for_workers(plan2, load_plan_meta(plan2), 4, replan)
    assert all(np.array_equal(a.arcs, b.arcs) for a, b in zip(again, got, strict=True))
    assert [
        (cache / name / f"{kind}.json").stat().st_mtime_ns
        for name, kind in (("part-metis-4", "partition"), ("part-metis-4.plan-clustergcn-sage", "plan"))
    ] == made
    # a cached plan that was removed is made again
    shutil.rmtree(cache / "part-metis-4.plan-clustergcn-sage")
    third = clusters_for_workers(plan2, load_plan_meta(plan2), 4, replan)
    assert all(np.array_equal(a.arcs, b.arcs) for a, b in zip(third, got, strict=True))


def test_g3_simulate_a_clustergcn_plan_from_its_run(partitions, tmp_path):
    plan = _plan(partitions("metis", 2), tmp_path / "plan")
    run = tmp_path / "run"
    r = invoke(["simulate", str(plan), "-o", str(tmp_path / "s0")])
    assert r.exit_code == 2 and "--run RUN" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    ok(["train", plan, *flags(epochs=3, workers=2, seed=3, eval_every=0, threads=1), "-o", run])
    scaling = flags(scaling="1,2,4", cache=tmp_path / "cache")
    ok(["simulate", plan, "--run", run, *scaling, "-o", tmp_path / "sim", "--json"])
    sim = json.loads((tmp_path / "sim" / "simulate.json").read_text())
    recs = records(run)
    at_k = sim["systems"][0]
    prof = sim["rates"]["profile"]
    assert (
        at_k["system"] == "clustergcn"
        and sim["workers"] == 2
        and prof["seed"] == 3
        and prof["epochs"] == [1, 2]
    )
    # the run's optimizer steps, its bytes (nothing but the all-reduce, which the run does not count), and the
    # all-reduce of every parameter of the run's model
    assert at_k["steps"] == 3 and at_k["optimizer_steps"] == recs[-1]["steps"] == 3
    assert at_k["bytes_per_epoch"] == sum(w["bytes_sent"] for rec in recs[1:] for w in rec["workers"]) == 0
    values = sum(t.numel() for t in weights(run)[1].values())
    assert prof["num_params"] == values and at_k["allreduce_bytes_per_epoch"] == 3 * 2 * (
        2 * 1 / 2 * values * 4
    )
    # the modelled batches are the run's: every worker's recorded arcs (once per layer) and rows
    meta = load_plan_meta(plan)
    workers = plan_clusters(plan, meta)
    for rec in recs[1:]:
        b = batches(workers, 2, 3, rec["epoch"])
        assert [w["sampled_arcs"] for w in rec["workers"]] == [2 * int(x) for x in b.arcs.sum(axis=0)]
        assert [w["source_rows"] for w in rec["workers"]] == [int(x) for x in b.nodes.sum(axis=0)]
    # the rates reproduce the run's compute seconds on its own batches
    p = ClusterProfile(**prof)
    assert p.t_unit > 0 and p.t_scan > 0 and p.t_row > 0
    # other K: the clusters g3 plan would make there
    k4 = next(row for row in sim["scaling"] if row["workers"] == 4)["systems"]["clustergcn"]
    at4 = simulate_clustergcn(
        p,
        clusters_for_workers(plan, meta, 4, replanner(meta, tmp_path / "cache")),
        sim["network"]["bandwidth_bytes_per_second"],
        sim["network"]["latency_seconds"],
    )
    assert k4["epoch_seconds"] == at4["epoch_seconds"] and k4["steps"] == at4["steps"] == 3
    # a run whose recorded batches are not the plan's is refused, naming the worker and epoch
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    lines = (bad / "metrics.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["workers"][1]["sampled_arcs"] += 2
    rec.pop("content_sha256", None)
    lines[1] = json.dumps(sealed(rec))
    (bad / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    r = invoke(["simulate", str(plan), "--run", str(bad), "--scaling", "none", "-o", str(tmp_path / "s2")])
    assert r.exit_code == 2 and "worker 1's batches of epoch 1 are not the plan's clusters" in r.output, (
        r.output
    )
