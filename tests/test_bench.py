"""`g3 bench`: the neutral graph file round-trips exactly, a missing peer is a row of the table (not a failure),
medians and ratios, and the command end to end on the tiny store without any peer installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import flags

from stages.bench.export import export_graph, read_graph
from stages.bench.report import table_rows
from stages.bench.run import BenchOptions, finish, median_epoch, not_installed, run_peer


def test_export_round_trips_exactly(tiny_store, tmp_path):
    from stages.common.store import GraphStore

    store = GraphStore.open(tiny_store)
    f = export_graph(tiny_store, tmp_path / "g.npz")
    g = read_graph(f)
    indptr, indices = store.load_csr()
    feats = np.asarray(store.features[:])
    for name, want in (
        ("indptr", indptr),
        ("indices", indices),
        ("features", feats),
        ("labels", store.load_labels()),
        ("train_idx", store.split_index("train")),
        ("valid_idx", store.split_index("valid")),
        ("test_idx", store.split_index("test")),
    ):
        assert g[name].dtype == np.asarray(want).dtype or name == "indptr", name
        assert np.array_equal(g[name], want), name
        assert g[name].tobytes() == np.ascontiguousarray(want, dtype=g[name].dtype).tobytes(), name
    assert g["num_classes"] == store.num_classes
    assert g["meta"]["checksums"] == store.meta["checksums"]
    # the file is plain numpy: no pickle needed, and a second export of the same store is reused
    with np.load(f, allow_pickle=False) as z:
        assert set(z.files) >= {"indptr", "indices", "features", "labels", "train_idx", "num_classes", "meta"}
    mtime = f.stat().st_mtime_ns
    assert export_graph(tiny_store, f) == f and f.stat().st_mtime_ns == mtime


def _ok(system: str, label: str, workers: int, epoch_seconds: list[float], **more) -> dict:
    """A bench entry of a run that went well, as bench.json holds it."""
    entry = {"system": system, "label": label, "status": "ok", "note": "", "workers": workers, **more}
    return {**entry, "epoch_seconds": epoch_seconds}


def test_missing_peer_is_a_table_row(tmp_path):
    o = BenchOptions(dgl_python=str(tmp_path / "no-such-venv" / "bin" / "python"))
    e = run_peer("dgl", tmp_path / "g.npz", o, 2, tmp_path / "logs")
    assert e["status"] == "not installed"
    assert e["note"] == "DGL: not installed (make peers-dgl)"
    entries = [
        _ok("g3", "g3, 1 worker", 1, [9.0, 2.0, 4.0, 3.0], threads=2),
        _ok("g3", "g3, 2 workers", 2, [5.0, 1.5], threads=2),
        e,
        not_installed("pyg"),
    ]
    res = finish(entries)
    assert res["goal"] is None  # no DGL, no verdict
    assert entries[0]["median_epoch_seconds"] == 3.0  # the first epoch is warm-up
    assert entries[1]["vs_g3_1"] == pytest.approx(0.5)
    assert entries[2]["median_epoch_seconds"] is None
    rows = table_rows({"entries": entries})
    assert rows[2][0] == "DGL" and rows[2][-1] == "DGL: not installed (make peers-dgl)"
    assert rows[3][-1] == "PyG: not installed (make peers)"


def test_ratios_against_dgl():
    entries = [_ok("g3", "g3, 1 worker", 1, [3.0, 1.0]), _ok("dgl", "DGL 2.1.0", 1, [3.0, 2.0])]
    res = finish(entries)
    assert res["goal"] == {"g3_1_worker": 1.0, "dgl": 2.0, "met": True}
    assert entries[0]["vs_dgl"] == pytest.approx(0.5)
    assert median_epoch([7.0]) == 7.0 and median_epoch([]) is None


def test_bench_command_without_peers(tiny_store, tmp_path, cli_runner, monkeypatch):
    import stages.bench.run as bench
    from g3cli.main import cli

    calls = []

    def fake_run(
        store, o, spec, k, out, threads, link=None
    ):  # the strategies' runs are `g3 train`'s (test_train, below)
        calls.append((spec.name, k, threads, o.hidden))
        return bench.entry(
            "g3", f"g3, {k} worker", workers=k, threads=threads, epoch_seconds=[1.0, 0.5, 0.25]
        )

    monkeypatch.setattr(bench, "run_strategy", fake_run)
    out = tmp_path / "bench"
    small = flags(workers=1, epochs=2, hidden=8, threads=2)
    dgl = flags(peers="dgl", dgl_python=tmp_path / "none" / "python")
    res = cli_runner.invoke(cli, ["bench", str(tiny_store), *small, *dgl, "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "bench.json").read_text())
    by = {e["system"]: e for e in data["entries"]}
    assert calls == [("g3", 1, 2, 8)]
    assert by["g3"]["median_epoch_seconds"] == pytest.approx(0.375)
    assert by["g3-single"]["status"] == "ok" and by["g3-single"]["median_epoch_seconds"] > 0
    assert by["dgl"]["note"] == "DGL: not installed (make peers-dgl)"
    assert (out / "bench.png").is_file() and (out / "graph.npz").is_file()
    assert "DGL" in res.output
    # an earlier bench.json is not replaced silently; --force replaces it (the partitions and plans stay)
    before = (out / "bench.json").read_text()
    args = ["bench", str(tiny_store), *small, "--peers", "none", "--no-single", "-o", str(out)]
    res = cli_runner.invoke(cli, args)
    assert res.exit_code == 2 and "bench.json" in res.output and "--force" in res.output, res.output
    assert (out / "bench.json").read_text() == before
    res = cli_runner.invoke(cli, [*args, "--force"])
    assert res.exit_code == 0, res.output
    assert [e["system"] for e in json.loads((out / "bench.json").read_text())["entries"]] == ["g3"]


def test_strategies_side_by_side(tiny_store, tmp_path, cli_runner):
    """`g3 bench --strategies` runs each spec for real (its partition method, plan options, training) and records
    epoch times, bytes per epoch, final test accuracy and peak memory per worker; bns-gcn with P = 1 moves g3's
    bytes, sampling moves fewer."""
    from g3cli.main import cli

    out = tmp_path / "bench"
    specs = "g3@metis,bns-gcn,bns-gcn{boundary-sample=0.25},sancus@metis{staleness=epoch:0,sancus-comm=p2p}"
    run = flags(strategies=specs, workers=2, epochs=3, threads=2, peers="none")
    res = cli_runner.invoke(cli, ["bench", str(tiny_store), *run, "--no-single", "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "bench.json").read_text())
    assert data["schema_version"] == 2
    by = {e["label"]: e for e in data["entries"]}
    assert list(by) == [
        "g3@metis, 2 workers",
        "bns-gcn@metis, 2 workers",
        "bns-gcn@metis {boundary-sample=0.25}, 2 workers",
        "sancus@metis {staleness=epoch:0, sancus-comm=p2p}, 2 workers",
    ]
    for e in by.values():
        assert e["status"] == "ok" and e["workers"] == 2 and len(e["epoch_seconds"]) == 3
        assert (
            0.0 <= e["test_acc"] <= 1.0
            and len(e["peak_memory_bytes"]) == 2
            and min(e["peak_memory_bytes"]) > 0
        )
        assert e["method"] == "metis"
    g3, bns, sampled, sancus = by.values()
    assert bns["bytes_per_epoch"] == g3["bytes_per_epoch"] > 0
    assert sampled["bytes_per_epoch"] < 0.6 * bns["bytes_per_epoch"]
    # sancus p2p moves g3's rows plus a one-word header per peer and layer
    assert sancus["bytes_per_epoch"] == g3["bytes_per_epoch"] + 2 * 8
    assert "bns-gcn@metis" in res.output and "sancus@metis" in res.output
    assert (out / "bench.png").stat().st_size > 0
    # the partition is shared by the specs of one method; a second run reuses partitions and plans
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("part-") and p.is_dir()) == [
        "part-metis-2",
        "part-metis-2.plan-bns-gcn-boundary-sample-0.25-sage",
        "part-metis-2.plan-bns-gcn-sage",
        "part-metis-2.plan-g3-sage",
        "part-metis-2.plan-sancus-staleness-epoch-0-sancus-comm-p2p-sage",
    ]


def test_p3_and_distdgl_side_by_side(tiny_store, tmp_path, cli_runner):
    """`g3 bench --strategies p3,...` (issue 30): p3 on its own partition, pipelined through a train knob in its
    spec, and distdgl on the same hash partition with the same global batches — the same model, so the same
    accuracy; the bench's g3 --pipeline default is not passed to p3, which has other schedules."""
    from g3cli.main import cli

    out = tmp_path / "bench"
    specs = (
        "p3{batch-order=global,fanouts=3,2,batch-size=50},p3{batch-order=global,fanouts=3,2,batch-size=50,"
        "pipeline=p3},distdgl@p3{batch-order=global,fanouts=3,2,batch-size=50}"
    )
    run = flags(strategies=specs, workers=2, epochs=2, threads=2, peers="none")
    res = cli_runner.invoke(cli, ["bench", str(tiny_store), *run, "--no-single", "-o", str(out)])
    assert res.exit_code == 0, res.output
    plain, piped, dgl = json.loads((out / "bench.json").read_text())["entries"]
    assert all(e["status"] == "ok" and e["method"] == "p3" for e in (plain, piped, dgl)), res.output
    assert (
        "--pipeline p3" in piped["note"] and "--pipeline none" in plain["note"]
    )  # p3's default, not g3's multi
    assert plain["test_acc"] == dgl["test_acc"]
    assert plain["bytes_per_epoch"] > 0 and dgl["bytes_per_epoch"] > 0


def test_bad_strategy_specs(tiny_store, tmp_path, cli_runner):
    from g3cli.main import cli

    for spec, message in (
        ("nope", "unknown strategy 'nope'"),
        ("bns-gcn@feature", "strategy bns-gcn runs on metis, chunk, g3, random partitions, not feature"),
        ("bns-gcn{p=0.1}", "bns-gcn has no option 'p'"),
        ("sancus{staleness}", "needs a value"),
        ("g3[x]", "is not NAME[@METHOD]"),
        ("p3{pipeline=multi}", "p3 does not take pipeline=multi"),
        ("distdgl{pipeline=p3}", "distdgl has no option 'pipeline'"),
    ):
        res = cli_runner.invoke(
            cli,
            ["bench", str(tiny_store), "--strategies", spec, "--peers", "none", "-o", str(tmp_path / "b")],
        )
        assert res.exit_code == 2 and message in res.output, (spec, res.output)
    assert not (tmp_path / "b").exists()


def test_peers_run_in_the_mode_of_the_strategies():
    """Mini-batch specs make the peers sample with the same fanouts and batch size (a value may hold commas);
    full-graph specs, or none, keep the full-graph mode; clustergcn has no sampler to match."""
    from stages.bench.run import peer_modes
    from stages.bench.runs import parse_spec

    spec = parse_spec("distdgl{fanouts=5,3,batch-size=200}")
    assert spec.options == (("fanouts", "5,3"), ("batch_size", "200"))
    specs = [parse_spec(s) for s in ("g3", "distdgl{fanouts=5,3,batch-size=200}", "bytegnn", "distdgl@metis")]
    assert peer_modes(specs) == [None, ((5, 3), 200), ((25, 10), 1000)]
    assert peer_modes([parse_spec("distdgl")]) == [((25, 10), 1000)]
    assert peer_modes([]) == [None] and peer_modes([parse_spec("clustergcn")]) == [None]


def test_a_mini_batch_peer_without_its_sampler_library_says_why(tiny_store, tmp_path, monkeypatch):
    """A peer whose sampler is missing (PyG without pyg-lib/torch-sparse) is a row with the reason, not a crash."""
    from stages.bench.run import BenchOptions, run_peer

    script = tmp_path / "pyg_runner.py"
    script.write_text(
        "raise ImportError(\"'NeighborSampler' requires either 'pyg-lib' or 'torch-sparse'\")\n"
    )
    monkeypatch.setattr("stages.bench.run.PEERS_DIR", tmp_path)
    monkeypatch.setattr("stages.bench.run.peer_python", lambda peer, o: Path(sys.executable))
    e = run_peer("pyg", tmp_path / "g.npz", BenchOptions(), 1, tmp_path / "logs", minibatch=((25, 10), 1000))
    assert e["status"] == "not installed" and "pyg-lib" in e["note"] and "make peers-minibatch" in e["note"]
    assert e["label"] == "PyG mini-batch (25,10) B=1000"
    assert "--fanouts 25,10 --batch-size 1000" in (tmp_path / "logs" / "pyg-minibatch.log").read_text()


def test_pyg_mini_batch_peer_trains_with_neighbor_loader(tiny_store, tmp_path):
    """PyG's NeighborLoader for real, at the fanouts and batch size a mini-batch strategy gives the peers: a
    mini-batch row, its sampling library named, every labelled training node a seed once an epoch."""
    pytest.importorskip("torch_geometric", reason="PyG is a peer installed by `make peers`")
    import torch_geometric.typing as pyg

    if not (pyg.WITH_PYG_LIB or pyg.WITH_TORCH_SPARSE):
        pytest.skip(
            "PyG's NeighborLoader needs pyg-lib or torch-sparse: `make peers-minibatch` builds torch-sparse"
        )
    from stages.bench.run import BenchOptions, run_peer
    from stages.common.store import GraphStore

    graph = export_graph(tiny_store, tmp_path / "g.npz")
    e = run_peer("pyg", graph, BenchOptions(epochs=2), 1, tmp_path / "logs", minibatch=((3, 2), 50))
    assert e["status"] == "ok", e
    assert (
        e["mode"] == "mini-batch"
        and e["label"].endswith("mini-batch (3,2) B=50")
        and e["seeds_per_second"] > 0
    )
    assert len(e["epoch_seconds"]) == 2 and 0 <= e["test_acc"] <= 1
    log = (tmp_path / "logs" / "pyg-minibatch.log").read_text()
    res = json.loads(next(ln for ln in log.splitlines() if ln.startswith("{")))
    assert res["fanouts"] == [3, 2] and res["batch_size"] == 50
    assert res["sampler"].startswith("torch_geometric.loader.NeighborLoader (")
    store = GraphStore.open(tiny_store)
    train = store.split_index("train")
    assert res["seeds_per_epoch"] == int((store.load_labels()[train] >= 0).sum())


def test_bench_summary_reads_cleanly_through_a_pipe(tmp_path, cli_runner, monkeypatch):
    """Off a terminal (click's runner: stdout is not a TTY) every table row of `g3 bench` is one line — long notes
    go below the tables as numbered footnotes instead of folding each row at 80 columns — and `--json` prints
    bench.json alone, which parses."""
    import g3cli.bench_cmd
    from g3cli.main import cli
    from g3cli.output import PIPE_WIDTH
    from stages.bench.run import BenchOptions, entry

    long_note = (
        "1 thread per worker, --pipeline multi, and a note long enough to fold a row at eighty columns"
    )
    labels = [f"g3@g3 {{bin-size=5000, pipeline=multi}}, {k} workers" for k in (1, 2)]
    entries = [
        entry(
            "g3",
            label,
            workers=k,
            threads=2,
            epoch_seconds=[1.0, 0.5, 0.25],
            note=long_note,
            bytes_per_epoch=3e6,
            test_acc=0.9,
            peak_memory_bytes=[2**30] * k,
            compute_balance=1.02,
        )
        for k, label in ((1, labels[0]), (2, labels[1]))
    ] + [not_installed("dgl")]
    result = {
        "store": {"name": "tiny", "num_nodes": 1000, "num_arcs": 5000},
        "options": vars(BenchOptions()),
        **finish(entries),
        "load_average": {"before": [1.0], "after": [1.5]},
        "cpu_count": 2,
        "path": str(tmp_path),
    }
    monkeypatch.setattr(g3cli.bench_cmd, "run_bench", lambda store, opts, out, force: result)
    res = cli_runner.invoke(cli, ["bench", str(tmp_path), "--peers", "dgl"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert sum(line.startswith("┃") for line in lines) == 2, res.stdout  # one header line per table
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 2 * len(entries), res.stdout  # one line per entry in each of the two tables
    for label in labels:
        assert sum(label in row for row in rows) == 2, res.stdout
    assert [line for line in lines if long_note in line] == [f"(1) {long_note}"]
    assert "(2) DGL: not installed (make peers-dgl)" in lines
    assert max(map(len, lines)) <= PIPE_WIDTH
    res = cli_runner.invoke(cli, ["bench", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    assert [e["note"] for e in json.loads(res.stdout)["entries"]] == [
        long_note,
        long_note,
        entries[2]["note"],
    ]


def test_bench_png_axes_in_human_units():
    """bench.png: bytes on an axis named in binary units (MiB, as the table), with no "1e8" offset, and accuracy
    in % (as the bar labels)."""
    import matplotlib.pyplot as plt

    from stages.bench.report import bench_figure, byte_unit
    from stages.bench.run import entry

    entries = [
        entry(
            "g3",
            f"g3, {k} workers",
            workers=k,
            threads=1,
            epoch_seconds=[1.0, 0.5],
            bytes_per_epoch=3e8 * k,
            test_acc=0.35,
            peak_memory_bytes=[3 * 2**30] * k,
        )
        for k in (1, 2)
    ]
    result = {
        "store": {"name": "tiny"},
        "options": {"model": "sage", "layers": 2, "hidden": 8, "epochs": 2},
        "threads": 2,
        **finish(entries),
    }
    fig = bench_figure(result)
    fig.canvas.draw()
    axes = {ax.get_title(): ax for ax in fig.axes}
    nbytes, acc, peak = (
        axes[t]
        for t in (
            "bytes sent per epoch (all workers)",
            "final test accuracy",
            "peak memory of the largest worker",
        )
    )
    assert nbytes.get_xlabel() == "MiB" and peak.get_xlabel() == "GiB"
    for ax in (nbytes, peak):
        assert ax.xaxis.get_offset_text().get_text() == ""
        ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert ticks and all("e" not in t for t in ticks), ticks
    assert nbytes.get_xlim()[1] == pytest.approx(1.35 * 6e8 / 2**20)  # bars drawn in MiB
    assert acc.xaxis.get_major_formatter()(0.35, 0) in ("35%", "35.0%")
    assert all(t.get_text().endswith("%") for t in acc.get_xticklabels() if t.get_text())
    assert byte_unit(1000) == (1.0, "B") and byte_unit(2**30) == (2.0**30, "GiB")
    plt.close(fig)


def test_a_peer_reports_its_peak_memory_and_what_loading_the_graph_cost(tiny_store, tmp_path):
    """PyG's runner, for real: its process's peak resident set is the entry's peak memory (the table's column
    next to g3's workers), and the seconds and peak of loading the graph come with it."""
    pytest.importorskip("torch_geometric", reason="PyG is a peer installed by `make peers`")
    from stages.bench.run import BenchOptions, run_peer

    graph = export_graph(tiny_store, tmp_path / "g.npz")
    e = run_peer("pyg", graph, BenchOptions(epochs=2), 1, tmp_path / "logs")
    assert e["status"] == "ok", e
    (peak,) = e["peak_memory_bytes"]
    assert 50 << 20 < peak < 8 << 30  # an interpreter with torch, not a stray figure
    assert 0 < e["load_peak_memory_bytes"] <= peak and e["load_seconds"] > 0
