"""WebGraph BVGraph decoder (stages.ingest.webgraph): the real cnr-2000 graph, round trips through the test
encoder (tests/bv_encoder.py) for every code, field and parameter, streaming, and bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from bv_encoder import FIELDS, gamma, pack, synthetic_lists, unary, write_bvgraph, write_properties, zeta
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stages.ingest.webgraph as wg
from stages.common.errors import G3InputError
from stages.ingest.webgraph import decode_bvgraph, iter_bvgraph_chunks, read_properties, read_webgraph

WEBGRAPH_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "webgraph"


def cnr_base() -> Path:
    if not WEBGRAPH_DIR.exists():
        pytest.skip(
            f"../shared/data/webgraph not found: {WEBGRAPH_DIR} is absent (the reference graphs are not "
            f"part of a fresh clone)"
        )
    return WEBGRAPH_DIR / "cnr-2000"


def as_lists(offs: np.ndarray, succ: np.ndarray) -> list[list[int]]:
    return [succ[offs[i] : offs[i + 1]].tolist() for i in range(len(offs) - 1)]


def chunked(base, max_arcs: int, segment_bytes: int = 64 << 20) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate iter_bvgraph_chunks into one CSR, checking the chunk invariants on the way."""
    offs_parts, succ_parts = [np.zeros(1, dtype=np.int64)], []
    expect_first = 0
    for first, offs, succ in iter_bvgraph_chunks(base, max_arcs, _segment_bytes=segment_bytes):
        assert first == expect_first
        assert offs.dtype == np.int64 and offs[0] == 0 and offs[-1] == succ.size
        assert 1 <= offs.size - 1 <= max_arcs
        assert succ.size <= max_arcs or np.count_nonzero(np.diff(offs)) == 1  # one long list may exceed it
        expect_first += offs.size - 1
        offs_parts.append(offs[1:] + offs_parts[-1][-1])
        succ_parts.append(succ)
    offs = np.concatenate(offs_parts)
    succ = np.concatenate(succ_parts) if succ_parts else np.empty(0, dtype=np.int32)
    return offs, succ


def decode_all_ways(base, n_nodes: int, has_offsets: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """Whole sequential, whole parallel (several range splits and warm-ups), streaming (tiny and big chunks)."""
    results = [decode_bvgraph(base, parallel=False)]
    if has_offsets:
        for n_ranges, warm in ((1, None), (3, None), (max(1, n_nodes // 3), 0), (max(1, n_nodes), 2)):
            results.append(decode_bvgraph(base, parallel=True, _n_ranges=n_ranges, _warm=warm))
    results.append(chunked(base, 1, segment_bytes=64))
    results.append(chunked(base, 7, segment_bytes=80))
    results.append(chunked(base, 1 << 20))
    return results


def assert_round_trip(base, lists: list[list[int]], has_offsets: bool = True) -> None:
    for offs, succ in decode_all_ways(base, len(lists), has_offsets):
        assert offs.dtype == np.int64 and succ.dtype == np.int32
        assert offs.size == len(lists) + 1
        assert as_lists(offs, succ) == lists


def assert_valid_csr(offs: np.ndarray, succ: np.ndarray, n: int) -> None:
    assert offs.size == n + 1 and offs[0] == 0 and offs[-1] == succ.size
    assert np.all(np.diff(offs) >= 0)
    if succ.size:
        assert succ.min() >= 0 and succ.max() < n
    for i in range(n):
        assert np.all(np.diff(succ[offs[i] : offs[i + 1]]) > 0)


def feature_lists(n: int = 80, seed: int = 0) -> list[list[int]]:
    """Lists with every feature: empty lists, long intervals, copies, self loops, the first and last node."""
    lists = synthetic_lists(n, avg_degree=6, seed=seed)
    lists[0] = [0, 1, n - 1]
    lists[1] = list(range(n))  # one long interval over every node
    lists[2] = list(range(n))  # a copy of it
    lists[3] = []
    lists[5] = sorted(set(range(0, n, 2)) | {n - 1})
    lists[n // 2] = []
    lists[n - 2] = list(range(n - 30, n))
    lists[n - 1] = [0, n - 2, n - 1]
    return lists


# ------------------------------------------------------------------------------------------------ cnr-2000


def test_cnr2000_properties():
    props = read_properties(cnr_base())
    assert props["nodes"] == 325_557 and props["arcs"] == 3_216_152
    assert props["windowsize"] == 7 and props["maxrefcount"] == 3 and props["minintervallength"] == 4
    assert props["zetak"] == 3 and props["version"] == 0 and props["compressionflags"] == ""
    assert props["codes"]["RESIDUALS"] == "ZETA" and props["codes"]["REFERENCES"] == "UNARY"


def test_cnr2000_decode_matches_ground_truth():
    base = cnr_base()
    truth = [
        [int(v) for v in line.split()]
        for line in (WEBGRAPH_DIR / "cnr-2000_edges.txt").read_text().splitlines()
    ]
    offs, succ = decode_bvgraph(str(base) + ".graph", parallel=False)
    assert offs.size == 325_557 + 1 and succ.size == 3_216_152 and offs[-1] == 3_216_152
    assert succ.dtype == np.int32 and offs.dtype == np.int64
    assert len(truth) > 30
    assert as_lists(offs[: len(truth) + 1], succ) == truth
    assert succ.min() >= 0 and succ.max() < 325_557
    assert np.all(np.diff(offs) >= 0)
    # Sorted, duplicate-free lists: successor + node * n is strictly increasing over the whole array.
    key = np.repeat(np.arange(325_557, dtype=np.int64), np.diff(offs)) * 325_557 + succ
    assert np.all(np.diff(key) > 0)

    par_offs, par_succ = decode_bvgraph(base, parallel=True)
    assert np.array_equal(par_offs, offs) and np.array_equal(par_succ, succ)
    small_offs, small_succ = decode_bvgraph(base, parallel=True, _n_ranges=97, _warm=3)  # fallbacks needed
    assert np.array_equal(small_offs, offs) and np.array_equal(small_succ, succ)
    for max_arcs, seg in ((1 << 24, 64 << 20), (100_003, 4096)):
        c_offs, c_succ = chunked(base, max_arcs, seg)
        assert np.array_equal(c_offs, offs) and np.array_equal(c_succ, succ)


def test_cnr2000_graph_source():
    base = cnr_base()
    src = read_webgraph(str(base))
    assert src.name == "cnr-2000" and src.num_nodes == 325_557 and src.expected_arcs == 3_216_152
    assert src.path.endswith("cnr-2000.graph") and not src.undirected_once
    assert src.feature_blocks is None and src.labels is None and src.splits is None
    assert src.info["windowsize"] == 7 and src.info["has_offsets"]
    total = 0
    first = None
    for s, d in src.arcs():
        assert s.dtype == np.int64 and d.dtype == np.int64 and s.shape == d.shape
        first = first if first is not None else (s[:5].tolist(), d[:5].tolist())
        total += s.size
    assert total == 3_216_152
    assert first == ([0, 0, 0, 0, 0], [1, 4, 8, 219, 220])


def test_cnr2000_truncated(tmp_path):
    base = cnr_base()
    for ext in (".graph", ".properties", ".offsets"):
        shutil.copy(str(base) + ext, tmp_path / ("cnr" + ext))
    data = (tmp_path / "cnr.graph").read_bytes()
    (tmp_path / "cnr.graph").write_bytes(data[:-1000])
    with pytest.raises(G3InputError, match="truncated") as e:
        decode_bvgraph(tmp_path / "cnr")  # parallel: the offsets say where the stream should end
    assert e.value.path == tmp_path / "cnr.graph"
    with pytest.raises(G3InputError, match="truncated"):
        decode_bvgraph(tmp_path / "cnr", parallel=False)
    (tmp_path / "cnr.offsets").unlink()
    with pytest.raises(G3InputError, match="truncated"):
        decode_bvgraph(tmp_path / "cnr")
    with pytest.raises(G3InputError, match="truncated"):
        for _ in iter_bvgraph_chunks(tmp_path / "cnr", 1 << 20):
            pass


# ------------------------------------------------------------------------------------------------ round trips

CODE_CASES = [("GAMMA", 3), ("DELTA", 3), ("UNARY", 3), ("NIBBLE", 3)]
CODE_CASES += [("ZETA", k) for k in range(1, 6)] + [("GOLOMB", k) for k in (1, 2, 3, 5)]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(("code", "k"), CODE_CASES, ids=[f"{c}{k}" for c, k in CODE_CASES])
def test_every_code_in_every_field(tmp_path, field, code, k):
    lists = feature_lists(60, seed=k)
    base = tmp_path / "g"
    props = write_bvgraph(
        base, lists, windowsize=3, maxrefcount=2, minintervallength=3, zetak=k, codes={field: code}
    )
    assert props["compressionflags"] == f"{field}_{code}"
    assert read_properties(base)["codes"][field] == code
    offs, succ = decode_bvgraph(base, parallel=False)
    assert as_lists(offs, succ) == lists
    offs, succ = decode_bvgraph(base, parallel=True, _n_ranges=4, _warm=1)
    assert as_lists(offs, succ) == lists
    assert as_lists(*chunked(base, 5, segment_bytes=64)) == lists


def test_all_flags_together(tmp_path):
    lists = feature_lists(70, seed=3)
    codes = {
        "OUTDEGREES": "DELTA",
        "REFERENCES": "GAMMA",
        "BLOCKS": "DELTA",
        "BLOCK_COUNT": "UNARY",
        "INTERVALS": "ZETA",
        "RESIDUALS": "NIBBLE",
        "OFFSETS": "DELTA",
    }
    base = tmp_path / "g"
    props = write_bvgraph(base, lists, zetak=2, codes=codes)
    assert props["compressionflags"].count("|") == 6
    assert_round_trip(base, lists)


@pytest.mark.parametrize("rust_style", [False, True])
def test_blocks_flag_java_vs_rust(tmp_path, rust_style):
    # Java codes block counts with BLOCK_COUNT_* (default gamma), the Rust crate with BLOCKS_* (and writes an
    # endianness property): both must decode.
    lists = feature_lists(50, seed=4)
    base = tmp_path / "g"
    write_bvgraph(base, lists, codes={"BLOCKS": "UNARY"}, rust_style=rust_style)
    assert read_properties(base)["codes"]["BLOCK_COUNT"] == ("UNARY" if rust_style else "GAMMA")
    assert_round_trip(base, lists)


@pytest.mark.parametrize("windowsize", [0, 1, 2, 7])
@pytest.mark.parametrize("minintervallength", [0, 1, 2, 4])
def test_parameters(tmp_path, windowsize, minintervallength):
    lists = feature_lists(60, seed=windowsize * 10 + minintervallength)
    base = tmp_path / "g"
    write_bvgraph(base, lists, windowsize=windowsize, minintervallength=minintervallength, maxrefcount=2)
    assert_round_trip(base, lists)


@pytest.mark.parametrize("with_offsets", [True, False])
def test_forced_references(tmp_path, with_offsets):
    """References exactly at the window limit, to empty lists, and chains far beyond maxrefcount."""
    n, w = 90, 4
    lists = feature_lists(n, seed=9)
    for x in range(40, 60):  # identical lists: a long reference chain
        lists[x] = [1, 2, 3, 10, 11, 12, 13, 14, 40 + (x % 3), n - 1]
    lists[70] = []
    lists[74] = [5, 6, 70, 71]

    def refs(x):
        if 41 <= x < 60:
            return 1  # chain of length 19 with maxrefcount=1
        if x == 74:
            return 4  # reference to an empty list, exactly windowsize back
        if x >= w and x % 5 == 0 and lists[x] and lists[x - w]:
            return w  # exactly at the window limit
        return None

    base = tmp_path / "g"
    write_bvgraph(
        base, lists, windowsize=w, maxrefcount=1, minintervallength=2, refs=refs, write_offsets=with_offsets
    )
    assert_round_trip(base, lists, has_offsets=with_offsets)


def test_maxrefcount_chains(tmp_path):
    n = 120
    lists = [[0, 5, 6, 7, 8, 9, 50 + (x % 2), n - 1] if x % 17 else [] for x in range(n)]
    base = tmp_path / "g"
    write_bvgraph(base, lists, windowsize=3, maxrefcount=5, minintervallength=4)
    assert_round_trip(base, lists)


def test_empty_and_edgeless_graphs(tmp_path):
    write_bvgraph(tmp_path / "empty", [])
    offs, succ = decode_bvgraph(tmp_path / "empty")
    assert offs.tolist() == [0] and succ.size == 0
    assert list(iter_bvgraph_chunks(tmp_path / "empty")) == []
    lists = [[] for _ in range(37)]
    write_bvgraph(tmp_path / "edgeless", lists)
    assert_round_trip(tmp_path / "edgeless", lists)


def test_int64_successors(tmp_path, monkeypatch):
    # Graphs with >= 2**31 nodes get int64 successors; exercise that kernel on a small graph.
    lists = feature_lists(40, seed=5)
    write_bvgraph(tmp_path / "g", lists)
    monkeypatch.setattr(wg._Params, "succ_dtype", property(lambda self: np.int64))
    offs, succ = decode_bvgraph(tmp_path / "g", parallel=False)
    assert succ.dtype == np.int64 and as_lists(offs, succ) == lists
    first, c_offs, c_succ = next(iter_bvgraph_chunks(tmp_path / "g", 10_000))
    assert first == 0 and c_succ.dtype == np.int64 and as_lists(c_offs, c_succ) == lists


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 40))
    lists = []
    for x in range(n):
        kind = draw(st.sampled_from(["empty", "random", "run", "copy"]))
        if kind == "empty":
            lists.append([])
        elif kind == "random":
            lists.append(sorted(draw(st.sets(st.integers(0, n - 1), max_size=12))))
        elif kind == "run":
            lo = draw(st.integers(0, n - 1))
            hi = draw(st.integers(lo, n))
            extra = draw(st.sets(st.integers(0, n - 1), max_size=4))
            lists.append(sorted(set(range(lo, hi)) | extra))
        else:
            src = lists[max(0, x - draw(st.integers(1, 4)))] if lists else []
            keep = draw(st.lists(st.booleans(), min_size=len(src), max_size=len(src)))
            extra = draw(st.sets(st.integers(0, n - 1), max_size=3))
            lists.append(sorted({v for v, k in zip(src, keep, strict=True) if k} | extra))
    field_codes = {}
    for field in FIELDS:
        if draw(st.booleans()):
            field_codes[field] = draw(
                st.sampled_from(["GAMMA", "DELTA", "UNARY", "ZETA", "NIBBLE", "GOLOMB"])
            )
    params = {
        "windowsize": draw(st.integers(0, 4)),
        "maxrefcount": draw(st.integers(1, 4)),
        "minintervallength": draw(st.sampled_from([0, 1, 2, 3, 4])),
        "zetak": draw(st.integers(1, 5)),
        "codes": field_codes,
        "write_offsets": draw(st.booleans()),
        "rust_style": draw(st.booleans()),
    }
    return lists, params


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=graphs(), n_ranges=st.integers(1, 9), warm=st.integers(0, 6), max_arcs=st.integers(1, 30))
def test_round_trip_property(tmp_path, case, n_ranges, warm, max_arcs):
    lists, params = case
    base = tmp_path / "h"
    if Path(str(base) + ".offsets").exists():
        Path(str(base) + ".offsets").unlink()
    write_bvgraph(base, lists, **params)
    offs, succ = decode_bvgraph(base, parallel=False)
    assert as_lists(offs, succ) == lists
    if params["write_offsets"]:
        offs, succ = decode_bvgraph(base, parallel=True, _n_ranges=n_ranges, _warm=warm)
        assert as_lists(offs, succ) == lists
    assert as_lists(*chunked(base, max_arcs, segment_bytes=64)) == lists


def test_read_webgraph_source(tmp_path):
    lists = feature_lists(50, seed=6)
    write_bvgraph(tmp_path / "small-graph", lists, windowsize=2)
    src = read_webgraph(tmp_path / "small-graph.graph")  # with the suffix
    assert src.name == "small-graph" and src.num_nodes == 50
    assert src.path == str(tmp_path / "small-graph.graph")
    assert src.expected_arcs == sum(map(len, lists)) and src.undirected_once is False
    assert src.feature_blocks is None and src.labels is None and src.splits is None
    assert src.info["windowsize"] == 2 and src.info["nodes"] == 50 and src.info["arcs"] == src.expected_arcs
    expect = sorted((x, y) for x, lst in enumerate(lists) for y in lst)
    for _ in range(2):  # arcs() may be called more than once
        got = sorted(
            (int(s), int(d))
            for src_chunk, dst_chunk in src.arcs()
            for s, d in zip(src_chunk, dst_chunk, strict=True)
        )
        assert got == expect
    assert read_webgraph(tmp_path / "small-graph").name == "small-graph"


# ------------------------------------------------------------------------------------------------ bad input


def small_graph(tmp_path, **kw) -> tuple[Path, list[list[int]]]:
    lists = feature_lists(80, seed=7)
    base = tmp_path / "bad"
    write_bvgraph(base, lists, **kw)
    return base, lists


def edit_properties(base: Path, **changes) -> None:
    props = read_properties(base)
    raw = {k: str(v) for k, v in props.items() if k != "codes"}
    for k, v in changes.items():
        if v is None:
            raw.pop(k, None)
        else:
            raw[k] = v
    write_properties(str(base) + ".properties", raw)


def test_missing_files(tmp_path):
    base, _ = small_graph(tmp_path)
    with pytest.raises(G3InputError, match="properties file not found") as e:
        decode_bvgraph(tmp_path / "nope")
    assert e.value.path == tmp_path / "nope.properties"
    Path(str(base) + ".graph").unlink()
    with pytest.raises(G3InputError, match="graph file not found") as e:
        decode_bvgraph(base)
    assert e.value.path == Path(str(base) + ".graph")
    with pytest.raises(G3InputError, match="graph file not found"):
        iter_bvgraph_chunks(base)
    with pytest.raises(G3InputError, match="graph file not found"):
        read_webgraph(base)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"compressionflags": "RESIDUALS_ZETA|OUTDEGREES_FOO"}, "unknown compression flag 'OUTDEGREES_FOO'"),
        ({"compressionflags": "WEIGHTS_GAMMA"}, "unknown compression flag"),
        ({"compressionflags": "RESIDUALS_SKEWED_GOLOMB"}, "unsupported compression flag"),
        ({"compressionflags": "RESIDUALS_PI2"}, "unsupported compression flag"),
        ({"nodes": None}, "missing property 'nodes'"),
        ({"arcs": None}, "missing property 'arcs'"),
        ({"windowsize": None}, "missing property 'windowsize'"),
        ({"nodes": "many"}, "'nodes' must be an integer"),
        ({"nodes": "-3"}, "'nodes' must be >= 0"),
        ({"version": "1"}, "unsupported BVGraph format version=1"),
        ({"version": None}, "missing property 'version'"),
        ({"graphclass": "it.unimi.dsi.webgraph.EFGraph"}, "is not a BVGraph"),
        ({"graphclass": None}, "missing property 'graphclass'"),
        ({"endianness": "little"}, "unsupported endianness"),
        ({"zetak": "0"}, "'zetak' must be in"),
    ],
)
def test_bad_properties(tmp_path, changes, message):
    base, _ = small_graph(tmp_path)
    edit_properties(base, **changes)
    with pytest.raises(G3InputError, match=message) as e:
        decode_bvgraph(base)
    assert e.value.path == Path(str(base) + ".properties")
    with pytest.raises(G3InputError, match=message):
        read_webgraph(base)


def test_properties_syntax(tmp_path):
    base, lists = small_graph(tmp_path)
    text = Path(str(base) + ".properties").read_text()
    text = text.replace(
        "graphclass=it.unimi.dsi.webgraph.BVGraph", "graphclass : it.unimi.dsi.big.webgraph.BVGraph"
    )
    text = text.replace("nodes=80", "! a comment\nnodes   80").replace("windowsize=", "window\\\n  size=")
    Path(str(base) + ".properties").write_text(text)
    props = read_properties(base)
    assert props["nodes"] == 80 and props["graphclass"] == "it.unimi.dsi.big.webgraph.BVGraph"
    assert as_lists(*decode_bvgraph(base)) == lists


@pytest.mark.parametrize("delta", [-1, 1])
@pytest.mark.parametrize("with_offsets", [True, False])
def test_arc_count_mismatch(tmp_path, delta, with_offsets):
    base, lists = small_graph(tmp_path, write_offsets=with_offsets)
    edit_properties(base, arcs=str(sum(map(len, lists)) + delta))
    with pytest.raises(G3InputError, match="arc count mismatch") as e:
        decode_bvgraph(base, parallel=with_offsets)
    assert e.value.path == Path(str(base) + ".graph")
    for max_arcs in (3, 1 << 20):
        with pytest.raises(G3InputError, match="arc count mismatch"):
            for _ in iter_bvgraph_chunks(base, max_arcs):
                pass


@pytest.mark.parametrize("cut", [1, 2, 50])
def test_truncated_graph(tmp_path, cut):
    base, _ = small_graph(tmp_path)
    gpath = Path(str(base) + ".graph")
    gpath.write_bytes(gpath.read_bytes()[:-cut])
    for parallel in (True, False):
        with pytest.raises(G3InputError, match="truncated") as e:
            decode_bvgraph(base, parallel=parallel)
        assert e.value.path == gpath
    with pytest.raises(G3InputError, match="truncated"):
        for _ in iter_bvgraph_chunks(base, 4, _segment_bytes=64):
            pass


def test_truncated_offsets(tmp_path):
    base, _ = small_graph(tmp_path)
    opath = Path(str(base) + ".offsets")
    opath.write_bytes(opath.read_bytes()[:-3])
    with pytest.raises(G3InputError, match="offsets file ends") as e:
        decode_bvgraph(base, parallel=True)
    assert e.value.path == opath


def raw_graph(tmp_path: Path, nodes: list[str], n: int, arcs: int, **props) -> Path:
    """A graph written from hand-made per-node bit strings (default codes), with its offsets."""
    base = tmp_path / "raw"
    nodes = nodes + [gamma(0)] * (n - len(nodes))  # empty lists up to n nodes
    Path(str(base) + ".graph").write_bytes(pack("".join(nodes)))
    Path(str(base) + ".offsets").write_bytes(pack("".join(gamma(g) for g in [0, *map(len, nodes)])))
    raw = {
        "graphclass": "it.unimi.dsi.webgraph.BVGraph",
        "version": "0",
        "nodes": str(n),
        "arcs": str(arcs),
        "windowsize": "1",
        "maxrefcount": "3",
        "minintervallength": "0",
        "zetak": "3",
        "compressionflags": "",
    }
    raw.update({k: str(v) for k, v in props.items()})
    write_properties(str(base) + ".properties", raw)
    return base


def z(x: int) -> str:
    return zeta(x, 3)


LIST_01 = gamma(2) + unary(0) + z(0) + z(0)  # node 0 -> [0, 1] (window 1, no intervals)
CORRUPT_CASES = {
    "reference before node 0": ([gamma(1) + unary(1) + gamma(0)], 1, 1, {}, "before node 0"),
    "reference beyond the window": (
        [LIST_01, gamma(1) + unary(2) + gamma(0)],
        2,
        3,
        {},
        "beyond windowsize=1",
    ),
    "copies more than the outdegree": (
        [LIST_01, gamma(1) + unary(1) + gamma(0)],
        2,
        3,
        {},
        "copies more successors than its outdegree",
    ),
    "copy block beyond the referenced list": (
        [LIST_01, gamma(2) + unary(1) + gamma(1) + gamma(5)],
        2,
        4,
        {},
        "copy blocks of node 1 exceed",
    ),
    "intervals beyond the outdegree": (
        [gamma(2) + unary(0) + gamma(1) + gamma(0) + gamma(3)],
        2,
        2,
        {"minintervallength": 2},
        "intervals of node 0 hold more",
    ),
    "negative successor": ([gamma(1) + unary(0) + z(1)], 1, 1, {}, r"out of range \[0, 1\)"),
    "successor beyond the last node": (
        [gamma(2) + unary(0) + z(0) + z(4)],
        3,
        2,
        {},
        r"out of range \[0, 3\)",
    ),
    "repeated successor": ([LIST_01, gamma(3) + unary(1) + gamma(0) + z(0)], 4, 5, {}, "repeats a successor"),
    "outdegree above the node count": (
        [gamma(4) + unary(0) + z(0) + z(0) + z(0) + z(0)],
        3,
        4,
        {},
        "outdegree 4 > nodes=3",
    ),
    "code word too long": (["0" * 70 + "1" * 90], 1, 1, {}, "code word is longer than any valid value"),
}


@pytest.mark.parametrize("case", list(CORRUPT_CASES), ids=list(CORRUPT_CASES))
def test_corrupt_stream(tmp_path, case):
    nodes, n, arcs, props, message = CORRUPT_CASES[case]
    base = raw_graph(tmp_path, nodes, n, arcs, **props)
    gpath = Path(str(base) + ".graph")
    with pytest.raises(G3InputError, match=message) as e:
        decode_bvgraph(base, parallel=False)
    assert e.value.path == gpath
    with pytest.raises(G3InputError, match=message):
        chunked(base, 1, segment_bytes=64)
    with pytest.raises(G3InputError) as e:  # the parallel decoder may see it first as an inconsistent offset
        decode_bvgraph(base, parallel=True)
    assert e.value.path == gpath


def test_stream_ends_inside_a_list(tmp_path):
    nodes = [LIST_01, gamma(3) + unary(0) + z(0)]  # node 1 announces 3 successors and gives 1
    base = raw_graph(tmp_path, nodes, 4, 5)
    Path(str(base) + ".graph").write_bytes(pack("".join(nodes)))  # no lists after node 1
    Path(str(base) + ".offsets").unlink()
    with pytest.raises(G3InputError, match="ends inside the successor list of node 1"):
        decode_bvgraph(base)
    with pytest.raises(G3InputError, match="ends inside the successor list of node 1"):
        chunked(base, 1, segment_bytes=64)


def test_offsets_disagree_with_graph(tmp_path):
    base, lists = small_graph(tmp_path)
    (tmp_path / "other").mkdir()
    other = tmp_path / "other" / "bad"
    write_bvgraph(other, [[] for _ in lists])  # same node count, one bit per list
    shutil.copy(str(other) + ".offsets", str(base) + ".offsets")
    with pytest.raises(G3InputError, match="does not end where bad.offsets says|does not fit") as e:
        decode_bvgraph(base, parallel=True)
    assert e.value.path == Path(str(base) + ".graph")
    assert as_lists(*decode_bvgraph(base, parallel=False)) == lists  # the sequential decoder ignores them


@pytest.mark.parametrize("target", [".graph", ".offsets"])
def test_bit_flips_never_crash(tmp_path, target):
    """Random bit flips: decoding raises G3InputError or returns a valid CSR; it never crashes or hangs."""
    lists = feature_lists(120, seed=8)
    base = tmp_path / "f"
    write_bvgraph(base, lists, windowsize=3, minintervallength=2, zetak=2)
    path = Path(str(base) + target)
    original = path.read_bytes()
    rng = np.random.default_rng(12345)
    outcomes = {"error": 0, "valid": 0}
    for trial in range(60):
        data = bytearray(original)
        for _ in range(1 + trial % 3):
            bit = int(rng.integers(0, len(data) * 8))
            data[bit // 8] ^= 0x80 >> (bit % 8)
        path.write_bytes(bytes(data))
        decoders = [
            lambda: decode_bvgraph(base, parallel=True, _n_ranges=5, _warm=2),
            lambda: decode_bvgraph(base, parallel=False),
            lambda: chunked(base, 9, segment_bytes=64),
        ]
        for decode in decoders:
            try:
                offs, succ = decode()
            except G3InputError:
                outcomes["error"] += 1
            else:
                outcomes["valid"] += 1
                assert_valid_csr(offs, succ, len(lists))
    assert outcomes["error"] > 0
