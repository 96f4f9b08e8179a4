"""`g3 simulate` of a hopgnn plan (stages/strategies/hopgnn/simulate.py): the modelled bytes and times against their formulas
worked by hand, ``--merge auto`` as the runtime's rule on modelled epochs, the home share recovered from a merged
run's miss share, and `g3 simulate PLAN --run RUN` on a real two-worker run reproducing its measured bytes. Also
HopGNN's Table 1 script (examples/hopgnn_locality.py) against micrographs built one root at a time."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import flags, g3_plan, invoke, ok, records

from stages.kits.simulate.minibatch import MiniBatchProfile
from stages.strategies.hopgnn.simulate import (
    HopProfile,
    _home_share,
    auto_merged,
    miss_share,
    simulate_hopgnn,
)

INF = math.inf


def profiles(**hop) -> tuple[MiniBatchProfile, HopProfile]:
    p = MiniBatchProfile(
        strategy="hopgnn",
        workers=2,
        order="global",
        batch_size=100,
        fanouts=[5, 3],
        feat_dim=8,
        num_train=1000,
        num_params=50,
        arcs_per_step=1000,
        rows_per_step=200,
        remote_share=0.3,
        t_sample=0.0,
        t_gather=0.0,
        t_compute=1e-6,
        prefetch=True,
        measured_epoch_seconds=1.0,
    )
    h = HopProfile(
        **{
            "local_only": False,
            "pregather": True,
            "migrate": True,
            "merge": 0,
            "itemsize": 4,
            "home_share": 0.3,
            "dedup": 0.5,
            "away_share": 0.0,
            "merged_measured": 0,
            **hop,
        }
    )
    return p, h


def test_bytes_follow_the_formulas():
    p, h = profiles()
    r = simulate_hopgnn(p, h, 4, INF, 0.0, merged=0)
    # 10 iterations; per server 500 arcs and 100 rows; home share 0.3 at K0 = 2 -> 0.3 * (3/4) / (1/2) = 0.45
    assert r["steps"] == 10 and r["time_steps"] == 4 and r["miss_rate"] == pytest.approx(0.45)
    # 45 missed rows, 22.5 fetched once deduplicated; 8 float32 values a row; answers (3 + 1) * 8 per missed row
    assert r["feature_bytes_per_epoch"] == 10 * 22.5 * 8 * 4 * 4
    # 3 migrations a server and iteration of parameters and gradients: 2 * 50 values of 4 bytes
    assert r["migrated_bytes_per_epoch"] == 10 * 3 * 2 * 50 * 4 * 4
    assert r["bytes_per_epoch"] == 10 * 4 * (22.5 * 32 + 45 * 32 + 3 * 400)
    # two steps merged away: T = 2, half the roots away: 0.5 * 0.45 + 0.5 * (1 - 0.45 / 3) = 0.65; one migration
    m = simulate_hopgnn(p, h, 4, INF, 0.0, merged=2)
    assert m["time_steps"] == 2 and m["miss_rate"] == pytest.approx(0.65)
    assert m["migrated_bytes_per_epoch"] == 10 * 1 * 400 * 4
    assert m["feature_bytes_per_epoch"] == pytest.approx(10 * 4 * 100 * 0.65 * 0.5 * 32)
    # without pre-gathering every missed row is fetched
    _, off = profiles(pregather=False)
    assert simulate_hopgnn(p, off, 4, INF, 0.0, 0)["feature_bytes_per_epoch"] == 10 * 45 * 32 * 4
    # no migration: nothing migrates; local-only: one time step of ceil(100 / 4) own roots, nothing migrates
    _, still = profiles(migrate=False)
    assert simulate_hopgnn(p, still, 4, INF, 0.0, 0)["migrated_bytes_per_epoch"] == 0
    _, local = profiles(local_only=True)
    lo = simulate_hopgnn(p, local, 4, INF, 0.0, 3)
    assert (lo["steps"], lo["time_steps"], lo["migrated_bytes_per_epoch"], lo["merged_steps"]) == (
        10,
        1,
        0,
        0,
    )
    # one worker: nothing remote, nothing migrates
    one = simulate_hopgnn(p, h, 1, INF, 0.0, 0)
    assert one["bytes_per_epoch"] == 0 and one["miss_rate"] == 0.0


def test_times_follow_the_formulas():
    p, h = profiles()
    # no network: an iteration is its compute (500 arcs of 1 us)
    assert simulate_hopgnn(p, h, 4, INF, 0.0, 0)["epoch_seconds"] == pytest.approx(10 * 500e-6)
    # 1 ms latency: 4 sampling rounds + 1 pre-gathered fetch, 3 collectives each: 15 ms prepared under
    # 0.5 ms compute + 3 migrations of 1 ms; one ring all-reduce per iteration: 2 (K - 1) latencies
    r = simulate_hopgnn(p, h, 4, INF, 1e-3, 0)
    assert r["step_parts"]["rounds"] == 5 and r["step_parts"]["migrate"] == pytest.approx(3e-3)
    assert r["allreduce_seconds"] == pytest.approx(10 * 6e-3)
    assert r["epoch_seconds"] == pytest.approx(10 * (15e-3 + 6e-3))
    _, off = profiles(pregather=False)
    assert simulate_hopgnn(p, off, 4, INF, 1e-3, 0)["step_parts"]["rounds"] == 8  # a fetch per time step
    p.prefetch = False  # prepared in the step: the sum
    assert simulate_hopgnn(p, h, 4, INF, 1e-3, 0)["epoch_seconds"] == pytest.approx(
        10 * (15e-3 + 3.5e-3 + 6e-3)
    )
    # bandwidth: the migration's 400 bytes at 400 B/s take a second each
    p.prefetch, p.t_compute = True, 1.0
    assert simulate_hopgnn(p, h, 2, 400.0, 0.0, 0)["step_parts"]["migrate"] == pytest.approx(1.0)


def test_auto_merging_is_the_runtime_rule_on_modelled_epochs():
    p, h = profiles(merge="auto")
    # latency-bound: every merged step saves a sampling round and a migration -> merged down to one time step
    epochs = [simulate_hopgnn(p, h, 4, INF, 1e-3, m)["epoch_seconds"] for m in range(4)]
    assert epochs == sorted(epochs, reverse=True) and auto_merged(p, h, 4, INF, 1e-3) == 3
    # bandwidth-bound on wide features: merging only adds remote rows -> try one, go back to none
    p.feat_dim = 10_000
    assert (
        simulate_hopgnn(p, h, 4, 1e6, 0.0, 1)["epoch_seconds"]
        > simulate_hopgnn(p, h, 4, 1e6, 0.0, 0)["epoch_seconds"]
    )
    assert auto_merged(p, h, 4, 1e6, 0.0) == 0


def test_home_share_is_recovered_from_a_merged_runs_miss_share():
    p, h = profiles(home_share=0.2)
    p.workers = 4
    measured = miss_share(p, h, 4, 1)  # a = 1/4 of the roots away
    assert measured > 0.2 and _home_share(measured, 0.25, 4) == pytest.approx(0.2)
    assert _home_share(0.3, 0.0, 4) == 0.3 and _home_share(0.3, 0.5, 1) == 0.3


def test_profile_takes_the_home_share_from_unmerged_epochs(tmp_path):
    """--merge auto: the first epoch runs every root at home, so its miss share is s itself; a run that merged
    in every epoch has s solved from its miss share and away roots."""
    p, _ = profiles()

    def worker(rows, misses, fetched, away, merged):
        return {
            "source_rows": rows,
            "feature_misses": misses,
            "fetched_rows": fetched,
            "away_roots": away,
            "merged_steps": merged,
        }

    def profile(epochs):
        (tmp_path / "run.json").write_text(
            json.dumps(
                {
                    "schema": "g3.run",
                    "schema_version": 1,
                    "plan": {},
                    "status": "completed",
                    "config": {"dtype": "float64"},
                }
            )
        )
        (tmp_path / "metrics.jsonl").write_text(
            "\n".join(
                json.dumps({"epoch": e, "epoch_seconds": 1.0, "workers": w}) for e, w in enumerate(epochs)
            )
        )
        meta = {
            "strategy": {
                "options": {"batch_order": "global", "pregather": True, "migrate": True, "merge": "auto"}
            }
        }
        return HopProfile.from_run(tmp_path, meta, p)

    h = profile([[worker(100, 10, 5, 0, 0)] * 2, [worker(100, 50, 40, 250, 1)] * 2])
    assert (h.home_share, h.dedup, h.itemsize, h.merged_measured) == (0.1, 0.5, 8, 1)
    assert h.away_share == 500 / 1000  # the steady epoch's away roots over the training nodes
    # every epoch merged (K0 = 2 would leave s undetermined: take K0 = 4): s = (mu - a) / (1 - a K/(K-1))
    p.workers = 4
    h = profile([[worker(100, 40, 20, 125, 1)] * 2, [worker(100, 40, 20, 125, 1)] * 2])
    assert h.home_share == pytest.approx((0.4 - 0.25) / (1 - 0.25 * 4 / 3)) and h.dedup == 0.5


def test_g3_simulate_a_hopgnn_plan_from_its_run(partitions, tmp_path):
    sampling = flags(strategy="hopgnn", hidden=6, fanouts="3,2", batch_size=40, merge="off")
    plan, run = g3_plan(partitions("distdgl", 2), tmp_path / "plan", *sampling), tmp_path / "run"
    r = invoke(["simulate", str(plan), "-o", str(tmp_path / "s0")])
    assert r.exit_code == 2 and "--run RUN" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    ok(["train", plan, *flags(epochs=2, workers=2, dtype="float64", eval_every=0, threads=1), "-o", run])
    ok(["simulate", plan, "--run", run, "--scaling", "2,16", "-o", tmp_path / "sim", "--json"])
    sim = json.loads((tmp_path / "sim" / "simulate.json").read_text())
    measured = records(run)[-1]  # the one epoch after the first
    w = measured["workers"]
    at_k = sim["systems"][0]
    assert [s["system"] for s in sim["systems"]] == ["hopgnn"] and at_k["steps"] == measured["steps"]
    # at the run's K the model gives back the run's bytes: migration (float64: 8-byte values) and features
    assert at_k["migrated_bytes_per_epoch"] == sum(x["bytes_sent_per_phase"]["migrate"] for x in w)
    assert at_k["migrated_bytes_per_epoch"] == measured["steps"] * 2 * 2 * w[0]["model_values"] * 8
    assert abs(at_k["feature_bytes_per_epoch"] - sum(x["feature_bytes"] for x in w)) <= 1
    assert at_k["miss_rate"] == pytest.approx(
        sum(x["feature_misses"] for x in w) / sum(x["source_rows"] for x in w)
    )
    k16 = sim["scaling"][-1]
    assert k16["workers"] == 16 and k16["systems"]["hopgnn"]["time_steps"] == 16
    assert (
        k16["systems"]["hopgnn"]["migrated_bytes_per_epoch"]
        == measured["steps"] * 16 * 15 * 2 * w[0]["model_values"] * 8
    )


# --- examples/hopgnn_locality.py (Table 1 in shape) ------------------------------------------------------------
def test_locality_shares_equal_micrographs_built_one_root_at_a_time(store):
    from stages.common.store import GraphStore
    from stages.kits.runtime.neighbor_sampler import build_blocks

    path = Path(__file__).resolve().parents[1] / "examples" / "hopgnn_locality.py"
    spec = importlib.util.spec_from_file_location("hopgnn_locality", path)
    loc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loc)
    g = GraphStore.open(store)
    sample = loc.Sampler(g, seed=3)
    k, fanouts = 3, [3, 2]
    owner = np.random.default_rng(1).integers(0, k, g.num_nodes)
    batches = [np.array([5, 17, 40, 41, 99, 120, 200]), np.array([1, 2, 3, 150, 230])]
    micro, owned, sub_max = [], [], []
    for step, roots in enumerate(batches):

        def vertices(targets, step=step):
            blocks = build_blocks(
                targets, fanouts, lambda nodes, fanout, hop: sample(nodes, fanout, hop, step)
            )
            return np.unique(blocks[0].src)

        for root in roots:  # one micrograph: the root's own blocks
            v = vertices(np.array([root]))
            micro.append(np.mean(owner[v] == owner[root]))
        for w in range(k):  # the subgraph of the roots worker w owns
            mine = roots[owner[roots] == w]
            if len(mine):
                owned.append(np.mean(owner[vertices(mine)] == w))
        v = vertices(roots)
        sub_max.append(max(np.mean(owner[v] == w) for w in range(k)))
    got = loc.locality(owner, k, batches, fanouts, sample)
    assert got["R_micro"] == pytest.approx(np.mean(micro)) and got["R_owned"] == pytest.approx(np.mean(owned))
    assert got["R_sub_max"] == pytest.approx(np.mean(sub_max)) and got["R_sub_mean"] == pytest.approx(1 / k)
    assert got["R_micro"] > got["R_sub_mean"]  # a micrograph's vertices sit with its root more than 1/K do
