"""Node ids, pointers and degrees in the shards and plans are written in the narrowest integer type that holds them
(int32 below 2^31, docs/ARTIFACTS.md): a small graph's are int32, and a partition and plan written so train the
model, bit for bit, that the same artifacts with every such array widened back to int64 (what g3 wrote before,
and still reads) train."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import g3_partition, g3_plan, g3_train

# what shards and plans held as int64 before they were narrowed (by file name; layer arrays by their leaf name)
SHARD_IDS = (
    "owned",
    "remote",
    "remote_owner_ptr",
    "indptr",
    "in_degree",
    "out_degree",
    "train",
    "valid",
    "test",
    "send_ptr",
    "send",
)
PLAN_IDS = ("priority", "row_ptr", "bin_ptr", "src_ptr", "src", "owned")


def _id_files(folder: Path, json_name: str) -> list[str]:
    """The manifest names of the id arrays of a shard or plan worker folder."""
    names = json.loads((folder / json_name).read_text())["files"]
    ids = SHARD_IDS if json_name == "shard.json" else PLAN_IDS
    return [
        n
        for n in names
        if Path(n).stem in ids or (n.endswith(("_nodes.npy", "_msgs.npy")) and json_name == "worker.json")
    ]


def _folders(root: Path) -> list[tuple[Path, str]]:
    return [(f.parent, f.name) for f in sorted(root.rglob("shard.json"))] + [
        (f.parent, f.name) for f in sorted(root.rglob("worker.json"))
    ]


def _widened_copy(part: Path, plan: Path, out: Path) -> tuple[Path, Path]:
    """PART and PLAN copied side by side into OUT with every id array int64, the manifests and seals rewritten to
    match: an artifact as g3 wrote it before ids were narrowed."""
    from stages.common.artifact_json import sealed
    from stages.common.npy import npy_entry

    out.mkdir()
    part2, plan2 = out / part.name, out / plan.name
    shutil.copytree(part, part2)
    shutil.copytree(plan, plan2)
    for folder, json_name in _folders(out):
        meta = json.loads((folder / json_name).read_text())
        for name in _id_files(folder, json_name):
            np.save(folder / name, np.load(folder / name).astype(np.int64))
            meta["files"][name] = npy_entry(folder / name)
        (folder / json_name).write_text(
            json.dumps(sealed({k: v for k, v in meta.items() if k != "content_sha256"}))
        )
    return part2, plan2


def _dtypes(root: Path) -> dict[str, set[str]]:
    """Every id array's dtypes below ROOT, by manifest name."""
    seen: dict[str, set[str]] = {}
    for folder, json_name in _folders(root):
        for name in _id_files(folder, json_name):
            seen.setdefault(name, set()).add(str(np.load(folder / name, mmap_mode="r").dtype))
    return seen


def test_a_small_graphs_ids_are_written_int32(store, tmp_path):
    part = g3_partition(store, tmp_path / "part", 2, method="metis", seed=1)
    g3 = g3_plan(part, tmp_path / "g3", bin_size=50)
    distdgl = g3_plan(part, tmp_path / "distdgl", strategy="distdgl", fanouts="3,2", batch_size=40)
    sancus = g3_plan(part, tmp_path / "sancus", strategy="sancus", sancus_comm="broadcast")
    columns = g3_partition(store, tmp_path / "columns", 2, method="feature")
    for root, expect in (
        (part, set(SHARD_IDS)),
        (columns, {"owned", "in_degree", "out_degree", "train", "valid", "test"}),
        (g3, {"priority", "row_ptr", "bin_ptr", "src_ptr", "src", "fwd_send_0_nodes", "bwd_recv_1_msgs"}),
        (distdgl, {"boundary_send_nodes", "boundary_recv_msgs"}),
        (sancus, {"broadcast_pick_nodes", "broadcast_pick_msgs"}),
    ):
        seen = _dtypes(root)
        assert expect <= {Path(n).stem for n in seen}, (root.name, sorted(seen))
        assert all(d == {"int32"} for d in seen.values()), (root.name, seen)
        # the manifests say so, and the readers check the files against them
        for folder, json_name in _folders(root):
            files = json.loads((folder / json_name).read_text())["files"]
            assert all(files[n]["dtype"] == "int32" for n in _id_files(folder, json_name))


def test_the_readers_hand_the_runtime_int64_where_it_keeps_them(store, tmp_path):
    """Plans' node- and bin-sized arrays and tables are widened once at load; the arcs-sized ``src`` stays as
    stored (memory-mapped when streamed)."""
    from stages.common.partition_artifact import open_shard
    from stages.common.plan_artifact import WorkerPlan

    part = g3_partition(store, tmp_path / "part", 2, method="metis", seed=1)
    plan = g3_plan(part, tmp_path / "plan", bin_size=50)
    wp = WorkerPlan(plan, 0)
    assert wp.priority.dtype == wp.row_ptr.dtype == np.int64
    lp = wp.layer(0, mmap=True)
    assert lp.bin_ptr.dtype == lp.src_ptr.dtype == np.int64 and lp.src.dtype == np.int32
    t = wp.table("fwd_send_0")
    assert t.nodes.dtype == t.msgs.dtype == np.int64 and len(t.nodes)
    shard = open_shard(part, 0, 2)
    assert shard.send_ptr.dtype == shard.remote_owner_ptr.dtype == np.int64
    assert shard.recv_from(1).dtype == np.int64 and shard.owned.dtype == np.int32


@pytest.mark.parametrize(
    "strategy, plan_options, train_options",
    [
        ("g3", {"bin_size": 50}, ()),
        ("g3", {"bin_size": 50}, ("--stream-bins", "on", "--pipeline", "intra")),
        ("distdgl", {"fanouts": "3,2", "batch_size": 40}, ()),
    ],
    ids=["g3", "g3-streamed", "distdgl"],
)
def test_narrow_ids_train_bitwise_as_int64_ids(store, tmp_path, strategy, plan_options, train_options):
    part = g3_partition(store, tmp_path / "narrow" / "part", 2, method="metis", seed=1)
    plan = g3_plan(part, tmp_path / "narrow" / "plan", strategy=strategy, **plan_options)
    wide_part, wide_plan = _widened_copy(part, plan, tmp_path / "wide")
    from stages.common.plan_artifact import load_plan_meta

    assert Path(load_plan_meta(wide_plan)["partition"]["path"]) == wide_part  # the copy reads its own shards
    assert all(d == {"int32"} for d in _dtypes(tmp_path / "narrow").values())
    assert all(d == {"int64"} for d in _dtypes(tmp_path / "wide").values())
    narrow_run = g3_train(plan, tmp_path / "run-narrow", 2, *train_options)
    wide_run = g3_train(wide_plan, tmp_path / "run-wide", 2, *train_options)
    a = torch.load(narrow_run / "model.pt", weights_only=True)
    b = torch.load(wide_run / "model.pt", weights_only=True)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    first = torch.load(narrow_run / "init.pt", weights_only=True)
    assert any(not torch.equal(first[k], a[k]) for k in a)  # it trained
