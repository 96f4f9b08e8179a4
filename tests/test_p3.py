"""`p3` (P3, paper 003): push-pull parallelism on a hash-partitioned structure and column-split features.

Unpipelined, K workers train the model of the independent single-process reference on distdgl's global batches
(tests/reference_minibatch.py) and of `distdgl --batch-order global` itself; pipelined (`--pipeline p3`) they
train the reference's delay-3 model with weight stashing (P3 Eq. 3). A resumed pipelined run equals an
uninterrupted one bitwise (the sharded layer-1 slices and the stashed weight versions are in the rank files).
The bytes moved — structure pushed, partials pulled, gradients pushed, the all-reduce — equal their formulas
from the reference sampler's blocks. Bad input is one line and exit 2.

Every run is real: `g3 partition --method p3`, `g3 plan --strategy p3`, `g3 train` with torch.distributed.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import DROPOUT, LR, SEED, flags, g3_plan, invoke, minibatch_run, records, weights
from reference_minibatch import (
    ascending_rows,
    draw,
    global_batches,
    key_of,
    labelled_train,
    minibatch_train,
    union_of_local_batches,
)
from test_eval import assert_eval_is_independent
from test_train import max_weight_diff, ref_graph

EPOCHS, BATCH, HIDDEN = 3, 40, 6


def fanouts_for(layers: int) -> list[int]:
    return [3, 2, 2][:layers]


def run(part: Path, tmp: Path, strategy: str = "p3", model: str = "sage", layers: int = 2, **kw) -> Path:
    """STRATEGY planned into TMP/PLAN_NAME (default plan-OUT) with LAYERS layers of width HIDDEN, their fanouts,
    batches of BATCH in global order unless KW says otherwise, and trained for EPOCHS unless KW says otherwise."""
    kw.setdefault("epochs", EPOCHS)
    fanouts = ",".join(map(str, fanouts_for(layers)))
    return minibatch_run(
        part, tmp, strategy, model, layers=layers, hidden=HIDDEN, fanouts=fanouts, batch=BATCH, **kw
    )


# --- the model: exact unpipelined, delay 3 pipelined ----------------------------------------------------------
@pytest.mark.parametrize("model,k,layers", [("sage", 1, 2), ("gcn", 2, 2), ("sage", 4, 3), ("gcn", 4, 3)])
def test_p3_equals_the_reference_on_distdgl_global_batches(store, partitions, tmp_path, model, k, layers):
    """F = 10 features over K = 4 workers: column slices of 3, 3, 3 and 1."""
    run_dir = run(partitions("p3", k), tmp_path, model=model, layers=layers)
    init, final = weights(run_dir)
    assert init["layers.0.lin_neigh.weight" if model == "sage" else "layers.0.lin.weight"].shape == (
        HIDDEN,
        10,
    )
    graph = ref_graph(store)
    expected = minibatch_train(
        model, init, graph, global_batches(graph, BATCH, SEED), fanouts_for(layers), EPOCHS, LR, DROPOUT, SEED
    )
    assert max_weight_diff(final, expected) <= 1e-5
    assert max_weight_diff(final, init) > 1e-3


def test_p3_equals_distdgl_and_moves_the_bytes_of_its_formulas(store, partitions, tmp_path):
    k = 2
    part = partitions("p3", k)
    p3 = run(part, tmp_path, out="p3")
    dgl = run(part, tmp_path, "distdgl", out="dgl")
    assert max_weight_diff(weights(dgl)[0], weights(p3)[0]) == 0.0
    assert max_weight_diff(weights(dgl)[1], weights(p3)[1]) <= 1e-10
    # bytes of the last epoch against the reference sampler's layer-1 blocks of every owner
    graph = ref_graph(store)
    assignment = np.load(part / "assignment.npy")
    nbrs = ascending_rows(graph.indptr.numpy(), graph.indices.numpy())
    epoch = EPOCHS - 1
    structure, partials, gradients = np.zeros(k), np.zeros(k), np.zeros(k)
    for step, batch in enumerate(global_batches(graph, BATCH, SEED)(epoch)):
        n_dst = np.zeros(k, dtype=np.int64)
        for w in range(k):
            dst = np.sort(batch[assignment[batch] == w])
            for hop, f in enumerate(fanouts_for(2)):
                counts, picks = draw(graph.indptr.numpy(), nbrs, dst, f, key_of(SEED, epoch, step, hop))
                src = np.union1d(dst, picks)
                if hop == 1:  # the last hop sampled is layer 1's block: V¹ -> V⁰
                    n_dst[w] = len(dst)
                    structure[w] += (k - 1) * 4 * (3 + len(src) + len(dst) + int(counts.sum()))
                dst = src
        for w in range(k):
            partials[w] += (n_dst.sum() - n_dst[w]) * HIDDEN * 8  # its columns' partials of the others' V¹
            gradients[w] += (k - 1) * n_dst[w] * HIDDEN * 8  # its own ∂L/∂z¹ to everyone
    rec = records(p3)[-1]
    steps = math.ceil(len(labelled_train(graph)) / BATCH)
    replicated = HIDDEN + (4 * HIDDEN * 2 + 4)  # layer 1's bias, layer 2 (W_self, W_neigh, bias)
    for w, x in enumerate(rec["workers"]):
        sent = x["bytes_sent_per_phase"]
        assert sent["structure"] == structure[w]
        assert sent["structure-sizes"] == steps * (k - 1) * 8
        assert sent["partials"] == partials[w]
        assert sent["gradients"] == gradients[w]
        assert x["allreduce_bytes"] == steps * replicated * 8
        assert "features0" not in sent  # no feature row ever moves in training
    assert_eval_is_independent(store, p3, "sage")  # g3 eval assembles the column slices


def test_replicated_structure_samples_the_same_without_asking_anyone(partitions, tmp_path):
    """--topology replicated (P3's choice when the structure fits): every worker samples from the plan's whole CSR,
    so no sampling request crosses the network, and the model is the partitioned run's, bitwise."""
    part = partitions("p3", 2)
    shared = run(part, tmp_path, options=("--topology", "replicated"), epochs=2, out="replicated")
    asked = run(part, tmp_path, epochs=2, out="partitioned")
    assert max_weight_diff(weights(shared)[1], weights(asked)[1]) == 0.0
    sent = [w["bytes_sent_per_phase"] for w in records(shared)[-1]["workers"]]
    assert all("sample" not in s and "sample-ids" not in s and s["partials"] > 0 for s in sent)
    assert all(w["bytes_sent_per_phase"]["sample"] > 0 for w in records(asked)[-1]["workers"])


def test_p3_local_order_equals_the_union_of_local_batches(store, partitions, tmp_path):
    k = 2
    part = partitions("p3", k)
    run_dir = run(part, tmp_path, order="local")
    init, final = weights(run_dir)
    graph = ref_graph(store)
    batches = union_of_local_batches(graph, np.load(part / "assignment.npy"), k, BATCH, SEED)
    expected = minibatch_train("sage", init, graph, batches, fanouts_for(2), EPOCHS, LR, DROPOUT, SEED)
    assert max_weight_diff(final, expected) <= 1e-5


def test_pipelined_p3_is_the_delay_3_reference_and_resumes_bitwise(store, partitions, tmp_path):
    part = partitions("p3", 2)
    pipe = ("--pipeline", "p3")
    whole = run(part, tmp_path, train=pipe, epochs=4, out="whole", plan_name="plan")
    init, final = weights(whole)
    graph = ref_graph(store)
    batches = global_batches(graph, BATCH, SEED)
    expected = minibatch_train("sage", init, graph, batches, fanouts_for(2), 4, LR, DROPOUT, SEED, delay=3)
    assert max_weight_diff(final, expected) <= 1e-5
    fresh = minibatch_train("sage", init, graph, batches, fanouts_for(2), 4, LR, DROPOUT, SEED)
    assert max_weight_diff(final, fresh) > 1e-4  # staleness changes the model
    # batches really in flight: with the delay-3 weights known, batches t+1 … t+3's partials travel while batch t
    # computes (4 at once when an epoch has that many steps); unpipelined, one at a time
    steps = records(whole)[0]["steps"]
    assert all(w["batches_in_flight_max"] == min(4, steps) for r in records(whole) for w in r["workers"])
    plain = records(run(part, tmp_path, epochs=1, out="plain", plan_name="plan"))
    assert all(w["batches_in_flight_max"] == 1 for r in plain for w in r["workers"])
    assert all(0.0 <= w["partials_hidden_share"] <= 1.0 for r in records(whole) for w in r["workers"])
    # the replicated update of batch t trails its gradient: three all-reduces still in flight after a step (the
    # weights above prove each is applied before batch t + 4 reads it); unpipelined, none (no such field)
    assert all(w["updates_trailing_max"] == min(3, steps) for r in records(whole) for w in r["workers"])
    assert all("updates_trailing_max" not in w for r in plain for w in r["workers"])
    run(part, tmp_path, train=(*pipe, "--checkpoint-every", "1"), epochs=2, out="cut", plan_name="plan")
    resume = (*pipe, "--checkpoint-every", "1", "--resume")
    run(part, tmp_path, train=resume, epochs=4, out="cut", plan_name="plan")
    assert max_weight_diff(weights(tmp_path / "cut")[1], final) == 0.0


# --- bad input ------------------------------------------------------------------------------------------------
def test_bad_input_is_one_line_and_exit_2(partitions, tmp_path):
    metis = partitions("metis", 2)
    r = invoke(["plan", str(metis), "--strategy", "p3", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "p3" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    part = partitions("p3", 2)
    r = invoke(["plan", str(part), "--strategy", "p3", "--model", "gat", "-o", str(tmp_path / "y")])
    assert r.exit_code == 2 and "gat" in r.output, r.output
    plans = {}
    for s in ("p3", "distdgl"):
        plans[s] = g3_plan(part, tmp_path / f"plan-{s}", *flags(strategy=s, fanouts="3,2", batch_size=40))
    for plan, flag, value in [(plans["p3"], "--pipeline", "multi"), (plans["distdgl"], "--pipeline", "p3")]:
        r = invoke(["train", str(plan), "--epochs", "1", flag, value, "-o", str(tmp_path / "r")])
        assert r.exit_code == 2 and flag in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("strategy,method", [("p3", "p3"), ("bytegnn", "bytegnn")])
def test_split_order_is_global_orders_model_for_every_strategy_that_takes_it(
    store, partitions, tmp_path, strategy, method
):
    """`--batch-order split` (worker k computes positions k, k+K, … of each global batch wherever its roots live)
    trains global order's batches in p3 and bytegnn too: the independent reference's model."""
    run_dir = run(partitions(method, 2), tmp_path, strategy=strategy, order="split")
    init, final = weights(run_dir)
    graph = ref_graph(store)
    expected = minibatch_train(
        "sage", init, graph, global_batches(graph, BATCH, SEED), fanouts_for(2), EPOCHS, LR, DROPOUT, SEED
    )
    assert max_weight_diff(final, expected) <= 1e-5
