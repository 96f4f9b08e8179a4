"""``g3 train --stream-bins``: a worker that reads each bin's structure and input features from disk as it runs
trains the same model as one that holds its partition in memory, and as the independent reference."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from reference import reference_train
from test_train import DROPOUT, EPOCHS, LR, SEED, max_weight_diff, pipeline, ref_graph

from stages.common.cost import disk_bytes
from stages.kits.runtime.config import RuntimeConfig
from stages.strategies.g3 import runtime as g3_runtime
from stages.strategies.g3.knobs import G3Knobs


@pytest.mark.parametrize(
    "model,k,schedule,remote",
    [
        ("sage", 2, "intra", "epoch"),
        ("gcn", 3, "none", "bin"),
        ("gat", 2, "multi", "bin"),
        ("sage", 1, "intra", "epoch"),
    ],
)
def test_streamed_bins_train_the_in_memory_model(store, tmp_path, model, k, schedule, remote):
    """Bitwise the weights of the in-memory path with the same bins (backward recomputing, no layer-0 cache:
    what streaming implies), and the reference's within 1e-5. The trace shows layer 0's rows read from disk;
    with ``--remote-features bin`` the remote ones fetched from their owners bin by bin, nothing of them in
    TMPDIR."""
    heads = 2 if model == "gat" else None
    streamed = pipeline(
        store,
        tmp_path / "streamed",
        k,
        "g3",
        model,
        2,
        "12",
        extra_train=(
            "--stream-bins",
            "on",
            "--pipeline",
            schedule,
            "--trace",
            "--prefetch",
            "on",
            "--remote-features",
            remote,
        ),
    )
    in_memory = pipeline(
        store,
        tmp_path / "memory",
        k,
        "g3",
        model,
        2,
        "12",
        extra_train=(
            "--stream-bins",
            "off",
            "--pipeline",
            "intra",
            "--layer0-cache",
            "off",
            "--backward",
            "recompute",
        ),
    )
    final = torch.load(streamed / "model.pt", weights_only=True)
    kept = torch.load(in_memory / "model.pt", weights_only=True)
    assert final.keys() == kept.keys()
    assert all(torch.equal(final[name], kept[name]) for name in final)
    init = torch.load(streamed / "init.pt", weights_only=True)
    expected = reference_train(model, init, ref_graph(store), EPOCHS, LR, 0.0, DROPOUT, SEED, heads=heads)
    assert max_weight_diff(final, expected) <= 1e-5
    assert json.loads((streamed / "run.json").read_text())["config"]["stream_bins"] == "on"
    # the disk it took: TMPDIR as the workers' estimate said (the one the TMPDIR check refuses by), the run folder
    workers = json.loads((streamed / "metrics.jsonl").read_text().splitlines()[-1])["workers"]
    for w in workers:
        assert 0.85 <= w["scratch_peak_bytes"] / w["scratch_estimate_bytes"] <= 1.15, w
    # the plan said so beforehand, in float32 (the run is float64: twice), with the remote input features, which
    # a worker fetching them per bin does not spill
    planned = json.loads((tmp_path / "streamed" / "plan" / "plan.json").read_text())["workers"]
    width = ref_graph(store).x.shape[1]
    features = [p["num_remote"] * width * 8 if remote == "bin" else 0 for p in planned]
    assert [2 * p["scratch_bytes"] - f for p, f in zip(planned, features, strict=True)] == [
        w["scratch_estimate_bytes"] for w in workers
    ]
    # `g3 info PLAN` / `g3 plan` say how much of it the features are
    from stages.common.units import human_bytes
    from stages.strategies.g3.plan import summary_rows

    plan_meta = json.loads((tmp_path / "streamed" / "plan" / "plan.json").read_text())
    most = max(planned, key=lambda p: p["scratch_bytes"])
    said = dict(summary_rows(plan_meta))["streamed"]
    assert f"{human_bytes(most['num_remote'] * width * 4)} of it remote input features" in said
    fetched = [w["bytes_sent_per_phase"].get("features-bin", 0) for w in workers]
    assert (sum(fetched) > 0) == (remote == "bin" and k > 1)
    cost, kept_cost = (json.loads((run / "run.json").read_text())["cost"] for run in (streamed, in_memory))
    assert cost["scratch_peak_bytes"] == sum(w["scratch_peak_bytes"] for w in workers) > 0
    assert kept_cost["scratch_peak_bytes"] == 0 and 0 < cost["disk_bytes"] <= disk_bytes(streamed)
    # a streamed worker waits half an hour for a peer (its layers can take minutes), an in-memory one a minute
    assert "waits 1800 s for a peer" in (streamed / "logs" / "rank-00000.log").read_text()
    assert "waits 60 s for a peer" in (in_memory / "logs" / "rank-00000.log").read_text()
    for rank in range(k):
        trace = json.loads((streamed / "trace" / f"rank-{rank:05d}.json").read_text())
        gathers = [e for e in trace["traceEvents"] if e["ph"] == "X" and e.get("cat") == "gather"]
        stored = [e for e in gathers if e["args"].get("stored")]
        assert stored and {e["args"]["layer"] for e in stored} == {0}
        if remote == "bin" and k > 1:
            asked = [e for e in trace["traceEvents"] if e.get("name", "").startswith("features-bin →")]
            assert asked
            # intra, multi: fetched on the read-ahead thread while the bin before computes; none: in turn
            assert all(e["args"]["prefetched"] == (schedule != "none") for e in stored)


def _ctx(mode: str, arcs: int, resident: bool = False, world: int = 4, owned: int = 1000, remote: int = 0):
    cfg = RuntimeConfig()
    manifest = {
        "indices.npy": {"shape": [arcs], "dtype": "int64"},
        "features.npy": {"shape": [owned, 64], "dtype": "float32"},
        "owned.npy": {"shape": [owned], "dtype": "int64"},
        "remote.npy": {"shape": [remote], "dtype": "int64"},
    }
    return SimpleNamespace(
        cfg=cfg,
        knobs=G3Knobs(stream_bins=mode),
        resident=resident,
        world=world,
        shard=SimpleNamespace(manifest=manifest),
        memo={},
    )


def test_auto_streams_where_the_partitions_would_not_fit(monkeypatch):
    """auto: on where the local workers' in-memory partitions exceed what the machine (or cgroup) has left;
    remote rows count as well as arcs."""
    monkeypatch.setattr("stages.common.cost.available_memory", lambda root="/": (8 << 30, "MemAvailable"))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    fits = 10_000_000  # 4 workers x (350 MiB + 10 M arcs x 100 B) < 8 GiB
    assert not g3_runtime.streams_bins(_ctx("auto", fits))
    assert g3_runtime.streams_bins(_ctx("auto", 2 * fits))
    assert g3_runtime.streams_bins(_ctx("auto", fits, remote=600_000))  # + 4 x 600 K rows x 1.4 KB
    assert not g3_runtime.streams_bins(_ctx("auto", 2 * fits, resident=True))
    assert g3_runtime.streams_bins(_ctx("on", 10))
    assert not g3_runtime.streams_bins(_ctx("off", 2 * fits))
    with pytest.raises(Exception, match="resident on the device"):
        g3_runtime.streams_bins(_ctx("on", 10, resident=True))


def test_the_in_memory_estimate_follows_the_measured_peaks():
    """The fitted model against in-memory workers measured at K = 8 (docs/BENCHMARKS.md): within 10 %."""
    measured = [  # arcs, owned, remote, peak bytes of one worker (synthetic, 64 features)
        (1_242_259, 50_086, 94_432, 694_435_840),
        (6_176_515, 245_843, 491_353, 1_899_130_880),
        (2_060_798, 253_303, 176_865, 1_237_807_104),
    ]
    for arcs, owned, remote, peak in measured:
        model = g3_runtime.in_memory_bytes(_ctx("auto", arcs, owned=owned, remote=remote).shard.manifest)
        assert abs(model - peak) <= 0.1 * peak, (arcs, model, peak)


def test_bad_stream_bins_value_is_refused(store, tmp_path):
    from test_train import invoke

    r = invoke(["train", str(tmp_path / "nowhere"), "--stream-bins", "maybe"])
    assert r.exit_code == 2
    assert "--stream-bins" in r.output


def test_release_pages_lets_go_of_a_mapped_file(tmp_path):
    """After a full read of a memory-mapped file, release_pages leaves it unmapped in the process's resident
    set (Linux): the pages a streamed worker read stay in the page cache, not in its RSS."""
    from stages.common.npy import release_pages

    path = tmp_path / "a.npy"
    np.save(path, np.arange(8 << 20, dtype=np.int64))  # 64 MiB
    a = np.load(path, mmap_mode="r")

    def rss():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) << 10 for line in f if line.startswith("RssFile:"))

    before = rss()
    assert int(np.asarray(a[::512]).sum()) > 0  # touches every page
    touched = rss()
    release_pages(a)
    assert touched - before > 48 << 20
    assert rss() - before < 8 << 20
    release_pages(np.zeros(3))  # not a mapped file: nothing happens


def test_a_streamed_plan_is_checked_in_runs_of_arcs(store, tmp_path, monkeypatch):
    """A worker maps its plan's arcs-sized arrays and checks them a run of bins at a time (its pages let go of
    after each): a source position out of range in the last bin is still found."""
    from test_train import invoke

    from stages.common import plan_artifact
    from stages.common.errors import G3InputError

    part, plan = tmp_path / "part", tmp_path / "plan"
    assert invoke(["partition", str(store), "--workers", "2", "-o", str(part)]).exit_code == 0
    assert invoke(["plan", str(part), "--bin-size", "7", "-o", str(plan)]).exit_code == 0
    monkeypatch.setattr(plan_artifact, "_CHECK_ARCS", 50)
    wp = plan_artifact.WorkerPlan(plan, 0)
    lp = wp.layer(1, mmap=True)
    assert isinstance(lp.indices, np.ndarray) and lp.num_bins > 3
    worker = plan / "worker-00000"
    bad = np.load(worker / "layer-1" / "indices.npy")
    bad[-1] = 10**6  # the last arc: in the last run checked
    np.save(worker / "layer-1" / "indices.npy", bad)
    with pytest.raises(G3InputError, match="source position outside"):
        plan_artifact.LayerPlan(worker, 1, None, wp.row_ptr, mmap=True)


def test_feature_messages_are_cut_into_matching_rounds():
    """A streamed worker exchanges its input features in rounds of bounded pieces: every message's nodes come
    out once, in order, in pieces of at most ``piece`` rows, round j holding piece j of each message; the
    rounds run as long as the longest message either way (empty tables pad the shorter side)."""
    from stages.common.plan_artifact import Table

    send = Table(np.arange(23, dtype=np.int64) * 10, np.array([[0, 1, 10], [0, 2, 3], [1, 3, 10]]))
    recv = Table(np.arange(17, dtype=np.int64), np.array([[0, 1, 17]]))
    rounds = g3_runtime.message_rounds(send, recv, 4)
    assert len(rounds) == 5  # recv's 17 rows: 4 + 4 + 4 + 4 + 1
    for table, parts in ((send, [r[0] for r in rounds]), (recv, [r[1] for r in rounds])):
        for m, (step, peer, count) in enumerate(table.msgs):
            start = int(table.msgs[:m, 2].sum())
            got, j = [], 0
            for part in parts:
                rows = [i for i, (s, p, _) in enumerate(part.msgs) if (s, p) == (step, peer)]
                if rows:
                    i = rows[0]
                    off = int(part.msgs[:i, 2].sum())
                    assert part.msgs[i, 2] <= 4
                    got += list(part.nodes[off : off + part.msgs[i, 2]])
                    j += 1
            assert got == list(table.nodes[start : start + count])
            assert j == -(-count // 4)
        assert all(part.total == len(part.nodes) for part in parts)
    assert len(rounds[4][0].msgs) == 0 and rounds[4][1].total == 1


def test_a_tmpdir_too_small_for_the_spilled_rows_is_refused_up_front(monkeypatch, tmp_path):
    """A streamed worker adds up what it spills (hidden rows and gradients, logits, remote features) for every
    worker on the machine and refuses a TMPDIR whose disk has less free, one line with the figures — not a
    SIGBUS when a page cannot be written hours into the epoch."""
    import shutil
    from collections import namedtuple

    from stages.common.errors import G3InputError

    table_rows = {"fwd_send_0": 300, "fwd_recv_0": 500, "bwd_recv_1": 300, "bwd_send_1": 500}
    data = SimpleNamespace(
        dtype=torch.float32,
        num_owned=1000,
        num_remote=500,
        feature_width=64,
        table=lambda name: SimpleNamespace(nodes=np.zeros(table_rows[name], dtype=np.int64)),
    )
    parts = g3_runtime.spill_bytes(data, [64, 16, 7])
    assert parts == {
        "layer rows and gradients": 2 * 1500 * 16 * 4,
        "logits": 1000 * 7 * 4,
        "remote input features": 500 * 64 * 4,
        # backward's receives (posted at the forward's start) and its first sends, which beside the top layer's
        # gradients (1500 rows) outweigh the forward's sends and receives (800 rows)
        "messages": (300 + 500) * 16 * 4,
    }
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(1 << 40, 0, sum(parts.values()) * 4))
    g3_runtime.check_spill_space(parts, 4)  # exactly enough for 4 workers
    with pytest.raises(G3InputError, match="remote input features") as err:
        g3_runtime.check_spill_space(parts, 5)
    assert "--stream-bins (5 streamed workers, TMPDIR)" in str(err.value)
    # fetched per bin, the features are not spilled: 5 workers fit where they did not
    per_bin = g3_runtime.spill_bytes(data, [64, 16, 7], features=False)
    assert per_bin == {k: v for k, v in parts.items() if k != "remote input features"}
    g3_runtime.check_spill_space(per_bin, 5)


def test_streamed_workers_above_the_machines_memory_are_refused_naming_the_floor(monkeypatch):
    """Streamed workers still hold their node-sized bookkeeping; where that floor, summed over the machine's
    workers, exceeds all the memory the machine (or its cgroup) has, the run is refused before any work."""
    from stages.common.errors import G3InputError

    data = SimpleNamespace(num_owned=6_000_000, num_remote=10_000_000)
    floor = g3_runtime.STREAM_BASE_BYTES + 16_000_000 * g3_runtime.STREAM_BYTES_PER_ROW
    monkeypatch.setattr("stages.common.cost.memory_limit", lambda root="/": (4 * floor, "MemTotal"))
    g3_runtime.check_stream_memory(data, 4)
    with pytest.raises(G3InputError, match=r"5 streamed workers .*16,000,000 local rows.* MemTotal") as err:
        g3_runtime.check_stream_memory(data, 5)
    assert "\n" not in str(err.value)


def test_a_streamed_worker_waits_longer_for_its_peers_unless_timeout_says(monkeypatch):
    """Without --timeout a worker waits 60 s for a peer, a streamed one 30 minutes (a layer read from disk on a few
    cores took longer than a minute at 300 M arcs); a given --timeout holds for both."""
    monkeypatch.setattr("stages.common.cost.available_memory", lambda root="/": (8 << 30, "MemAvailable"))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert g3_runtime.G3Strategy.peer_wait_seconds(_ctx("off", 10)) == 60.0
    assert g3_runtime.G3Strategy.peer_wait_seconds(_ctx("on", 10)) == 1800.0
    assert g3_runtime.G3Strategy.peer_wait_seconds(_ctx("auto", 100_000_000)) == 1800.0
    given = _ctx("on", 10)
    given.cfg.timeout = 120.0
    assert g3_runtime.G3Strategy.peer_wait_seconds(given) == 120.0
    assert (
        RuntimeConfig().wait_seconds() == 60.0
        and RuntimeConfig(timeout=5.0).wait_seconds(streamed=True) == 5.0
    )


def test_auto_fetches_remote_features_per_bin_where_tmpdir_cannot_take_them(monkeypatch, tmp_path):
    """``--remote-features auto``: per bin exactly where the streamed workers' spill with the features exceeds what
    TMPDIR's disk has free; never for a worker in memory or without remote rows; ``epoch``/``bin`` as said."""
    import shutil
    import tempfile
    from collections import namedtuple

    from stages.strategies.g3.remote_features import fetches_per_bin

    monkeypatch.setattr(
        tempfile, "tempdir", str(tmp_path / "not" / "made" / "yet")
    )  # its disk: the nearest folder
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(1 << 40, 0, 4_000))
    assert not fetches_per_bin("auto", True, 10, 1_000, 4)  # 4,000 bytes: exactly enough
    assert fetches_per_bin("auto", True, 10, 1_000, 5)
    assert not fetches_per_bin("auto", False, 10, 1_000, 5)  # in memory: exchanged once
    assert not fetches_per_bin("bin", True, 0, 1_000, 5)  # no remote rows
    assert fetches_per_bin("bin", True, 10, 0, 1) and not fetches_per_bin("epoch", True, 10, 10**9, 8)
