"""g3 plan + g3 train end to end: K-worker training equals single-process full-graph training.

Every run here is real: real partitions (METIS included), real plan folders, real torch.distributed
processes over gloo. The reference (tests/reference.py) is an independent full-graph implementation.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    DROPOUT,
    LR,
    SEED,
    cut_and_resume,
    flags,
    g3_partition,
    g3_plan,
    g3_train,
    invoke,
    records,
    weights,
)
from reference import RefGraph, reference_train

from stages.common.plan_artifact import WorkerPlan, load_plan_meta
from stages.common.store import GraphStore

EPOCHS = 5


def pipeline(
    store: Path,
    tmp: Path,
    k: int,
    method: str,
    model: str,
    layers: int,
    bin_size: str,
    dtype: str = "float64",
    extra_train: tuple[str, ...] = (),
) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    part = g3_partition(store, tmp / "part", k, method=method, seed=1)
    model_flags = flags(
        model=model, layers=layers, hidden=6, heads=2, bin_size=bin_size, device_memory="2MiB"
    )
    return g3_train(
        g3_plan(part, tmp / "plan", *model_flags), tmp / "run", EPOCHS, *extra_train, workers=k, dtype=dtype
    )


def ref_graph(store: Path, dtype=torch.float64) -> RefGraph:
    s = GraphStore.open(store)
    indptr, indices = s.load_csr()
    in_deg, out_deg = s.load_degrees()
    return RefGraph(
        indptr=torch.from_numpy(indptr.astype(np.int64)),
        indices=torch.from_numpy(indices.astype(np.int64)),
        in_degree=torch.from_numpy(in_deg).to(dtype),
        out_degree=torch.from_numpy(out_deg).to(dtype),
        x=torch.from_numpy(np.asarray(s.features[:])).to(dtype),
        y=torch.from_numpy(s.load_labels().astype(np.int64)),
        train_mask=torch.from_numpy(s.split_mask("train")),
    )


def max_weight_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


CASES = [
    # model, layers, workers, partition method, bin size, pipeline
    ("sage", 2, 1, "g3", "50", "multi"),
    ("sage", 2, 2, "g3", "7", "none"),
    ("sage", 2, 4, "random", "auto", "intra"),
    ("sage", 3, 2, "metis", "13", "inter"),
    ("sage", 3, 4, "chunk", "64", "multi"),
    ("gcn", 2, 1, "g3", "auto", "none"),
    ("gcn", 2, 2, "random", "9", "inter"),
    ("gcn", 2, 4, "g3", "31", "multi"),
    ("gcn", 3, 4, "random", "5", "intra"),
    ("gat", 2, 1, "g3", "40", "intra"),
    ("gat", 2, 2, "g3", "11", "multi"),
    ("gat", 2, 4, "random", "auto", "inter"),
    ("gat", 3, 2, "chunk", "17", "none"),
]


@pytest.mark.parametrize("model,schedule", [("sage", "multi"), ("gat", "none"), ("gcn", "inter")])
def test_keeping_activations_gives_the_same_model(store, tmp_path, model, schedule):
    run = pipeline(
        store,
        tmp_path,
        2,
        "random",
        model,
        2,
        "10",
        extra_train=("--backward", "keep", "--pipeline", schedule),
    )
    init, final = weights(run)
    expected = reference_train(
        model, init, ref_graph(store), EPOCHS, LR, 0.0, DROPOUT, SEED, heads=2 if model == "gat" else None
    )
    assert max_weight_diff(final, expected) <= 1e-5


@pytest.mark.parametrize("model,layers,k,method,bin_size,schedule", CASES)
def test_k_workers_match_single_process_reference(
    store, tmp_path, model, layers, k, method, bin_size, schedule
):
    run = pipeline(store, tmp_path, k, method, model, layers, bin_size, extra_train=("--pipeline", schedule))
    init, final = weights(run)
    expected = reference_train(
        model, init, ref_graph(store), EPOCHS, LR, 0.0, DROPOUT, SEED, heads=2 if model == "gat" else None
    )
    assert max_weight_diff(final, expected) <= 1e-5
    assert max_weight_diff(final, init) > 1e-3  # training moved the weights


@pytest.mark.parametrize(
    "model,cache,backward",
    [("sage", "off", "recompute"), ("gcn", "off", "keep"), ("gcn", "on", "recompute"), ("gat", "on", "keep")],
)
def test_layer0_cache_setting_gives_the_same_model(store, tmp_path, model, cache, backward):
    """--layer0-cache on (the CPU default, used by every other test here) and off compute the same model; GAT,
    which has no static path, ignores it."""
    run = pipeline(
        store,
        tmp_path,
        2,
        "g3",
        model,
        2,
        "12",
        extra_train=("--layer0-cache", cache, "--backward", backward, "--pipeline", "intra"),
    )
    init, final = weights(run)
    expected = reference_train(
        model, init, ref_graph(store), EPOCHS, LR, 0.0, DROPOUT, SEED, heads=2 if model == "gat" else None
    )
    assert max_weight_diff(final, expected) <= 1e-5
    assert json.loads((run / "run.json").read_text())["config"]["layer0_cache"] == cache


def test_float32_training_matches_reference(store, tmp_path):
    run = pipeline(store, tmp_path, 2, "g3", "sage", 2, "9", dtype="float32")
    init, final = weights(run)
    expected = reference_train("sage", init, ref_graph(store, torch.float32), EPOCHS, LR, 0.0, DROPOUT, SEED)
    assert max_weight_diff(final, expected) <= 1e-5


def test_forward_bytes_equal_remote_sets_times_width(store, tmp_path):
    run = pipeline(store, tmp_path, 4, "random", "sage", 3, "8", dtype="float32")
    part = json.loads((tmp_path / "part" / "partition.json").read_text())
    total_remote = sum(p["remote"] for p in part["partitions"])
    recs = records(run)
    assert len(recs) == EPOCHS
    for rec in recs:
        for layer in (0, 1):  # outputs of layers 0 and 1 (width 6) feed layers 1 and 2 at peers
            sent = sum(w["bytes_sent_per_phase"].get(f"fwd{layer}", 0) for w in rec["workers"])
            assert sent == total_remote * 6 * 4
    # remote input features travel once (cached), then never again
    feat0 = [sum(w["bytes_sent_per_phase"].get("features0", 0) for w in r["workers"]) for r in recs]
    assert feat0[0] == total_remote * 10 * 4 and all(b == 0 for b in feat0[1:])


def test_no_feature_cache_resends_features(store, tmp_path):
    run = pipeline(
        store, tmp_path, 2, "random", "sage", 2, "auto", dtype="float32", extra_train=("--no-feature-cache",)
    )
    feat = [sum(w["bytes_sent_per_phase"].get("features0", 0) for w in r["workers"]) for r in records(run)]
    assert feat[0] > 0 and all(b == feat[0] for b in feat)


def test_bins_respect_their_limits(store, tmp_path):
    part = g3_partition(store, tmp_path / "part", 2)
    g3_plan(part, tmp_path / "mem", model="gat", hidden=6, heads=2, device_memory="300KiB", bins_for="cuda")
    meta = load_plan_meta(tmp_path / "mem")
    for w in meta["workers"]:
        for layer in w["layers"]:
            assert layer["max_bin_bytes"] <= layer["bin_limit_bytes"] == 150 * 1024
            assert layer["num_bins"] > 1
    g3_plan(part, tmp_path / "fixed", bin_size=16)
    wp = WorkerPlan(tmp_path / "fixed", 0)
    for li in range(2):
        assert np.diff(wp.layer(li).bin_ptr).max() <= 16


def test_plan_tables_send_every_pair_once(store, tmp_path):
    part = g3_partition(store, tmp_path / "part", 3, method="random")
    g3_plan(part, tmp_path / "plan", bin_size=10)
    from stages.common.partition_artifact import open_shard

    for r in range(3):
        shard = open_shard(part, r, 3)
        wp = WorkerPlan(tmp_path / "plan", r)
        t = wp.table("fwd_send_0")
        pairs = set()
        for _, peer, sl in t.message_slices():
            for node in t.nodes[sl]:
                assert (int(node), peer) not in pairs
                pairs.add((int(node), peer))
        expected = {(int(n), q) for q in range(3) if q != r for n in shard.send_to(q)}
        assert pairs == expected


def test_backward_messages_leave_after_the_last_bin_reading_them(store, tmp_path):
    """Backward runs bins in plan order: a remote node's input gradient is final after the last bin that reads
    it, and that bin's step is the step of its bwd_send message."""
    g3_plan(
        g3_partition(store, tmp_path / "part", 3, method="random"), tmp_path / "plan", layers=3, bin_size=10
    )
    checked = 0
    for r in range(3):
        wp = WorkerPlan(tmp_path / "plan", r)
        n_own = int(wp.meta["num_owned"])
        for li in (1, 2):
            lp = wp.layer(li)
            last = {}
            for b in range(lp.num_bins):
                for s in lp.src[lp.src_ptr[b] : lp.src_ptr[b + 1]]:
                    if s >= n_own:
                        last[int(s) - n_own] = b
            t = wp.table(f"bwd_send_{li}")
            for step, _peer, sl in t.message_slices():
                for node in t.nodes[sl]:
                    assert last[int(node)] == step
                    checked += 1
    assert checked > 0


@pytest.mark.parametrize("how", ["kill", "raise"])
def test_failed_worker_stops_the_run_cleanly(store, tmp_path, monkeypatch, how):
    import time

    part = g3_partition(store, tmp_path / "part", 3, method="random")
    plan = g3_plan(part, tmp_path / "plan", bin_size=20)
    monkeypatch.setenv("G3_FAULT", f"1:2:{how}")
    t0 = time.monotonic()
    r = invoke(["train", str(plan), "--epochs", "50", "--threads", "1", "-o", str(tmp_path / "run")])
    elapsed = time.monotonic() - t0
    assert r.exit_code == 1, r.output
    assert "worker 1" in r.output
    assert ("SIGKILL" in r.output) if how == "kill" else ("injected fault" in r.output)
    assert elapsed < 60
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "failed"


def test_resume_equals_uninterrupted(store, tmp_path):
    plan = g3_plan(g3_partition(store, tmp_path / "part", 2), tmp_path / "plan", bin_size=15)
    common = flags(threads=1, dtype="float64", seed=3, checkpoint_every=2, eval_every=0)
    full, resumed = cut_and_resume(plan, tmp_path, 6, 4, *common)
    assert max_weight_diff(weights(full)[1], weights(resumed)[1]) == 0.0
    assert [r["epoch"] for r in records(resumed)] == list(range(6))


def test_bad_plans_and_mismatched_artifacts(store, tmp_path):
    part = g3_partition(store, tmp_path / "part", 2)
    plan = g3_plan(part, tmp_path / "plan")
    cases = []
    r = invoke(["train", str(plan), "--workers", "3", "-o", str(tmp_path / "r1")])
    cases.append((r, "plan is for 2 workers"))
    r = invoke(["train", str(tmp_path / "nope"), "-o", str(tmp_path / "r2")])
    cases.append((r, "not a g3 plan"))
    meta = json.loads((plan / "plan.json").read_text())
    meta["schema_version"] = 99
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "plan.json").write_text(json.dumps(meta))
    cases.append((invoke(["train", str(tmp_path / "old"), "-o", str(tmp_path / "r3")]), "schema version 99"))
    meta["schema_version"] = 1  # backward steps numbered for the reversed order: must be re-planned
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "plan.json").write_text(json.dumps(meta))
    cases.append((invoke(["train", str(tmp_path / "v1"), "-o", str(tmp_path / "r4")]), "schema version 1"))
    # the partition changed after planning
    from stages.common.artifact_json import sealed

    pmeta = json.loads((part / "partition.json").read_text())
    pmeta["created"] = "changed"  # a partition written again (sealed as g3 writes it), not an edit
    (part / "partition.json").write_text(json.dumps(sealed(pmeta)))
    cases.append((invoke(["train", str(plan), "-o", str(tmp_path / "r4")]), "does not match its partition"))
    cases.append((invoke(["plan", str(tmp_path / "nope")]), "not a g3 partition"))
    cases.append((invoke(["plan", str(part), "--layers", "0", "-o", str(tmp_path / "p2")]), "must be >= 1"))
    for r, message in cases:
        assert r.exit_code == 2, r.output
        assert message in r.output and "Traceback" not in r.output
    assert not any((tmp_path / f"r{i}").exists() for i in range(1, 5))


def test_every_pipeline_gives_the_same_model_and_a_trace(store, tmp_path):
    runs = {}
    for schedule in ("none", "intra", "inter", "multi"):
        extra = ("--pipeline", schedule, "--trace", "--prefetch", "on")
        runs[schedule] = pipeline(store, tmp_path / schedule, 3, "random", "sage", 3, "9", extra_train=extra)
    final = {k: weights(r)[1] for k, r in runs.items()}
    # the plan's bins in any order, with peers' contributions added in table order: bit for bit the same model;
    # `inter` computes forward in bins of other sizes, whose dense products may round differently
    for schedule in ("intra", "multi"):
        assert max_weight_diff(final["none"], final[schedule]) == 0.0, schedule
    assert max_weight_diff(final["none"], final["inter"]) <= 1e-12
    for schedule, run in runs.items():
        recs = records(run)
        traced = [r for r in recs if r.get("traced")]
        assert len(traced) == 1 and traced[0]["epoch"] == len(recs) - 1  # one timeline, the last epoch's ...
        for r in recs[1:]:  # ... and the shares of every epoch but the first
            share, waited, moving = r["comm_hidden_share"], r["comm_waited_share"], r["comm_moving_share"]
            assert min(share, waited, moving) >= 0.0 and share + waited + moving <= 1.0 + 1e-9
        assert "comm_hidden_share" not in recs[0]
        # messages from one peer stay in flight while another's are unpacked or a bin's inputs gathered
        assert max(r["comm_moving_share"] for r in recs[1:]) > 0.0, schedule
        for w in recs[-1]["workers"]:  # one thread's CPU time within its own wall-clock spans
            assert 0.0 < w["compute_cpu_seconds"] <= w["compute_seconds"] + 1e-3
        # the first epoch takes its memory fresh from the OS: page faults counted, per epoch and worker
        assert all(w["page_faults"] > 0 for w in recs[0]["workers"])
        assert all(
            isinstance(w["page_faults"], int) and w["page_faults"] >= 0 for r in recs for w in r["workers"]
        )
        forward_prefetched = 0
        for rank in range(3):
            trace = json.loads((run / "trace" / f"rank-{rank:05d}.json").read_text())
            spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
            cats = {e["cat"] for e in spans}
            assert {"compute", "gather", "pack", "unpack", "send", "recv"} <= cats, (schedule, cats)
            assert all(e["pid"] == rank and e["dur"] >= 0 for e in spans)
            fwd_bins = [e for e in spans if e["cat"] == "compute" and e["args"].get("phase") == "fwd"]
            assert {e["args"]["layer"] for e in fwd_bins} == {0, 1, 2}
            assert [e["name"] for e in spans if e["args"].get("phase") == "loss"] == ["loss"]
            # after the first epoch layer 0 reads its cached rows, in forward and backward of every schedule
            # (`inter` once gathered the features again in every backward: its forward runs run-time bins)
            assert not [e for e in spans if e["cat"] == "gather" and e["args"]["layer"] == 0], schedule
            # layer 1 (6 -> 6, aggregate-first) reads its rows in place, in forward and in backward (a bin whose
            # sources are a contiguous range takes them as a view, copying nothing)
            assert not [
                e for e in spans if e["cat"] == "gather" and e["args"]["layer"] == 1 and not e["args"]["view"]
            ], schedule
            assert [e for e in spans if e["cat"] == "gather" and e["args"]["layer"] == 2], (
                schedule
            )  # 6 -> 4 gathers
            # backward runs no forward again for the cached layer 0 (weight gradients from its kept output), and
            # recomputes the others (--backward recompute)
            bwd_bins = [e for e in spans if e["cat"] == "compute" and e["args"].get("phase") == "bwd"]
            assert {e["args"]["layer"] for e in bwd_bins} == {0, 1, 2}
            assert all(e["args"]["recomputed"] == (e["args"]["layer"] > 0) for e in bwd_bins), schedule
            bwd_start = min(e["ts"] for e in spans if e["args"].get("phase") == "bwd")
            # the background schedules post backward's receives with the forward's, before the loss, so a peer's
            # gradients move as soon as it sends them; `none` posts each layer's at that layer's backward
            loss_start = next(e["ts"] for e in spans if e["args"].get("phase") == "loss")
            bwd_posts = [e["ts"] for e in spans if e["cat"] == "recv" and e["name"].startswith("bwd")]
            assert bwd_posts and (max(bwd_posts) < loss_start) == (schedule != "none"), schedule
            forward_prefetched += sum(
                1 for e in spans if e["cat"] == "gather" and e["ts"] < bwd_start and e["args"]["prefetched"]
            )
            # the outputs' side of the intra-layer overlap (intra, multi): messages packed and posted off the
            # compute thread (which runs the bins: the main thread), the forward's arrived rows copied in off it too
            background = schedule in ("intra", "multi")
            computers = {e["args"].get("thread", "MainThread") for e in spans if e["cat"] == "compute"}
            packers = {e["args"]["thread"] for e in spans if e["cat"] == "pack"}
            assert packers.isdisjoint(computers) if background else packers == {"MainThread"}, (
                schedule,
                packers,
            )
            unpackers = {
                e["args"]["thread"] for e in spans if e["cat"] == "unpack" and e["name"].startswith("fwd")
            }
            assert bool(unpackers - {"MainThread"}) == background, (schedule, unpackers)
        # the intra-layer overlap of the forward: the next bin gathered on the prefetch thread (intra, multi)
        assert (forward_prefetched > 0) == (schedule in ("intra", "multi")), (schedule, forward_prefetched)


def test_hidden_and_waited_shares_from_spans():
    """Rank 1 receives two messages from rank 0: in flight 0-10 and 20-40 (sender post → receiver done);
    its compute spans cover 0-5 and 25-40, it waits 5-10, gathers 3-8 (on the prefetch thread, during compute
    and the wait: counted once, as those) and 18-22, and unpacks a message 22-23."""
    from stages.kits.runtime.trace import hidden_share

    def span(cat, t0, t1):
        return {"cat": cat, "ts": float(t0), "dur": float(t1 - t0)}

    rank0 = {"events": [], "messages": [((1, 0, 1, 0), "send", 0.0, 1.0), ((1, 0, 1, 1), "send", 20.0, 21.0)]}
    rank1 = {
        "events": [
            span("compute", 0, 5),
            span("wait", 5, 10),
            span("compute", 25, 40),
            span("gather", 3, 8),
            span("gather", 18, 22),
            span("unpack", 22, 23),
        ],
        # the receiver posted both at 0: the sender's post time starts the flight
        "messages": [((1, 0, 1, 0), "recv", 0.0, 10.0), ((1, 0, 1, 1), "recv", 0.0, 40.0)],
    }
    share = hidden_share([rank0, rank1])
    assert share["per_rank"] == [None, pytest.approx(20 / 30)]
    assert share["overall"] == pytest.approx(20 / 30)
    assert share["waited"] == pytest.approx(5 / 30)
    assert share["moving"] == pytest.approx(3 / 30)  # 20-22 and 22-23 of the second message's flight
    assert share["comm_seconds"] == pytest.approx(30e-6)


def test_prefetch_setting():
    """auto: on for CUDA; on the CPU only when threads x local workers leave a core idle."""
    import os

    from stages.strategies.g3.knobs import G3Knobs

    cores = os.cpu_count() or 1
    assert G3Knobs().prefetch_enabled("cuda", cores, 4)
    assert not G3Knobs().prefetch_enabled("cpu", cores, 1)
    assert not G3Knobs().prefetch_enabled("cpu", 1, cores)
    assert G3Knobs().prefetch_enabled("cpu", 1, 1) == (cores > 1)
    assert G3Knobs(prefetch="on").prefetch_enabled("cpu", cores, 4)
    assert not G3Knobs(prefetch="off").prefetch_enabled("cuda", 1, 1)


@pytest.mark.parametrize("order", ["plan", "node-id"])
def test_eager_bin_dependencies_match_a_recount(store, tmp_path, order):
    """The eager schedules start a forward bin of layer l once the layer-(l-1) bins computing its rows' own
    nodes and owned in-neighbours have run and the messages carrying its remote in-neighbours have arrived:
    ``bin_dependencies``' counts and dependents equal a recount from the plan's arcs, for every worker and
    layer, for `multi`'s bins (the plan's) and for bins of consecutive node ids (`inter`'s)."""
    from stages.common.partition_artifact import open_shard
    from stages.kits.runtime.dataflow import bin_dependencies

    part = g3_partition(store, tmp_path / "part", 3, method="random")
    plan = g3_plan(part, tmp_path / "plan", layers=3, bin_size=11)
    for rank in range(3):
        wp, shard = WorkerPlan(plan, rank), open_shard(part, rank, 3)
        n_own, n_rem = shard.num_owned, shard.num_remote
        prio = np.asarray(wp.priority)
        pos = np.empty(n_own, dtype=np.int64)
        pos[prio] = np.arange(n_own)  # a node's row (position in the priority list)
        row_ptr = np.asarray(wp.row_ptr)
        # every arc's source as a row (owned) or n_own + remote offset, rows in priority order
        edge_src = np.concatenate(
            [np.asarray(shard.indices[shard.indptr[v] : shard.indptr[v + 1]], dtype=np.int64) for v in prio]
        )
        edge_src = np.where(edge_src < n_own, pos[np.minimum(edge_src, n_own - 1)], edge_src)
        if order == "plan":
            bins = [
                [np.arange(p[b], p[b + 1]) for b in range(len(p) - 1)]
                for p in (np.asarray(wp.layer(li).bin_ptr) for li in range(3))
            ]
        else:  # rows in node-id order, cut every 11 nodes
            layer_bins = [np.sort(pos[i : i + 11]) for i in range(0, len(pos), 11)]
            ids = [prio[rows] for rows in layer_bins]
            assert all(a.max() < b.min() for a, b in zip(ids, ids[1:], strict=False))
            bins = [layer_bins] * 3
        for li in (1, 2):
            row_bin = np.full(n_own, -1)
            prev_bin = np.full(n_own, -1)
            for b, rows in enumerate(bins[li]):
                row_bin[rows] = b
            for b, rows in enumerate(bins[li - 1]):
                prev_bin[rows] = b
            table = wp.table(f"fwd_recv_{li - 1}")
            deps = bin_dependencies(bins[li - 1], bins[li], row_ptr, edge_src, table, n_own, n_rem)
            msg_of = {
                int(node): m
                for m, (_, _, sl) in enumerate(table.message_slices())
                for node in table.nodes[sl]
            }
            expected = {b: set() for b in range(len(bins[li]))}
            for row in range(n_own):
                want = expected[int(row_bin[row])]
                want.add(("bin", int(prev_bin[row])))
                for src in edge_src[row_ptr[row] : row_ptr[row + 1]]:
                    want.add(
                        ("bin", int(prev_bin[src])) if src < n_own else ("msg", msg_of[int(src) - n_own])
                    )
            got = {b: set() for b in expected}
            for i in range(len(deps.ptr) - 1):
                dep = ("bin", i) if i < deps.n_bins_before else ("msg", i - deps.n_bins_before)
                for b in deps.dependents(i):
                    got[int(b)].add(dep)
            assert got == expected
            assert [len(expected[b]) for b in sorted(expected)] == deps.wait.tolist()
            assert any(dep[0] == "msg" for want in expected.values() for dep in want)  # remote inputs exist


HEAP_PROBE = """
import resource, sys, torch
from stages.kits.runtime.heap import keep_freed_memory
kept = sys.argv[1] == "keep" and keep_freed_memory()
faults = []
for _ in range(12):  # an epoch's pattern: large temporaries written, freed, allocated again
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(16 * 2**20).fill_(1.0)
    u = torch.empty(4 * 2**20).fill_(1.0)
    del t, u
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, sum(faults[-4:]))  # torch's aligned blocks leave holes at first: the heap settles after a few rounds
"""


def test_heap_keep_reuses_freed_pages():
    """With the heap kept (`g3 train --heap keep`, the default), a large block freed and allocated again reuses
    the same pages; with the C library's defaults each allocation maps and faults in fresh ones."""
    import subprocess
    import sys

    def probe(policy: str) -> tuple[bool, int]:
        out = subprocess.run(
            [sys.executable, "-c", HEAP_PROBE, policy],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        ).stdout.split()
        return out[0] == "True", int(out[1])

    kept, kept_faults = probe("keep")
    if not kept:
        pytest.skip("this C library has no glibc mallopt: --heap keep falls back to the defaults")
    _, system_faults = probe("system")
    pages = 4 * (64 * 2**20) // 4096  # the last four rounds allocate (64 + 16) MiB each
    assert system_faults >= pages // 2  # the probe sees fresh pages under the defaults...
    assert kept_faults <= pages // 50  # ...and none to speak of once the heap keeps freed memory


def test_heap_setting_gives_the_same_model(store, tmp_path):
    runs = {
        policy: pipeline(store, tmp_path / policy, 2, "g3", "sage", 2, "9", extra_train=("--heap", policy))
        for policy in ("keep", "system")
    }
    final = {p: weights(r)[1] for p, r in runs.items()}
    assert max_weight_diff(final["keep"], final["system"]) == 0.0
    for policy, run in runs.items():
        assert json.loads((run / "run.json").read_text())["config"]["heap"] == policy
        log = (run / "logs" / "rank-00000.log").read_text()
        assert ("heap keeps freed memory" if policy == "keep" else "heap system defaults") in log


THREADS_PROBE = """
import time, torch
torch.set_num_threads(3)
from stages.kits.runtime.threads import DaemonThreads
helpers = DaemonThreads("probe", 2)  # each sets its own torch thread count to 1
time.sleep(0.3)
print(torch.get_num_threads())
"""


def test_helper_threads_leave_the_compute_thread_count_alone():
    """Helper threads run their kernels on one thread each, and the thread that starts them keeps its own
    count even if it had run no parallel op yet (torch takes a thread's count from a process-wide value on
    first use, which a helper's set_num_threads(1) would otherwise have changed)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", THREADS_PROBE],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.stdout.strip() == "3", out.stdout + out.stderr


def test_background_schedules_run_on_numbas_workqueue_layer(store, tmp_path, monkeypatch):
    """Where numba has neither OpenMP nor TBB it falls back to its `workqueue` threading layer, which aborts
    the process when two threads launch parallel kernels at once. The helper threads of `multi` (prefetch,
    sender, receiving) run their row copies as plain loops, so training still works there, with the model
    `none` gives."""
    import subprocess
    import sys

    monkeypatch.setenv("NUMBA_THREADING_LAYER", "workqueue")  # read by the spawned workers' numba
    probe = (
        "import numpy as np; from stages.kits.runtime.kernels import take_rows_at; import torch, numba; "
        "take_rows_at(torch.ones(8, 2), torch.arange(4)); print(numba.threading_layer())"
    )
    layer = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout.strip()
    assert layer == "workqueue"  # what a worker process gets
    runs = {
        p: pipeline(
            store,
            tmp_path / p,
            3,
            "random",
            "sage",
            2,
            "9",
            extra_train=("--pipeline", p, "--prefetch", "on"),
        )
        for p in ("none", "multi")
    }
    final = {p: weights(r)[1] for p, r in runs.items()}
    assert max_weight_diff(final["none"], final["multi"]) <= 1e-12


def test_four_workers_are_bitwise_reproducible_and_resume_exactly(store, tmp_path):
    """What a worker receives from several peers is added in table order, not arrival order: two float32 runs
    with K = 4 — one uninterrupted over 15 epochs, one stopped after epoch 10 and resumed from its checkpoint of
    epoch 8 in new processes — give the same weights bit for bit (arrival order varies from run to run; summed
    in arrival order two runs drifted apart from about epoch 13)."""
    common = ("--pipeline", "multi", "--checkpoint-every", "4")
    first = pipeline(
        store,
        tmp_path / "a",
        4,
        "random",
        "sage",
        3,
        "9",
        dtype="float32",
        extra_train=(*common, "--epochs", "15"),
    )
    cut = g3_train(tmp_path / "a" / "plan", tmp_path / "cut", 10, *common, workers=4, dtype="float32")
    g3_train(tmp_path / "a" / "plan", cut, 15, *common, "--resume", workers=4, dtype="float32")
    final = [weights(r)[1] for r in (first, cut)]
    assert max_weight_diff(final[0], final[1]) == 0.0


PEAK_PROBE = """
import sys, numpy as np, torch.multiprocessing as mp

def child(rank, path):
    from stages.train.metrics import peak_memory_bytes
    open(path, "w").write(str(peak_memory_bytes("cpu")))

if __name__ == "__main__":
    big = np.ones(1_200_000_000 // 8)  # the parent grows to ~1.2 GB before it starts a worker
    mp.start_processes(child, args=(sys.argv[1],), nprocs=1, start_method="spawn")
    from stages.train.metrics import peak_memory_bytes
    print(peak_memory_bytes("cpu"))
"""


def test_a_workers_peak_memory_is_its_own(tmp_path):
    """A worker reports its own peak resident set, not the peak of the process that started it (getrusage's
    maximum survives exec: every worker of a `g3 bench` once reported the bench process's 2.55 GiB)."""
    import subprocess
    import sys

    script = tmp_path / "probe.py"
    script.write_text(PEAK_PROBE)
    parent = int(
        subprocess.run(
            [sys.executable, str(script), str(tmp_path / "child")],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        ).stdout.split()[-1]
    )
    child = int((tmp_path / "child").read_text())
    assert parent > 1_200_000_000 and child < parent - 700_000_000, (parent, child)


def test_every_module_the_fork_server_preloads_imports():
    """multiprocessing's fork server silently skips a preload module that fails to import, and the workers
    would then each import it again: every name it preloads for a run must import (the launching script's main
    module aside), and the preload leaves every strategy's runtime module and torch's lazily imported parts
    loaded."""
    import importlib
    import sys

    from stages.kits.runtime.launch.processes import preload_for
    from stages.strategies.registry import STRATEGIES
    from stages.train.loop import train_rank

    for name in preload_for(train_rank):
        if name != "__main__":
            importlib.import_module(name)
    assert "torch._dynamo" in sys.modules and "torch.fx.experimental.symbolic_shapes" in sys.modules
    assert all(s.runtime().__module__ in sys.modules for s in STRATEGIES.values())


@pytest.mark.slow
@pytest.mark.parametrize("bin_size,recomputes", [("100000", False), ("300", True)])
def test_backward_auto_keeps_activations_only_where_every_layer_is_one_bin(
    tiny_store, tmp_path, bin_size, recomputes
):
    """`--backward auto` (the default): a worker whose layers are one bin each keeps the forward's activations
    (no second forward: G3 at K = 1 has no per-bin cost over the layer-synchronous baseline); with several bins
    it recomputes each bin's forward in backward, as the bin limit requires. Read from the trace's backward
    spans (layer 0 never recomputes: its inputs are fixed)."""
    run = pipeline(tiny_store, tmp_path, 1, "random", "sage", 2, bin_size, extra_train=("--trace",))
    spans = [
        e
        for e in json.loads((run / "trace" / "rank-00000.json").read_text())["traceEvents"]
        if e["ph"] == "X" and e["cat"] == "compute" and e["args"].get("phase") == "bwd"
    ]
    upper = [e["args"]["recomputed"] for e in spans if e["args"]["layer"] > 0]
    assert upper and all(r == recomputes for r in upper), upper
    bins = json.loads((run.parent / "plan" / "plan.json").read_text())["workers"][0]["layers"]
    assert all(layer["num_bins"] == 1 for layer in bins) == (not recomputes)
