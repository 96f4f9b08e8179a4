"""`g3 train` knobs are declared once (stages/common/knobs.py; a strategy's knobs are a dataclass of them) and every
place that takes or reads one is generated from the declarations: a knob added to one strategy's knobs appears in
`g3 train --help`, is checked, resolved to its default, refused by other strategies, taken by the Python API and
`g3 bench`, written to run.json, put on `g3 advise`'s commands and reset by `g3 eval`."""

from __future__ import annotations

import dataclasses
import importlib
import types

import pytest
from helpers import g3_partition, g3_plan, invoke

from stages.common.errors import G3InputError
from stages.common.knobs import TrainKnob, at_least_one, knob
from stages.strategies.registry import STRATEGIES, config_record, knob_declarations, resolve_knobs

FIXTURE = TrainKnob(
    "fixture_rounds",
    int,
    3,
    metavar="N",
    check=at_least_one,
    help="Rounds of the fixture strategy's made-up mechanism.",
)


@pytest.fixture
def fixture_knob(monkeypatch):
    """The g3 strategy's entry with one more knob, and the `g3 train` command built again from the registry."""
    import g3cli.train_cmd

    g3 = STRATEGIES["g3"]
    fixture_knobs = dataclasses.make_dataclass(
        "FixtureKnobs", [("fixture_rounds", int, knob(FIXTURE))], bases=(g3.knobs,), frozen=True
    )
    with monkeypatch.context() as m:
        m.setitem(STRATEGIES, "g3", dataclasses.replace(g3, knobs=fixture_knobs))
        importlib.reload(g3cli.train_cmd)
        yield STRATEGIES["g3"]
    importlib.reload(g3cli.train_cmd)
    assert "fixture_rounds" not in knob_declarations()


@pytest.fixture(scope="module")
def plans(tiny_store, tmp_path_factory):
    """A g3 plan and a distdgl plan of the tiny graph (2 workers)."""
    tmp = tmp_path_factory.mktemp("knobs")
    part = g3_partition(tiny_store, tmp / "part", 2, method="metis")
    for strategy in ("g3", "distdgl"):
        g3_plan(part, tmp / strategy, strategy=strategy)
    return tmp


def test_a_knob_declared_in_one_entry_reaches_the_cli(fixture_knob, plans):
    r = invoke(["train", "--help"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert (
        "--fixture-rounds N [g3 plans; default 3] Rounds of the fixture strategy's made-up mechanism." in text
    )
    for args, what in [
        (["g3", "--fixture-rounds", "0"], "--fixture-rounds must be >= 1"),
        (["g3", "--fixture-rounds", "x"], "'x' is not a valid integer"),
        (
            ["distdgl", "--fixture-rounds", "2"],
            "--fixture-rounds does not apply to the distdgl strategy of this plan (it applies to g3)",
        ),
    ]:
        r = invoke(["train", str(plans / args[0]), *args[1:], "-o", str(plans / "run")])
        assert r.exit_code == 2 and what in r.output, (args, r.output)
        assert not (plans / "run").exists()


def test_a_knob_declared_in_one_entry_reaches_the_api_run_json_and_eval(fixture_knob):
    from g3.api import _options
    from stages.eval.run import _inference_config
    from stages.train.run import TrainConfig

    cfg = _options(TrainConfig, "train", {"epochs": 2, "fixture_rounds": 5})
    assert cfg.knobs == {"fixture_rounds": 5}
    with pytest.raises(G3InputError, match="fixture_rounds must be int | None, not str"):
        _options(TrainConfig, "train", {"fixture_rounds": "5"})
    with pytest.raises(G3InputError, match="no option 'fixture_round'"):
        _options(TrainConfig, "train", {"fixture_round": 5})

    knobs = resolve_knobs(cfg.knobs, fixture_knob)  # the strategy's typed knobs, its other knobs at defaults
    assert knobs.fixture_rounds == 5 and knobs.pipeline == "multi" and knobs.prefetch == "auto"
    assert cfg.knobs["pipeline"] == "multi"  # resolved in place: run.json records what the run used
    assert resolve_knobs(TrainConfig().knobs, fixture_knob).fixture_rounds == 3
    with pytest.raises(
        G3InputError,
        match="--fixture-rounds does not apply to the distdgl strategy of this plan "
        r"\(it applies to g3\)",
    ):
        resolve_knobs({"fixture_rounds": 5}, STRATEGIES["distdgl"])

    record = config_record(cfg)  # run.json's config: one key per knob
    assert record["fixture_rounds"] == 5 and "knobs" not in record
    assert dataclasses.replace(cfg, epochs=3).knobs["fixture_rounds"] == 5  # a copy keeps it ...
    again = dataclasses.replace(cfg, knobs={**cfg.knobs, "fixture_rounds": 7})
    assert again.knobs["fixture_rounds"] == 7 and cfg.knobs["fixture_rounds"] == 5  # ... a change stays there
    evaluated = _inference_config({"config": record})  # eval: every knob its strategy's default
    assert evaluated.knobs == {}


def test_a_knob_declared_in_one_entry_reaches_bench_and_advise(fixture_knob):
    from stages.advise import train_command
    from stages.bench.runs import candidate_configs, parse_spec

    spec = parse_spec("g3{fixture_rounds=4}")
    bench = types.SimpleNamespace(
        bin_size=None, device_memory=None, pipeline="multi", epochs=1, lr=0.01, dropout=0.5
    )
    options, train = candidate_configs(bench, spec)
    assert train["knobs"]["fixture_rounds"] == 4 and "fixture_rounds" not in options
    with pytest.raises(G3InputError, match=r"g3 does not take fixture_rounds=0 \(must be >= 1\)"):
        parse_spec("g3{fixture_rounds=0}")
    with pytest.raises(G3InputError, match="distdgl has no option 'fixture_rounds'"):
        parse_spec("distdgl{fixture_rounds=4}")
    assert (
        train_command("P", None, {"fixture_rounds": 4, "feature_cache": False}, 2)
        == "g3 train P --fixture-rounds 4 --no-feature-cache"
    )


def test_every_knob_is_declared_alike_by_the_strategies_that_share_it():
    """One name, one type and one flag (the CLI option is shared); a text knob's values are its choices or its
    check's."""
    for name, uses in knob_declarations().items():
        assert len({k.type for _, k in uses}) == 1, name
        assert all(k.type is not bool or not k.choices for _, k in uses), name
        for info, declared in uses:
            assert declared.problem(declared.default) is None, (
                info.name,
                name,
            )  # its own default is a value it takes


def test_a_strategy_knob_value_outside_every_declaration_is_refused(plans):
    for args, what in [
        (["--pipeline", "p4"], "'p4' is not one of 'none', 'intra', 'inter', 'multi', 'p3'"),
        (["--prefetch", "soon"], "--prefetch soon is not one of auto, on, off or a step count >= 0"),
        (["--launch-sigma", "inf"], "--launch-sigma must be a finite number >= 0"),
        (["--task-nodes", "0"], "--task-nodes must be >= 1"),
    ]:
        r = invoke(["train", str(plans / "g3"), *args, "-o", str(plans / "run")])
        assert r.exit_code == 2 and what in r.output, (args, r.output)
    r = invoke(["train", str(plans / "distdgl"), "--pipeline", "none", "-o", str(plans / "run")])
    assert (
        r.exit_code == 2
        and "--pipeline does not apply to the distdgl strategy of this plan (it applies to g3, neutrontp, p3)"
        in r.output
    ), r.output
