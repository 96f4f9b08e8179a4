"""`hopgnn` (HopGNN, paper 004): K workers with migration, pre-gathering and merging equal distdgl's global order
and the independent single-process reference (tests/reference_minibatch.py); its schedule (time steps,
merging) against hand-worked cases and the paper's Figure 10; migrated and fetched bytes against their
formulas; auto merging agreed by every rank, replayed from the recorded times and repeated by a resumed run;
the local-only variant against its own single-process reference; bad input.

Every run is real: `g3 partition`, `g3 plan --strategy hopgnn`, `g3 train` with torch.distributed processes.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import DROPOUT, LR, SEED, invoke, minibatch_run, records, weights
from reference_minibatch import global_batches, labelled_train, minibatch_train, permutation
from test_eval import assert_eval_is_independent
from test_train import max_weight_diff, ref_graph

from stages.strategies.hopgnn.runtime import merge_decision, time_steps

EPOCHS, BATCH, FANOUTS = 3, 40, "3,2"


def run(part: Path, tmp: Path, strategy: str = "hopgnn", model: str = "sage", **kw) -> Path:
    """STRATEGY planned into TMP/plan-OUT (hidden 6, FANOUTS, batches of BATCH in global order unless the options
    name another) and trained for EPOCHS unless KW says otherwise, into TMP/OUT."""
    kw.setdefault("epochs", EPOCHS)
    return minibatch_run(part, tmp, strategy, model, fanouts=FANOUTS, batch=BATCH, **kw)


# --- the schedule --------------------------------------------------------------------------------------------
def test_time_steps_put_each_root_on_its_home_server():
    home = np.array([0, 1, 2, 0, 1, 2, 2, 2, 1, 0, 0, 1])
    kept, model, step = time_steps(home, 3, 0)
    assert kept.tolist() == [0, 1, 2] and model.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert np.array_equal((model + step) % 3, home)  # model d at step t is on server (d + t) mod K


def test_merging_drops_the_emptiest_step_and_spreads_its_roots_over_the_same_model():
    """The paper's Figure 10 in shape: three servers; each model's roots of the dropped step go to that model's
    other steps, as evenly as possible, and the total per model is kept."""
    home = np.array([0, 1, 2, 0, 1, 2, 2, 2, 1, 0, 0, 1])
    _, _, before = time_steps(home, 3, 0)
    assert np.bincount(before, minlength=3).tolist() == [
        3,
        6,
        3,
    ]  # step 0 the fewest (a tie with 2: the lower)
    kept, model, step = time_steps(home, 3, 1)
    assert kept.tolist() == [1, 2]
    assert step.tolist() == [
        1,
        1,
        2,
        2,
        1,
        1,
        1,
        1,
        2,
        1,
        1,
        2,
    ]  # model 0's two roots at step 0 -> steps 1, 2
    moved = before != step
    assert (before[moved] == 0).all() and set(step[moved]) <= {1, 2}
    kept, _, step = time_steps(home, 3, 5)  # at most K - 1 steps merge away: one time step, every root in it
    assert len(kept) == 1 and (step == kept[0]).all()
    many = np.random.default_rng(0).integers(0, 4, 1000)
    kept, model, step = time_steps(many, 4, 1)
    gone = next(t for t in range(4) if t not in kept)
    for d in range(4):  # the model's dropped roots spread over its 3 other steps within one of each other
        old = (model == d) & ((many - d) % 4 == gone)
        extra = np.bincount(step[old], minlength=4)[kept]
        assert extra.max() - extra.min() <= 1 and extra.sum() == old.sum()


def test_auto_merging_rule():
    h = [{"merged": 0, "seconds": 5.0}]
    assert merge_decision(h, 4) == (1, False)  # the examination starts at the second epoch
    h.append({"merged": 1, "seconds": 4.0})
    assert merge_decision(h, 4) == (2, False)  # faster: merge one more
    h.append({"merged": 2, "seconds": 4.5})
    assert merge_decision(h, 4) == (1, True)  # slower: back to the previous count, frozen (Fig. 17 settles)
    assert merge_decision([{"merged": 0, "seconds": 2.0}, {"merged": 1, "seconds": 1.0}], 2) == (1, True)


# --- exactness -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "model,k,method",
    [("sage", 1, "metis"), ("sage", 2, "distdgl"), ("gcn", 2, "metis"), ("gcn", 4, "distdgl")],
)
def test_hopgnn_equals_distdgl_global_order_and_the_reference(store, partitions, tmp_path, model, k, method):
    part = partitions(method, k)
    # K = 1 keeps the default --merge auto: one worker has no peer to merge with (it once failed there)
    hop = run(part, tmp_path, model=model, options=("--merge", "off") if k > 1 else (), out="hop")
    init, final = weights(hop)
    graph = ref_graph(store)
    expected = minibatch_train(
        model, init, graph, global_batches(graph, BATCH, SEED), [3, 2], EPOCHS, LR, DROPOUT, SEED
    )
    assert max_weight_diff(final, expected) <= 1e-5
    assert max_weight_diff(final, init) > 1e-3
    dgl = run(part, tmp_path, "distdgl", model, out="dgl")
    assert max_weight_diff(weights(dgl)[0], init) == 0.0
    assert max_weight_diff(weights(dgl)[1], final) <= 1e-10
    rec = records(hop)
    steps = math.ceil(len(labelled_train(graph)) / BATCH)
    assert rec[0]["steps"] == steps and rec[0].get("micro_steps", steps) == steps * k
    w = rec[0]["workers"]
    assert all(x["time_steps"] == k and x["merged_steps"] == 0 and x["away_roots"] == 0 for x in w)
    if k > 1:  # every model moved K - 1 times per iteration with its parameters and gradients
        p = w[0]["model_values"]
        assert all(x["bytes_sent_per_phase"]["migrate"] == steps * (k - 1) * 2 * p * 8 for x in w)
    if (model, k) == ("gcn", 2):  # g3 eval of a hopgnn run: the plain reference's accuracy from its weights
        assert_eval_is_independent(store, hop, model)


@pytest.mark.parametrize("k", [2, 4])
def test_pregather_merge_and_migration_change_where_work_runs_not_the_model(partitions, tmp_path, k):
    part = partitions("distdgl", k)
    base = run(
        part, tmp_path, options=("--merge", "off", "--pregather", "off", "--migrate", "off"), out="base"
    )
    final = weights(base)[1]
    for name, opts in [
        ("pre", ("--merge", "off", "--pregather", "on")),
        ("merge", ("--merge", str(k - 1), "--pregather", "off")),
        ("all", ("--merge", "1", "--pregather", "on", "--migrate", "on")),
    ]:
        other = run(part, tmp_path, options=opts, out=name)
        assert max_weight_diff(weights(other)[1], final) <= 1e-10, name
    b, pre, merged = (records(tmp_path / n)[0]["workers"] for n in ("base", "pre", "merge"))
    width, item, steps = 10, 8, records(base)[0]["steps"]
    for x, y in zip(b, pre, strict=True):
        # the same rows are read (the same micrographs), fewer are fetched once deduplicated over the iteration
        assert x["source_rows"] == y["source_rows"] and x["feature_misses"] == y["feature_misses"]
        assert x["fetched_rows"] == x["feature_misses"]  # without pre-gathering every miss is fetched
        assert y["fetched_rows"] <= x["fetched_rows"]
        assert (
            x["feature_bytes"] == x["fetched_rows"] * width * item
            and "migrate" not in x["bytes_sent_per_phase"]
        )
        assert y["feature_bytes"] == y["fetched_rows"] * width * item
        assert y["bytes_sent_per_phase"]["migrate"] == steps * (k - 1) * 2 * y["model_values"] * item
    for w in (
        b,
        pre,
    ):  # what the owners served is what was fetched, each reply with its 29-byte frame (status,
        # array count, dtype, ndim, two extents: stages/kits/runtime/sampling_service.py) — at most one reply per worker,
        # owner asked and time step
        extra = sum(x["bytes_sent_per_phase"]["features0"] for x in w) - sum(x["feature_bytes"] for x in w)
        assert extra % 29 == 0 and 0 <= extra <= 29 * steps * k * k * (k - 1), extra
    assert sum(y["fetched_rows"] for y in pre) < sum(x["fetched_rows"] for x in b)
    assert all(x["time_steps"] == 1 and x["merged_steps"] == k - 1 for x in merged)
    assert sum(x["away_roots"] for x in merged) > 0  # merged roots ran away from home
    # where the models are: without merging every root is computed on its home server, and server s sends every
    # model it holds to server s + 1 alone (model d is at server d + t in time step t) — the reverse direction,
    # which leaves the weights as they are (the all-reduce sums the gradients wherever they went), fails here at
    # K = 4 (at K = 2 both directions are the one other server)
    model_bytes = 2 * pre[0]["model_values"] * item
    for s, x in enumerate(pre):
        assert x["away_roots"] == 0
        assert x["migrated_bytes_to"] == {str((s + 1) % k): steps * (k - 1) * model_bytes}, x[
            "migrated_bytes_to"
        ]
    assert all(x["migrated_bytes_to"] == {} for x in b)  # --migrate off: nothing moves


def test_auto_merging_is_agreed_replayed_and_resumed(partitions, tmp_path):
    part = partitions("distdgl", 4)
    opts = ("--merge", "auto")
    cut = run(part, tmp_path, options=opts, train=("--checkpoint-every", "1"), epochs=2, out="cut")
    resumed = run(
        part, tmp_path, options=opts, train=("--checkpoint-every", "1", "--resume"), epochs=4, out="cut"
    )
    assert resumed == cut
    rec = records(cut)
    assert [r["epoch"] for r in rec] == [0, 1, 2, 3]
    history = []
    for r in rec:
        w = r["workers"]
        assert len({(x["merged_steps"], x["merge_frozen"], x.get("merge_epoch_seconds")) for x in w}) == 1
        merged = w[0]["merged_steps"]
        if history:  # the recorded merged steps follow the rule from the recorded (agreed) times
            assert merged == merge_decision(history, 4)[0]
        if "merge_epoch_seconds" in w[0]:
            history.append({"merged": merged, "seconds": w[0]["merge_epoch_seconds"]})
    # the warm-up epoch is not measured: the second epoch (unmerged) is the baseline, the third merges one
    assert [r["workers"][0]["merged_steps"] for r in rec[:3]] == [0, 0, 1]
    assert "merge_epoch_seconds" not in rec[0]["workers"][0]
    uninterrupted = run(part, tmp_path, options=("--merge", "off"), epochs=4, out="plain")
    assert max_weight_diff(weights(cut)[1], weights(uninterrupted)[1]) <= 1e-10


# --- local-only ----------------------------------------------------------------------------------------------
def local_only_batches(graph, assignment: np.ndarray, k: int, batch: int, seed: int):
    """HopGNN's locality-optimised variant seen by one process: step s trains on the union of every server's
    s-th slice of ceil(B/K) of its own shuffled training nodes."""
    train = labelled_train(graph)
    own = [train[assignment[train] == w] for w in range(k)]
    b = -(-batch // k)
    steps = max(-(-len(t) // b) for t in own)

    def batches(epoch: int) -> list[np.ndarray]:
        perms = [permutation(t, seed, epoch) for t in own]
        return [np.concatenate([p[s * b : (s + 1) * b] for p in perms]) for s in range(steps)]

    return batches


@pytest.mark.parametrize("k", [2, 4])
def test_local_only_equals_its_own_reference_and_differs_from_global(store, partitions, tmp_path, k):
    part = partitions("metis", k)
    lo = run(part, tmp_path, options=("--batch-order", "local-only"), out="lo")
    init, final = weights(lo)
    graph = ref_graph(store)
    assignment = np.load(part / "assignment.npy").astype(np.int64)
    expected = minibatch_train(
        "sage",
        init,
        graph,
        local_only_batches(graph, assignment, k, BATCH, SEED),
        [3, 2],
        EPOCHS,
        LR,
        DROPOUT,
        SEED,
    )
    assert max_weight_diff(final, expected) <= 1e-5
    exact = minibatch_train(
        "sage", init, graph, global_batches(graph, BATCH, SEED), [3, 2], EPOCHS, LR, DROPOUT, SEED
    )
    assert max_weight_diff(final, exact) > 1e-4  # stratified batches: a different model
    w = records(lo)[0]["workers"]
    assert all(x["time_steps"] == 1 and "migrate" not in x["bytes_sent_per_phase"] for x in w)


# --- bad input -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,message",
    [
        (("--batch-order", "local"), "global or local-only"),
        (("--pregather", "maybe"), "on or off"),
        (("--merge", "x"), "auto, off or a number"),
        (("--merge", "-1"), "at least 0"),
        (("--migrate", "1"), "on or off"),
        (("--fanouts", "3"), "1 hops but the model has 2 layers"),
        (("--topology", "replicated"), "not of hopgnn"),
    ],
)
def test_bad_options_are_one_line(partitions, tmp_path, args, message):
    r = invoke(
        ["plan", str(partitions("metis", 2)), "--strategy", "hopgnn", *args, "-o", str(tmp_path / "p")]
    )
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "p").exists()


def test_a_feature_partition_is_refused(partitions, tmp_path):
    r = invoke(["plan", str(partitions("feature", 2)), "--strategy", "hopgnn", "-o", str(tmp_path / "p")])
    assert r.exit_code == 2 and "hopgnn runs on distdgl, metis, g3 partitions" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
