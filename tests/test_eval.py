"""`g3 eval` equals an independent accuracy computation (reference forward on the full graph).

:func:`assert_eval_is_independent` is called wherever a test already has a float64 run of a strategy (g3 here;
distdgl, bytegnn and clustergcn in tests/test_minibatch.py; bns-gcn and sancus in tests/test_strategies.py;
neutrontp in tests/test_neutrontp.py), so every strategy's evaluation is checked without extra training runs.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from reference import reference_forward
from test_train import invoke, pipeline, ref_graph

from g3cli.main import cli
from stages.common.store import GraphStore


def independent_accuracy(store_path, weights: dict, model: str) -> dict:
    graph = ref_graph(store_path)
    s = GraphStore.open(store_path)
    logits = reference_forward(
        model, {k: v.double() for k, v in weights.items()}, graph, heads=2 if model == "gat" else None
    )
    pred = logits.argmax(1)
    y = graph.y
    out = {}
    for split in ("train", "valid", "test"):
        idx = torch.from_numpy(s.split_index(split))
        idx = idx[y[idx] >= 0]
        out[split] = float((pred[idx] == y[idx]).double().mean())
    return out


def assert_eval_is_independent(store_path, run, model: str) -> dict:
    """`g3 eval RUN --json` (the run's strategy, plan and worker count) against the accuracy the plain reference
    computes from the run's saved weights; returns g3's result."""
    r = invoke(["eval", str(run), "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.output)
    expected = independent_accuracy(store_path, torch.load(run / "model.pt", weights_only=True), model)
    assert result["accuracy"] == pytest.approx(expected, abs=1e-12)
    return result


@pytest.mark.parametrize("model,k", [("sage", 2), ("gat", 2)])
def test_eval_matches_independent_accuracy(store, tmp_path, model, k, monkeypatch):  # noqa: F811
    run = pipeline(store, tmp_path, k, "random", model, 2, "12", dtype="float64")
    result = assert_eval_is_independent(store, run, model)
    expected = result["accuracy"]
    assert json.loads((run / "eval.json").read_text())["accuracy"] == result["accuracy"]
    # the same weights again: the earlier result is read back (no --force, no workers started)
    before = (run / "eval.json").read_text()
    r = invoke(["eval", str(run), "--split", "test", "--json"])
    assert r.exit_code == 0, r.output
    again = json.loads(r.output)
    assert again["reused"] is True and again["accuracy"] == {"test": expected["test"]}
    assert (run / "eval.json").read_text() == before
    # another `g3 eval` of the run while one evaluates it is refused at once, not a silent replacement
    from stages.common.atomic import target_lock

    with target_lock(run / "eval.json", "evaluating"):
        r = invoke(["eval", str(run), "--workers", "1", "--force"])
    assert r.exit_code == 2 and "another g3 process is evaluating this" in r.output, r.output
    assert (run / "eval.json").read_text() == before
    # another evaluation (another worker count) does not replace eval.json silently
    r = invoke(["eval", str(run), "--workers", "1", "--split", "test", "--json"])
    assert r.exit_code == 2 and "eval.json" in r.output and "--force" in r.output, r.output
    assert (run / "eval.json").read_text() == before
    if model == "gat":  # the model does not change the 1-worker path below: one model checks it
        return
    # damaged or foreign weights: one line, exit 2, before any worker starts
    for content, message in [
        (b"garbage", "cannot read the weights"),
        (None, "which the plan's model does not have"),
    ]:
        bad = run / "checkpoints" / "bad.pt"
        bad.parent.mkdir(exist_ok=True)
        if content is None:
            torch.save({"nope.weight": torch.zeros(2)}, bad)
        else:
            bad.write_bytes(content)
        r = invoke(["eval", str(run), "--checkpoint", str(bad), "--force"])
        assert r.exit_code == 2 and message in r.output and "worker" not in r.output, r.output
        bad.unlink()

    # another worker count (a temporary 1-way partition and plan) gives the same numbers; one worker evaluates in
    # this process (no worker process, no fork server to start), its log where a worker's would be
    def no_workers(*args, **kwargs):
        raise AssertionError("a 1-worker evaluation started worker processes")

    monkeypatch.setattr("stages.kits.runtime.launch.launchers.spawn_workers", no_workers)
    handlers = logging.getLogger("g3").handlers[:]
    r = invoke(["eval", str(run), "--workers", "1", "--split", "test", "--json", "--force"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["accuracy"]["test"] == pytest.approx(expected["test"], abs=1e-12)
    assert "evaluated" in (run / "logs" / "eval-rank-00000.log").read_text()
    assert logging.getLogger("g3").handlers == handlers  # this process's logging is left as it was


def test_eval_imports_only_what_it_needs():
    """Importing stages.eval (`g3 eval` does) imports no torch, and the fork server of an evaluation's workers preloads
    every strategy but not training's torch._dynamo (1.4 s of its start on the 2-core sandbox): a fresh
    interpreter, as `g3 eval` is."""
    code = """if True:
        import importlib, sys
        import stages.eval
        assert "torch" not in sys.modules, "stages.eval imports torch"
        from stages.strategies.registry import STRATEGIES
        from stages.eval.run import RUNNER
        from stages.kits.runtime.launch.processes import INFERENCE_PRELOAD
        for name in [*INFERENCE_PRELOAD, RUNNER]:
            if name != "__main__":
                importlib.import_module(name)
        assert "torch._dynamo" not in sys.modules
        assert "torch.fx.experimental.symbolic_shapes" in sys.modules
        assert all(s.runtime().__module__ in sys.modules for s in STRATEGIES.values())
    """
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1]
    )
    assert r.returncode == 0 and not r.stderr, r.stderr


def test_eval_bad_input(tmp_path):
    from click.testing import CliRunner

    r = CliRunner().invoke(cli, ["eval", str(tmp_path)])
    assert r.exit_code == 2 and "not a g3 run" in r.output


def _fails(rank, world, init_method, error):
    raise error


def test_a_rank_run_in_process_fails_as_a_worker_does(tmp_path):
    """A 1-worker evaluation's rank runs in the launching process: its error is written and named as a worker's
    (bad input: G3InputError, exit 2; anything else: G3RuntimeError), and the process's "g3" logging is restored."""
    from stages.common.errors import G3InputError, G3RuntimeError
    from stages.kits.runtime.launch.processes import run_in_process

    handlers = logging.getLogger("g3").handlers[:]
    for error, kind in ((G3InputError("bad weights"), G3InputError), (ValueError("oops"), G3RuntimeError)):
        with pytest.raises(kind, match=f"worker 0 failed: {type(error).__name__}: {error}") as info:
            run_in_process(_fails, tmp_path, "eval-", "127.0.0.1", 0, error)
        assert type(info.value) is kind
        assert (tmp_path / "logs" / "eval-rank-00000.error").read_text().startswith(type(error).__name__)
        assert logging.getLogger("g3").handlers == handlers


def test_in_a_process_group_one_rank_still_runs_in_a_worker(tmp_path, monkeypatch):
    """g3's Python API inside a distributed job: the rank cannot start a process group of its own there, so a
    1-worker evaluation goes to a worker process; elsewhere it runs in this process, whose torch threads it
    restores."""
    import torch.distributed as dist

    from stages.kits.runtime.config import RuntimeConfig
    from stages.kits.runtime.launch import launchers

    ran = []
    monkeypatch.setattr(launchers, "spawn_workers", lambda *a, **k: ran.append("worker"))
    monkeypatch.setattr(
        launchers, "run_in_process", lambda *a, **k: (torch.set_num_threads(1), ran.append(a[7].heap))
    )
    threads = torch.get_num_threads()
    launcher = launchers.LocalLauncher(inference=True)
    launcher.run(_fails, 1, tmp_path, "eval-", tmp_path, RuntimeConfig())
    # the caller's allocator policy is left alone (process-wide, for good), its thread count restored
    assert ran == ["system"] and torch.get_num_threads() == threads
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    launcher.run(_fails, 1, tmp_path, "eval-", tmp_path, RuntimeConfig())
    assert ran == ["system", "worker"]
