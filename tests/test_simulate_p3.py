"""`g3 simulate` of a p3 plan (stages/strategies/p3/simulate.py): the modelled bytes and times against their formulas worked
by hand, the pipelined schedule never slower than the unpipelined one and equal to it when nothing overlaps, and
`g3 simulate PLAN --run RUN` on a real two-worker p3 run reproducing the bytes the run measured."""

from __future__ import annotations

import json
import math

import pytest
from helpers import flags, g3_plan, invoke, ok, records

from stages.strategies.p3.simulate import P3Profile, simulate_p3, train_seconds

INF = math.inf


def profile(**kw) -> P3Profile:
    base = dict(
        workers=2,
        order="global",
        batch_size=100,
        num_train=1000,
        layers=2,
        feat_dim=8,
        hidden=4,
        arcs=1000.0,
        arcs1=800.0,
        src0=300.0,
        dst1=100.0,
        sample_bytes=2000.0,
        replicated=50,
        t_sample=1e-6,
        t_struct=2e-6,
        t_unit=1e-7,
        prefetch=True,
        measured_epoch_seconds=1.0,
    )
    return P3Profile(**{**base, **kw})


def test_bytes_follow_the_formulas():
    p = profile()
    r = simulate_p3(p, 4, INF, 0.0, pipelined=False)
    # global order: 10 steps; per owner the K0 = 2 counts halved: A = 500, A1 = 400, V0 = 150, V1 = 50
    assert r["steps"] == 10
    b = r["bytes_per_step"]
    assert b["structure"] == 3 * ((3 + 150 + 50 + 400) * 4 + 8)  # the block and its size, to 3 peers
    assert b["partials"] == 3 * 50 * 4 * 4 and b["gradients"] == 3 * 50 * 4 * 4  # (K-1)·V¹·H·4
    assert b["sample"] == pytest.approx(2000 * 0.5 * (3 / 4) / (1 / 2))  # hash partition: (K-1)/K remote
    assert b["allreduce"] == 2 * 3 / 4 * 50 * 4  # ring all-reduce of the replicated values only
    assert r["bytes_per_epoch"] == round(
        10 * 4 * (b["structure"] + b["partials"] + b["gradients"] + b["sample"])
    )
    # local order: the counts stay, the steps fall
    lo = simulate_p3(profile(order="local"), 4, INF, 0.0, pipelined=False)
    assert lo["steps"] == 3 and lo["bytes_per_step"]["partials"] == 3 * 100 * 4 * 4
    assert lo["bytes_per_step"]["structure"] == 3 * ((3 + 300 + 100 + 800) * 4 + 8)
    # one worker: nothing moves
    one = simulate_p3(p, 1, INF, 0.0, pipelined=False)
    assert one["bytes_per_epoch"] == 0 and one["allreduce_seconds"] == 0.0


def test_times_follow_the_formulas():
    p = profile()
    bw, lat = 1e6, 1e-4
    r = simulate_p3(p, 4, bw, lat, pipelined=False)
    parts = r["step_parts"]
    assert parts["sampling"] == pytest.approx(500 * 1e-6 + 1500 / bw + 1 * 3 * lat)
    assert parts["structure"] == pytest.approx(4 * 603 * 2e-6 + 3 * (603 * 4 + 8) / bw + 2 * lat)
    assert parts["model_parallel"] == pytest.approx(400 * 8 * 1e-7)  # A1 at F/K columns of each of K owners
    assert parts["data_parallel"] == pytest.approx(100 * 4 * 1e-7)
    assert parts["partials"] == pytest.approx(600 * 4 / bw + lat) == parts["gradients"]
    allreduce = 2 * 3 / 4 * 200 / bw + 2 * 3 * lat
    assert parts["allreduce"] == pytest.approx(allreduce)
    train = parts["model_parallel"] + parts["partials"] + parts["data_parallel"] + parts["gradients"]
    assert r["epoch_seconds"] == pytest.approx(10 * (max(parts["prepare"], train) + allreduce))
    # --topology replicated: the run sent no sampling requests, so sampling waits on no one
    replicated = simulate_p3(profile(sample_bytes=0.0), 4, bw, lat, pipelined=False)["step_parts"]["sampling"]
    assert replicated == pytest.approx(500 * 1e-6)
    off = simulate_p3(profile(prefetch=False), 4, bw, lat, pipelined=False)
    assert off["epoch_seconds"] == pytest.approx(10 * (parts["prepare"] + train + allreduce))
    # pipelined: the next batch's partials (2.5 ms) under this one's data-parallel compute (0.04 ms)
    pipe = simulate_p3(profile(prefetch=False), 4, bw, lat, pipelined=True)
    mp, pa, dp, gr = (parts[x] for x in ("model_parallel", "partials", "data_parallel", "gradients"))
    expected = 10 * (mp + gr) + pa + 9 * max(pa, dp) + dp
    assert pipe["epoch_seconds"] == pytest.approx(10 * (parts["prepare"] + allreduce) + expected)
    assert train_seconds(10, mp, pa, dp, gr, True) == pytest.approx(expected)


@pytest.mark.parametrize("prefetch", [True, False])
def test_pipelined_is_never_longer_and_equal_when_nothing_overlaps(prefetch):
    for order in ("global", "local"):
        for bw in (1e5, 1.25e8, 1.25e9, INF):
            for k in (1, 2, 3, 4, 8, 16):
                p = profile(order=order, prefetch=prefetch)
                plain, pipe = (simulate_p3(p, k, bw, 5e-5, on)["epoch_seconds"] for on in (False, True))
                assert pipe <= plain * (1 + 1e-12)
                if k == 1:  # no partials to overlap
                    assert pipe == pytest.approx(plain, rel=1e-12)
        # no data-parallel work (every arc in layer 1), or partials that take no time: equal
        flat = profile(order=order, prefetch=prefetch, arcs=800.0)
        assert simulate_p3(flat, 4, 1e6, 1e-4, True)["epoch_seconds"] == pytest.approx(
            simulate_p3(flat, 4, 1e6, 1e-4, False)["epoch_seconds"], rel=1e-12
        )
        free = profile(order=order, prefetch=prefetch)
        assert simulate_p3(free, 4, INF, 0.0, True)["epoch_seconds"] == pytest.approx(
            simulate_p3(free, 4, INF, 0.0, False)["epoch_seconds"], rel=1e-12
        )
    # and with something to overlap, strictly shorter
    slow = profile(prefetch=False)
    assert (
        simulate_p3(slow, 4, 1e6, 0.0, True)["epoch_seconds"]
        < simulate_p3(slow, 4, 1e6, 0.0, False)["epoch_seconds"]
    )


def test_g3_simulate_reproduces_a_real_p3_run_at_its_worker_count(store, partitions, tmp_path):
    sampling = flags(strategy="p3", hidden=6, fanouts="3,2", batch_size=40, batch_order="global")
    plan, run = g3_plan(partitions("p3", 2), tmp_path / "plan", *sampling), tmp_path / "run"
    ok(["train", plan, *flags(epochs=1, workers=2, eval_every=0, threads=1), "-o", run])
    ok(["simulate", plan, "--run", run, "--bandwidth", "1Gbit", "-o", tmp_path / "sim"])
    sim = json.loads((tmp_path / "sim" / "simulate.json").read_text())
    assert [s["system"] for s in sim["systems"]] == ["p3", "p3-pipelined"]
    assert [row["workers"] for row in sim["scaling"]] == [2, 4, 8, 16]
    assert all(set(row["systems"]) == {"p3", "p3-pipelined"} for row in sim["scaling"])
    # at the run's K the modelled bytes are the ones its (only) epoch measured
    last = records(run)[-1]
    phases = ("sample", "sample-ids", "structure-sizes", "structure", "partials", "gradients")
    measured = sum(w["bytes_sent_per_phase"].get(ph, 0) for w in last["workers"] for ph in phases)
    assert sum(w["bytes_sent"] for w in last["workers"]) == measured  # nothing else moved in training
    assert sim["systems"][0]["bytes_per_epoch"] == measured
    prof = P3Profile(**sim["rates"]["profile"])
    assert prof.replicated == 6 + (2 * 6 * 4 + 4)  # layer 1's bias and layer 2 (SAGE, 4 classes); W1 sharded
    # a one-worker record cannot calibrate the split: one line, exit 2
    one = tmp_path / "one"
    one.mkdir()
    for name in ("run.json", "init.pt"):
        (one / name).write_bytes((run / name).read_bytes())
    from stages.common.artifact_json import sealed

    rec = sealed({**last, "workers": last["workers"][:1]})  # a record g3 could have written (sealed)
    (one / "metrics.jsonl").write_text(json.dumps(rec) + "\n")
    r = invoke(["simulate", str(plan), "--run", str(one), "-o", str(tmp_path / "sim1")])
    assert (
        r.exit_code == 2 and "two or more workers" in r.output and len(r.output.strip().splitlines()) == 1
    ), r.output


def test_scaled_profile_keeps_the_run_at_k0():
    """At the profiled K the scale factors are 1: the modelled counts are the run's."""
    p = profile(workers=4)
    r = simulate_p3(p, 4, INF, 0.0, pipelined=False)
    assert r["bytes_per_step"]["sample"] == p.sample_bytes
    assert r["bytes_per_step"]["partials"] == 3 * p.dst1 * p.hidden * 4
