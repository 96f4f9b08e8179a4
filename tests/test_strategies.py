"""The strategies of `g3 plan --strategy`: bns-gcn and sancus against the exact single-process reference where
they are exact, and against their own single-process references where they approximate (boundary sampling,
stale embeddings); bytes against the formulas; resume with caches; bad options.

Every run is real: `g3 partition` (METIS included), `g3 plan`, `g3 train` with torch.distributed processes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import cut_and_resume, flags, g3_partition, g3_plan, g3_train, invoke, ok, records, weights
from reference import reference_train
from reference_arcs import bns_substitute, sancus_ask_substitute, sancus_substitute, train_with
from test_eval import independent_accuracy
from test_train import DROPOUT, LR, SEED, max_weight_diff, ref_graph

from stages.common.store import GraphStore

EPOCHS = 5


def run_strategy(
    part: Path,
    tmp: Path,
    strategy: str,
    model: str,
    options: tuple[str, ...] = (),
    train: tuple[str, ...] = (),
    dtype: str = "float64",
    epochs: int = EPOCHS,
    layers: int = 2,
) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    model_flags = flags(strategy=strategy, model=model, layers=layers, hidden=6, heads=2)
    plan = g3_plan(part, tmp / "plan", *model_flags, *options)
    return g3_train(plan, tmp / "run", epochs, *train, dtype=dtype)


def assignment(part: Path) -> torch.Tensor:
    return torch.from_numpy(np.load(part / "assignment.npy").astype(np.int64))


def phase_bytes(record: dict, phase: str) -> int:
    return sum(w["bytes_sent_per_phase"].get(phase, 0) for w in record["workers"])


# --- exact configurations -------------------------------------------------------------------------------------
METHODS = ("metis", "chunk", "g3", "random")
# every strategy, K = 1, 2, 4 x SAGE, GCN, GAT, in its exact configuration; partitions and layouts rotate
EXACT = [
    ("bns-gcn", (), model, k, METHODS[i % 4])
    for i, (k, model) in enumerate((k, m) for k in (1, 2, 4) for m in ("sage", "gcn", "gat"))
] + [
    (
        "sancus",
        ("--staleness", ("epoch:0", "drift:0")[i % 2], "--sancus-comm", ("broadcast", "p2p")[i // 2 % 2]),
        model,
        k,
        METHODS[(i + 1) % 4],
    )
    for i, (k, model) in enumerate((k, m) for k in (1, 2, 4) for m in ("sage", "gcn", "gat"))
]


@pytest.mark.parametrize("strategy,options,model,k,method", EXACT)
def test_exact_configurations_match_single_process_reference(
    store, partitions, tmp_path, strategy, options, model, k, method
):
    run = run_strategy(partitions(method, k), tmp_path, strategy, model, options)
    init, final = weights(run)
    expected = reference_train(
        model, init, ref_graph(store), EPOCHS, LR, 0.0, DROPOUT, SEED, heads=2 if model == "gat" else None
    )
    assert max_weight_diff(final, expected) <= 1e-5
    assert max_weight_diff(final, init) > 1e-3
    assert json.loads((run / "run.json").read_text())["strategy"]["name"] == strategy


# --- approximations against their own references --------------------------------------------------------------
@pytest.mark.parametrize("model,k,p", [("sage", 2, 0.5), ("gcn", 4, 0.3), ("sage", 4, 0.1)])
def test_boundary_sampling_matches_its_reference(store, partitions, tmp_path, model, k, p):
    part = partitions("metis", k)
    run = run_strategy(part, tmp_path, "bns-gcn", model, ("--boundary-sample", str(p)), layers=3)
    init, final = weights(run)
    expected = train_with(
        model,
        init,
        ref_graph(store),
        assignment(part),
        EPOCHS,
        LR,
        DROPOUT,
        SEED,
        bns_substitute(assignment(part), p, SEED),
    )
    assert max_weight_diff(final, expected) <= 1e-5
    exact = reference_train(model, init, ref_graph(store), EPOCHS, LR, 0.0, DROPOUT, SEED)
    assert max_weight_diff(final, exact) > 1e-4  # sampling changed the model
    # hidden layers' boundary rows: about a P-fraction of g3's, features (layer 0) all of them once
    rec = records(run)
    total_remote = sum(p_["remote"] for p_ in json.loads((part / "partition.json").read_text())["partitions"])
    assert phase_bytes(rec[0], "features0") == total_remote * 10 * 8
    sent = sum(phase_bytes(r, "fwd0") + phase_bytes(r, "fwd1") for r in rec) / (
        EPOCHS * 2 * total_remote * 6 * 8
    )
    assert abs(sent - p) < 0.15


@pytest.mark.parametrize(
    "model,k,staleness,comm", [("sage", 2, "epoch:1", "broadcast"), ("gcn", 4, "epoch:2", "p2p")]
)
def test_stale_embeddings_match_the_stale_reference(store, partitions, tmp_path, model, k, staleness, comm):
    part = partitions("chunk" if comm == "broadcast" else "metis", k)
    options = ("--staleness", staleness, "--sancus-comm", comm)
    run = run_strategy(part, tmp_path, "sancus", model, options, layers=3, epochs=6)
    init, final = weights(run)
    bound = int(staleness.split(":")[1])
    expected = train_with(
        model,
        init,
        ref_graph(store),
        assignment(part),
        6,
        LR,
        DROPOUT,
        SEED,
        sancus_substitute(assignment(part), bound, 3),
    )
    assert max_weight_diff(final, expected) <= 1e-5
    exact = reference_train(model, init, ref_graph(store), 6, LR, 0.0, DROPOUT, SEED)
    assert max_weight_diff(final, exact) > 1e-5  # staleness changed the model
    # every hidden layer is sent at epochs 0, N+1, 2(N+1), ... and skipped otherwise; gradients every epoch
    sends = [r["workers"][0]["sancus_sent_layers"] for r in records(run)]
    assert sends == [2 if e % (bound + 1) == 0 else 0 for e in range(6)]
    assert all(phase_bytes(r, "bwd1") > 0 and phase_bytes(r, "bwd2") > 0 for r in records(run))


@pytest.mark.parametrize("model,k,bound,comm", [("sage", 4, 1, "p2p"), ("gcn", 2, 0, "broadcast")])
def test_ask_is_check_a_decided_by_the_receivers(store, partitions, tmp_path, model, k, bound, comm):
    """Check A: a receiver that computed with a copy more than N epochs old asks its owner, who sends at the next
    epoch. The run equals the receivers'-side reference, not epoch:N's (ask:0 is not exact); lock-step, every
    receiver holds the same versions, so it coincides exactly with epoch:N+1's reference."""
    part = partitions("chunk" if comm == "broadcast" else "metis", k)
    epochs = 6
    options = ("--staleness", f"ask:{bound}", "--sancus-comm", comm)
    run = run_strategy(part, tmp_path, "sancus", model, options, layers=3, epochs=epochs)
    init, final = weights(run)
    graph, part_of = ref_graph(store), assignment(part)

    def reference(substitute):
        return train_with(model, init, graph, part_of, epochs, LR, DROPOUT, SEED, substitute)

    asked = reference(sancus_ask_substitute(part_of, bound, 3))
    assert max_weight_diff(final, asked) <= 1e-5
    assert max_weight_diff(final, reference(sancus_substitute(part_of, bound, 3))) > 1e-5  # not epoch:N
    assert max_weight_diff(asked, reference(sancus_substitute(part_of, bound + 1, 3))) <= 1e-12
    # every owner sends both hidden layers at epochs 0, N+2, 2(N+2), ...; the asks cost one word per pair
    # (p2p) or an all-reduce of K flags (broadcast) per layer and epoch
    rec = records(run)
    assert [[w["sancus_sent_layers"] for w in r["workers"]] for r in rec] == [
        [2 if e % (bound + 2) == 0 else 0] * k for e in range(epochs)
    ]
    ask_bytes = k * (k - 1) * 8 if comm == "p2p" else k * k * 8
    assert all(phase_bytes(r, "ask0") == phase_bytes(r, "ask1") == ask_bytes for r in rec)
    assert [phase_bytes(r, "fwd1") > 0 for r in rec] == [e % (bound + 2) == 0 for e in range(epochs)]


@pytest.mark.parametrize("comm", ["broadcast", "p2p"])
def test_drift_skips_sends_while_rows_change_little(store, partitions, tmp_path, comm):
    """Check H: an owner resends a layer only when its rows moved by more than X (relative Frobenius norm) since
    its last send. With a loose bound some sends are skipped, by owner; drift:0 sends every epoch (exact, above)."""
    part = partitions("metis", 4)
    options = ("--staleness", "drift:0.3", "--sancus-comm", comm)
    rec = records(
        run_strategy(part, tmp_path, "sancus", "sage", options, dtype="float32", epochs=8, layers=3)
    )
    sent = [[w["sancus_sent_layers"] for w in r["workers"]] for r in rec]
    assert sent[0] == [2, 2, 2, 2]  # nothing cached yet: every owner sends both hidden layers
    skipped = sum(w["sancus_skipped_layers"] for r in rec for w in r["workers"])
    assert 0 < skipped < 8 * 4 * 2
    fwd = [phase_bytes(r, "fwd0") + phase_bytes(r, "fwd1") for r in rec]
    assert min(fwd[1:]) < fwd[0]
    if comm == "broadcast":  # the owners' decisions reach every worker through an all-reduce of K flags
        assert all(phase_bytes(r, "drift0") == 4 * 4 * 8 for r in rec)


def test_sancus_bytes_follow_the_layouts(store, partitions, tmp_path):
    """broadcast: a fresh layer moves every owner's whole block to the K−1 others, (K−1)/K·N rows received per
    rank on average; p2p: the boundary rows, g3's bytes, plus a one-word header per peer; epoch:1 halves them."""
    k, n, width = 4, 240, 6
    part = partitions("chunk", k)
    meta = json.loads((part / "partition.json").read_text())
    total_remote = sum(p["remote"] for p in meta["partitions"])
    bc_options, p2p_options = ("--staleness", "epoch:1"), ("--staleness", "epoch:1", "--sancus-comm", "p2p")
    bc = records(run_strategy(part, tmp_path / "bc", "sancus", "sage", bc_options, dtype="float32", epochs=3))
    p2p = records(
        run_strategy(part, tmp_path / "p2p", "sancus", "sage", p2p_options, dtype="float32", epochs=3)
    )
    for e, (b, q) in enumerate(zip(bc, p2p, strict=True)):
        fresh = e % 2 == 0
        assert phase_bytes(b, "fwd0") == (n * (k - 1) * width * 4 if fresh else 0)
        recv = [w["bytes_recv"] for w in b["workers"]]
        assert sum(recv) >= (n * (k - 1) * width * 4 if fresh else 0)
        assert phase_bytes(q, "fwd0") == (total_remote * width * 4 if fresh else 0)
        assert phase_bytes(q, "fwd0-header") == k * (k - 1) * 8
        assert phase_bytes(b, "bwd1") == phase_bytes(q, "bwd1") == total_remote * width * 4


def test_bns_gcn_sends_exactly_g3s_bytes(store, partitions, tmp_path):
    """BNS-GCN with P = 1 moves each (node, peer) pair once per layer, forward and backward: g3's messages."""
    part = partitions("metis", 4)
    bns = records(
        run_strategy(part, tmp_path / "bns", "bns-gcn", "sage", dtype="float32", layers=3, epochs=2)
    )
    tmp = tmp_path / "g3"
    tmp.mkdir()
    plan = g3_plan(part, tmp / "plan", layers=3, hidden=6)
    ok(["train", plan, *flags(epochs=2, workers=4, eval_every=0, threads=1), "-o", tmp / "run"])
    g3 = records(tmp / "run")
    for phase in ("features0", "fwd0", "fwd1", "bwd1", "bwd2"):
        assert [phase_bytes(r, phase) for r in bns] == [phase_bytes(r, phase) for r in g3], phase


@pytest.mark.parametrize("staleness", ["epoch:2", "ask:1"])
def test_resume_with_caches_equals_an_uninterrupted_run(store, partitions, tmp_path, staleness):
    """The sancus caches (and versions) are part of the checkpoint: a run stopped after epoch 2 and resumed from
    its checkpoint of epoch 1 (whose rows were sent at epoch 0 and skipped at 1 and 2; ask:1's asks of epoch 2
    are served at 3, after the resume) gives the uninterrupted run's weights bitwise, at K = 4 in float32."""
    part = partitions("metis", 4)
    plan = g3_plan(
        part, tmp_path / "plan", strategy="sancus", staleness=staleness, sancus_comm="p2p", hidden=6
    )

    def checkpoints_of_the_cut_run(cut: Path) -> None:
        assert sorted(p.name for p in (cut / "checkpoints").glob("*.pt"))[:5] == [
            "epoch-00001.pt",
            "epoch-00001.rank-00000.pt",
            "epoch-00001.rank-00001.pt",
            "epoch-00001.rank-00002.pt",
            "epoch-00001.rank-00003.pt",
        ]

    common = flags(threads=1, seed=3, checkpoint_every=2, eval_every=0, workers=4)
    full, resumed = cut_and_resume(plan, tmp_path, 5, 3, *common, at_cut=checkpoints_of_the_cut_run)
    assert max_weight_diff(weights(full)[1], weights(resumed)[1]) == 0.0


def test_gradient_clipping_scales_to_the_local_threshold():
    from stages.strategies.sancus.runtime import clip_rows

    g = torch.full((4, 3), 2.0)  # norm sqrt(48)
    assert torch.equal(clip_rows(g, 0.0, 4), g)  # off
    assert torch.equal(clip_rows(g, 100.0, 4), g)  # within TH / sqrt(K) = 50
    clipped = clip_rows(g, 2.0, 4)  # limit 1
    assert float(torch.linalg.norm(clipped)) == pytest.approx(1.0)
    assert torch.allclose(clipped / clipped[0, 0], torch.ones_like(g))  # the direction is kept


def test_bad_strategy_options_give_one_line(store, partitions, tmp_path):
    part = partitions("metis", 2)
    feature = g3_partition(store, tmp_path / "feat", 2, method="feature")
    g3_plan(part, tmp_path / "bns", strategy="bns-gcn")
    cases = [
        (["plan", str(part), "--strategy", "nope"], "Invalid value for '--strategy'"),
        (
            ["plan", str(feature), "--strategy", "g3"],
            "strategy g3 runs on g3, metis, random, chunk partitions, not feature",
        ),
        (
            ["plan", str(feature), "--strategy", "sancus"],
            "run `g3 partition STORE --workers K --method chunk`",
        ),
        (
            ["plan", str(part), "--strategy", "bns-gcn", "--boundary-sample", "0"],
            "--boundary-sample 0: the sampling ratio must be in (0, 1]",
        ),
        (["plan", str(part), "--strategy", "bns-gcn", "--boundary-sample", "1.5"], "must be in (0, 1]"),
        (
            ["plan", str(part), "--strategy", "bns-gcn", "--boundary-sample", "x"],
            "expected a number in (0, 1]",
        ),
        (
            ["plan", str(part), "--strategy", "bns-gcn", "--boundary-sample", "0.5", "--model", "gat"],
            "with GAT is not supported",
        ),
        (
            ["plan", str(part), "--strategy", "sancus", "--staleness", "epoch:-1"],
            "needs a whole number of epochs >= 0",
        ),
        (
            ["plan", str(part), "--strategy", "sancus", "--staleness", "drift:-0.1"],
            "drift:X needs a number >= 0",
        ),
        (
            ["plan", str(part), "--strategy", "sancus", "--staleness", "often"],
            "expected epoch:N, ask:N or drift:X",
        ),
        (
            ["plan", str(part), "--strategy", "sancus", "--boundary-sample", "0.5"],
            "--boundary-sample is an option of bns-gcn, not of sancus",
        ),
        (
            ["plan", str(part), "--strategy", "g3", "--sancus-comm", "p2p"],
            "--sancus-comm is an option of sancus, not of g3",
        ),
        (
            ["train", str(tmp_path / "bns"), "--pipeline", "intra"],
            "--pipeline does not apply to the bns-gcn strategy",
        ),
    ]
    for args, message in cases:
        r = invoke(
            [*args, "-o", str(tmp_path / "out")]
            if args[0] == "plan"
            else [*args, "-o", str(tmp_path / "run")]
        )
        assert r.exit_code == 2, (args, r.output)
        assert message in r.output and "Traceback" not in r.output, (args, r.output)
        assert len([ln for ln in r.output.strip().splitlines() if ln.startswith("g3: error")]) <= 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists()


def test_plan_help_lists_every_strategy_and_info_shows_it(partitions, tmp_path):
    from stages.strategies.registry import STRATEGIES

    r = invoke(["plan", "--help"])
    assert r.exit_code == 0
    for s in STRATEGIES.values():
        assert s.name in r.output and ", ".join(s.methods) in r.output
    part = partitions("chunk", 2)
    plan = g3_plan(part, tmp_path / "plan", strategy="sancus", staleness="drift:0.02")
    meta = json.loads((plan / "plan.json").read_text())
    assert meta["schema_version"] == 6
    assert meta["strategy"] == {
        "name": "sancus",
        "options": {
            "sancus_comm": "broadcast",
            "staleness": {"policy": "drift", "bound": 0.02},
            "drift_norm": "fro",
            "grad_clip": 0.0,
            "device_memory": None,
        },
    }
    r = invoke(["info", str(plan), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["strategy"]["name"] == "sancus"
    r = invoke(["info", str(plan)])
    assert "sancus" in r.output and "drift:0.02" in r.output


def test_a_version_2_plan_is_read_as_g3(partitions, tmp_path):
    """Plans written before strategies existed (schema v2, no strategy field) still train, as g3 plans."""
    part = partitions("metis", 2)
    plan = g3_plan(part, tmp_path / "plan", bin_size=50)
    meta = json.loads((plan / "plan.json").read_text())
    old = {k: v for k, v in meta.items() if k not in ("strategy", "content_sha256")} | {"schema_version": 2}
    old["config"] = {**meta["config"], "bin_size": 50, "device_memory": meta["device_memory"]}
    (plan / "plan.json").write_text(json.dumps(old))
    ok(["train", plan, *flags(epochs=1, workers=2, threads=1), "-o", tmp_path / "run"])
    assert json.loads((tmp_path / "run" / "run.json").read_text())["strategy"]["name"] == "g3"


def test_store_fixture_has_cross_partition_arcs(store, partitions):
    """The exactness tests above would pass vacuously if no arc crossed partitions."""
    g = GraphStore.open(store)
    indptr, indices = g.load_csr()
    dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    for method, k in (("metis", 4), ("chunk", 4)):
        part = np.load(partitions(method, k) / "assignment.npy")
        assert (part[indices] != part[dst]).mean() > 0.05


@pytest.mark.parametrize(
    "strategy,options", [("bns-gcn", ("--boundary-sample", "0.5")), ("sancus", ("--staleness", "epoch:1"))]
)
def test_eval_is_exact_inference_for_every_strategy(store, partitions, tmp_path, strategy, options):
    """`g3 eval RUN` runs the plan's strategy forward only with every boundary row, fresh: the accuracies equal
    the loop's final evaluation and the plain reference's from the saved weights, and an evaluation with another
    worker count (through a g3 plan) agrees."""
    part = partitions("metis", 2)
    run = run_strategy(part, tmp_path, strategy, "sage", options, train=("--eval-every", "5"))
    final = records(run)[-1]
    r = invoke(["eval", str(run)])
    assert r.exit_code == 0, r.output
    ev = json.loads((run / "eval.json").read_text())
    assert ev["strategy"] == strategy and ev["workers"] == 2
    assert ev["accuracy"] == pytest.approx(independent_accuracy(store, weights(run)[1], "sage"), abs=1e-12)
    for split in ("train", "valid", "test"):
        assert ev["accuracy"][split] == pytest.approx(final[f"{split}_acc"], abs=1e-12)
    r = invoke(["eval", str(run), "--workers", "1", "--force"])
    assert r.exit_code == 0, r.output
    one = json.loads((run / "eval.json").read_text())
    assert one["workers"] == 1 and one["accuracy"] == ev["accuracy"]
