"""`g3 advise`: on the tiny synthetic graph at K = 2, the ranking is g3 simulate's prediction from this machine's
profile and calibration runs (recomputed here), it moves with the link rate as the model says, memory decides
what fits, refusals carry their reason, --plans gives plans `g3 train` runs, caches are reused, bad input is one
line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import advise

from stages.advise import ADVISE_SCHEMA, ADVISE_VERSION, AdviseOptions
from stages.strategies.registry import STRATEGIES

STRATS = ("g3", "bns-gcn", "neutrontp", "distdgl", "clustergcn")
LINKS = ("10mbit", "10gbit")
AT_1GBIT = dict(workers=(2,), links=("1gbit",))  # the later calls: K = 2 at one link rate
KEYS = (
    "strategy",
    "workers",
    "link",
    "predicted_epoch_seconds",
    "bytes_per_epoch",
    "peak_memory_bytes",
    "fits",
    "reason",
    "plan",
    "rank",
    "status",
)


@pytest.fixture(scope="module")
def advice(tiny_store, tmp_path_factory):
    root = tmp_path_factory.mktemp("advise")
    return root, advise(
        tiny_store, root, "out", workers=(2,), links=LINKS, device_memory="1GiB", strategies=STRATS
    )


def _predicted(result, link=None):
    return [e for e in result["ranking"] if e["status"] == "ok" and (link is None or e["link"] == link)]


def test_advise_json_has_the_schema_and_every_candidate(advice):
    root, result = advice
    on_disk = json.loads((root / "out" / "advise.json").read_text())
    assert on_disk["schema"] == ADVISE_SCHEMA and on_disk["schema_version"] == ADVISE_VERSION
    ranking = on_disk["ranking"]
    want = {(s, v.label, link) for s in STRATS for v in STRATEGIES[s].advise_variants for link in LINKS}
    assert {(e["strategy"], e["variant"], e["link"]) for e in ranking} == want
    for e in ranking:
        assert all(k in e for k in KEYS), e
        assert Path(e["plan"], "plan.json").is_file()
        assert e["train_command"].startswith(f"g3 train {e['plan']} --emulate-link {e['link']}")
    assert [e["rank"] for e in ranking] == list(range(1, len(ranking) + 1))
    # clustergcn is predicted by its own model, calibrated on its own short run
    cgcn = [e for e in ranking if e["strategy"] == "clustergcn"]
    assert cgcn and all(
        e["status"] == "ok" and e["simulated_system"] == "clustergcn" and e["predicted_epoch_seconds"] > 0
        for e in cgcn
    )
    # the profile and the mini-batch strategies' runs were made on this machine
    assert on_disk["calibration"]["profile"]["status"] == "ok"
    # (and the runs that fit neutrontp's and bns-gcn's compute speed, one per plan variant:
    # test_neutrontp_computes_at_the_speed_its_own_run_shows)
    runs = on_disk["calibration"]["runs"]
    assert {r["strategy"]: r["status"] for r in runs} == {
        "distdgl": "ok",
        "clustergcn": "ok",
        "neutrontp": "ok",
        "bns-gcn": "ok",
    }
    assert sorted(r["strategy"] for r in runs if r.get("purpose") == "compute speed") == [
        "bns-gcn",
        "bns-gcn",
        "neutrontp",
    ]


def test_the_order_is_the_predicted_epoch_and_the_prediction_is_the_simulators(advice):
    _, result = advice
    ok = _predicted(result)
    assert len(ok) == 2 * 8  # 2 links x (g3: 2, bns-gcn: 2, neutrontp: 2, distdgl: 1, clustergcn: 1)
    times = [e["predicted_epoch_seconds"] for e in ok]
    assert times == sorted(times)
    assert ok[0]["reason"].startswith("fastest predicted epoch")
    assert all(
        e["reason"].split(";")[1].strip().split(":")[0]
        in ("communication-bound", "compute-bound", "overhead-bound", "mixed")
        for e in ok
    )
    # recompute one candidate with g3 simulate's own entry point and the profile advise recorded (bns-gcn at the
    # compute speed its own run fitted; test_neutrontp_computes_at_the_speed_its_own_run_shows)
    from stages.simulate import SimulateOptions, simulate_plan

    e = next(
        x
        for x in ok
        if x["strategy"] == "bns-gcn"
        and x["link"] == "10mbit"
        and x["plan_options"]["boundary_sample"] == "1"
    )
    speed = e["compute_speed"]
    prof = result["calibration"]["profile"]["path"]
    sim, _ = simulate_plan(
        e["plan"],
        SimulateOptions(
            workers=2,
            bandwidth=10e6 / 8,
            profile=prof,
            scaling=(),
            worker_speed=(speed, speed),
            cache=str(Path(prof).parent / "simcache-test"),
        ),
    )
    system = next(s for s in sim["systems"] if s["system"] == e["simulated_system"])
    assert e["model_epoch_seconds"] == pytest.approx(system["epoch_seconds"], rel=1e-9)
    assert e["bytes_per_epoch"] == system["bytes_per_epoch"]
    # the anchor: what the model missed on its own calibration run, at that run's K (per epoch)
    check = next(
        r
        for r in result["calibration"]["runs"]
        if r["strategy"] == "bns-gcn" and r["plan_options"] == e["plan_options"]
    )["model_check"]
    assert e["model_check_error"] == pytest.approx(check["error"])
    residual = check["measured_epoch_seconds"] - check["predicted_epoch_seconds"]
    assert e["predicted_epoch_seconds"] == pytest.approx(
        max(e["model_epoch_seconds"] + residual, e["model_epoch_seconds"] / 2), rel=1e-9
    )
    # a sampling strategy's: from its own run, which the anchored model reproduces at the run's K and network
    d = next(x for x in ok if x["strategy"] == "distdgl")
    run = next(r for r in result["calibration"]["runs"] if r["strategy"] == "distdgl")["model_check"]
    assert d["model_check_error"] == pytest.approx(run["error"])
    assert (
        run["measured_epoch_seconds"] + d["model_epoch_seconds"] - run["predicted_epoch_seconds"]
        == pytest.approx(d["predicted_epoch_seconds"], rel=1e-9)
        or d["anchor_seconds"] < 0
    )


def test_neutrontp_computes_at_the_speed_its_own_run_shows(advice):
    """neutrontp's kernels are not the ones the bins profile times: a run of its own plan fits one compute speed
    (the model's busy seconds over the run's compute seconds), at which the model computes exactly what the run
    computed, and its candidates are predicted at that speed and anchored on that run, not on the profile's."""
    from stages.simulate import SimulateOptions, simulate_plan

    _, result = advice
    fit_run = next(r for r in result["calibration"]["runs"] if r["strategy"] == "neutrontp")
    assert fit_run["purpose"] == "compute speed"
    fit = fit_run["speed_fit"]
    assert fit["speed"] == pytest.approx(fit["modelled_compute_seconds"] / fit["measured_compute_seconds"])
    # the run's own record: mean compute_seconds per worker over the epochs after the first
    records = [json.loads(line) for line in Path(fit_run["run"], "metrics.jsonl").read_text().splitlines()]
    per_epoch = [sum(w["compute_seconds"] for w in r["workers"]) / len(r["workers"]) for r in records[1:]]
    assert fit["measured_compute_seconds"] == pytest.approx(sum(per_epoch) / len(per_epoch), rel=1e-9)
    prof = result["calibration"]["profile"]["path"]

    def simulated(plan, speed, bandwidth):
        opts = SimulateOptions(
            workers=2,
            bandwidth=bandwidth,
            profile=prof,
            scaling=(),
            worker_speed=None if speed is None else (speed, speed),
            cache=str(Path(prof).parent / "simcache-test"),
        )
        sim, _ = simulate_plan(plan, opts)
        return next(s for s in sim["systems"] if s["system"] == fit["system"])

    # at the fitted speed the model's compute is the run's (the calibration ran on the loopback: no limit)
    at_speed = simulated(fit_run["plan"], fit["speed"], float("inf"))
    assert at_speed["busy_mean"] == pytest.approx(fit["measured_compute_seconds"], rel=1e-6)
    if abs(fit["speed"] - 1) > 0.05:  # and not at the profile's own speed
        assert simulated(fit_run["plan"], None, float("inf"))["busy_mean"] != pytest.approx(
            fit["measured_compute_seconds"], rel=0.04
        )
    ntp = [e for e in _predicted(result) if e["strategy"] == "neutrontp"]
    assert ntp and all(e["compute_speed"] == pytest.approx(fit["speed"]) for e in ntp)
    # every strategy that fits its speed, each variant its own run's; the others run at the profile's rates
    fitted = {
        (r["strategy"], json.dumps(r["plan_options"], sort_keys=True)): r["speed_fit"]["speed"]
        for r in result["calibration"]["runs"]
        if r.get("purpose") == "compute speed"
    }
    for e in _predicted(result):
        if STRATEGIES[e["strategy"]].fits_own_speed:
            assert (
                e["compute_speed"] == fitted[(e["strategy"], json.dumps(e["plan_options"], sort_keys=True))]
            )
        else:
            assert e["compute_speed"] is None
    for e in ntp:  # the prediction is the simulator's at that speed, anchored on neutrontp's own run
        system = simulated(e["plan"], fit["speed"], 10e6 / 8 if e["link"] == "10mbit" else 10e9 / 8)
        if e["simulated_system"] == fit["system"]:
            assert e["model_epoch_seconds"] == pytest.approx(system["epoch_seconds"], rel=1e-9)
        assert e["model_check_error"] == pytest.approx(fit_run["model_check"]["error"])


def test_a_slower_link_slows_the_communication_heavy_candidates_most(advice):
    """From 10 Gbit/s to 10 Mbit/s every epoch grows, and broadly by more the more bytes the candidate sends (with
    links shared fairly, a candidate whose messages overlap well can grow less than one sending a little fewer
    bytes: the order is checked between byte counts at least twice apart); the candidate that sends the most
    falls furthest. The slow link is slow enough that no candidate's compute hides its messages: at 100 Mbit/s
    distdgl's 0.4 MB per epoch were hidden behind the sampling its calibration run measured on a loaded machine."""
    _, result = advice
    fast = {(e["strategy"], e["variant"]): e for e in _predicted(result, "10gbit")}
    slow = {(e["strategy"], e["variant"]): e for e in _predicted(result, "10mbit")}
    assert fast.keys() == slow.keys()
    grow = {key: slow[key]["predicted_epoch_seconds"] - fast[key]["predicted_epoch_seconds"] for key in fast}
    sent = {key: fast[key]["bytes_per_epoch"] for key in fast}
    assert all(g > 0 for g in grow.values())
    # bytes_per_epoch leaves the gradient all-reduce out: clustergcn sends nothing else (0 bytes) and grows by its
    # per-step all-reduce alone (tests/test_simulate_clustergcn.py), so it has no place in this order
    sending = [k for k in fast if sent[k] > 0]
    by_bytes = sorted({sent[k] for k in sending})
    growth_at = {b: max(grow[k] for k in sending if sent[k] == b) for b in by_bytes}
    for small in by_bytes:  # more bytes (twice or more), more growth
        for large in by_bytes:
            if large >= 2 * small:
                assert growth_at[large] > growth_at[small], (small, large, growth_at)
    heaviest = max(fast, key=sent.get)
    assert grow[heaviest] == max(grow.values())
    assert "10mbit" in slow[heaviest]["reason"]


def test_time_to_target_takes_the_same_optimizer_steps_or_the_same_epochs(advice, tiny_store):
    """'steps' (the default): a mini-batch candidate with S updates an epoch needs ceil(target / S) epochs, a
    full-graph one the target; 'epochs': every candidate the target. Time to target = those epochs x epoch."""
    import math

    from stages.advise import epochs_to_target

    steps_model = AdviseOptions(target_epochs=100)
    assert epochs_to_target({"epoch_seconds": 1.0}, steps_model) == 100  # full graph: one step an epoch
    assert epochs_to_target({"steps": 7}, steps_model) == 15  # ceil(100 / 7)
    assert epochs_to_target({"steps": 7, "optimizer_steps": 5}, steps_model) == 20  # the updates it takes
    assert epochs_to_target({"steps": 300}, steps_model) == 1
    assert epochs_to_target({"steps": 7}, AdviseOptions(target_epochs=100, convergence="epochs")) == 100
    root, result = advice
    assert result["time_to_target"]["model"] == "steps"
    target = result["time_to_target"]["epochs"]
    families = set()
    for e in _predicted(result):
        steps = e["optimizer_steps_per_epoch"]
        families.add(e["family"])
        assert e["epochs_to_target"] == math.ceil(target / steps) and (
            steps == 1 or e["family"] == "mini-batch"
        )
        assert e["time_to_target_seconds"] == pytest.approx(
            e["predicted_epoch_seconds"] * e["epochs_to_target"]
        )
    assert {"full-graph", "mini-batch"} <= families
    by_epochs = dict(strategies=("g3", "distdgl"), convergence="epochs", target_epochs=40)
    same = advise(tiny_store, root, "epochs", **AT_1GBIT, device_memory="1GiB", **by_epochs)
    assert same["time_to_target"]["model"] == "epochs"
    for e in _predicted(same):
        assert e["epochs_to_target"] == 40
        assert e["time_to_target_seconds"] == pytest.approx(e["predicted_epoch_seconds"] * 40)


def test_too_little_device_memory_is_refused_or_ranked_after_what_fits(advice, tiny_store):
    root, first = advice
    strategies = ("g3", "bns-gcn", "distdgl")
    result = advise(tiny_store, root, "small", **AT_1GBIT, device_memory="2MiB", strategies=strategies)
    ranking = result["ranking"]
    fits = [e for e in ranking if e["fits"]]
    not_fit = [e for e in ranking if e["fits"] is False]
    assert fits and not_fit
    assert all(e["peak_memory_bytes"] <= 2 * 2**20 for e in fits)
    assert all(e["peak_memory_bytes"] > 2 * 2**20 for e in not_fit)
    assert {e["strategy"] for e in fits} == {
        "g3"
    }  # g3 sizes its bins by the device; the others hold a partition
    assert max(e["rank"] for e in fits) < min(e["rank"] for e in not_fit)
    for e in not_fit:
        assert e["status"] == "does not fit" and e["reason"].startswith("does not fit: needs")
        assert (
            e["predicted_epoch_seconds"] is not None
        )  # still predicted, for what a bigger device would give
    # the distdgl run of the first call was reused, not made again
    assert not any("distdgl" in m and m.endswith(".run") for m in result["cache"]["made"])
    assert any(m.endswith(".run") and "distdgl" in m for m in result["cache"]["reused"])


def test_gat_is_refused_by_the_strategies_that_do_not_train_it(advice, tiny_store):
    root, _ = advice
    result = advise(tiny_store, root, "gat", **AT_1GBIT, model="gat", strategies=("neutrontp", "p3"))
    assert result["ranking"] and all(e["status"] == "refused" for e in result["ranking"])
    assert all("does not train gat" in e["reason"] for e in result["ranking"])
    assert result["calibration"]["profile"] is None and result["calibration"]["runs"] == []


def test_the_budget_bounds_the_calibration_runs(advice, tiny_store):
    root, _ = advice
    result = advise(tiny_store, root, "budget", **AT_1GBIT, strategies=("distdgl", "bytegnn"), budget=1e-6)
    status = {r["strategy"]: r["status"] for r in result["calibration"]["runs"]}
    assert status == {"distdgl": "ok", "bytegnn": "skipped (budget)"}  # distdgl's run is the cached one
    skipped = next(e for e in result["ranking"] if e["strategy"] == "bytegnn")
    assert skipped["status"] == "not predicted" and "--budget" in skipped["reason"]


def test_a_plan_from_plans_trains(advice, tmp_path):
    from stages.train.config import TrainConfig
    from stages.train.run import run_train

    _, result = advice
    e = next(x for x in result["ranking"] if x["strategy"] == "bns-gcn" and x["status"] == "ok")
    info = run_train(e["plan"], TrainConfig(epochs=1, eval_every=0, live=False), out=tmp_path / "run")
    assert info["plan"]["num_workers"] == 2


@pytest.mark.parametrize(
    "args, says",
    [
        (["--link", "3zbit"], "--link"),
        (["--workers", "0"], "--workers"),
        (["--workers", "two"], "--workers"),
        (["--strategies", "nope"], "--strategies"),
        (["--device-memory", "lots"], "--device-memory"),
        (["--calibrate-link", "fast"], "--calibrate-link"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli_runner, tiny_store, tmp_path, args, says):
    from g3cli.main import cli

    r = cli_runner.invoke(cli, ["advise", str(tiny_store), "-o", str(tmp_path / "o"), *args])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("g3: error:") and says in lines[0]


def test_an_earlier_advice_is_not_replaced_without_force(advice, cli_runner, tiny_store):
    from g3cli.main import cli

    root, _ = advice
    before = (root / "out" / "advise.json").read_bytes()
    r = cli_runner.invoke(cli, ["advise", str(tiny_store), "-o", str(root / "out")])
    assert r.exit_code == 2 and "--force" in r.output
    assert (root / "out" / "advise.json").read_bytes() == before
    r = cli_runner.invoke(cli, ["advise", "/nonexistent/store", "-o", str(root / "x")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1


def test_the_python_facade_advises_as_the_command(advice, tiny_store):
    import g3

    root, _ = advice
    result = g3.advise(
        tiny_store,
        workers=2,
        link=("100mbit", "10gbit"),
        strategies="g3,distdgl",
        device_memory="1GiB",
        plans=str(root / "plans"),
        cache=str(root / "cache"),
        calibrate_link="local",
        out=root / "api",
    )
    assert {e["strategy"] for e in result["ranking"]} == {"g3", "distdgl"}
    assert {e["link"] for e in result["ranking"]} == {"100mbit", "10gbit"}
    # partitions, plans and calibration runs of the first call are reused, nothing is made again
    assert result["cache"]["made"] == [] and any(".plan-g3-" in m for m in result["cache"]["reused"])
    assert json.loads((root / "api" / "advise.json").read_text())["ranking"] == result["ranking"]
    with pytest.raises(g3.G3InputError, match="--link"):
        g3.advise(tiny_store, link="fast", out=root / "api2")


def test_calibrate_link_auto_uses_emulated_hosts_only_where_they_can_be_built(monkeypatch):
    from stages.advise import AUTO_CALIBRATE_LINK, resolve_calibrate_link
    from stages.kits.runtime.launch import netemu

    monkeypatch.setattr(netemu, "why_not_available", lambda: None)
    assert resolve_calibrate_link("auto") == AUTO_CALIBRATE_LINK
    monkeypatch.setattr(netemu, "why_not_available", lambda: "network namespaces need root or CAP_NET_ADMIN")
    assert resolve_calibrate_link("auto") is None
    assert resolve_calibrate_link("local") is None and resolve_calibrate_link("1gbit") == "1gbit"


def test_a_damaged_store_is_refused_before_calibration_naming_the_array(cli_runner, tiny_store, tmp_path):
    """One damaged chunk: one line naming the array, exit 2, nothing written — not every candidate "refused"."""
    import shutil

    from g3cli.main import cli

    store = tmp_path / "tiny"
    shutil.copytree(tiny_store, store)
    chunk = max(
        (p for p in (store / "indices").rglob("*") if p.is_file() and p.name != "zarr.json"),
        key=lambda p: p.stat().st_size,
    )
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    chunk.write_bytes(bytes(data))
    r = cli_runner.invoke(cli, ["advise", str(store), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "indices" in lines[0] and "Traceback" not in r.output, r.output
    assert not (tmp_path / "o").exists()
