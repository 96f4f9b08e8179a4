"""The edge-list reader: text (CSV/whitespace, comments, header), .npy/.npz arrays, side arrays, bad input."""

from __future__ import annotations

import gzip

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stages.common.errors import G3InputError
from stages.ingest import edgelist
from stages.ingest.edgelist import open_array_spec, read_edgelist

SRC = np.array([0, 1, 2, 3, 4, 0, 5, 5], dtype=np.int64)
DST = np.array([1, 2, 3, 4, 0, 5, 5, 1], dtype=np.int64)


def consume(source):
    parts = list(source.arcs())
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    s = np.concatenate([np.asarray(p[0], dtype=np.int64) for p in parts])
    d = np.concatenate([np.asarray(p[1], dtype=np.int64) for p in parts])
    return s, d


def features_of(source):
    return np.concatenate(list(source.feature_blocks()))


def assert_arcs(source, src, dst):
    s, d = consume(source)
    np.testing.assert_array_equal(s, src)
    np.testing.assert_array_equal(d, dst)


@pytest.fixture
def small_blocks(monkeypatch):
    """Tiny parse blocks and array chunks so every path crosses block boundaries."""
    monkeypatch.setattr(edgelist, "TEXT_BLOCK_BYTES", 16)
    monkeypatch.setattr(edgelist, "ARRAY_ARC_CHUNK", 3)
    monkeypatch.setattr(edgelist, "FEATURE_BLOCK_BYTES", 40)
    monkeypatch.setattr(edgelist, "LABEL_BLOCK", 4)


# --- text formats ---------------------------------------------------------------------------------------------

TEXT_CASES = {
    "spaces": "\n".join(f"{s} {d}" for s, d in zip(SRC, DST, strict=True)) + "\n",
    "tabs_no_final_newline": "\n".join(f"{s}\t{d}" for s, d in zip(SRC, DST, strict=True)),
    "csv": "\n".join(f"{s},{d}" for s, d in zip(SRC, DST, strict=True)) + "\n",
    "csv_spaces_header": "source, target\n"
    + "\n".join(f"{s}, {d}" for s, d in zip(SRC, DST, strict=True))
    + "\n",
    "snap_comments": "# Directed graph\n# Nodes: 6 Edges: 8\n# FromNodeId\tToNodeId\n"
    + "\n".join(f"{s}\t{d}" for s, d in zip(SRC, DST, strict=True))
    + "\n",
    "konect_weights": "% sym unweighted\n% 8 6 6\n"
    + "\n".join(f"{s} {d} 1 {i}" for i, (s, d) in enumerate(zip(SRC, DST, strict=True))),
    "ragged_whitespace": "  src   dst  \n\n"
    + "\n".join(f"  {s}  \t {d}   " for s, d in zip(SRC, DST, strict=True))
    + "\n\n\n",
    "crlf": "\r\n".join(f"{s} {d}" for s, d in zip(SRC, DST, strict=True)) + "\r\n",
    "mid_comments": "\n".join(
        f"{s} {d}\n# note {i}\n\n% x" for i, (s, d) in enumerate(zip(SRC, DST, strict=True))
    )
    + "\n",
}


@pytest.mark.parametrize("case", sorted(TEXT_CASES))
@pytest.mark.parametrize("blocks", ["default", "small"])
def test_text_formats(tmp_path, monkeypatch, case, blocks):
    if blocks == "small":
        monkeypatch.setattr(edgelist, "TEXT_BLOCK_BYTES", 7)
    p = tmp_path / "g.txt"
    p.write_bytes(TEXT_CASES[case].encode())
    src = read_edgelist(p)
    assert src.num_nodes == 6
    assert_arcs(src, SRC, DST)
    assert_arcs(src, SRC, DST)  # arcs() may be called again
    assert src.expected_arcs == len(SRC)
    assert src.labels is None and src.feature_blocks is None and src.splits is None
    assert not src.undirected_once


def test_gzip_text_and_two_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(edgelist, "CACHE_ARCS_LIMIT", 0)  # no cache: arcs() re-parses the file
    p = tmp_path / "g.tsv.gz"
    with gzip.open(p, "wt") as f:
        f.write("# c\n" + "\n".join(f"{s}\t{d}" for s, d in zip(SRC, DST, strict=True)) + "\n")
    src = read_edgelist(p, undirected=True)
    assert src.undirected_once and src.name == "g"
    assert_arcs(src, SRC, DST)
    assert_arcs(src, SRC, DST)


def test_byte_order_mark(tmp_path):
    p = tmp_path / "g.csv"
    p.write_bytes(b"\xef\xbb\xbf0,1\n1,2\n")
    assert_arcs(read_edgelist(p), [0, 1], [1, 2])


def test_num_nodes_given_keeps_isolated_nodes(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("0 1\n1 2\n")
    src = read_edgelist(p, num_nodes=10)
    assert src.num_nodes == 10
    assert_arcs(src, [0, 1], [1, 2])


def test_empty_edge_list(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("# nothing\n")
    src = read_edgelist(p, num_nodes=3)
    s, d = consume(src)
    assert len(s) == 0


@st.composite
def edge_text(draw):
    n = draw(st.integers(1, 50))
    m = draw(st.integers(0, 60))
    src = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    sep = draw(st.sampled_from([" ", "\t", ",", "  ", ", ", " \t"]))
    comma = "," in sep
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    lines = [f"{s}{sep}{d}" for s, d in zip(src, dst, strict=True)]
    if draw(st.booleans()):  # extra columns (weights)
        lines = [ln + f"{sep}{draw(st.integers(0, 9))}" for ln in lines]
    for _ in range(draw(st.integers(0, 6))):  # comments and blank lines anywhere
        pos = draw(st.integers(0, len(lines)))
        lines.insert(pos, draw(st.sampled_from(["# a comment", "% konect", "", "   ", "#1 2", "%,"])))
    if draw(st.booleans()):
        header = "src,dst" if comma else "from to"
        # the header comes before the first data line, after any leading comments
        first_data = next(
            (i for i, ln in enumerate(lines) if ln.strip() and ln.strip()[0] not in "#%"), len(lines)
        )
        lines.insert(draw(st.integers(0, first_data)), header)
    text = eol.join(lines) + (eol if draw(st.booleans()) else "")
    return text, np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), n


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=edge_text(), block=st.sampled_from([5, 13, 64, 1 << 20]))
def test_text_parsing_property(tmp_path_factory, case, block):
    text, src, dst, n = case
    p = tmp_path_factory.mktemp("prop") / "g.txt"
    p.write_text(text)
    old = edgelist.TEXT_BLOCK_BYTES
    edgelist.TEXT_BLOCK_BYTES = block
    try:
        source = read_edgelist(p, num_nodes=n)
        assert_arcs(source, src, dst)
        if len(src):
            inferred = read_edgelist(p)
            assert inferred.num_nodes == max(src.max(), dst.max()) + 1
            assert_arcs(inferred, src, dst)
    finally:
        edgelist.TEXT_BLOCK_BYTES = old


# --- bad text -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, line",
    [
        ("0 1\n1 2\n3\n4 5\n", 3),  # one field
        ("0 1\n1 2\n4 x\n", 3),  # not an integer
        ("# c\nsrc dst\n0 1\nfrom to\n", 4),  # a second header
        ("0 1\n1.5 2\n", 2),  # a float id
        ("7\n0 1\n", 1),  # numeric first line with one field: malformed, not a header
        ("0,1\n1,2\n2 3\n", 3),  # CSV file with a whitespace line
        ("0,1\n1,\n", 2),  # empty field
    ],
)
@pytest.mark.parametrize("blocks", ["default", "small"])
def test_malformed_line_names_file_and_line(tmp_path, monkeypatch, text, line, blocks):
    if blocks == "small":
        monkeypatch.setattr(edgelist, "TEXT_BLOCK_BYTES", 6)
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(G3InputError, match="malformed line") as exc:
        consume(read_edgelist(p, num_nodes=100))
    assert f"{p}:{line}:" in str(exc.value)
    assert exc.value.line == line


def test_malformed_line_far_into_a_big_file(tmp_path, monkeypatch):
    monkeypatch.setattr(edgelist, "TEXT_BLOCK_BYTES", 1000)
    lines = [f"{i % 97} {(i * 7) % 97}" for i in range(5000)]
    lines[4321] = "12 oops"
    p = tmp_path / "big.txt"
    p.write_text("# header comment\n" + "\n".join(lines) + "\n")
    with pytest.raises(G3InputError) as exc:
        read_edgelist(p)
    assert exc.value.line == 4321 + 2 and "oops" in str(exc.value)


@pytest.mark.parametrize("blocks", ["default", "small"])
def test_id_out_of_range_names_line(tmp_path, monkeypatch, blocks):
    if blocks == "small":
        monkeypatch.setattr(edgelist, "TEXT_BLOCK_BYTES", 9)
    p = tmp_path / "g.txt"
    p.write_text("# c\n0 1\n\n1 2\n# c\n2 9\n3 4\n")
    with pytest.raises(G3InputError, match=r"node id 9 is out of range \[0, 5\)") as exc:
        consume(read_edgelist(p, num_nodes=5))
    assert exc.value.line == 6 and str(p) in str(exc.value)


def test_negative_id_names_line(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("0 1\n1 -2\n")
    with pytest.raises(G3InputError, match="node id -2") as exc:
        read_edgelist(p)  # found by the pass that counts nodes
    assert exc.value.line == 2


def test_missing_edge_file(tmp_path):
    with pytest.raises(G3InputError, match="no such file") as exc:
        read_edgelist(tmp_path / "nope.txt")
    assert "nope.txt" in str(exc.value)


# --- arrays ---------------------------------------------------------------------------------------------------

EDGE_INDEX = np.stack([SRC, DST])


@pytest.mark.parametrize(
    "kind",
    [
        "npy_2xE",
        "npy_Ex2",
        "npy_int32",
        "npy_fortran",
        "npz_key",
        "npz_single",
        "npz_compressed",
        "npz_compressed_Ex2",
        "npz_compressed_fortran",
        "h5",
    ],
)
def test_edge_arrays(tmp_path, small_blocks, kind):
    if kind.startswith("npy"):
        p = tmp_path / "e.npy"
        arr = {
            "npy_2xE": EDGE_INDEX,
            "npy_Ex2": EDGE_INDEX.T.copy(),
            "npy_int32": EDGE_INDEX.astype(np.int32),
            "npy_fortran": np.asfortranarray(EDGE_INDEX),
        }[kind]
        np.save(p, arr)
        spec = p
    elif kind == "npz_key":
        spec = tmp_path / "e.npz"
        np.savez(spec, other=np.zeros(3), edge_index=EDGE_INDEX)
        spec = f"{spec}:edge_index"
    elif kind == "npz_single":
        spec = tmp_path / "e.npz"
        np.savez(spec, EDGE_INDEX.T.copy())
    elif kind == "npz_compressed":
        spec = tmp_path / "e.npz"
        np.savez_compressed(spec, edge_index=EDGE_INDEX)
    elif kind == "npz_compressed_Ex2":
        spec = tmp_path / "e.npz"
        np.savez_compressed(spec, edge_index=EDGE_INDEX.T.copy())
    elif kind == "npz_compressed_fortran":
        spec = tmp_path / "e.npz"
        np.savez_compressed(spec, edge_index=np.asfortranarray(EDGE_INDEX))
    else:
        p = tmp_path / "e.h5"
        with h5py.File(p, "w") as f:
            f["graph/edges"] = EDGE_INDEX
        spec = f"{p}:/graph/edges"
    src = read_edgelist(spec)
    assert src.num_nodes == 6 and src.expected_arcs == len(SRC)
    assert_arcs(src, SRC, DST)
    assert_arcs(src, SRC, DST)


@pytest.mark.parametrize("save", [np.save, "npz_compressed"])
def test_edge_array_out_of_range_names_index(tmp_path, small_blocks, save):
    bad = EDGE_INDEX.copy()
    bad[1, 5] = 77
    if save is np.save:
        p = tmp_path / "e.npy"
        np.save(p, bad)
    else:
        p = tmp_path / "e.npz"
        np.savez_compressed(p, edge_index=bad)
    with pytest.raises(
        G3InputError, match=r"node id 77 at edge_index\[:, 5\] \(edge 5\) is out of range \[0, 6\)"
    ) as exc:
        consume(read_edgelist(p, num_nodes=6))
    assert str(p) in str(exc.value)


def test_edge_array_bad_shape_and_dtype(tmp_path):
    p = tmp_path / "e.npy"
    np.save(p, np.zeros((3, 4), dtype=np.int64))
    with pytest.raises(G3InputError, match=r"shape \[2, E\] or \[E, 2\]"):
        read_edgelist(p)
    np.save(p, np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(G3InputError, match="integers"):
        read_edgelist(p)


def test_a_two_by_two_edge_array_is_read_as_an_edge_index(tmp_path):
    """[[0, 1], [2, 3]] is two arcs either way; the help says which: [2, E], row 0 the sources (0 → 2, 1 → 3)."""
    p = tmp_path / "e.npy"
    np.save(p, np.array([[0, 1], [2, 3]], dtype=np.int64))
    s, d = consume(read_edgelist(p))
    assert s.tolist() == [0, 1] and d.tolist() == [2, 3]


def test_npz_with_several_arrays_needs_a_key(tmp_path):
    p = tmp_path / "e.npz"
    np.savez(p, a=EDGE_INDEX, b=EDGE_INDEX)
    with pytest.raises(G3InputError, match="holds 2 arrays"):
        read_edgelist(p)
    with pytest.raises(G3InputError, match="has no array 'c'"):
        read_edgelist(f"{p}:c")
    np.savez(p, weights=np.ones(len(SRC)), edge_index=EDGE_INDEX)  # edge_index is the default key
    assert_arcs(read_edgelist(p), SRC, DST)


# --- array specs, features, labels, splits --------------------------------------------------------------------


def test_open_array_spec_kinds(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.save(tmp_path / "x.npy", x)
    a = open_array_spec(tmp_path / "x.npy")
    assert isinstance(a, np.memmap)
    np.testing.assert_array_equal(a[2:4], x[2:4])
    np.savez_compressed(tmp_path / "x.npz", feat=x)
    a = open_array_spec(f"{tmp_path / 'x.npz'}:feat")
    assert isinstance(a, edgelist.NpzMember)
    np.testing.assert_array_equal(a[1:5], x[1:5])
    np.testing.assert_array_equal(a[0:2], x[0:2])  # backwards
    np.testing.assert_array_equal(np.asarray(a), x)
    np.savez(tmp_path / "y.npz", feat=x)
    a = open_array_spec(tmp_path / "y.npz")
    assert isinstance(a, np.memmap)
    np.testing.assert_array_equal(a, x)
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["a/feat"] = x
    a = open_array_spec(f"{tmp_path / 'x.h5'}:/a/feat")
    np.testing.assert_array_equal(a[3:6], x[3:6])
    a = open_array_spec(tmp_path / "x.h5")  # the only dataset
    np.testing.assert_array_equal(a[:], x)


def test_open_array_spec_errors(tmp_path):
    with pytest.raises(G3InputError, match="no such file") as exc:
        open_array_spec(f"{tmp_path / 'missing.h5'}:/feat")
    assert "missing.h5" in str(exc.value)
    with pytest.raises(G3InputError, match="no such file"):
        open_array_spec(tmp_path / "missing.npy")
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["feat"] = np.zeros((3, 2))
        f["lab"] = np.zeros(3)
    with pytest.raises(G3InputError, match=r"has no dataset '/nope' \(datasets: /feat, /lab\)") as exc:
        open_array_spec(f"{tmp_path / 'x.h5'}:/nope")
    assert "x.h5" in str(exc.value)
    with pytest.raises(G3InputError, match="holds 2 datasets"):
        open_array_spec(tmp_path / "x.h5")
    (tmp_path / "x.txt").write_text("1 2\n")
    with pytest.raises(G3InputError, match="unsupported"):
        open_array_spec(tmp_path / "x.txt")


def _edges_file(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("\n".join(f"{s} {d}" for s, d in zip(SRC, DST, strict=True)) + "\n")
    return p


def test_features_labels_splits(tmp_path, small_blocks):
    p = _edges_file(tmp_path)
    n = 8  # two isolated nodes beyond the largest id: the side arrays give the node count
    feats = np.random.default_rng(0).standard_normal((n, 3)).astype(np.float32)
    np.save(tmp_path / "f.npy", feats)
    labels = np.array([0, 1, np.nan, 2, 1, np.nan, 0, 4])
    with h5py.File(tmp_path / "l.h5", "w") as f:
        f["y"] = labels
    (tmp_path / "train.txt").write_text("# train ids\n0\n1\n\n3\n")
    np.save(tmp_path / "valid.npy", np.array([4, 6]))
    src = read_edgelist(
        p,
        features=str(tmp_path / "f.npy"),
        labels=f"{tmp_path / 'l.h5'}:/y",
        train_idx=tmp_path / "train.txt",
        valid_idx=tmp_path / "valid.npy",
    )
    assert src.num_nodes == n and src.feat_dim == 3
    np.testing.assert_array_equal(features_of(src), feats)
    np.testing.assert_array_equal(src.labels, [0, 1, -1, 2, 1, -1, 0, 4])
    assert src.num_classes == 5
    np.testing.assert_array_equal(src.splits["train"], [0, 1, 3])
    np.testing.assert_array_equal(src.splits["valid"], [4, 6])
    assert len(src.splits["test"]) == 0
    assert_arcs(src, SRC, DST)


def test_int_labels_and_h5_features(tmp_path, small_blocks):
    p = _edges_file(tmp_path)
    feats = np.arange(24, dtype=np.float64).reshape(6, 4)
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["x"] = feats
        f["y"] = np.array([[3], [1], [0], [-1], [2], [2]], dtype=np.int16)
    src = read_edgelist(p, features=f"{tmp_path / 'd.h5'}:/x", labels=f"{tmp_path / 'd.h5'}:/y")
    np.testing.assert_array_equal(features_of(src), feats)
    np.testing.assert_array_equal(src.labels, [3, 1, 0, -1, 2, 2])
    assert src.num_classes == 4


def test_feature_rows_must_match_num_nodes(tmp_path):
    p = _edges_file(tmp_path)
    np.save(tmp_path / "f.npy", np.zeros((5, 2), dtype=np.float32))
    with pytest.raises(G3InputError, match="5 rows but the graph has 6 nodes") as exc:
        read_edgelist(p, num_nodes=6, features=tmp_path / "f.npy")
    assert "f.npy" in str(exc.value)


def test_labels_and_features_disagree(tmp_path):
    p = _edges_file(tmp_path)
    np.save(tmp_path / "f.npy", np.zeros((6, 2), dtype=np.float32))
    np.save(tmp_path / "l.npy", np.zeros(7, dtype=np.int64))
    with pytest.raises(G3InputError, match="disagree on the number of nodes"):
        read_edgelist(p, features=tmp_path / "f.npy", labels=tmp_path / "l.npy")


def test_edge_id_beyond_feature_rows(tmp_path):
    p = _edges_file(tmp_path)
    np.save(tmp_path / "f.npy", np.zeros((5, 2), dtype=np.float32))
    with pytest.raises(
        G3InputError,
        match=r"node id 5 is out of range \[0, 5\): the node count 5 is the rows of "
        r".*f\.npy",
    ) as exc:
        consume(read_edgelist(p, features=tmp_path / "f.npy"))
    assert exc.value.line == 6  # both inputs named: the edge's line, and the file that set the node count


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_features(tmp_path, small_blocks, bad):
    p = _edges_file(tmp_path)
    feats = np.ones((6, 2), dtype=np.float32)
    feats[4, 1] = bad
    np.save(tmp_path / "f.npy", feats)
    with pytest.raises(G3InputError, match=r"row 4 \(node 4\), column 1 is not finite") as exc:
        features_of(read_edgelist(p, features=tmp_path / "f.npy"))
    assert "f.npy" in str(exc.value)


def test_missing_h5_dataset(tmp_path):
    p = _edges_file(tmp_path)
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["x"] = np.zeros((6, 2))
    with pytest.raises(G3InputError, match="has no dataset '/feat'") as exc:
        read_edgelist(p, features=f"{tmp_path / 'd.h5'}:/feat")
    assert "d.h5" in str(exc.value)


def test_missing_feature_file(tmp_path):
    with pytest.raises(G3InputError, match="no such file") as exc:
        read_edgelist(_edges_file(tmp_path), features=tmp_path / "nope.npy")
    assert "nope.npy" in str(exc.value)


@pytest.mark.parametrize(
    "labels, match",
    [
        (np.zeros((6, 3)), "multi-label"),
        (np.array([0, 1, 2.5, 0, 0, 0]), r"label 2.5 at row 2 \(node 2\) is not an integer"),
        (np.array([0, 1, 2, -3, 0, 0]), "label -3 at row 3"),
        (np.array([0, 1, np.inf, 0, 0, 0]), "label inf at row 2"),
    ],
)
def test_bad_labels(tmp_path, labels, match):
    np.save(tmp_path / "l.npy", labels)
    with pytest.raises(G3InputError, match=match) as exc:
        read_edgelist(_edges_file(tmp_path), labels=tmp_path / "l.npy")
    assert "l.npy" in str(exc.value)


def test_split_errors(tmp_path):
    p = _edges_file(tmp_path)
    (tmp_path / "train.txt").write_text("0\n# c\n1\n6\n")
    with pytest.raises(G3InputError, match=r"train_idx node id 6 is out of range \[0, 6\)") as exc:
        read_edgelist(p, train_idx=tmp_path / "train.txt")
    assert exc.value.line == 4
    (tmp_path / "train.txt").write_text("0\n1 2\n")
    with pytest.raises(G3InputError, match="malformed line") as exc:
        read_edgelist(p, train_idx=tmp_path / "train.txt")
    assert exc.value.line == 2
    np.save(tmp_path / "t.npy", np.array([1, -1]))
    with pytest.raises(G3InputError, match="at index 1 is out of range"):
        read_edgelist(p, test_idx=tmp_path / "t.npy")
    with pytest.raises(G3InputError, match="no such valid_idx file"):
        read_edgelist(p, valid_idx=tmp_path / "nope.txt")


# --- round trip through the store builder ---------------------------------------------------------------------


def reference_csr(n, src, dst, symmetrize):
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    m = sp.csr_matrix((np.ones(len(src)), (dst, src)), shape=(n, n))
    m.sum_duplicates()
    m.sort_indices()
    return m.indptr.astype(np.int64), m.indices.astype(np.int64)


@pytest.mark.parametrize("fmt", ["text", "csv_gz", "npy", "npz"])
@pytest.mark.parametrize("undirected", [False, True])
def test_round_trip_through_store(tmp_path, fmt, undirected):
    from stages.common.store import GraphStore
    from stages.ingest.build import IngestOptions, build_store

    rng = np.random.default_rng(1)
    n, m = 40, 300
    src, dst = rng.integers(0, n - 3, m), rng.integers(0, n - 3, m)  # duplicates, self-loops, isolated nodes
    if fmt == "text":
        p = tmp_path / "g.txt"
        p.write_text(
            "# test\nsrc dst\n" + "\n".join(f"{s} {d}" for s, d in zip(src, dst, strict=True)) + "\n"
        )
    elif fmt == "csv_gz":
        p = tmp_path / "g.csv.gz"
        with gzip.open(p, "wt") as f:
            f.write("\n".join(f"{s},{d}" for s, d in zip(src, dst, strict=True)) + "\n")
    elif fmt == "npy":
        p = tmp_path / "g.npy"
        np.save(p, np.stack([src, dst]))
    else:
        p = tmp_path / "g.npz"
        np.savez_compressed(p, edge_index=np.stack([src, dst]).T.copy())
    feats = rng.standard_normal((n, 5)).astype(np.float32)
    np.save(tmp_path / "f.npy", feats)
    labels = rng.integers(0, 4, n)
    np.save(tmp_path / "l.npy", labels)
    np.save(tmp_path / "train.npy", np.arange(0, 20))
    (tmp_path / "valid.txt").write_text("\n".join(map(str, range(20, 30))) + "\n")
    source = read_edgelist(
        p,
        features=tmp_path / "f.npy",
        labels=tmp_path / "l.npy",
        train_idx=tmp_path / "train.npy",
        valid_idx=tmp_path / "valid.txt",
        undirected=undirected,
    )
    out = tmp_path / "store"
    build_store(source, out, IngestOptions())
    store = GraphStore.open(out)
    assert store.num_nodes == n
    indptr, indices = store.load_csr()
    ref_ptr, ref_idx = reference_csr(n, src, dst, undirected)
    np.testing.assert_array_equal(indptr, ref_ptr)
    np.testing.assert_array_equal(indices, ref_idx)
    np.testing.assert_array_equal(np.asarray(store.features[:]), feats)
    np.testing.assert_array_equal(store.load_labels(), labels)
    np.testing.assert_array_equal(store.split_index("train"), np.arange(0, 20))
    np.testing.assert_array_equal(store.split_index("valid"), np.arange(20, 30))
    assert len(store.split_index("test")) == 0
