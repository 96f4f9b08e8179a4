"""Nothing corrupted is used: a damaged store, shard or plan is one line naming the file and what is wrong,
exit code 2, no traceback, no segfault, nothing half-written (issue 23 §3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from g3cli.main import cli


def run(cli_runner, *args):
    return cli_runner.invoke(cli, [str(a) for a in args])


def one_line_error(r, message: str) -> None:
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output, r.output
    assert len([ln for ln in r.output.splitlines() if ln.startswith("g3: error")]) == 1


@pytest.fixture
def store(tiny_store, tmp_path) -> Path:
    out = tmp_path / "store"
    shutil.copytree(tiny_store, out)
    return out


def set_meta(store: Path, reseal: bool = True, **changes) -> None:
    """Edit the store's g3 metadata; ``reseal``: as a writer would that wrote it so (its seal recomputed), to
    reach the checks behind the seal."""
    from stages.common.artifact_json import sealed

    meta_file = store / "zarr.json"
    meta = json.loads(meta_file.read_text())
    g3 = meta["attributes"]["g3"]
    for key, value in changes.items():
        if key == "checksums":
            g3["checksums"].update(value)
        else:
            g3[key] = value
    if reseal:
        meta["attributes"]["g3"] = sealed(g3)
    meta_file.write_text(json.dumps(meta))


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name]


def test_out_of_range_source_id_is_refused_by_every_method(store, tmp_path, cli_runner):
    """One source id past N in `indices`: before, METIS died with SIGSEGV (exit 139) and left a temporary
    folder. The checksum catches the change; with the checksum updated too, the range check does."""
    group = zarr.open_group(str(store), mode="r+")
    indices = np.asarray(group["indices"][:])
    n = int(group.attrs["g3"]["num_nodes"])
    indices[7] = n + 1000
    group["indices"][:] = indices
    r = run(cli_runner, "partition", store, "--workers", "2", "-o", tmp_path / "p")
    one_line_error(r, "array indices does not match its recorded checksum")
    from stages.common.store import checksum

    set_meta(store, checksums={"indices": checksum(indices)})
    for method in ("g3", "metis", "random", "chunk", "feature"):
        r = run(cli_runner, "partition", store, "--workers", "2", "--method", method, "-o", tmp_path / method)
        one_line_error(r, f"indices[7] = {n + 1000} is not a node id in [0, {n})")
        assert not (tmp_path / method).exists()
    assert leftovers(tmp_path) == []


def test_deleted_and_garbage_chunks(store, tmp_path, cli_runner):
    """A deleted chunk used to be read as zeros and partitioned without complaint; a garbage one gave a
    100-line traceback."""
    chunk = store / "features" / "c" / "0" / "0"
    saved = chunk.read_bytes()
    chunk.unlink()
    r = run(cli_runner, "partition", store, "--workers", "2", "--method", "random", "-o", tmp_path / "p")
    one_line_error(r, "array features does not match its recorded checksum")
    chunk.write_bytes(b"\x00garbage" * 10)
    r = run(cli_runner, "partition", store, "--workers", "2", "--method", "random", "-o", tmp_path / "p")
    one_line_error(r, "array features cannot be read near row 0")
    chunk.write_bytes(saved)
    (store / "labels" / "c" / "0").unlink()
    r = run(cli_runner, "partition", store, "--workers", "2", "--method", "random", "-o", tmp_path / "p")
    one_line_error(r, "array labels does not match its recorded checksum")
    assert not (tmp_path / "p").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("num_nodes", 1999, "array indptr has shape (2001,), the metadata says (2000,)"),
        ("num_arcs", 5, "array indices has shape"),
        ("feat_dim", 3, "array features has shape"),
        ("feature_dtype", "float16", "array features has dtype float32, the metadata says float16"),
    ],
)
def test_altered_attributes(store, tmp_path, cli_runner, key, value, message):
    set_meta(store, reseal=False, **{key: value})  # an edit: the seal tells
    one_line_error(
        run(cli_runner, "partition", store, "--workers", "2", "-o", tmp_path / "p"),
        "does not match its content_sha256",
    )
    set_meta(store, **{key: value})
    r = run(cli_runner, "partition", store, "--workers", "2", "-o", tmp_path / "p")
    one_line_error(r, message)
    r = run(cli_runner, "info", store)
    one_line_error(r, message)


def test_damaged_shard_and_plan_files_stop_training_before_it_starts(store, tmp_path, cli_runner):
    part, plan = tmp_path / "part", tmp_path / "plan"
    assert (
        run(cli_runner, "partition", store, "--workers", "2", "--method", "random", "-o", part).exit_code == 0
    )
    assert run(cli_runner, "plan", part, "--bin-size", "300", "-o", plan).exit_code == 0
    np.save(part / "part-00001" / "labels.npy", np.zeros(3, dtype=np.int32))  # a file of another shape
    r = run(cli_runner, "train", plan, "--epochs", "1", "-o", tmp_path / "run")
    one_line_error(r, "file labels.npy holds int32 [3], its folder's JSON says int32")
    assert not (tmp_path / "run").exists()
    assert (
        run(
            cli_runner, "partition", store, "--workers", "2", "--method", "random", "-o", part, "--force"
        ).exit_code
        == 0
    )
    assert run(cli_runner, "plan", part, "--bin-size", "300", "-o", plan, "--force").exit_code == 0
    (plan / "worker-00000" / "layer-1" / "src.npy").write_bytes(b"\x93NUMPY truncated")
    r = run(cli_runner, "train", plan, "--epochs", "1", "-o", tmp_path / "run")
    one_line_error(r, "file layer-1/src.npy is not a readable .npy array")
    assert not (tmp_path / "run").exists()


def test_eval_refuses_a_run_whose_store_changed(store, tmp_path, cli_runner):
    part, plan, out = tmp_path / "part", tmp_path / "plan", tmp_path / "run"
    assert (
        run(cli_runner, "partition", store, "--workers", "2", "--method", "random", "-o", part).exit_code == 0
    )
    assert run(cli_runner, "plan", part, "--bin-size", "500", "-o", plan).exit_code == 0
    assert run(cli_runner, "train", plan, "--epochs", "1", "--threads", "1", "-o", out).exit_code == 0
    set_meta(store, checksums={"indices": "sha256:" + "0" * 64})  # the store was ingested again, differently
    r = run(cli_runner, "eval", out)
    one_line_error(r, "the store's indices changed since `g3 partition` made this partition")
    assert not (out / "eval.json").exists()


def test_a_target_is_never_replaced_silently(tmp_path):
    """Concurrent writers to one target: the second is refused at once (the target's lock is held); a target
    that appears while an artifact is built is not replaced at the rename without force."""
    from stages.common.atomic import atomic_dir
    from stages.common.errors import G3InputError

    target = tmp_path / "artifact"
    with atomic_dir(target) as tmp:
        (tmp / "a").write_text("first")
        with pytest.raises(G3InputError, match="another g3 process is writing this"), atomic_dir(target):
            pass
    assert (target / "a").read_text() == "first"
    with pytest.raises(G3InputError, match="already exists"), atomic_dir(target):
        pass
    other = tmp_path / "other"
    with (
        pytest.raises(G3InputError, match="appeared while this artifact was being built"),
        atomic_dir(other) as tmp,
    ):
        (tmp / "b").write_text("mine")
        other.mkdir()  # another writer got there first
        (other / "theirs").write_text("kept")
    assert [p.name for p in other.iterdir()] == ["theirs"] and leftovers(tmp_path) == []
    with atomic_dir(other, force=True) as tmp:
        (tmp / "b").write_text("mine")
    assert [p.name for p in other.iterdir()] == ["b"]


def test_two_partitions_to_one_target(store, tmp_path):
    """Two `g3 partition` processes writing the same target: one publishes, the other exits 2 (before, both
    exited 0 and the second silently replaced the first)."""
    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-m",
        "g3cli.main",
        "partition",
        str(store),
        "--workers",
        "2",
        "--method",
        "metis",
        "-o",
        str(tmp_path / "p"),
    ]
    repo = Path(__file__).resolve().parents[1]
    procs = [
        subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "another g3 process is writing this" in loser or "already exists" in loser, loser
    assert json.loads((tmp_path / "p" / "partition.json").read_text())["num_partitions"] == 2


def test_an_output_under_a_file_is_one_line_in_every_stage(store, tmp_path, cli_runner):
    part, plan = tmp_path / "part", tmp_path / "plan"
    assert (
        run(cli_runner, "partition", store, "--workers", "2", "--method", "random", "-o", part).exit_code == 0
    )
    assert run(cli_runner, "plan", part, "--bin-size", "500", "-o", plan).exit_code == 0
    assert (
        run(cli_runner, "train", plan, "--epochs", "1", "--threads", "1", "-o", tmp_path / "run").exit_code
        == 0
    )
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    under = blocker / "x"
    for args in (
        ["ingest", "synthetic:tiny", under],
        ["partition", store, "--workers", "2", "-o", under],
        ["plan", part, "-o", under],
        ["train", plan, "--epochs", "1", "-o", under],
        ["report", tmp_path / "run", "-o", under],
        ["simulate", plan, "--scaling", "none", "-o", under],
        ["bench", store, "--workers", "1", "--peers", "none", "-o", under],
    ):
        r = run(cli_runner, *args)
        assert r.exit_code == 2 and "Traceback" not in r.output, (args, r.output)
        assert f"{blocker} is a file, not a folder" in r.output or f"{under}: Not a directory" in r.output, (
            r.output
        )


def test_a_full_disk_is_one_line_in_a_stage_and_in_a_worker(store, tmp_path, cli_runner, monkeypatch):
    """A write the disk refuses: one line, exit 2, nothing half-written — in the launcher's process (an
    injected ENOSPC while the shards are written) and in a worker (reported through the launcher)."""
    import errno

    import stages.kits.partition.shards as shards

    real_save = np.save

    def full(path, *a, **k):
        if "labels" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(path, *a, **k)

    monkeypatch.setattr(shards.np, "save", full)
    r = run(cli_runner, "partition", store, "--workers", "2", "--method", "random", "-o", tmp_path / "part")
    one_line_error(r, "No space left on device")
    assert not (tmp_path / "part").exists() and leftovers(tmp_path) == []
    monkeypatch.setattr(shards.np, "save", real_save)
    assert (
        run(
            cli_runner, "partition", store, "--workers", "2", "--method", "random", "-o", tmp_path / "part"
        ).exit_code
        == 0
    )
    assert (
        run(cli_runner, "plan", tmp_path / "part", "--bin-size", "500", "-o", tmp_path / "plan").exit_code
        == 0
    )
    monkeypatch.setenv("G3_FAULT", "1:1:enospc")
    r = run(cli_runner, "train", tmp_path / "plan", "--epochs", "3", "--threads", "1", "-o", tmp_path / "run")
    one_line_error(r, "worker 1 failed: OSError: [Errno 28] No space left on device")


@pytest.mark.parametrize(
    "strategy, change, message",
    [
        (
            "distdgl",
            {"options": {"fanouts": "a"}},
            "records --fanouts 'a': expected comma-separated integers",
        ),
        ("distdgl", {"options": {"batch_size": 0}}, "records --batch-size 0"),
        ("sancus", {"options": {"staleness": "x"}}, "records --staleness 'x'"),
        ("distdgl", {"options": {"fanouts": [25, 10], "no_such": 1}}, "records option 'no_such'"),
        ("g3", {"num_workers": 0}, "num_workers is 0, not a worker count >= 1"),
        ("g3", {"num_workers": 3}, "lists 2 workers for num_workers 3"),
        ("bns-gcn", {"strategy": None}, "has no strategy field"),
    ],
)
def test_a_sealed_but_wrong_plan_is_refused_where_it_is_read(
    store, tmp_path, cli_runner, strategy, change, message
):
    """plan.json edited and re-sealed (as another tool or a buggy version would write it): its strategy options
    are parsed back by the command line's parsers and its worker count checked, before any worker starts."""
    from stages.common.artifact_json import sealed

    part, plan = tmp_path / "part", tmp_path / "plan"
    method = "metis"
    assert (
        run(cli_runner, "partition", store, "--workers", "2", "--method", method, "-o", part).exit_code == 0
    )
    assert run(cli_runner, "plan", part, "--strategy", strategy, "-o", plan).exit_code == 0
    meta = json.loads((plan / "plan.json").read_text())
    for key, value in change.items():
        if key == "options":
            meta["strategy"]["options"].update(value)
        elif value is None:
            del meta[key]
        else:
            meta[key] = value
    (plan / "plan.json").write_text(
        json.dumps(sealed({k: v for k, v in meta.items() if k != "content_sha256"}))
    )
    r = run(cli_runner, "train", plan, "--epochs", "1", "-o", tmp_path / "run")
    one_line_error(r, message)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("key", ["degree", "num_classes", "checksums"])
def test_a_store_without_a_field_its_readers_need_is_refused_by_every_reader(
    store, tmp_path, cli_runner, key
):
    """A store's attributes without a field every reader relies on (written by another tool and sealed) are
    refused when the store is opened, naming the field — `g3 info` once raised KeyError: 'degree'."""
    from stages.common.artifact_json import sealed

    meta_file = store / "zarr.json"
    meta = json.loads(meta_file.read_text())
    g3 = {k: v for k, v in meta["attributes"]["g3"].items() if k not in (key, "content_sha256")}
    meta["attributes"]["g3"] = sealed(g3)
    meta_file.write_text(json.dumps(meta))
    for args in (["info", store], ["partition", store, "--workers", "2", "-o", tmp_path / "p"]):
        one_line_error(run(cli_runner, *args), f"lacks the field {key!r}")


def _rewrite(folder: Path, json_name: str, array: str, values: np.ndarray) -> None:
    """Replace ``folder/array.npy`` and record it in ``json_name``'s ``files`` with a fresh checksum and seal, as
    another tool (or a buggy version) would write a wrong but consistent artifact."""
    from stages.common.artifact_json import sealed
    from stages.common.npy import npy_entry

    np.save(folder / f"{array}.npy", values)
    meta = json.loads((folder / json_name).read_text())
    meta["files"][f"{array}.npy"] = npy_entry(folder / f"{array}.npy")
    (folder / json_name).write_text(
        json.dumps(sealed({k: v for k, v in meta.items() if k != "content_sha256"}))
    )


@pytest.mark.parametrize(
    "where, array, edit, message",
    [
        ("shard", "send", lambda a: a + 10**6, "file send.npy holds id"),
        (
            "shard",
            "owned",
            lambda a: np.where(np.arange(len(a)) == 0, 10**9, a),
            "file owned.npy holds id 1000000000",
        ),
        ("shard", "train", lambda a: a - 10**6, "file train.npy holds id"),
        ("shard", "send_ptr", lambda a: a[::-1].copy(), "file send_ptr.npy is not 3 pointers"),
        ("plan", "layer-0/bin_ptr", lambda a: a[::-1].copy(), "file bin_ptr.npy is not pointers from 0"),
        ("plan", "priority", lambda a: a - 1, "file priority.npy holds an id outside the worker's"),
        ("plan", "layer-1/indices", lambda a: a + 10**6, "file indices.npy holds a source position outside"),
        # values a worker indexes with: a class beyond the logits, a source beyond the worker's rows
        ("shard", "labels", lambda a: a + 10**3, "file labels.npy holds class"),
        ("plan", "layer-0/src", lambda a: a + 10**6, "file src.npy holds local id"),
    ],
)
def test_a_sealed_but_wrong_shard_or_bin_array_is_refused_before_a_worker_uses_it(
    store, tmp_path, cli_runner, where, array, edit, message
):
    """Ids out of range and pointers that decrease, with checksums and seals made to match: one line naming
    the file, from the reader every stage uses, before training starts."""
    part, plan = tmp_path / "part", tmp_path / "plan"
    assert (
        run(cli_runner, "partition", store, "--workers", "2", "--method", "metis", "-o", part).exit_code == 0
    )
    if where == "plan":
        assert run(cli_runner, "plan", part, "--bin-size", "300", "-o", plan).exit_code == 0
    folder = (part / "part-00000") if where == "shard" else (plan / "worker-00000")
    name = "shard.json" if where == "shard" else "worker.json"
    sub, _, leaf = array.rpartition("/")
    target = folder / sub if sub else folder
    values = edit(np.load(target / f"{leaf}.npy"))
    if sub:  # a layer's array: worker.json lists it by its relative path
        from stages.common.artifact_json import sealed
        from stages.common.npy import npy_entry

        np.save(target / f"{leaf}.npy", values.astype(np.load(target / f"{leaf}.npy").dtype))
        meta = json.loads((folder / name).read_text())
        meta["files"][f"{array}.npy"] = npy_entry(target / f"{leaf}.npy")
        (folder / name).write_text(
            json.dumps(sealed({k: v for k, v in meta.items() if k != "content_sha256"}))
        )
    else:
        _rewrite(folder, name, leaf, values)
    if where == "shard":  # the planner reads the shard first (its P2P raw material); the worker after it
        r = run(cli_runner, "plan", part, "--bin-size", "300", "-o", plan)
        if r.exit_code == 0:
            r = run(cli_runner, "train", plan, "--epochs", "1", "-o", tmp_path / "run")
    else:
        r = run(cli_runner, "train", plan, "--epochs", "1", "-o", tmp_path / "run")
    one_line_error(r, message)
    assert not (tmp_path / "run").exists()
