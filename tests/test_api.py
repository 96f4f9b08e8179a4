"""`import g3`: the Python API over the stages — an in-memory graph in, a run, its model and its predictions
out — and importing g3 changes nothing outside g3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import g3

REPO = Path(__file__).resolve().parents[1]


def small_graph(n: int = 300, seed: int = 0) -> SimpleNamespace:
    """A PyG-Data-like object: two planted communities, features that say the community with noise."""
    rng = np.random.default_rng(seed)
    y = (np.arange(n) >= n // 2).astype(np.int64)
    src = rng.integers(0, n, 6 * n)
    same = rng.random(6 * n) < 0.9
    dst = np.where(
        same,
        (src + rng.integers(1, n // 2, 6 * n)) % (n // 2) + (y[src] * (n // 2)),
        rng.integers(0, n, 6 * n),
    )
    edge_index = torch.from_numpy(np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]))
    x = torch.from_numpy(rng.normal(size=(n, 8)) + y[:, None]).float()
    order = rng.permutation(n)
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    for m, part in zip(masks, np.split(order, [n // 2, 3 * n // 4]), strict=True):
        m[part] = True
    return SimpleNamespace(
        edge_index=edge_index,
        x=x,
        y=torch.from_numpy(y),
        num_nodes=n,
        train_mask=torch.from_numpy(masks[0]),
        val_mask=torch.from_numpy(masks[1]),
        test_mask=torch.from_numpy(masks[2]),
    )


def _bns_gcn_plan(data, folder: Path, name: str, workers: int) -> tuple:
    """DATA ingested as FOLDER/NAME.g3, partitioned for WORKERS and planned for bns-gcn at hidden 4, through the API:
    the store and the plan."""
    store = g3.ingest(data, folder / f"{name}.g3")
    part = g3.partition(store, workers=workers, out=folder / f"{name}.part")
    return store, g3.plan(part, strategy="bns-gcn", hidden=4, out=folder / f"{name}.plan")


@pytest.mark.slow
def test_a_pyg_data_through_the_whole_pipeline_and_back(tmp_path):
    data = small_graph()
    store = g3.ingest(data, tmp_path / "g.g3", name="two-communities")
    part = g3.partition(store, workers=2, out=tmp_path / "g.part")
    plan = g3.plan(part, strategy="g3", hidden=8, out=tmp_path / "g.plan")
    run = g3.train(
        plan, epochs=20, lr=0.05, dropout=0.0, workers=2, threads=1, dtype="float64", out=tmp_path / "g.run"
    )
    assert isinstance(run, g3.Run) and len(run.metrics) == 20 and run.test_acc > 0.8
    prov = run.meta["provenance"]  # what produced the run
    assert prov["torch"] == torch.__version__.split("+")[0] or prov["torch"] == torch.__version__
    assert prov["g3"] and prov["numba"] and prov["host"] and isinstance(prov["command"], list)
    assert run.store_path.resolve() == store.resolve() and run.plan_path.resolve() == plan.resolve()
    # the store keeps the user's masks as its splits
    from stages.common.store import GraphStore

    g = GraphStore.open(store)
    assert np.array_equal(np.sort(g.split_index("test")), np.flatnonzero(data.test_mask.numpy()))
    # the whole-graph model computes in one process what the 2 workers' evaluation measured
    logits = g3.predict(run)
    assert logits.shape == (300, 2)
    test = torch.from_numpy(g.split_index("test"))
    acc = (logits[test].argmax(1) == data.y[test]).double().mean().item()
    assert acc == pytest.approx(run.test_acc, abs=1e-12)
    assert torch.equal(g3.predict(run, split="test"), logits[test])
    # `g3 eval` as a function: the workers' exact inference, what the last training epoch evaluated
    scores = g3.evaluate(run, split="test")
    assert scores["accuracy"] == {"test": pytest.approx(run.test_acc, abs=1e-12)}
    assert set(scores["correct"]) == set(scores["labelled"]) == {"test"}  # what it counted for that split
    assert json.loads((run.path / "eval.json").read_text())["accuracy"]["test"] == scores["accuracy"]["test"]
    model = g3.load_model(run)
    assert isinstance(model, torch.nn.Module) and not model.training
    again = model(data.x.double(), *(torch.from_numpy(a.astype(np.int64)) for a in g.load_csr()))
    assert torch.allclose(again, logits)
    with pytest.raises(g3.G3InputError, match="already exists"):
        g3.ingest(data, store)
    # `g3 info RUN`: a summary like the other artifacts', figures from metrics.jsonl
    from click.testing import CliRunner

    from g3cli.main import cli

    r = CliRunner().invoke(cli, ["info", str(run.path)], terminal_width=60)
    assert r.exit_code == 0 and "completed" in r.output and "20 of 20" in r.output, r.output
    assert f"test {run.test_acc * 100:.2f} %" in r.output and "'schema'" not in r.output
    r = CliRunner().invoke(cli, ["info", str(run.path), "--json"])
    assert json.loads(r.output)["progress"]["epochs_done"] == 20


def test_arrays_and_scipy_sources_and_their_bad_input(tmp_path):
    data = small_graph(60)
    from stages.common.store import GraphStore

    adj = sp.coo_matrix((np.ones(data.edge_index.shape[1]), data.edge_index.numpy()), shape=(60, 60)).tocsr()
    a = g3.ingest(adj, tmp_path / "a.g3", x=data.x.numpy(), y=data.y.numpy())
    b = g3.ingest({"edge_index": data.edge_index.numpy(), "x": data.x, "y": data.y}, tmp_path / "b.g3")
    ga, gb = GraphStore.open(a), GraphStore.open(b)
    for one, two in zip(ga.load_csr(), gb.load_csr(), strict=True):
        assert np.array_equal(one, two)
    assert ga.num_classes == 2 and np.array_equal(ga.load_labels(), data.y.numpy())
    bad = [
        ({"edge_index": np.array([[0, 1], [1, 99]])}, {"num_nodes": 10}, "node id 99 .* out of range"),
        ({"edge_index": np.array([[0.0, 1.0], [1.0, 0.0]])}, {}, "integer node ids"),
        (
            {
                "edge_index": data.edge_index,
                "train": np.ones((60, 3), bool),
                "valid": np.ones(60, bool),
                "test": np.ones(60, bool),
            },
            {},
            "holds 3 splits",
        ),
        ({"edge_index": data.edge_index, "train": np.arange(5)}, {}, "give all three or none"),
        ({"edge_index": data.edge_index, "y": np.full(60, 0.5)}, {}, "not an integer class id"),
        ({"edges": data.edge_index}, {}, "unknown keys"),
    ]
    for i, (source, extra, message) in enumerate(bad):
        obj = {**source, **extra}
        with pytest.raises(g3.G3InputError, match=message):
            g3.ingest(obj, tmp_path / f"bad{i}.g3")
        assert not (tmp_path / f"bad{i}.g3").exists()
    with pytest.raises(g3.G3InputError, match="cannot ingest a list"):
        g3.ingest([1, 2], tmp_path / "list.g3")


IMPORT_PROBE = """
import json, sys
import numba, torch
from numba.core import dispatcher
import warnings
before = {"enable_caching": repr(dispatcher.Dispatcher.enable_caching), "threads": torch.get_num_threads(),
          "g3_warning_filters": sum("Sparse CSR" in repr(f) for f in warnings.filters),
          "dtype": str(torch.get_default_dtype()), "grad": torch.is_grad_enabled(),
          "deterministic": torch.are_deterministic_algorithms_enabled(), "numba_threads": numba.config.NUMBA_NUM_THREADS}
import g3, stages.kits.runtime.kernels, stages.strategies.g3.repartition, stages.ingest.webgraph, stages.kits.runtime.loss
after = {"enable_caching": repr(dispatcher.Dispatcher.enable_caching), "threads": torch.get_num_threads(),
         "g3_warning_filters": sum("Sparse CSR" in repr(f) for f in warnings.filters),
         "dtype": str(torch.get_default_dtype()), "grad": torch.is_grad_enabled(),
         "deterministic": torch.are_deterministic_algorithms_enabled(), "numba_threads": numba.config.NUMBA_NUM_THREADS}

@numba.njit(cache=True)
def users_kernel(x):
    return x + 1

print(json.dumps({"before": before, "after": after, "users_cache": type(users_kernel._cache).__name__,
                  "g3_cache": type(stages.kits.runtime.kernels.__dict__[next(n for n, v in vars(stages.kits.runtime.kernels).items()
                                   if isinstance(v, dispatcher.Dispatcher))]._cache).__name__}))
"""


def test_importing_g3_changes_nothing_outside_g3(tmp_path):
    probe = tmp_path / "probe.py"  # a file: numba caches only kernels defined in one
    probe.write_text(IMPORT_PROBE)
    p = subprocess.run(
        [sys.executable, str(probe)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["before"] == out["after"]
    assert out["users_cache"] == "FunctionCache"  # another library's kernels cache as numba does
    assert out["g3_cache"] == "CompileOnceCache"  # g3's own compile once across processes


def test_cli_reads_the_heterophilous_npz_and_torch_files(tmp_path, cli_runner):
    from conftest import shared_path

    from g3cli.main import cli
    from stages.common.store import GraphStore

    npz = shared_path("data", "real", "tolokers.npz")
    r = cli_runner.invoke(cli, ["ingest", str(npz), str(tmp_path / "t.g3")])
    assert r.exit_code == 2 and "holds 10 splits" in r.output and "--split-index" in r.output
    assert not (tmp_path / "t.g3").exists()
    r = cli_runner.invoke(cli, ["ingest", str(npz), str(tmp_path / "t.g3"), "--split-index", "3"])
    assert r.exit_code == 0, r.output
    g, z = GraphStore.open(tmp_path / "t.g3"), np.load(npz)
    assert g.num_nodes == 11758 and g.num_arcs == 2 * 519000 and g.num_classes == 2  # made undirected
    assert np.array_equal(np.sort(g.split_index("train")), np.flatnonzero(z["train_masks"][3]))
    assert np.array_equal(np.sort(g.split_index("test")), np.flatnonzero(z["test_masks"][3]))
    assert np.allclose(np.asarray(g.features[:]), z["node_features"])
    # torch.save of a dict of tensors (PyG's attribute names) is read without unpickling code
    data = small_graph(40)
    saved = {
        "edge_index": data.edge_index,
        "x": data.x,
        "y": data.y,
        "train_mask": data.train_mask,
        "val_mask": data.val_mask,
        "test_mask": data.test_mask,
    }
    torch.save(saved, tmp_path / "g.pt")
    r = cli_runner.invoke(cli, ["ingest", str(tmp_path / "g.pt"), str(tmp_path / "pt.g3")])
    assert r.exit_code == 0, r.output
    assert np.array_equal(
        np.sort(GraphStore.open(tmp_path / "pt.g3").split_index("valid")),
        np.flatnonzero(data.val_mask.numpy()),
    )
    torch.save({"weights": torch.zeros(3)}, tmp_path / "w.pt")
    r = cli_runner.invoke(cli, ["ingest", str(tmp_path / "w.pt"), str(tmp_path / "w.g3")])
    assert r.exit_code == 2 and "not a PyG Data or a dict with an edge_index" in r.output
    # what is wrong inside the file is said naming the file, not "<arrays>"
    for bad, says in [
        ({"edge_index": torch.tensor([[0, 1, 2]] * 3)}, "edge_index must be a [2, E]"),
        ({"edge_index": torch.tensor([[0.0, 1.0], [1.0, 0.0]])}, "must hold integer node ids"),
        ({"edge_index": torch.tensor([[0, 1], [1, 5]]), "num_nodes": 2}, "node id 5"),
        ({"edge_index": torch.tensor([[0, 1], [1, 0]]), "y": torch.tensor([0.5, 1.0])}, "label 0.5"),
        (
            {"edge_index": torch.tensor([[0, 1], [1, 0]]), "train_mask": torch.tensor([True] * 3)},
            "the train split is a mask of shape (3,)",
        ),
    ]:
        torch.save(bad, tmp_path / "bad.pt")
        r = cli_runner.invoke(cli, ["ingest", str(tmp_path / "bad.pt"), str(tmp_path / "bad.g3")])
        assert r.exit_code == 2 and f"{tmp_path / 'bad.pt'}" in r.output and says in r.output, r.output
        assert "<arrays>" not in r.output


def test_g3_help_lists_every_command_without_importing_the_stages():
    probe = (
        "import sys\nfrom g3cli.main import COMMANDS, cli\n"
        "try:\n    cli(['--help'], prog_name='g3')\nexcept SystemExit:\n    pass\n"
        "print('heavy:', sorted(m for m in ('numba', 'torch', 'stages.kits.runtime') if m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "heavy: []"
    from g3cli.main import COMMANDS

    for name in COMMANDS:
        assert f"g3 {name}" in p.stdout, name


@pytest.mark.slow
def test_predict_command_writes_the_logits(tmp_path, cli_runner):
    from g3cli.main import cli

    data = small_graph(120)
    store, plan = _bns_gcn_plan(data, tmp_path, "g", 1)
    run = g3.train(plan, epochs=3, threads=1, out=tmp_path / "g.run")
    r = cli_runner.invoke(cli, ["predict", str(run.path), "-o", str(tmp_path / "p.npy")])
    assert r.exit_code == 0, r.output
    assert np.array_equal(np.load(tmp_path / "p.npy"), g3.predict(run).numpy())
    r = cli_runner.invoke(cli, ["predict", str(run.path), "-o", str(tmp_path / "t.zarr"), "--split", "test"])
    assert r.exit_code == 0, r.output
    import zarr

    assert np.array_equal(zarr.open_array(str(tmp_path / "t.zarr"))[:], g3.predict(run, split="test").numpy())
    r = cli_runner.invoke(cli, ["predict", str(run.path), "-o", str(tmp_path / "p.npy")])
    assert r.exit_code == 2 and "--force" in r.output
    r = cli_runner.invoke(cli, ["predict", str(run.path), "-o", str(tmp_path / "p.csv")])
    assert r.exit_code == 2 and ".npy or .zarr" in r.output
    # a damaged run.json is refused by the run reader every command uses: one line, no traceback
    import shutil

    damaged = tmp_path / "damaged.run"
    shutil.copytree(run.path, damaged)
    (damaged / "run.json").write_text("nope")
    r = cli_runner.invoke(cli, ["predict", str(damaged), "-o", str(tmp_path / "d.npy")])
    assert r.exit_code == 2 and "run.json: invalid JSON" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "d.npy").exists()


def test_cli_reads_musae_csv_labels_and_json_sparse_features(tmp_path, cli_runner):
    from conftest import shared_path

    from g3cli.main import cli
    from stages.common.store import GraphStore

    real = shared_path("data", "real")
    r = cli_runner.invoke(
        cli,
        [
            "ingest",
            str(real / "facebook_edges.csv"),
            str(tmp_path / "fb.g3"),
            "--undirected",
            "--features",
            str(real / "facebook.json"),
            "--labels",
            f"{real / 'facebook_target.csv'}:page_type",
        ],
    )
    assert r.exit_code == 0, r.output
    g = GraphStore.open(tmp_path / "fb.g3")
    assert g.num_nodes == 22470 and g.num_classes == 4 and g.feat_dim == 4714
    labels = g.load_labels()
    names = sorted(["company", "government", "politician", "tvshow"])  # classes in the names' sorted order
    rows = (real / "facebook_target.csv").read_text(encoding="utf-8").splitlines()[1:]
    for line in rows[:50]:
        node, *_, page_type = line.split(",")
        assert labels[int(node)] == names.index(page_type)
    feats = json.loads((real / "facebook.json").read_text())
    x = np.asarray(g.features[:50])
    for node in range(50):
        assert np.flatnonzero(x[node]).tolist() == sorted(set(feats[str(node)]))
    # bad specs: one line, exit 2
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    (tmp_path / "l.csv").write_text("id,kind\n0,a\n1,b\n2,a\n")
    (tmp_path / "f.json").write_text('{"0": [1], "x": [2]}')
    for extra, message in [
        (["--labels", str(tmp_path / "l.csv")], "name the labels column"),
        (["--labels", f"{tmp_path / 'l.csv'}:nope"], "has no column 'nope'"),
        (["--features", str(tmp_path / "f.json")], "must be integers"),
    ]:
        r = cli_runner.invoke(cli, ["ingest", str(tmp_path / "e.txt"), str(tmp_path / "bad.g3"), *extra])
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, (extra, r.output)
    r = cli_runner.invoke(
        cli,
        [
            "ingest",
            str(tmp_path / "e.txt"),
            str(tmp_path / "ok.g3"),
            "--labels",
            f"{tmp_path / 'l.csv'}:kind",
        ],
    )
    assert r.exit_code == 0, r.output
    assert GraphStore.open(tmp_path / "ok.g3").load_labels().tolist() == [0, 1, 0]


def pairwise_auc(score: np.ndarray, label: np.ndarray) -> float:
    """ROC-AUC by its definition: the share of (positive, negative) pairs ranked right, ties one half."""
    pos, neg = score[label == 1], score[label == 0]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


@pytest.mark.slow
def test_rocauc_over_two_workers_is_the_definition(tmp_path, cli_runner):
    from g3cli.main import cli
    from stages.common.store import GraphStore

    data = small_graph(200, seed=3)
    data.x = data.x + torch.randn_like(data.x) * 3  # a harder task: the area is not simply 1
    store, plan = _bns_gcn_plan(data, tmp_path, "b", 2)
    run = g3.train(plan, epochs=3, threads=1, dtype="float64", metric="rocauc", out=tmp_path / "b.run")
    last = run.metrics[-1]
    g = GraphStore.open(store)
    prob = torch.softmax(g3.predict(run).double(), dim=1)[:, 1].numpy()
    y = g.load_labels()
    for split in ("train", "valid", "test"):
        idx = g.split_index(split)
        assert last[f"{split}_rocauc"] == pytest.approx(pairwise_auc(prob[idx], y[idx]), abs=1e-9)
    assert 0.0 < last["test_rocauc"] < 1.0  # not a degenerate area
    r = cli_runner.invoke(cli, ["eval", str(run.path), "--json"])  # the run's metric by default
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["rocauc"]["test"] == pytest.approx(last["test_rocauc"], abs=1e-12)
    # a task with more than two classes is refused before any worker starts
    three = {"edge_index": data.edge_index, "x": data.x, "y": torch.arange(200) % 3}
    _, plan3 = _bns_gcn_plan(three, tmp_path, "c", 1)
    with pytest.raises(g3.G3InputError, match="--metric rocauc needs a binary task: the store has 3 classes"):
        g3.train(plan3, epochs=1, metric="rocauc", out=tmp_path / "c.run")
    assert not (tmp_path / "c.run").exists()


@pytest.mark.slow
def test_loggers_csv_and_tensorboard(tmp_path):
    import csv
    import importlib.util

    data = small_graph(80)
    store, plan = _bns_gcn_plan(data, tmp_path, "g", 1)
    run = g3.train(plan, epochs=3, threads=1, logger="csv", out=tmp_path / "g.run")
    rows = list(csv.DictReader((run.path / "metrics.csv").read_text().splitlines()))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    for row, record in zip(rows, run.metrics, strict=True):
        assert (
            float(row["loss"]) == pytest.approx(record["loss"])
            and float(row["test_acc"]) == record["test_acc"]
        )
    if importlib.util.find_spec("tensorboard") is None:
        with pytest.raises(g3.G3InputError, match="--logger tensorboard needs the tensorboard package"):
            g3.train(plan, epochs=1, logger=("tensorboard",), out=tmp_path / "tb.run")
        assert not (tmp_path / "tb.run").exists()
        return
    run = g3.train(plan, epochs=3, threads=1, logger=["tensorboard"], out=tmp_path / "tb.run")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run.path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("accuracy/test")] == [0, 1, 2]
    assert [e.value for e in events.Scalars("loss")] == pytest.approx([r["loss"] for r in run.metrics])


def test_training_from_a_thread_that_is_not_the_main_one(tmp_path):
    """A notebook's or a service's worker thread trains as the main thread does (Python takes signals only in
    the main thread: there the launcher turns SIGTERM into a clean stop; elsewhere it does not try)."""
    import threading

    _, plan = _bns_gcn_plan(small_graph(60), tmp_path, "t", 2)
    done: list = []
    thread = threading.Thread(
        target=lambda: done.append(g3.train(plan, epochs=2, threads=1, out=tmp_path / "r"))
    )
    thread.start()
    thread.join(timeout=300)
    assert done and [m["epoch"] for m in done[0].metrics] == [0, 1]


def test_the_api_checks_its_arguments_and_speaks_of_force_true(tmp_path):
    """A wrong type or an unknown option is a G3InputError naming the argument (not a TypeError from deep
    inside), and "already exists" says what the API takes: force=True."""
    store = g3.ingest(small_graph(40), tmp_path / "s.g3")
    cases = [
        (lambda: g3.partition(store, workers="2"), "g3.partition: workers must be int, not str '2'"),
        (lambda: g3.partition(store, workers=2, balance_tol="x"), "g3.partition: balance_tol must be float"),
        (lambda: g3.plan(tmp_path / "none", hidden=4.5), "g3.plan: hidden must be int, not float 4.5"),
        (lambda: g3.train(tmp_path / "none", epochs="3"), "g3.train: epochs must be int"),
        (lambda: g3.train(tmp_path / "none", epoch=3), "g3.train: no option 'epoch'"),
        # a sequence option takes one string or a list: anything else says so
        (lambda: g3.train(tmp_path / "none", logger=3), "g3.train: logger must be a str or a list of str"),
        (lambda: g3.evaluate(tmp_path / "none", workers="2"), "g3.evaluate: workers must be int"),
        (lambda: g3.evaluate(tmp_path / "none", splits="test"), "g3.evaluate: no option 'splits'"),
        (lambda: g3.ingest(small_graph(40), tmp_path / "s.g3"), "pass force=True to replace it"),
    ]
    for call, says in cases:
        with pytest.raises(g3.G3InputError) as exc:
            call()
        assert says in str(exc.value) and "--force" not in str(exc.value), str(exc.value)
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
def test_a_script_without_a_main_guard_is_told_what_to_do(tmp_path):
    """A user's script run as written, calling g3.train at its top level: the fork server never runs it, and
    the one line says what to do (workers import the script) instead of naming a log that does not exist."""
    script = tmp_path / "noguard.py"
    script.write_text(
        "import g3\n"
        "store = g3.ingest('synthetic:tiny', 'work/t.g3')\n"
        "part = g3.partition(store, workers=2, out='work/t.part')\n"
        "plan = g3.plan(part, hidden=4, out='work/t.plan')\n"
        "run = g3.train(plan, epochs=1, threads=1, out='work/t.run')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert 'put that script\'s calls under `if __name__ == "__main__":`' in lines[-1], p.stderr[-2000:]
    # the traceback ends at the script's own call: the script's line and the API's raise, none of g3's frames
    frames = [line for line in lines if line.startswith("  File ")]
    assert len(frames) == 2 and str(script) in frames[0], p.stderr[-2000:]
    assert "already exists" not in p.stderr and "rank-00000.log" not in p.stderr, p.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("guarded", [True, False])
def test_a_script_piped_to_python_trains(tmp_path, guarded):
    """`python - < train.py`: the script has no file for the workers to import (its ``__file__`` is
    ``<stdin>``), so they start without it, as from an interactive session, guard or no guard."""
    calls = (
        "store = g3.ingest('synthetic:tiny', 'work/t.g3')\n"
        "part = g3.partition(store, workers=2, out='work/t.part')\n"
        "plan = g3.plan(part, hidden=4, out='work/t.plan')\n"
        "print('epochs', len(g3.train(plan, epochs=1, threads=1, out='work/t.run').metrics))\n"
    )
    if guarded:
        calls = 'if __name__ == "__main__":\n' + "".join(f"    {line}\n" for line in calls.splitlines())
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.run(
        [sys.executable, "-"],
        input="import g3\n" + calls,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "epochs 1", p.stderr[-2000:]
