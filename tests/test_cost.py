"""Every stage records what it cost — wall time and peak resident memory of its processes — in its artifact, and
`g3 info` shows it (so a user sizes a machine from what their run took)."""

from __future__ import annotations

import json
import shutil

import pytest
from test_train import invoke

from stages.common.cost import disk_bytes, process_peak_bytes


@pytest.mark.slow
def test_each_stage_records_its_time_and_peak_memory_and_info_shows_it(tiny_store, tmp_path):
    store = tmp_path / "s.g3"
    r = invoke(["ingest", "synthetic:tiny", str(store)])
    assert r.exit_code == 0, r.output
    part, plan, run = tmp_path / "p", tmp_path / "P", tmp_path / "R"
    for args in (
        ["partition", str(store), "--workers", "2", "-o", str(part)],
        ["plan", str(part), "--hidden", "4", "-o", str(plan)],
        ["train", str(plan), "--epochs", "1", "--threads", "1", "-o", str(run)],
        ["eval", str(run)],
    ):
        r = invoke(args)
        assert r.exit_code == 0, r.output
    zattrs = json.loads((store / "zarr.json").read_text())["attributes"]["g3"]
    costs = {
        "store": zattrs["cost"],
        "partition": json.loads((part / "partition.json").read_text())["cost"],
        "plan": json.loads((plan / "plan.json").read_text())["cost"],
        "run": json.loads((run / "run.json").read_text())["cost"],
        "eval": json.loads((run / "eval.json").read_text())["cost"],
    }
    for kind, cost in costs.items():
        assert cost["seconds"] > 0 and cost["peak_memory_bytes"] >= cost["process_peak_bytes"] > 10 * 2**20, (
            kind
        )
        assert cost["peak_memory_bytes"] == cost["process_peak_bytes"] + cost["workers_peak_bytes"], kind
    # training's two workers report their own peaks, added to the command's
    assert costs["run"]["workers_peak_bytes"] > 2 * 10 * 2**20
    # this process ran the in-process stages: its high-water mark holds the plan's, give or take what the kernel
    # updates lazily (pages a reader released with madvise do not raise VmHWM when they go)
    assert process_peak_bytes() >= costs["plan"]["process_peak_bytes"] - 2**20
    # and the disk each folder took, before its JSON: within what it holds when done, most of it
    for kind, artifact in (("store", store), ("partition", part), ("plan", plan), ("run", run)):
        held = disk_bytes(artifact)
        assert 0.5 * held < costs[kind]["disk_bytes"] <= held, (kind, costs[kind], held)
    for artifact in (store, part, plan, run):
        r = invoke(["info", str(artifact)])
        assert r.exit_code == 0 and "made in " in r.output and "peak memory" in r.output, (artifact, r.output)
        assert ", disk " in r.output, r.output
    # an artifact from before costs were recorded reads as before
    from stages.common.artifact_json import sealed

    old = tmp_path / "old.g3"
    shutil.copytree(tiny_store, old)
    meta = json.loads((old / "zarr.json").read_text())
    meta["attributes"]["g3"] = sealed(
        {k: v for k, v in meta["attributes"]["g3"].items() if k not in ("cost", "content_sha256")}
    )
    (old / "zarr.json").write_text(json.dumps(meta))
    r = invoke(["info", str(old)])
    assert r.exit_code == 0 and "made in" not in r.output, r.output


def _fake_system(tmp_path, cgroup_line: str, files: dict) -> str:
    """A root with /proc/meminfo (8 GiB available), /proc/self/cgroup and the cgroup files given."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text("MemTotal:  16777216 kB\nMemAvailable:  8388608 kB\n")
    (tmp_path / "proc/self/cgroup").write_text(cgroup_line + "\n")
    for name, text in files.items():
        f = tmp_path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return str(tmp_path)


def test_available_memory_is_the_cgroups_room_where_one_limits_the_process(tmp_path):
    """A stage sizing itself (g3 partition's default --metis-memory) takes a memory cgroup's limit less its use
    (dropping reclaimable page cache) when that is below MemAvailable; no limit, or none readable: MemAvailable."""
    from stages.common.cost import available_memory, memory_limit

    gib = 1 << 30
    v1 = _fake_system(
        tmp_path / "v1",
        "9:memory:/g3",
        {
            "sys/fs/cgroup/memory/g3/memory.limit_in_bytes": str(6 * gib),
            "sys/fs/cgroup/memory/g3/memory.usage_in_bytes": str(3 * gib),
            "sys/fs/cgroup/memory/g3/memory.stat": f"total_rss {gib}\ntotal_inactive_file {gib}\n",
        },
    )
    assert available_memory(v1) == (4 * gib, "the memory cgroup's limit")
    v2 = _fake_system(
        tmp_path / "v2",
        "0::/job",
        {
            "sys/fs/cgroup/job/memory.max": str(2 * gib),
            "sys/fs/cgroup/job/memory.current": str(gib),
            "sys/fs/cgroup/job/memory.stat": "anon 1\ninactive_file 0\n",
        },
    )
    assert available_memory(v2) == (gib, "the memory cgroup's limit")
    unlimited = _fake_system(
        tmp_path / "max",
        "0::/job",
        {
            "sys/fs/cgroup/job/memory.max": "max",
            "sys/fs/cgroup/job/memory.current": "1",
            "sys/fs/cgroup/job/memory.stat": "",
        },
    )
    assert available_memory(unlimited) == (8 * gib, "MemAvailable")
    roomy = _fake_system(
        tmp_path / "roomy",
        "9:memory:/g3",
        {
            "sys/fs/cgroup/memory/g3/memory.limit_in_bytes": str(64 * gib),
            "sys/fs/cgroup/memory/g3/memory.usage_in_bytes": "0",
            "sys/fs/cgroup/memory/g3/memory.stat": "",
        },
    )
    assert available_memory(roomy) == (8 * gib, "MemAvailable")
    assert available_memory(str(tmp_path / "nothing")) == (None, "MemAvailable unknown")
    # all the memory there is: the cgroup's limit where it is below MemTotal (16 GiB here)
    assert memory_limit(v1) == (6 * gib, "the memory cgroup's limit")
    assert memory_limit(unlimited) == (16 * gib, "MemTotal")
    assert memory_limit(roomy) == (16 * gib, "MemTotal")
    assert memory_limit(str(tmp_path / "nothing")) == (None, "MemTotal unknown")


def test_plans_size_their_bins_for_the_memory_training_may_take_on_a_cpu(monkeypatch):
    """Without CUDA, `g3 plan --device-memory auto` gives each of the K workers a share of the machine's memory, or
    its memory cgroup's limit where less, after the launcher, the fork server and each worker's interpreter:
    a plan made in a 6 GiB cgroup streams bins that fit it at K = 4; never under the least share."""
    import torch

    from stages.kits.plan import residency
    from stages.kits.runtime.launch.processes import FORK_SERVER_BYTES, PROCESS_BYTES

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    limit = {"bytes": 6 << 30}
    monkeypatch.setattr("stages.common.cost.memory_limit", lambda root="/": (limit["bytes"], "the cgroup"))
    share = residency.auto_device_memory(4)
    assert share == (((6 << 30) - PROCESS_BYTES - FORK_SERVER_BYTES) // 4 - PROCESS_BYTES) * 3 // 4
    assert 4 * (share + PROCESS_BYTES) + PROCESS_BYTES + FORK_SERVER_BYTES < 6 << 30
    assert residency.auto_device_memory(1) > 3 * share
    limit["bytes"] = 256 << 20
    assert residency.auto_device_memory(4) == residency.MIN_AUTO_DEVICE_MEMORY


def test_ingest_budget_is_cgroup_aware(monkeypatch):
    """`g3 ingest --memory-limit auto` (the default): 4 GiB, or half of what the process may take where that is
    less (a small machine or a memory cgroup), never under 64 MiB; a given size is kept."""
    from stages.ingest.build import IngestOptions, parse_memory_limit

    room = {"bytes": 64 << 30}
    monkeypatch.setattr(
        "stages.common.cost.available_memory", lambda root="/": (room["bytes"], "MemAvailable")
    )
    assert IngestOptions().memory_budget == 4 << 30
    room["bytes"] = 3 << 30
    assert IngestOptions().memory_budget == 3 << 29
    room["bytes"] = 10 << 20
    assert IngestOptions().memory_budget == 64 << 20
    assert IngestOptions(memory_limit=parse_memory_limit("8GiB")).memory_budget == 8 << 30
    assert parse_memory_limit("auto") is None


def test_a_stage_whose_floor_exceeds_the_machines_memory_is_refused_naming_it(monkeypatch, tmp_path):
    """Ingest (its --memory-limit and per-node arrays), partition (the graph's arcs, per-node arrays, a given
    --metis-memory) and plan (the planner, per arc) add up what they hold at least; above all the memory the machine or its cgroup has, they
    refuse before any work with one line naming the floor, and write nothing."""
    limit = {"bytes": 1 << 40}
    monkeypatch.setattr("stages.common.cost.memory_limit", lambda root="/": (limit["bytes"], "MemTotal"))
    store = tmp_path / "s.g3"
    limit["bytes"] = 32 << 20  # under ingest's smallest --memory-limit (64 MiB)
    r = invoke(["ingest", "synthetic:tiny", str(store), "--memory-limit", "64MiB"])
    assert r.exit_code == 2 and "this ingest needs at least" in r.output and "--memory-limit 64" in r.output
    assert "MemTotal (32" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not store.exists()
    limit["bytes"] = 1 << 40
    assert invoke(["ingest", "synthetic:tiny", str(store)]).exit_code == 0
    limit["bytes"] = 1 << 30
    part = tmp_path / "p"
    r = invoke(
        ["partition", str(store), "-w", "2", "--method", "metis", "--metis-memory", "2GiB", "-o", str(part)]
    )
    assert r.exit_code == 2 and "this partition needs at least" in r.output and "--metis-memory 2" in r.output
    assert "the graph's arcs" in r.output and not part.exists(), r.output
    assert invoke(["partition", str(store), "-w", "2", "--method", "metis", "-o", str(part)]).exit_code == 0
    limit["bytes"] = 128 << 20  # under the planner's own memory
    r = invoke(["plan", str(part), "-o", str(tmp_path / "plan")])
    assert r.exit_code == 2 and "this plan needs at least" in r.output and "the planner" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "plan").exists(), r.output
