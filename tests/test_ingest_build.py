"""The shared ingest builder, the store format, the synthetic generator and the ingest/info CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from g3cli.main import cli
from stages.common.cost import disk_bytes
from stages.common.errors import G3InputError
from stages.common.store import GraphStore
from stages.ingest.build import IngestOptions, build_store
from stages.ingest.source import GraphSource
from stages.ingest.synthetic import resolve_spec, synthetic_source


def arc_source(n, src, dst, chunk=7, **kw) -> GraphSource:
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)

    def arcs():
        for i in range(0, max(1, len(src)), chunk):
            yield src[i : i + chunk], dst[i : i + chunk]

    return GraphSource(name="t", num_nodes=n, arcs=arcs, path="test-source", **kw)


def reference_csr(n, src, dst, symmetrize, keep_dup, keep_loops):
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if not keep_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    if keep_dup:
        order = np.lexsort((src, dst))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
        return indptr, src[order]
    m = sp.csr_matrix((np.ones(len(src)), (dst, src)), shape=(n, n))
    m.sum_duplicates()
    m.sort_indices()
    return m.indptr.astype(np.int64), m.indices.astype(np.int64)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 40),
    data=st.data(),
    symmetrize=st.booleans(),
    keep_dup=st.booleans(),
    keep_loops=st.booleans(),
    spill=st.booleans(),
)
def test_csr_equals_scipy_reference(tmp_path_factory, n, data, symmetrize, keep_dup, keep_loops, spill):
    m = data.draw(st.integers(0, 200))
    src = data.draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst = data.draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    out = tmp_path_factory.mktemp("csr") / "s"
    # a tiny memory limit forces the external sort through several buckets
    opts = IngestOptions(
        symmetrize=symmetrize,
        keep_duplicates=keep_dup,
        keep_self_loops=keep_loops,
        memory_limit=256 * 40 if spill else 1 << 30,
        feat_dim=4,
        num_classes=3,
    )
    report = build_store(arc_source(n, src, dst), out, opts)
    store = GraphStore.open(out)
    indptr, indices = store.load_csr()
    ref_ptr, ref_idx = reference_csr(n, src, dst, symmetrize, keep_dup, keep_loops)
    np.testing.assert_array_equal(indptr, ref_ptr)
    np.testing.assert_array_equal(indices, ref_idx)
    in_deg, out_deg = store.load_degrees()
    np.testing.assert_array_equal(in_deg, np.diff(ref_ptr))
    np.testing.assert_array_equal(out_deg, np.bincount(ref_idx, minlength=n))
    assert report.num_arcs == len(ref_idx) == store.num_arcs
    assert store.indices.dtype == np.int32


def test_external_sort_really_spills(tmp_path):
    rng = np.random.default_rng(0)
    n, m = 500, 20_000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    report = build_store(
        arc_source(n, src, dst, chunk=1000), tmp_path / "s", IngestOptions(memory_limit=40 * 2000)
    )
    assert report.spilled and report.buckets > 5
    ref_ptr, ref_idx = reference_csr(n, src, dst, False, False, False)
    got_ptr, got_idx = GraphStore.open(tmp_path / "s").load_csr()
    np.testing.assert_array_equal(got_ptr, ref_ptr)
    np.testing.assert_array_equal(got_idx, ref_idx)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no spill or temp folders left
    # what it took on disk: every arc spilled once (two int32 ids), in runs or buckets, then the store
    cost = GraphStore.open(tmp_path / "s").meta["cost"]
    assert cost["scratch_peak_bytes"] >= m * 2 * 4 and 0 < cost["disk_bytes"] <= disk_bytes(tmp_path / "s")


def test_store_metadata_checksums_and_lazy_arrays(tiny_store):
    store = GraphStore.open(tiny_store)
    assert store.meta["schema"] == "g3.store" and store.meta["schema_version"] == 1
    assert store.verify() == []
    assert set(store.meta["checksums"]) >= {
        "indptr",
        "indices",
        "features",
        "labels",
        "in_degree",
        "out_degree",
    }
    assert store.features.shape == (store.num_nodes, store.feat_dim)
    assert store.features.chunks[1] == store.feat_dim  # chunked by rows only
    sizes = store.meta["split_sizes"]
    assert sum(sizes.values()) == store.meta["num_labeled"]
    for split in ("train", "valid", "test"):
        assert len(store.split_index(split)) == sizes[split]
    assert not (store.split_mask("train") & store.split_mask("test")).any()


def test_store_refuses_other_schema_version(tmp_path, tiny_store):
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(tiny_store, copy)
    meta = json.loads((copy / "zarr.json").read_text())
    meta["attributes"]["g3"]["schema_version"] = 99
    (copy / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(G3InputError, match="schema version 99"):
        GraphStore.open(copy)


def test_synthetic_is_deterministic_and_heavy_tailed(tmp_path):
    a, b, c = (tmp_path / x for x in "abc")
    build_store(synthetic_source(resolve_spec("tiny", seed=3)), a, IngestOptions(seed=3))
    build_store(synthetic_source(resolve_spec("tiny", seed=3)), b, IngestOptions(seed=3))
    build_store(synthetic_source(resolve_spec("tiny", seed=4)), c, IngestOptions(seed=4))
    sa, sb, sc = (GraphStore.open(p) for p in (a, b, c))
    assert sa.meta["checksums"] == sb.meta["checksums"]
    assert sa.meta["checksums"]["indices"] != sc.meta["checksums"]["indices"]
    in_deg, _ = sa.load_degrees()
    assert in_deg.max() > 5 * in_deg.mean()  # heavy tail
    labels = sa.load_labels()
    assert len(np.unique(labels)) == 8


def test_synthetic_draws_are_the_binary_searchs_bit_for_bit():
    """The generator finds each drawn node from a guide table; its answer is ``np.searchsorted(..., "right")``'s
    for any target (a sum exactly, either side of one, a bucket's edge, 0, the total), so every graph is the
    same as the binary search made it."""
    from stages.ingest.synthetic import _count_at_most, _guide

    rng = np.random.default_rng(5)
    for n, span in ((1, 1), (7, 4), (1000, 4), (5000, 1), (5000, 64)):
        cum = np.cumsum(rng.pareto(1.5, size=n) + 1.0)
        guide = _guide(cum, max(1, n // span))
        edges = np.arange(len(guide)) * (cum[-1] / (len(guide) - 1))
        targets = np.concatenate(
            [rng.random(20_000) * cum[-1], cum, np.nextafter(cum, 0), np.nextafter(cum, np.inf), edges, [0.0]]
        )
        out = np.empty(len(targets), dtype=np.int64)
        _count_at_most(cum, guide, targets, out)
        assert np.array_equal(out, np.searchsorted(cum, targets, side="right")), (n, span)


def test_synthetic_features_carry_class_signal(tiny_store):
    store = GraphStore.open(tiny_store)
    x = np.asarray(store.features[:])
    y = store.load_labels()
    train, test = store.split_index("train"), store.split_index("test")
    centroids = np.stack([x[train][y[train] == k].mean(0) for k in range(store.num_classes)])
    pred = np.argmin(((x[test, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    acc = (pred == y[test]).mean()
    assert acc > 2.0 / store.num_classes  # well above chance: features are informative


def test_out_of_range_ids_are_refused_and_nothing_written(tmp_path):
    with pytest.raises(G3InputError, match="out of range"):
        build_store(arc_source(3, [0, 5], [1, 2]), tmp_path / "s", IngestOptions())
    assert list(tmp_path.iterdir()) == []


def test_nan_features_are_refused(tmp_path):
    feats = np.ones((3, 2), dtype=np.float32)
    feats[1, 1] = np.nan
    src = arc_source(3, [0, 1], [1, 2], feat_dim=2, feature_blocks=lambda: iter([feats]))
    with pytest.raises(G3InputError, match="row 1"):
        build_store(src, tmp_path / "s", IngestOptions())
    assert list(tmp_path.iterdir()) == []


def test_declared_arc_count_is_checked(tmp_path):
    with pytest.raises(G3InputError, match="declares 5 arcs but 2"):
        build_store(arc_source(3, [0, 1], [1, 2], expected_arcs=5), tmp_path / "s", IngestOptions())


def test_cli_ingest_info_and_refuses_overwrite(tmp_path, cli_runner):
    out = tmp_path / "tiny"
    r = cli_runner.invoke(cli, ["ingest", "synthetic:tiny", str(out)])
    assert r.exit_code == 0, r.output
    r = cli_runner.invoke(cli, ["info", str(out), "--json"])
    assert r.exit_code == 0
    summary = json.loads(r.output)
    assert summary["num_nodes"] == 2000 and summary["kind"] == "store"
    r = cli_runner.invoke(cli, ["info", str(out)])
    assert "arcs" in r.output and "size on disk" in r.output
    r = cli_runner.invoke(cli, ["ingest", "synthetic:tiny", str(out)])
    assert r.exit_code == 2
    assert "already exists" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = cli_runner.invoke(cli, ["ingest", "synthetic:tiny", str(out), "--force", "--seed", "1"])
    assert r.exit_code == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["synthetic:nope"], "unknown synthetic preset"),
        (["synthetic"], "needs --nodes and --avg-degree"),
        (["/nonexistent/graph.txt"], "no such file"),
        (["synthetic:tiny", "--split", "0.5,0.5,0.5"], "summing to 1"),
        (["synthetic:tiny", "--split", "nan,0.1,0.1"], "summing to 1"),
        (["synthetic:tiny", "--seed", "-1"], "--seed must be an integer in [0, 2^63)"),
    ],
)
def test_cli_bad_input_one_line_exit_2(tmp_path, cli_runner, args, message):
    r = cli_runner.invoke(cli, ["ingest", args[0], str(tmp_path / "out"), *args[1:]])
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "files, args, message",
    [
        (
            {"e.txt": "0 1\n1 2\n2 1099511627776\n"},
            ["e.txt"],
            "e.txt:3: node id 1099511627776 would make the graph 1,099,511,627,777 nodes",
        ),
        (
            {"e.npy": np.array([[0, 1], [1, 2], [2, 2**40]])},
            ["e.npy"],
            "e.npy: edge_index[2]: node id 1099511627776",
        ),
        (
            {"e.txt": "0 1\n1 0\n"},
            ["e.txt", "--num-nodes", str(2**40)],
            "more nodes than this machine's memory holds",
        ),
        (
            {"e.txt": "0 1\n1 0\n", "f.json": '{"0": [1099511627776], "1": [1]}'},
            ["e.txt", "--features", "f.json"],
            "f.json: feature id 1099511627776 (node 0) makes a 2 x 1,099,511,627,777 feature matrix",
        ),
        (
            {"e.txt": "0 1\n1 0\n", "f.json": '{"0": "12", "1": [3]}'},
            ["e.txt", "--features", "f.json"],
            "f.json: node '0': expected a list of integer feature ids, got \"12\"",
        ),
        (
            {"e.npy": np.array([[0, 1, 5], [1, 2, 6], [2, 0, 7], [0, 2, 1]])},
            ["e.npy"],
            "edge array must have shape [2, E] or [E, 2], got (4, 3)",
        ),
    ],
)
def test_ids_beyond_memory_and_malformed_files_are_refused_before_allocating(
    tmp_path, cli_runner, files, args, message, monkeypatch
):
    """A node or feature id far beyond the rest (2^40: 8 TiB of per-node arrays) is a numbering ingest cannot
    hold: one line naming the file (and line), not an allocation error; strings are not lists of ids."""
    for name, content in files.items():
        if isinstance(content, str):
            (tmp_path / name).write_text(content)
        else:
            np.save(tmp_path / name, content)
    monkeypatch.chdir(tmp_path)
    r = cli_runner.invoke(cli, ["ingest", *args[:1], "out.g3", *args[1:]])
    assert r.exit_code == 2, r.output
    assert message in r.output, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "out.g3").exists()


def test_cli_debug_shows_traceback(tmp_path, cli_runner):
    r = cli_runner.invoke(cli, ["--debug", "ingest", "synthetic:nope", str(tmp_path / "o")])
    assert r.exit_code != 0 and isinstance(r.exception, G3InputError)


def test_cli_version_and_help(cli_runner):
    r = cli_runner.invoke(cli, ["--version"])
    assert r.exit_code == 0 and "g3" in r.output
    every = "ingest info partition plan bundle train eval predict export report bench simulate cluster advise"
    assert cli.list_commands(None) == sorted(every.split())
    for cmd in cli.list_commands(None):
        r = cli_runner.invoke(cli, [cmd, "--help"])
        assert r.exit_code == 0 and "Usage" in r.output
        for param in cli.get_command(None, cmd).params:
            if param.param_type_name == "option" and not param.hidden:
                assert param.help, f"g3 {cmd} {param.opts[0]} has no help text"
