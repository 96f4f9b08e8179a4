"""Adding a strategy is one folder and one registration: the fixture strategy of tests/fixture_strategy/ (its spec,
planner, runtime and knobs), registered as stages/strategies/__init__.py registers the nine, is found by `g3 plan
--help` and `g3 train --help`, planned and trained through the Python API, evaluated, simulated, advised on and
benchmarked, without a line of any stage naming it."""

from __future__ import annotations

import importlib
import socket
import types

import pytest
from fixture_strategy import spec as fixture
from test_train import invoke

from stages.strategies.registry import STRATEGIES


@pytest.fixture(scope="module")
def registered():
    """The registry with the fixture strategy, and the CLI's commands built again from it."""
    import g3cli.plan_cmd
    import g3cli.train_cmd

    with pytest.MonkeyPatch.context() as m:
        m.setitem(STRATEGIES, fixture.SPEC.name, fixture.SPEC)  # what register(fixture) does, undone after
        importlib.reload(g3cli.plan_cmd)
        importlib.reload(g3cli.train_cmd)
        yield fixture.SPEC
    importlib.reload(g3cli.plan_cmd)
    importlib.reload(g3cli.train_cmd)
    assert "fixture" not in STRATEGIES


@pytest.fixture(scope="module")
def trained(registered, tiny_store, tmp_path_factory):
    """A 2-epoch run of a fixture plan through the Python API, its one rank in this process (a torchrun rank: the
    fork server's workers know only the registered strategies)."""
    import g3

    tmp = tmp_path_factory.mktemp("fixture")
    part = g3.partition(tiny_store, 1, method="metis", out=tmp / "part")
    plan = g3.plan(part, strategy="fixture", hidden=8, out=tmp / "plan", fixture_note="loud")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    with pytest.MonkeyPatch.context() as m:
        for key, value in env.items():
            m.setenv(key, value)
        run = g3.train(plan, out=tmp / "run", epochs=2, eval_every=0, fixture_rounds=3)
    return types.SimpleNamespace(tmp=tmp, part=part, plan=plan, run=run)


def test_the_cli_offers_its_plan_option_and_its_knob(registered):
    r = invoke(["plan", "--help"])
    assert r.exit_code == 0 and "fixture" in r.output and "--fixture-note" in r.output, r.output
    r = invoke(["train", "--help"])
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "--fixture-rounds N [fixture plans; default 1]" in text, r.output


def test_the_api_plans_and_trains_it_and_its_runtime_reads_its_knob(trained):
    import json

    plan = json.loads((trained.plan / "plan.json").read_text())
    assert plan["strategy"] == {"name": "fixture", "options": {"fixture_note": "loud", "device_memory": None}}
    run = json.loads((trained.run.path / "run.json").read_text())
    assert run["status"] == "completed" and run["config"]["fixture_rounds"] == 3
    assert "fixture rounds 3" in (trained.run.path / "logs" / "rank-00000.log").read_text()
    r = invoke(["train", str(trained.plan), "--pipeline", "none", "-o", str(trained.tmp / "other")])
    assert r.exit_code == 2 and "--pipeline does not apply to the fixture strategy" in r.output, r.output


def test_eval_evaluates_a_run_of_it(trained):
    import g3

    result = g3.evaluate(trained.run.path)  # one worker: in this process, with the fixture's runtime
    assert result["strategy"] == "fixture" and 0.0 <= result["accuracy"]["test"] <= 1.0


def test_simulate_runs_its_bins_system_beside_g3s(trained):
    from stages.simulate import SimulateOptions, simulate_plan

    result, _ = simulate_plan(trained.plan, SimulateOptions(scaling=(1,), cache=str(trained.tmp / "cache")))
    assert "fixture" in {s["system"] for s in result["systems"]} and "fixture" in result["baselines"]


def test_advise_and_bench_take_it(registered):
    from stages.advise import parse_strategies, train_command
    from stages.bench.runs import candidate_configs, parse_spec

    assert parse_strategies("fixture,g3") == ("fixture", "g3")
    assert train_command("P", None, {"fixture_rounds": 2}, 2) == "g3 train P --fixture-rounds 2"
    entry = parse_spec("fixture@chunk{fixture_note=loud,fixture_rounds=2}")
    bench = types.SimpleNamespace(
        bin_size=None, device_memory=None, pipeline="multi", epochs=1, lr=0.01, dropout=0.5
    )
    options, train = candidate_configs(bench, entry)
    assert (
        options == {"device_memory": None, "fixture_note": "loud"} and train["knobs"]["fixture_rounds"] == 2
    )
