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
    proc = subprocess.run(["make", "-s", "-n", "-C", str(EXAMPLES), "G3=g3", *args], capture_output=True, text=True,
                          timeout=60)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    cmds = [shlex.split(line) for line in proc.stdout.splitlines()]
    return [c for c in cmds if c and Path(c[0]).name == "g3"]


def option(cmd: list[str], name: str) -> str:
    assert name in cmd, (name, cmd)
    return cmd[cmd.index(name) + 1]


def by_verb(cmds: list[list[str]], verb: str) -> list[list[str]]:
    return [c for c in cmds if c[1] == verb]


@pytest.mark.parametrize("target, bin_size, epochs, eval_every", [
    ("products", "5000", "300", "5"),
    ("amazon", "5000", "300", "5"),
    ("papers", "1000", "100", "5"),
    ("twitter", "1000", "10", "0"),
])
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
    cmds = dry_run("products", "DATA=/d", f"OUT={tmp_path}", "EPOCHS=7", "METHOD=metis", "LR=0.003",
                   "G3=/opt/bin/g3")
    assert {c[0] for c in cmds} == {"/opt/bin/g3"}
    train = by_verb(cmds, "train")[0]
    assert option(train, "--epochs") == "7" and option(train, "--lr") == "0.003"
    assert option(by_verb(cmds, "partition")[0], "--method") == "metis"
    proc = subprocess.run(["make", "-n", "-C", str(EXAMPLES), "products", f"OUT={tmp_path}"], capture_output=True,
                          text=True, timeout=60)
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
        (m, k) for m in ("random", "chunk", "metis", "g3") for k in ("2", "4"))
    trains = by_verb(cmds, "train")
    assert len(trains) == 8 and {option(c, "--pipeline") for c in trains} == {"none"}
    assert {option(c, "--epochs") for c in trains} == {"5"}
    (report,) = by_verb(cmds, "report")
    runs = [option(c, "-o") for c in trains]
    assert report[2:2 + len(runs)] == runs and option(report, "-o") == f"{tmp_path}/partition-bench/report"
    assert not by_verb(cmds, "eval")


def test_pipeline_bench_loops_over_every_variant(tmp_path):
    cmds = dry_run("pipeline-bench", f"OUT={tmp_path}", "WORKER_COUNTS=2 4", "BENCH_PRESET=tiny", "EPOCHS=3")
    assert by_verb(cmds, "ingest")[0][2] == "synthetic:tiny"
    trains = by_verb(cmds, "train")
    assert sorted((option(c, "--pipeline"), option(c, "--workers")) for c in trains) == sorted(
        (p, k) for p in ("none", "inter", "intra", "multi") for k in ("2", "4"))
    assert {option(c, "--epochs") for c in trains} == {"3"}
    assert len(by_verb(cmds, "partition")) == 2 and len(by_verb(cmds, "plan")) == 2  # shared by the variants
    # both benchmarks together share the g3 partitions and the g3 / none runs
    both = dry_run("partition-bench", "pipeline-bench", f"OUT={tmp_path}", "WORKER_COUNTS=2")
    assert len(by_verb(both, "train")) == 4 + 3 and len(by_verb(both, "report")) == 2


def test_every_option_exists_in_the_cli(tmp_path):
    from g3cli.main import cli

    cmds = []
    for target in ("products", "amazon", "papers", "twitter", "products-scaling", "partition-bench",
                   "pipeline-bench", "papers-bundle", "papers-slurm-eval"):
        cmds += dry_run(target, "DATA=/d", f"OUT={tmp_path}", "WORKER_COUNTS=2")
    for cmd in cmds:
        command = cli.commands[cmd[1]]
        known = {o for p in command.params for o in p.opts + p.secondary_opts}
        unknown = [a for a in cmd[2:] if a.startswith("-") and a not in known]
        assert not unknown, (cmd, unknown)


def test_cluster_targets_bundle_submit_and_evaluate(tmp_path):
    """`<dataset>-slurm`: the plan for WORKERS bundled for NODES hosts, then one sbatch of slurm/g3-train.sbatch
    with the bundle, the results folder and the train options (no --workers: torchrun starts the ranks);
    `<dataset>-slurm-eval` evaluates the results of host 0 with the plan that was bundled."""
    proc = subprocess.run(["make", "-s", "-n", "-C", str(EXAMPLES), "G3=g3", "papers-slurm", "DATA=/d",
                           f"OUT={tmp_path}", "WORKERS=16", "NODES=4", "SBATCH_ARGS=--partition=gpu"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    cmds = [shlex.split(line) for line in proc.stdout.splitlines()]
    assert [c[1] for c in cmds if c[0] == "g3"] == ["ingest", "partition", "plan", "bundle"]
    plan, bundle = [c for c in cmds if c[0] == "g3"][2:]
    assert bundle[2] == option(plan, "-o") and option(bundle, "--nodes") == "4"
    (sbatch,) = [c for c in cmds if c[0] == "sbatch"]
    assert option(sbatch, "--nodes") == "4" and "--partition=gpu" in sbatch
    script = sbatch.index("slurm/g3-train.sbatch")
    assert (EXAMPLES / sbatch[script]).is_file()
    assert sbatch[script + 1] == option(bundle, "-o") and sbatch[script + 2] == option(bundle, "-o") + ".results"
    train_options = sbatch[script + 3:]
    assert option(train_options, "--epochs") == "100" and option(train_options, "--checkpoint-every") == "10"
    assert "--workers" not in train_options
    from g3cli.main import cli

    known = {o for p in cli.commands["train"].params for o in p.opts}
    assert [a for a in train_options if a.startswith("-") and a not in known] == []
    ev, report = dry_run("papers-slurm-eval", "DATA=/d", f"OUT={tmp_path}", "WORKERS=16", "NODES=4")
    assert ev[1] == "eval" and ev[2] == sbatch[script + 2] + "/node-00000" and option(ev, "--plan") == option(plan, "-o")
    assert report[1] == "report" and report[2] == ev[2]


def test_help_is_the_default_target():
    proc = subprocess.run(["make", "-s", "-C", str(EXAMPLES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "partition-bench" in proc.stdout and "Fig. 17" in proc.stdout
