"""`g3 report`: every plot from recorded runs, the summary figures, fallbacks, bad input and the CLI.

Runs are small fake run folders with the files `g3 train` writes (run.json, metrics.jsonl, eval.json, trace/) and
the plan/partition JSON they point to, so these tests need no training; tests/test_demo.py reports a real run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.common.errors import G3InputError
from stages.report.run import run_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_artifact(file: Path, schema: str, /, **fields) -> None:
    """An artifact's JSON file (its folder made if need be): SCHEMA at version 1, then FIELDS."""
    file.parent.mkdir(exist_ok=True)
    file.write_text(json.dumps({"schema": schema, "schema_version": 1, **fields}))


def make_run(
    root: Path,
    name: str = "g.part-g3-2.plan-sage.run",
    owned=(100, 300),
    epochs: int = 6,
    method: str = "g3",
    pipeline: str = "none",
    epoch_seconds: float = 2.0,
    eval_every: int = 2,
    trace: bool = True,
    plan: bool = True,
    partition: bool = True,
    eval_json: bool = True,
    strategy: str | None = None,
) -> Path:
    """A run folder as `g3 train` leaves it, with its plan.json and partition.json beside it."""
    k = len(owned)
    part_dir, plan_dir, run = (
        root / f"g.part-{method}-{k}",
        root / f"g.part-{method}-{k}.plan-sage",
        root / name,
    )
    run.mkdir(parents=True)
    if partition:
        _write_artifact(
            part_dir / "partition.json",
            "g3.partition",
            store={"name": "fake"},
            method=method,
            num_partitions=k,
            before={"remote_per_partition": [40 + 5 * i for i in range(k)]},
            partitions=[
                {"partition": i, "nodes": n, "remote": 30 + i, "arcs": 10 * n} for i, n in enumerate(owned)
            ],
        )
    if plan:
        workers = [{"rank": i, "num_owned": n} for i, n in enumerate(owned)]
        _write_artifact(plan_dir / "plan.json", "g3.plan", num_workers=k, workers=workers)
    _write_artifact(
        run / "run.json",
        "g3.run",
        path=str(run),
        status="completed",
        plan={"path": str(plan_dir), "model": {"model": "sage", "bin_size": 5000}, "num_workers": k},
        partition={"path": str(part_dir), "method": method},
        store={"name": "fake", "num_nodes": sum(owned)},
        config={"pipeline": pipeline, "device": "cpu", "eval_every": eval_every},
        **({"strategy": {"name": strategy, "options": {}}} if strategy else {}),
    )
    lines = []
    for e in range(epochs):
        rec = {
            "epoch": e,
            "loss": 2.0 / (e + 1),
            "epoch_seconds": epoch_seconds,
            "bytes_sent": 1000 + 10 * e,
            "workers": [
                {
                    "rank": i,
                    "compute_seconds": 0.5 + 0.25 * i,
                    "comm_wait_seconds": 0.5,
                    "sync_seconds": 0.25,
                    "bytes_sent": 500,
                }
                for i in range(k)
            ],
        }
        if trace and e >= 1:  # as `g3 train --trace` records: a share every epoch but the first, one timeline
            rec.update(
                comm_hidden_share=(0.25, 0.75, 0.25, 0.5, 0.125)[(e - 1) % 5],
                comm_waited_share=(0.5, 0.0, 0.25, 0.125, 0.0)[(e - 1) % 5],
            )
            if e == epochs - 1:  # the timeline is the last epoch's
                rec.update(traced=True)
        if eval_every and (e + 1) % eval_every == 0:
            rec.update(train_acc=0.5 + 0.05 * e, valid_acc=0.4 + 0.05 * e, test_acc=0.35 + 0.05 * e)
        lines.append(json.dumps(rec))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if eval_json:
        (run / "eval.json").write_text(
            json.dumps({"schema": "g3.eval", "accuracy": {"train": 0.9, "valid": 0.7, "test": 0.66}})
        )
    if trace:
        (run / "trace").mkdir()
        for rank in range(k):
            events = [{"name": "thread_name", "ph": "M", "pid": rank, "tid": 1, "args": {"name": "comm"}}]
            ts = 0.0
            for b in range(3):
                for cat, lane, dur in (
                    ("gather", 0, 50),
                    ("copy_in", 0, 20),
                    ("compute", 0, 200),
                    ("copy_out", 0, 20),
                ):
                    events.append(
                        {
                            "name": cat,
                            "cat": cat,
                            "ph": "X",
                            "ts": ts,
                            "dur": dur,
                            "pid": rank,
                            "tid": lane,
                            "args": {"layer": 0, "bin": b, "phase": "forward"},
                        }
                    )
                    ts += dur
                events += [
                    {
                        "name": c,
                        "cat": c,
                        "ph": "X",
                        "ts": ts - 40,
                        "dur": 60,
                        "pid": rank,
                        "tid": 1,
                        "args": {"layer": 0, "bin": b, "phase": "forward"},
                    }
                    for c in ("send", "recv")
                ]
            events.append(
                {
                    "name": "wait",
                    "cat": "wait",
                    "ph": "X",
                    "ts": ts,
                    "dur": 30,
                    "pid": rank,
                    "tid": 0,
                    "args": {},
                }
            )
            (run / "trace" / f"rank-{rank:05d}.json").write_text(json.dumps({"traceEvents": events}))
    return run


def check_png(path: Path) -> None:
    import matplotlib.image

    assert path.is_file(), path
    assert path.read_bytes()[:8] == PNG_MAGIC, path
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_one_run_every_plot_and_summary(tmp_path):
    run = make_run(tmp_path)
    result = run_report([run])
    out = run / "report"
    assert Path(result["out"]) == out
    kinds = {p["kind"] for p in result["plots"]}
    assert kinds == {"time_to_accuracy", "throughput", "workers", "partition", "timeline"}
    index = (out / "index.html").read_text()
    for p in result["plots"]:
        check_png(out / p["file"])
        assert f'src="{p["file"]}"' in index
    assert json.loads((out / "summary.json").read_text())["runs"] == result["runs"]
    s = result["runs"][0]
    # throughput = sum over workers of owned / epoch time = 100/2 + 300/2
    assert s["throughput_nodes_per_second"] == pytest.approx(200.0)
    assert s["throughput_source"] == "plan.json"
    assert s["epochs"] == 6 and s["median_epoch_seconds"] == pytest.approx(2.0)
    assert s["final_test_acc"] == pytest.approx(0.6) and s["best_valid_acc"] == pytest.approx(0.65)
    assert s["eval_test_acc"] == pytest.approx(0.66)
    assert s["bytes_sent_per_epoch"] == pytest.approx(1025.0)
    assert s["comm_hidden_share"] == pytest.approx(0.25)  # the median of 0.25, 0.75, 0.25, 0.5, 0.125
    assert s["comm_waited_share"] == pytest.approx(0.125) and s["comm_moving_share"] is None  # not recorded
    assert "comm blocked (traced)" in index
    assert result["notes"] == []
    assert "throughput" in " ".join(result["definitions"])


def test_worker_breakdown_idle_and_per_worker_epoch_time(tmp_path):
    from stages.report.data import load_run

    run = make_run(tmp_path, trace=False)
    rows = load_run(run).worker_breakdown()
    assert [r["rank"] for r in rows] == [0, 1]
    # epoch 2.0 s - compute - comm wait 0.5 - sync 0.25; rank 0 computes 0.5 s, rank 1 0.75 s
    assert rows[0]["idle"] == pytest.approx(0.75) and rows[1]["idle"] == pytest.approx(0.5)
    assert rows[0]["epochs"] == 5  # the first epoch (warm-up) is left out

    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for rec in lines:
        rec["workers"][0]["epoch_seconds"] = 1.0  # a worker's own epoch time, when recorded, is used
        rec["workers"][1]["compute_seconds"] = 5.0  # idle is floored at 0
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    data = load_run(run)
    assert data.throughput()[0] == pytest.approx(100 / 1.0 + 300 / 2.0)
    assert data.worker_breakdown()[1]["idle"] == 0.0


def test_resumed_run_keeps_the_last_record_of_an_epoch(tmp_path):
    from stages.report.data import load_run

    run = make_run(tmp_path, epochs=4, trace=False)
    with open(run / "metrics.jsonl", "a") as f:  # resumed at epoch 2: epochs 2 and 3 recorded again
        for e in (2, 3):
            f.write(
                json.dumps({"epoch": e, "loss": 0.1, "epoch_seconds": 4.0, "bytes_sent": 0, "workers": []})
                + "\n"
            )
    data = load_run(run)
    assert [r["epoch"] for r in data.epochs] == [0, 1, 2, 3]
    assert data.cumulative_seconds()[-1] == pytest.approx(12.0)


def test_fallbacks_when_plan_partition_and_trace_are_missing(tmp_path):
    run = make_run(tmp_path, plan=False, trace=False, eval_every=0, eval_json=False)
    result = run_report([run], out=tmp_path / "rep")
    s = result["runs"][0]
    assert s["throughput_source"] == "partition.json"
    assert s["throughput_nodes_per_second"] == pytest.approx(200.0)
    assert {p["kind"] for p in result["plots"]} == {"throughput", "workers", "partition"}
    notes = " ".join(result["notes"])
    assert "no bin timeline" in notes and "no time-to-accuracy plot" in notes
    assert "no bin timeline" in (tmp_path / "rep" / "index.html").read_text()

    (tmp_path / "g.part-g3-2" / "partition.json").unlink()
    result = run_report([run], out=tmp_path / "rep2")
    s = result["runs"][0]
    assert s["throughput_source"].startswith("run.json")
    assert s["throughput_nodes_per_second"] == pytest.approx(200.0)
    assert "no partition plot" in " ".join(result["notes"])


def test_moved_run_finds_its_plan_beside_it(tmp_path):
    run = make_run(tmp_path / "a", trace=False)
    moved = tmp_path / "b"
    (tmp_path / "a").rename(moved)
    result = run_report([moved / run.name], out=tmp_path / "rep")
    assert result["runs"][0]["throughput_source"] == "plan.json"
    assert "partition" in {p["kind"] for p in result["plots"]}


def test_several_runs_compare_and_scale(tmp_path, monkeypatch):
    runs = [
        make_run(tmp_path / m, name=f"r-{k}.run", owned=(100,) * k, method=m, trace=(k == 2))
        for m in ("g3", "random")
        for k in (2, 4)
    ]
    monkeypatch.chdir(tmp_path)
    result = run_report(runs)
    out = tmp_path / "g3-report"
    assert Path(result["out"]) == Path("g3-report")
    kinds = [p["kind"] for p in result["plots"]]
    assert kinds.count("scaling") == 1 and kinds.count("workers") == 4 and kinds.count("timeline") == 2
    assert kinds.count("partition") == 4
    index = (out / "index.html").read_text()
    files = [p["file"] for p in result["plots"]]
    assert len(set(files)) == len(files)
    for f in files:
        check_png(out / f)
        assert f'src="{f}"' in index
    labels = [s["label"] for s in result["runs"]]
    assert len(set(labels)) == 4 and all("/" in lab for lab in labels)  # same folder names: parents added
    assert sum("no bin timeline" in n for n in result["notes"]) == 2  # the two runs without a trace
    from stages.report.data import load_run
    from stages.report.plots import scaling_groups

    data = [load_run(r) for r in runs]
    assert sorted(scaling_groups(data)) == ["partition g3", "partition random"]


def test_trace_variants(tmp_path):
    from stages.report.timeline import find_trace

    run = make_run(tmp_path, trace=False)
    (run / "trace" / "epoch-00003").mkdir(parents=True)
    events = [
        {
            "name": "c",
            "cat": "compute",
            "ph": "X",
            "ts": 5,
            "dur": 10,
            "pid": 0,
            "tid": "main",
            "args": {"epoch": 3},
        },
        {"name": "x", "cat": "custom", "ph": "X", "ts": 8, "dur": 1, "pid": 0, "tid": 0},
    ]
    (run / "trace" / "epoch-00003" / "rank-00000.json").write_text(json.dumps(events))  # JSON array form
    trace, why = find_trace(run)
    assert trace is not None and trace.num_events == 2 and trace.epoch == 3, why
    result = run_report([run], out=tmp_path / "rep")
    check_png(tmp_path / "rep" / "timeline.png")
    assert "timeline" in {p["kind"] for p in result["plots"]}

    from stages.report.timeline import pack

    rows = pack([{"ts": 0, "dur": 10}, {"ts": 5, "dur": 2}, {"ts": 10, "dur": 1}, {"ts": 6, "dur": 1}])
    assert [[e["ts"] for e in r] for r in rows] == [[0, 10], [5], [6]]  # overlapping spans in sub-rows

    (run / "trace" / "epoch-00003" / "rank-00000.json").write_text("{not json")
    trace, why = find_trace(run)
    assert trace is None and "not valid JSON" in why


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "no such folder"),
        ("no_run_json", "no run.json"),
        ("other_schema", "wrong schema"),
        ("no_metrics", "no metrics.jsonl"),
        ("empty_metrics", "metrics.jsonl is empty"),
        ("bad_line", ":2: not a JSON object"),
        ("no_epoch_seconds", "needs 'epoch', 'epoch_seconds'"),
    ],
)
def test_bad_input(tmp_path, cli_runner, case, message):
    from g3cli.main import cli

    run = tmp_path / "run"
    if case != "missing":
        run.mkdir()
    if case not in ("missing", "no_run_json"):
        make_run(tmp_path, name="ok.run", trace=False)
        meta = json.loads((tmp_path / "ok.run" / "run.json").read_text())
        if case == "other_schema":
            meta["schema"] = "g3.plan"
        (run / "run.json").write_text(json.dumps(meta))
    if case == "empty_metrics":
        (run / "metrics.jsonl").write_text("\n")
    elif case == "bad_line":
        (run / "metrics.jsonl").write_text('{"epoch": 0, "epoch_seconds": 1}\n{oops\n')
    elif case == "no_epoch_seconds":
        (run / "metrics.jsonl").write_text('{"epoch": 0}\n')
    with pytest.raises(G3InputError, match=message):
        run_report([run], out=tmp_path / "rep")
    r = cli_runner.invoke(cli, ["report", str(run), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("g3: error:") and message.lstrip(":2") in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_wrong_label_count_and_output_is_a_file(tmp_path):
    run = make_run(tmp_path, trace=False)
    with pytest.raises(G3InputError, match="--label"):
        run_report([run], labels=["a", "b"])
    (tmp_path / "f").write_text("")
    with pytest.raises(G3InputError, match="not a folder"):
        run_report([run], out=tmp_path / "f")


def test_two_untraced_runs_get_one_note_and_their_labels(tmp_path):
    a = make_run(tmp_path / "a", trace=False, owned=(50,), epochs=2)
    b = make_run(tmp_path / "b", trace=False, owned=(50,), epochs=2)
    result = run_report([a, b], out=tmp_path / "rep", labels=["first", "second"])
    assert [s["label"] for s in result["runs"]] == ["first", "second"]
    assert [n for n in result["notes"] if "bin timeline" in n] == [
        "no bin timeline: none of the 2 runs has a trace/ folder (train with g3 train --trace)"
    ]
    files = {p["file"] for p in result["plots"]}
    assert {"workers-1-first.png", "workers-2-second.png"} <= files
    assert "scaling" not in {p["kind"] for p in result["plots"]}
    assert any("no scaling plot" in n for n in result["notes"])


def test_cli(tmp_path, cli_runner):
    from g3cli.main import cli

    run = make_run(tmp_path, trace=False, partition=False, owned=(50,), epochs=2)
    r = cli_runner.invoke(cli, ["report", "--help"])
    assert r.exit_code == 0
    for opt in ("-o, --out", "--label", "--json", "RUN/report", "./g3-report"):
        assert opt in r.output
    r = cli_runner.invoke(cli, ["report", str(run), "--label", "mine", "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.output)
    assert result["runs"][0]["label"] == "mine" and Path(result["index"]).is_file()
    r = cli_runner.invoke(cli, ["report", str(run), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    assert "throughput" in r.output and "no bin timeline" in r.output
    assert (tmp_path / "rep" / "index.html").is_file()
    r = cli_runner.invoke(cli, ["report"])
    assert r.exit_code == 2


def test_runs_of_several_strategies_are_labelled_by_strategy(tmp_path):
    """Comparing strategies: labels and the summary say which strategy trained each run (runs written before
    strategies existed are g3's), and time-to-accuracy draws them on one plot."""
    a = make_run(tmp_path / "a", name="run-a", trace=False)
    b = make_run(
        tmp_path / "b", name="run-b", pipeline=None, strategy="bns-gcn", trace=False, epoch_seconds=1.0
    )
    res = run_report([a, b], out=tmp_path / "rep")
    assert [r["label"] for r in res["runs"]] == ["g3: run-a", "bns-gcn: run-b"]
    assert [r["strategy"] for r in res["runs"]] == ["g3", "bns-gcn"]
    assert res["runs"][1]["pipeline"] == "-"
    tta = [p for p in res["plots"] if p["kind"] == "time_to_accuracy"]
    assert len(tta) == 1 and tta[0]["runs"] == ["g3: run-a", "bns-gcn: run-b"]
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "<th>strategy</th>" in html and "strategy bns-gcn" in html


def test_bytes_per_epoch_is_the_mean_of_training_phases(tmp_path):
    """A strategy that sends every other epoch moves half per epoch on average; evaluation's bytes and the first
    epoch (which also fetches the input features) are left out."""
    run = make_run(tmp_path, trace=False, epochs=5)
    lines = []
    for e, line in enumerate((run / "metrics.jsonl").read_text().splitlines()):
        rec = json.loads(line)
        for w in rec["workers"]:
            w["bytes_sent_per_phase"] = {
                "features0": 9999 if e == 0 else 0,
                "fwd0": 100 * (e % 2),
                "bwd1": 10,
                "eval0": 5000,
            }
        lines.append(json.dumps(rec))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    s = run_report([run], out=tmp_path / "rep")["runs"][0]
    # epochs 1-4, two workers: fwd 200, 0, 200, 0 and bwd 20 each
    assert s["bytes_sent_per_epoch"] == pytest.approx(120.0)


def _lines(ax) -> list[list[float]]:
    return [list(map(float, line.get_xdata())) for line in ax.get_lines() if len(line.get_xdata()) > 2]


def test_time_axes_leave_out_epoch_0_and_count_epochs_from_0(tmp_path):
    """Time to accuracy starts after epoch 0 (its JIT compilation would shift every curve), says so on its axis,
    and the throughput and per-worker plots number epochs from 0, as `g3 train` prints them."""
    import matplotlib.pyplot as plt

    from stages.report.data import load_run
    from stages.report.plots import throughput_figure, time_to_accuracy_figure, worker_breakdown_figure

    run = make_run(tmp_path, trace=False, epochs=6, eval_every=2)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    lines[0]["epoch_seconds"] = 10.0  # epoch 0: compilation
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    data = load_run(run)

    fig = time_to_accuracy_figure([data])
    ax = fig.axes[0]
    # evaluated after epochs 1, 3, 5: 2, 6, 10 s of training after epoch 0 (not 12, 16, 20)
    assert [list(map(float, line.get_xdata())) for line in ax.get_lines()] == [[2.0, 6.0, 10.0]] * 2
    assert ax.get_xlim()[0] == 0.0 and "after epoch 0" in ax.get_xlabel() and "JIT" in ax.get_xlabel()
    plt.close(fig)

    fig = throughput_figure([data])
    ax = fig.axes[0]
    assert _lines(ax) == [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]] and "from 0" in ax.get_xlabel()
    plt.close(fig)

    fig = worker_breakdown_figure(data)
    assert "mean of epochs 1–5" in fig.axes[0].get_title()  # epoch 0 left out, numbered as the CLI does
    plt.close(fig)


def test_a_comparisons_worker_plots_share_their_y_scale(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from stages.report.data import load_run
    from stages.report.run import plots

    fast = make_run(tmp_path / "a", trace=False, epoch_seconds=2.0)
    slow = make_run(tmp_path / "b", trace=False, epoch_seconds=6.0)
    data = [load_run(fast), load_run(slow)]
    top = plots.workers_top(data)
    assert top == pytest.approx(1.05 * 6.0)  # the slow run's stack: its epoch time (idle fills it)
    figs = [plots.worker_breakdown_figure(r, top) for r in data]
    assert [f.axes[0].get_ylim() for f in figs] == [(0.0, top)] * 2
    for f in figs:
        plt.close(f)
    alone = plots.worker_breakdown_figure(data[0])  # one run: its own scale
    assert alone.axes[0].get_ylim()[1] < 3.0
    plt.close(alone)

    drawn = []
    original = plots.worker_breakdown_figure
    monkeypatch.setattr(
        plots, "worker_breakdown_figure", lambda r, top=None: drawn.append(top) or original(r, top)
    )
    run_report([fast, slow], out=tmp_path / "rep")
    assert drawn == [pytest.approx(top)] * 2
    run_report([slow], out=tmp_path / "rep1")
    assert drawn[-1] is None
