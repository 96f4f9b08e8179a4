"""examples/Makefile: every target expands (make -n) to the expected g3 commands with the paper's options, and
every option it passes exists in the g3 CLI."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(*args: str, check: bool = True) -> list[list[str]]:
    """`make -n` of examples/Makefile: the g3 commands it would run, as argument lists."""
    proc = subprocess.run(
        ["make", "-s", "-n", "-C", str(EXAMPLES), "G3=g3", *args], capture_output=True, text=True, timeout=60
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    cmds = [shlex.split(line) for line in proc.stdout.splitlines()]
    return [c for c in cmds if c and Path(c[0]).name == "g3"]


def option(cmd: list[str], name: str) -> str:
    assert name in cmd, (name, cmd)
    return cmd[cmd.index(name) + 1]


def by_verb(cmds: list[list[str]], verb: str) -> list[list[str]]:
    return [c for c in cmds if c[1] == verb]


@pytest.mark.parametrize(
    "target, bin_size, epochs, eval_every",
    [
        ("products", "5000", "300", "5"),
        ("amazon", "5000", "300", "5"),
        ("papers", "1000", "100", "5"),
        ("twitter", "1000", "10", "0"),
    ],
)
@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_dataset_targets_chain_the_pipeline(tmp_path, target, bin_size, epochs, eval_every, model):
    cmds = dry_run(target, "DATA=/data/x", f"OUT={tmp_path}", "WORKERS=16", f"MODEL={model}")
    assert [c[1] for c in cmds] == ["ingest", "partition", "plan", "train", "eval", "report"]
    ingest, part, plan, train, ev, report = cmds
    store = str(tmp_path / target)
    assert ingest[2] == "/data/x" and store in ingest
    assert part[2] == store and option(part, "--workers") == "16" and option(part, "--method") == "g3"
    assert plan[2] == option(part, "-o")
    assert option(plan, "--model") == model and option(plan, "--layers") == "2"
    assert option(plan, "--hidden") == "16" and option(plan, "--heads") == "8"
    assert option(plan, "--bin-size") == bin_size
    assert train[2] == option(plan, "-o") and option(train, "--workers") == "16"
    assert option(train, "--epochs") == epochs and option(train, "--eval-every") == eval_every
    assert option(train, "--pipeline") == "none"
    run = option(train, "-o")
    assert ev[2] == run and report[2] == run and option(report, "-o") == f"{run}/report"
    if target == "twitter":
        assert option(ingest, "--format") == "webgraph" and option(ingest, "--feat-dim") == "128"
        assert option(ingest, "--num-classes") == "100" and "--labeled-ratio" in ingest


def test_overrides_and_missing_data(tmp_path):
    cmds = dry_run(
        "products", "DATA=/d", f"OUT={tmp_path}", "EPOCHS=7", "METHOD=metis", "LR=0.003", "G3=/opt/bin/g3"
    )
    assert {c[0] for c in cmds} == {"/opt/bin/g3"}
    train = by_verb(cmds, "train")[0]
    assert option(train, "--epochs") == "7" and option(train, "--lr") == "0.003"
    assert option(by_verb(cmds, "partition")[0], "--method") == "metis"
    proc = subprocess.run(
        ["make", "-n", "-C", str(EXAMPLES), "products", f"OUT={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "DATA=" in proc.stderr


def test_scaling_sweep(tmp_path):
    cmds = dry_run("papers-scaling", "DATA=/d", f"OUT={tmp_path}", "WORKER_COUNTS=2 4 8 16")
    assert len(by_verb(cmds, "ingest")) == 1
    assert [option(c, "--workers") for c in by_verb(cmds, "train")] == ["2", "4", "8", "16"]
    assert len(by_verb(cmds, "eval")) == 4
    (report,) = by_verb(cmds, "report")
    assert [report[i + 1] for i, a in enumerate(report) if a == "--label"] == ["K=2", "K=4", "K=8", "K=16"]
    assert all(option(c, "--bin-size") == "1000" for c in by_verb(cmds, "plan"))


def test_partition_bench(tmp_path):
    cmds = dry_run("partition-bench", f"OUT={tmp_path}", "WORKER_COUNTS=2 4")
    (ingest,) = by_verb(cmds, "ingest")
    assert ingest[2] == "synthetic:small"
    parts = by_verb(cmds, "partition")
    assert sorted((option(c, "--method"), option(c, "--workers")) for c in parts) == sorted(
        (m, k) for m in ("random", "chunk", "metis", "g3") for k in ("2", "4")
    )
    trains = by_verb(cmds, "train")
    assert len(trains) == 8 and {option(c, "--pipeline") for c in trains} == {"none"}
    assert {option(c, "--epochs") for c in trains} == {"5"}
    (report,) = by_verb(cmds, "report")
    runs = [option(c, "-o") for c in trains]
    assert report[2 : 2 + len(runs)] == runs and option(report, "-o") == f"{tmp_path}/partition-bench/report"
    assert not by_verb(cmds, "eval")


def test_pipeline_bench_loops_over_every_variant(tmp_path):
    cmds = dry_run("pipeline-bench", f"OUT={tmp_path}", "WORKER_COUNTS=2 4", "BENCH_PRESET=tiny", "EPOCHS=3")
    assert by_verb(cmds, "ingest")[0][2] == "synthetic:tiny"
    trains = by_verb(cmds, "train")
    assert sorted((option(c, "--pipeline"), option(c, "--workers")) for c in trains) == sorted(
        (p, k) for p in ("none", "inter", "intra", "multi") for k in ("2", "4")
    )
    assert {option(c, "--epochs") for c in trains} == {"3"}
    assert len(by_verb(cmds, "partition")) == 2 and len(by_verb(cmds, "plan")) == 2  # shared by the variants
    # both benchmarks together share the g3 partitions and the g3 / none runs
    both = dry_run("partition-bench", "pipeline-bench", f"OUT={tmp_path}", "WORKER_COUNTS=2")
    assert len(by_verb(both, "train")) == 4 + 3 and len(by_verb(both, "report")) == 2


def test_every_option_exists_in_the_cli(tmp_path):
    from g3cli.main import cli

    cmds = []
    for target in (
        "products",
        "amazon",
        "papers",
        "twitter",
        "products-scaling",
        "partition-bench",
        "pipeline-bench",
        "papers-bundle",
        "papers-slurm-eval",
    ):
        cmds += dry_run(target, "DATA=/d", f"OUT={tmp_path}", "WORKER_COUNTS=2")
    for cmd in cmds:
        command = cli.get_command(None, cmd[1])
        known = {o for p in command.params for o in p.opts + p.secondary_opts}
        unknown = [a for a in cmd[2:] if a.startswith("-") and a not in known]
        assert not unknown, (cmd, unknown)


def test_cluster_targets_bundle_submit_and_evaluate(tmp_path):
    """`<dataset>-slurm`: the plan for WORKERS bundled for NODES hosts, then one sbatch of slurm/g3-train.sbatch
    with the bundle, the results folder and the train options (no --workers: torchrun starts the ranks);
    `<dataset>-slurm-eval` evaluates the results of host 0 with the plan that was bundled."""
    proc = subprocess.run(
        [
            "make",
            "-s",
            "-n",
            "-C",
            str(EXAMPLES),
            "G3=g3",
            "papers-slurm",
            "DATA=/d",
            f"OUT={tmp_path}",
            "WORKERS=16",
            "NODES=4",
            "SBATCH_ARGS=--partition=gpu",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    cmds = [shlex.split(line) for line in proc.stdout.splitlines()]
    assert [c[1] for c in cmds if c[0] == "g3"] == ["ingest", "partition", "plan", "bundle"]
    plan, bundle = [c for c in cmds if c[0] == "g3"][2:]
    assert bundle[2] == option(plan, "-o") and option(bundle, "--nodes") == "4"
    (sbatch,) = [c for c in cmds if c[0] == "sbatch"]
    assert option(sbatch, "--nodes") == "4" and "--partition=gpu" in sbatch
    script = sbatch.index("slurm/g3-train.sbatch")
    assert (EXAMPLES / sbatch[script]).is_file()
    assert (
        sbatch[script + 1] == option(bundle, "-o") and sbatch[script + 2] == option(bundle, "-o") + ".results"
    )
    train_options = sbatch[script + 3 :]
    assert option(train_options, "--epochs") == "100" and option(train_options, "--checkpoint-every") == "10"
    assert "--workers" not in train_options
    from g3cli.main import cli

    known = {o for p in cli.get_command(None, "train").params for o in p.opts}
    assert [a for a in train_options if a.startswith("-") and a not in known] == []
    ev, report = dry_run("papers-slurm-eval", "DATA=/d", f"OUT={tmp_path}", "WORKERS=16", "NODES=4")
    assert (
        ev[1] == "eval"
        and ev[2] == sbatch[script + 2] + "/node-00000"
        and option(ev, "--plan") == option(plan, "-o")
    )
    assert report[1] == "report" and report[2] == ev[2]


def test_help_is_the_default_target():
    proc = subprocess.run(["make", "-s", "-C", str(EXAMPLES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "partition-bench" in proc.stdout and "Fig. 17" in proc.stdout


def _bench_folder(tmp: Path) -> Path:
    """A `g3 bench -o` folder written by hand: one strategy run of two workers over three epochs (2 steps each,
    known bytes per phase), a plan with one per-epoch collective, a DGL entry and a peer that did not run."""
    import json

    run, plan = tmp / "run-x-metis-2", tmp / "plan-x"
    run.mkdir(parents=True)
    plan.mkdir()
    (plan / "plan.json").write_text(
        json.dumps(
            {
                "collectives": [
                    {"elements_sent": [2**18, 2**18], "once": False},
                    {"elements_sent": [10**9], "once": True},
                ]
            }
        )
    )
    (run / "run.json").write_text(json.dumps({"plan": {"path": str(plan)}}))

    def worker(
        rank, epoch
    ):  # rank 1 computes twice rank 0's; epoch e sends e MiB of features and 1 MiB of eval
        return {
            "rank": rank,
            "compute_seconds": 1.0 + rank,
            "compute_cpu_seconds": 0.5 * (1 + rank),
            "comm_wait_seconds": 0.1 * (rank + 1),
            "peak_memory_bytes": 2**30 * (1 + rank),
            "fetched_rows": 100 * epoch,
            "sampled_arcs": 1000,
            "bytes_sent": (epoch + 1) * 2**20,
            "bytes_sent_per_phase": {"features0": epoch * 2**20, "sample": 2**19, "eval0": 2**20},
        }

    recs = [
        {
            "epoch": e,
            "epoch_seconds": 3.0 - e,
            "steps": 2,
            "workers": [worker(0, e), worker(1, e)],
            "link_bytes_sent": (e + 2) * 2**20,
        }
        for e in range(3)
    ]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    entries = [
        {
            "system": "x",
            "label": "x@metis, 2 workers",
            "status": "ok",
            "note": "",
            "strategy": "x",
            "method": "metis",
            "options": {"boundary_sample": 0.1},
            "workers": 2,
            "run": str(run),
            "epoch_seconds": [3.0, 2.0, 1.0],
            "median_epoch_seconds": 1.5,
            "peak_memory_bytes": [2**30, 2**31],
            "test_acc": 0.9021,
            "vs_dgl": 0.5,
            "link": "1gbit",
            "hosts": 2,
            "comm_hidden_share": 0.25,
        },
        {
            "system": "dgl",
            "label": "DGL 2.1.0",
            "status": "ok",
            "note": "",
            "workers": 1,
            "epoch_seconds": [4.0, 3.0],
            "median_epoch_seconds": 3.0,
            "test_acc": 0.9,
            "vs_dgl": 1.0,
            "seeds_per_second": 12345.6,
        },
        {
            "system": "pyg",
            "label": "PyG",
            "status": "not installed",
            "note": "PyG: not installed (make peers)",
            "workers": 1,
            "epoch_seconds": [],
            "median_epoch_seconds": None,
        },
    ]
    (tmp / "bench.json").write_text(
        json.dumps(
            {
                "store": {"name": "tiny", "num_nodes": 1000, "num_arcs": 5000},
                "options": {"model": "sage", "hidden": 16, "epochs": 3},
                "entries": entries,
                "load_average": {"before": [1.5, 0, 0], "after": [2.25, 0, 0]},
                "cpu_count": 2,
                "created": "2026-11-25T10:00:00",
            }
        )
    )
    return tmp


def test_bench_table_regenerates_every_table_from_a_bench_folder(tmp_path, capsys):
    """examples/bench_table.py: each --table kind computes its figures from bench.json and the run's metrics (the
    steady epochs 1-2; tp: epoch 1 alone), captions the folder with graph, date, load and cores, and lists what
    did not run below the table."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_table", EXAMPLES / "bench_table.py")
    bt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bt)
    folder = _bench_folder(tmp_path)

    def rows(kind):
        assert bt.main(["--table", kind, str(folder)]) == 0
        out = capsys.readouterr().out
        assert (
            "`tiny` (1,000 nodes, 5,000 arcs)" in out
            and "2026-11-25T10:00:00, load 1.50 → 2.25 on 2 cores" in out
        )
        assert "- PyG: not installed — PyG: not installed (make peers)" in out
        return [
            [c.strip() for c in line.strip("|").split("|")]
            for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| ---")
        ][1:]

    # training bytes per epoch: e MiB of features + 0.5 MiB of sampling per worker (eval left out): epochs 1, 2
    # give 3 and 5 MiB over both workers, mean 4.0; compute 1 and 2 s (wall), 0.5 and 1.0 (CPU): max/mean 4/3
    assert rows("strategies") == [
        ["2", "`x@metis {boundary-sample=0.1}`", "1.500", "4.0", "1.333, 1.333", "0.200", "1.00–2.00"]
    ]
    # per global step (2 steps): bytes 2.0 MiB, features 1.5, sampling 0.5; fetched rows (100 e · 2) / 2; arcs 1000
    assert rows("minibatch") == [["metis (x)", "2", "750 ms", "2.0", "1.5", "0.50", "150", "1,000"]]
    # tp: epoch 1 only (no warm-up, no final evaluation): bytes_sent 2 MiB per worker; formula 4 · 2^19 B = 2 MiB
    assert rows("tp") == [
        ["x@metis, 2 workers", "2", "1.500 s", "4.0", "2.0", "1.333", "2048 MiB", "90.21 %"]
    ]
    # on emulated hosts: the links carried (2 + e) MiB in epochs 1, 2: mean 3.5
    assert rows("network") == [
        ["1gbit", "2", "2", "`x@metis {boundary-sample=0.1}`", "1.500", "4.0", "3.5", "0.200", "25 %"]
    ]
    assert rows("peers") == [
        ["x@metis, 2 workers", "2", "1.50 s", "0.50×", "90.21 %", "-", "3.000, 2.000, 1.000"],
        ["DGL 2.1.0", "1", "3.00 s", "1.00×", "90.00 %", "12,346", "4.000, 3.000"],
    ]
    with pytest.raises(SystemExit) as exc:
        bt.main(["--table", "peers", str(tmp_path / "run-x-metis-2")])
    assert exc.value.code == 2 and "run-x-metis-2: no bench.json" in capsys.readouterr().err
