"""Multi-host runs without a shared filesystem, on loopback (issue 23 §1, §2, §4): `g3 bundle` node folders,
two torchrun agents with a c10d rendezvous, each in its own copy of its node folder with nothing else on
"its host"; an elastic restart after a SIGKILLed worker. Both must end with the weights of `g3 train
--workers 4`, bit for bit."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import flags, g3_partition, g3_plan, invoke, ok, short_scratch
from test_train import max_weight_diff

K = 4
TRAIN = flags(epochs=6, seed=3, threads=1, dtype="float32", eval_every=0, checkpoint_every=2, timeout=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def source(store, tmp_path_factory) -> Path:
    """A store of its own (so the multi-host test can take it away), a 4-worker g3 plan and the reference run
    `g3 train --workers 4`, all under ``src/``."""
    root = tmp_path_factory.mktemp("multihost") / "src"
    shutil.copytree(store, root / "store")
    part = g3_partition(root / "store", root / "part", K, method="metis")
    ok(
        [
            "train",
            g3_plan(part, root / "plan", bin_size=40, hidden=6),
            "--workers",
            K,
            "-o",
            root / "reference",
            *TRAIN,
        ]
    )
    return root


def torchrun(cwd: Path, plan: str, nnodes: int, nproc: int, port: int, *extra: str, env: dict | None = None):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "g3-test",
        *extra,
        "-m",
        "g3cli",
        "train",
        plan,
        "-o",
        "run",
        *TRAIN,
    ]
    # the agent's torchelastic_* folder and the fork server's socket in a scratch folder removed after the test
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "TMPDIR": str(short_scratch()), **(env or {})}
    return subprocess.Popen(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


def finish(proc: subprocess.Popen, limit: float = 300) -> str:
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"torchrun did not finish in {limit} s:\n{out[-3000:]}") from None
    assert proc.returncode == 0, out[-3000:]
    return out


def weights(run: Path) -> dict:
    return torch.load(run / "model.pt", weights_only=True)


def test_two_hosts_without_a_shared_folder_match_four_local_workers(source, tmp_path):
    r = invoke(["bundle", str(source / "plan"), "--nodes", "2", "-o", str(tmp_path / "bundle")])
    assert r.exit_code == 0, r.output
    hosts = [tmp_path / "host0", tmp_path / "host1"]
    for n, host in enumerate(hosts):
        shutil.copytree(tmp_path / "bundle" / f"node-{n:05d}", host)
    shutil.rmtree(tmp_path / "bundle")
    # each "host" holds its node folder and nothing else: the store, partition and plan are gone meanwhile
    away = source.with_name("src-away")
    source.rename(away)
    try:
        assert sorted(p.name for p in (hosts[1] / "partition").iterdir()) == [
            "assignment.npy",
            "part-00002",
            "part-00003",
            "partition.json",
        ]
        port = free_port()
        procs = [torchrun(host, "plan", 2, 2, port) for host in hosts]
        outputs = [finish(p) for p in procs]
    finally:
        away.rename(source)
    assert "completed" in outputs[0]
    assert max_weight_diff(weights(source / "reference"), weights(hosts[0] / "run")) == 0.0
    # host 1 keeps its ranks' logs and every checkpoint, but not the run's record
    assert not (hosts[1] / "run" / "model.pt").exists() and not (hosts[1] / "run" / "metrics.jsonl").exists()
    assert sorted(p.name for p in (hosts[1] / "run" / "logs").glob("rank-*.log")) == [
        "rank-00002.log",
        "rank-00003.log",
    ]
    for host in hosts:
        assert (host / "run" / "checkpoints" / "epoch-00005.pt").is_file()
    assert json.loads((hosts[0] / "run" / "run.json").read_text())["status"] == "completed"
    # evaluated on the submit host with the plan that was bundled: the reference run's accuracy
    r = invoke(["eval", str(hosts[0] / "run")])
    assert r.exit_code == 2 and "this plan is node 0 of a bundle" in r.output and "--plan" in r.output, (
        r.output
    )
    r = invoke(["eval", str(hosts[0] / "run"), "--plan", str(source / "part")])
    assert r.exit_code == 2 and "plan.json" in r.output, r.output
    assert invoke(["eval", str(hosts[0] / "run"), "--plan", str(source / "plan")]).exit_code == 0
    assert invoke(["eval", str(source / "reference"), "--force"]).exit_code == 0
    accuracy = [
        json.loads((run / "eval.json").read_text())["accuracy"]
        for run in (hosts[0] / "run", source / "reference")
    ]
    assert accuracy[0] == accuracy[1]


def test_an_elastic_restart_after_a_killed_worker_ends_with_the_uninterrupted_weights(source, tmp_path):
    """Rank 1 of 2 is SIGKILLed at epoch 3, after the checkpoint of epoch 1; torchrun restarts the worker group,
    which resumes from that checkpoint by itself (no --resume). (Two workers rather than four: each torchrun
    worker is a fresh interpreter, and the restart starts them all again.)"""
    part = g3_partition(source / "store", tmp_path / "part", 2, method="metis")
    plan = g3_plan(part, tmp_path / "plan", bin_size=40, hidden=6)
    ok(["train", plan, "--workers", "2", "-o", tmp_path / "reference", *TRAIN])
    fault_done = tmp_path / "fault-happened"
    proc = torchrun(
        tmp_path,
        str(plan),
        1,
        2,
        free_port(),
        "--max-restarts",
        "1",
        env={"G3_FAULT": "1:3:kill", "G3_FAULT_ONCE": str(fault_done)},
    )
    finish(proc)
    assert fault_done.is_file()
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "completed"
    assert [h.get("restart") for h in info["history"] if h["status"] == "running"] == [0, 1]
    assert max_weight_diff(weights(tmp_path / "reference"), weights(tmp_path / "run")) == 0.0
    epochs = [
        json.loads(line)["epoch"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert epochs == list(range(6))


def test_bundle_bad_input_is_one_line(source, tmp_path):
    work = tmp_path / "copy"
    shutil.copytree(source / "part", work / "part")
    shutil.copytree(source / "plan", work / "plan")
    cases = [
        (["--nodes", "3"], "the plan's 4 workers do not split evenly over 3 nodes"),
        (
            ["--nodes", "2", "--procs-per-node", "3"],
            "--nodes 2 x --procs-per-node 3 = 6 processes, the plan has 4 workers",
        ),
        (["--nodes", "0"], "--nodes must be >= 1"),
    ]
    shutil.rmtree(work / "part" / "part-00002")
    cases.append((["--nodes", "2"], "part-00002 is missing: cannot bundle rank 2"))
    for args, message in cases:
        r = invoke(["bundle", str(work / "plan"), *args, "-o", str(tmp_path / "out")])
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, (args, r.output)
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "strategy,options", [("bns-gcn", ["--boundary-sample", "0.5"]), ("sancus", ["--staleness", "epoch:2"])]
)
def test_every_strategys_plan_bundles(source, tmp_path, strategy, options):
    """A node folder holds exactly its ranks' shards and plan folders, and its plan reads as the original
    (same strategy, its partition found inside the folder), even with the original gone."""
    part, plan = tmp_path / "part", tmp_path / "plan"
    method = "chunk" if strategy == "sancus" else "metis"
    assert (
        invoke(
            ["partition", str(source / "store"), "--workers", str(K), "--method", method, "-o", str(part)]
        ).exit_code
        == 0
    )
    assert invoke(["plan", str(part), "--strategy", strategy, *options, "-o", str(plan)]).exit_code == 0
    r = invoke(["bundle", str(plan), "--nodes", "2", "-o", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    shutil.rmtree(part)
    shutil.rmtree(plan)
    from stages.common.plan_artifact import load_plan_meta

    node = tmp_path / "b" / "node-00001"
    meta = load_plan_meta(node / "plan")
    assert meta["strategy"]["name"] == strategy
    assert Path(meta["partition"]["path"]).resolve() == (node / "partition").resolve()
    assert meta["bundle"]["ranks"] == [2, 3]
    assert sorted(p.name for p in (node / "plan").iterdir()) == ["plan.json", "worker-00002", "worker-00003"]
    # a node folder is for torchrun on its host, not for a local run of the whole plan
    r = invoke(["train", str(node / "plan"), "--workers", "4", "-o", str(tmp_path / "run")])
    assert r.exit_code == 2 and "this plan is node 1 of a bundle: run it with torchrun" in r.output, r.output


def test_the_slurm_node_script_runs_a_bundle_on_two_hosts(source, tmp_path):
    """examples/slurm/g3-node.sh as srun would start it on two hosts (SLURM_NODEID, SLURM_NNODES): each copies
    its node folder to its local folder, trains there and copies its run folder to the results; a host count
    other than the bundle's is refused."""
    part = g3_partition(source / "store", tmp_path / "part", 2, method="metis")
    plan = g3_plan(part, tmp_path / "plan", hidden=6)
    ok(["bundle", plan, "--nodes", "2", "-o", tmp_path / "bundle"])
    script = Path(__file__).resolve().parents[1] / "examples" / "slurm" / "g3-node.sh"
    port = free_port()

    def host(n: int, nnodes: int = 2) -> subprocess.Popen:
        env = {
            **os.environ,
            "SLURM_NODEID": str(n),
            "SLURM_NNODES": str(nnodes),
            "G3_RDZV": f"127.0.0.1:{port}",
            "G3_JOB": "slurm-test",
            "G3_LOCAL": str(tmp_path / f"local{n}"),
            "G3_RESULTS": str(tmp_path / "results"),
            "G3_PYTHON": sys.executable,
            "G3_MAX_RESTARTS": "0",
            "GLOO_SOCKET_IFNAME": "lo",
            "TMPDIR": str(short_scratch()),  # torchrun's torchelastic_* folder, removed after the test
        }
        return subprocess.Popen(
            ["bash", str(script), str(tmp_path / "bundle"), "--epochs", "2", "--threads", "1"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    wrong = host(0, nnodes=3)
    out, _ = wrong.communicate(timeout=60)
    assert wrong.returncode == 2 and "was bundled for 2 hosts, this job has 3" in out, out
    for p in [host(0), host(1)]:
        finish(p)
    assert (tmp_path / "local1" / "node-00001" / "run" / "logs" / "rank-00001.log").is_file()
    assert json.loads((tmp_path / "results" / "node-00000" / "run.json").read_text())["status"] == "completed"
    assert (tmp_path / "results" / "node-00000" / "model.pt").is_file()
    assert (tmp_path / "results" / "node-00001" / "logs" / "rank-00001.log").is_file()


def test_eval_refuses_a_plan_the_run_was_not_trained_with(source, tmp_path):
    other = tmp_path / "other"
    assert invoke(["plan", str(source / "part"), "--hidden", "7", "-o", str(other)]).exit_code == 0
    r = invoke(["eval", str(source / "reference"), "--plan", str(other), "--force"])
    assert r.exit_code == 2 and "not the plan this run was trained with: its model differs" in r.output, (
        r.output
    )


def test_a_bundle_carries_every_layout_of_the_partition(store, tmp_path, monkeypatch):
    """A method may write several layouts (P3: rows and columns; the further one's shards in PART/columns):
    every node folder holds its ranks' shards of each, byte for byte, and a missing one is refused up front."""
    import dataclasses

    from stages.kits.partition.methods import KIT_METHODS
    from stages.strategies import registry

    monkeypatch.setattr(
        registry,
        "KIT_METHODS",
        tuple(
            dataclasses.replace(m, layouts=("rows", "columns")) if m.name == "random" else m
            for m in KIT_METHODS
        ),
    )
    part, plan = tmp_path / "part", tmp_path / "plan"
    assert (
        invoke(
            ["partition", str(store), "--workers", str(K), "--method", "random", "-o", str(part)]
        ).exit_code
        == 0
    )
    assert json.loads((part / "partition.json").read_text())["layouts"] == ["rows", "columns"]
    assert invoke(["plan", str(part), "--bin-size", "40", "--hidden", "6", "-o", str(plan)]).exit_code == 0
    r = invoke(["bundle", str(plan), "--nodes", "2", "-o", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    for n, ranks in enumerate([(0, 1), (2, 3)]):
        node = tmp_path / "b" / f"node-{n:05d}" / "partition"
        for layout in (node, node / "columns"):
            assert sorted(p.name for p in layout.glob("part-*")) == [f"part-{r:05d}" for r in ranks]
        for r in ranks:
            for name in ("shard.json", "features.npy", "in_degree.npy"):
                got = node / "columns" / f"part-{r:05d}" / name
                assert got.read_bytes() == (part / "columns" / f"part-{r:05d}" / name).read_bytes(), got
            assert np.array_equal(
                np.load(node / f"part-{r:05d}" / "owned.npy"), np.load(part / f"part-{r:05d}" / "owned.npy")
            )
    shutil.rmtree(part / "columns" / "part-00003")
    r = invoke(["bundle", str(plan), "--nodes", "2", "-o", str(tmp_path / "c")])
    assert r.exit_code == 2 and "part-00003 is missing: cannot bundle rank 3" in r.output, r.output
    assert not (tmp_path / "c").exists()
