"""The OGB node-property-prediction reader: CSV and data.npz layouts, splits, and every bad-input check."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from stages.common.errors import G3InputError
from stages.ingest import edgelist, ogb
from stages.ingest.ogb import read_ogb

N = 12
RNG = np.random.default_rng(7)
SRC = RNG.integers(0, N, 40)
DST = RNG.integers(0, N, 40)
FEAT = RNG.standard_normal((N, 3)).astype(np.float32)
LABELS = np.array([0, 3, np.nan, 1, 1, 2, np.nan, 0, 3, 3, 1, 0])
SPLITS = {"train": np.array([0, 1, 3, 4, 5]), "valid": np.array([7, 8]), "test": np.array([9, 10, 11])}


def write_gz(path: Path, lines, gz: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{ln}\n" for ln in lines)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        (path.with_suffix("") if path.suffix == ".gz" else path).write_text(text)


def fmt_label(x) -> str:
    return "nan" if np.isnan(x) else str(int(x))


def make_csv(root: Path, name="products", gz=True, split_names=("sales_ranking",), feats=True) -> Path:
    folder = root / name
    raw = folder / "raw"
    write_gz(raw / "edge.csv.gz", [f"{s},{d}" for s, d in zip(SRC, DST, strict=True)], gz)
    if feats:
        write_gz(raw / "node-feat.csv.gz", [",".join(repr(float(v)) for v in row) for row in FEAT], gz)
    write_gz(raw / "node-label.csv.gz", [fmt_label(x) for x in LABELS], gz)
    write_gz(raw / "num-node-list.csv.gz", [N], gz)
    write_gz(raw / "num-edge-list.csv.gz", [len(SRC)], gz)
    for sname in split_names:
        for part, ids in SPLITS.items():
            write_gz(folder / "split" / sname / f"{part}.csv.gz", ids, gz)
    return folder


def make_npz(root: Path, name="papers100M-bin", compressed=True) -> Path:
    folder = root / name
    raw = folder / "raw"
    raw.mkdir(parents=True)
    save = np.savez_compressed if compressed else np.savez
    save(
        raw / "data.npz",
        edge_index=np.stack([SRC, DST]),
        node_feat=FEAT,
        num_nodes=np.array([N]),
        edge_feat=np.zeros((len(SRC), 2), dtype=np.float32),
    )
    save(raw / "node-label.npz", node_label=LABELS.reshape(-1, 1).astype(np.float32))
    for part, ids in SPLITS.items():
        write_gz(folder / "split" / "time" / f"{part}.csv.gz", ids)
    return folder


def consume(source):
    parts = list(source.arcs())
    s = np.concatenate([np.asarray(p[0], dtype=np.int64) for p in parts]) if parts else np.zeros(0, np.int64)
    d = np.concatenate([np.asarray(p[1], dtype=np.int64) for p in parts]) if parts else np.zeros(0, np.int64)
    return s, d


def features_of(source):
    return np.concatenate(list(source.feature_blocks()))


@pytest.fixture
def small_blocks(monkeypatch):
    """Tiny pyarrow blocks / array chunks so errors fall in later blocks than the first."""
    monkeypatch.setattr(ogb, "EDGE_BLOCK_BYTES", 32)
    monkeypatch.setattr(ogb, "FEATURE_BLOCK_BYTES", 128)
    monkeypatch.setattr(edgelist, "ARRAY_ARC_CHUNK", 7)
    monkeypatch.setattr(edgelist, "FEATURE_BLOCK_BYTES", 30)
    monkeypatch.setattr(edgelist, "LABEL_BLOCK", 5)


@pytest.fixture(params=["default", "small"])
def blocks(request) -> str:
    """Both block sizes: the readers' own, and small_blocks'."""
    if request.param == "small":
        request.getfixturevalue("small_blocks")
    return request.param


def check_source(src, name):
    assert src.name == name
    assert src.num_nodes == N
    assert src.undirected_once
    assert src.expected_arcs == len(SRC)
    for _ in range(2):  # arcs() may be called more than once
        s, d = consume(src)
        np.testing.assert_array_equal(s, SRC)
        np.testing.assert_array_equal(d, DST)
    assert src.feat_dim == 3
    np.testing.assert_array_equal(features_of(src), FEAT)
    np.testing.assert_array_equal(src.labels, np.where(np.isnan(LABELS), -1, LABELS).astype(int))
    assert src.num_classes == 4
    for part, ids in SPLITS.items():
        np.testing.assert_array_equal(src.splits[part], ids)


def detect_ogb(path) -> bool:
    """True for a folder laid out like an OGB node-property-prediction dataset (as the fixtures make them)."""
    raw = Path(path) / "raw"
    return raw.is_dir() and (ogb._find(raw, "edge") is not None or (raw / "data.npz").is_file())


def read_checked(folder: Path, name: str):
    """The source the reader makes of FOLDER, an OGB layout it detects, checked against the data written."""
    assert detect_ogb(folder)
    src = read_ogb(folder)
    check_source(src, name)
    return src


@pytest.mark.parametrize("gz", [True, False])
def test_csv_layout(tmp_path, gz, blocks):
    src = read_checked(make_csv(tmp_path, gz=gz), "products")
    assert src.info["split_name"] == "sales_ranking"
    assert src.info["format"] == "ogb-csv"


@pytest.mark.parametrize("compressed", [True, False])
def test_npz_layout(tmp_path, compressed, blocks):
    src = read_checked(make_npz(tmp_path, compressed=compressed), "papers100M-bin")
    assert src.info["format"] == "ogb-npz" and src.info["edge_feat"] == "ignored"


def test_no_features_and_no_split_folder(tmp_path):
    folder = make_csv(tmp_path, split_names=(), feats=False)
    src = read_ogb(folder)
    assert src.feature_blocks is None and src.feat_dim == 0
    assert src.splits is None


def test_detect_ogb(tmp_path):
    assert not detect_ogb(tmp_path)
    (tmp_path / "raw").mkdir()
    assert not detect_ogb(tmp_path)
    (tmp_path / "x.txt").write_text("0 1\n")
    assert not detect_ogb(tmp_path / "x.txt")


def test_split_choice(tmp_path):
    folder = make_csv(tmp_path, split_names=("a", "b"))
    with pytest.raises(G3InputError, match=r"several splits; choose one with --split-name \(a, b\)"):
        read_ogb(folder)
    with pytest.raises(G3InputError, match="no split 'c'; choose --split-name from: a, b"):
        read_ogb(folder, split_name="c")
    src = read_ogb(folder, split_name="b")
    assert src.info["split_name"] == "b"
    np.testing.assert_array_equal(src.splits["valid"], SPLITS["valid"])


def test_pt_split(tmp_path):
    torch = pytest.importorskip("torch")
    folder = make_csv(tmp_path)
    d = folder / "split" / "sales_ranking"
    (d / "test.csv.gz").unlink()
    torch.save(torch.tensor(SPLITS["test"]), d / "test.pt")
    np.testing.assert_array_equal(read_ogb(folder).splits["test"], SPLITS["test"])


# --- missing files ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "victim, name",
    [
        ("raw/edge.csv.gz", "edge.csv.gz"),
        ("raw/num-node-list.csv.gz", "num-node-list.csv.gz"),
        ("raw/num-edge-list.csv.gz", "num-edge-list.csv.gz"),
        ("raw/node-label.csv.gz", "node-label.csv.gz"),
        ("split/sales_ranking/valid.csv.gz", "valid.csv.gz"),
    ],
)
def test_missing_file_is_named(tmp_path, victim, name):
    folder = make_csv(tmp_path)
    (folder / victim).unlink()
    with pytest.raises(G3InputError, match=f"missing {name}") as exc:
        read_ogb(folder)
    assert str(folder) in str(exc.value)


def test_missing_folder_and_raw(tmp_path):
    with pytest.raises(G3InputError, match="no such folder"):
        read_ogb(tmp_path / "nope")
    with pytest.raises(G3InputError, match="no raw/"):
        read_ogb(tmp_path)
    (tmp_path / "raw" / "relations").mkdir(parents=True)
    with pytest.raises(G3InputError, match="heterogeneous"):
        read_ogb(tmp_path)


def test_missing_npz_label_and_key(tmp_path):
    folder = make_npz(tmp_path)
    (folder / "raw" / "node-label.npz").unlink()
    with pytest.raises(G3InputError, match="missing node-label.npz"):
        read_ogb(folder)
    np.savez(folder / "raw" / "data.npz", node_feat=FEAT, num_nodes=np.array([N]))
    with pytest.raises(G3InputError, match="has no array 'edge_index'") as exc:
        read_ogb(folder)
    assert "data.npz" in str(exc.value)


# --- malformed lines ---------------------------------------------------------------------------------------------


def corrupt(path: Path, line: int, text: str) -> None:
    """Replace 1-based line ``line`` of a .csv.gz file."""
    with gzip.open(path, "rt") as f:
        lines = f.read().split("\n")
    lines[line - 1] = text
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines))


@pytest.mark.parametrize("line", [1, 2, 23, 40])
@pytest.mark.parametrize(
    "text, why",
    [
        ("3,x", "'x' is not an integer"),
        ("3,4,5", "expected 2 comma-separated values, got 3"),
        ("7", "expected 2 comma-separated values, got 1"),
        ("", "empty line"),
        ("1.5,2", "'1.5' is not an integer"),
        ("3,", "'' is not an integer"),
    ],
)
def test_malformed_edge_line(tmp_path, line, text, why, blocks):
    folder = make_csv(tmp_path)
    edge = folder / "raw" / "edge.csv.gz"
    corrupt(edge, line, text)
    with pytest.raises(G3InputError) as exc:
        consume(read_ogb(folder))
    msg = str(exc.value)
    assert f"{edge}:{line}:" in msg and why in msg, msg


def test_malformed_feature_and_label_and_split_lines(tmp_path, small_blocks):
    folder = make_csv(tmp_path)
    corrupt(folder / "raw" / "node-feat.csv.gz", 9, "1.0,2.0")
    with pytest.raises(G3InputError, match="expected 3 comma-separated values, got 2") as exc:
        features_of(read_ogb(folder))
    assert exc.value.line == 9 and "node-feat.csv.gz" in str(exc.value)

    folder = make_csv(tmp_path / "b")
    corrupt(folder / "raw" / "node-label.csv.gz", 5, "cat")
    with pytest.raises(G3InputError, match="'cat' is not a number") as exc:
        read_ogb(folder)
    assert exc.value.line == 5 and "node-label.csv.gz" in str(exc.value)

    folder = make_csv(tmp_path / "c")
    corrupt(folder / "split" / "sales_ranking" / "test.csv.gz", 2, "ten")
    with pytest.raises(G3InputError, match="'ten' is not an integer") as exc:
        read_ogb(folder)
    assert exc.value.line == 2 and "test.csv.gz" in str(exc.value)

    folder = make_csv(tmp_path / "d")
    write_gz(folder / "raw" / "num-node-list.csv.gz", ["twelve"])
    with pytest.raises(G3InputError, match="malformed line 'twelve'") as exc:
        read_ogb(folder)
    assert exc.value.line == 1


# --- ids out of range, counts that disagree -----------------------------------------------------------------------


@pytest.mark.parametrize("bad, line", [(N, 31), (-1, 5), (10**6, 40)])
def test_edge_id_out_of_range(tmp_path, small_blocks, bad, line):
    folder = make_csv(tmp_path)
    edge = folder / "raw" / "edge.csv.gz"
    corrupt(edge, line, f"0,{bad}")
    with pytest.raises(G3InputError, match=rf"node id {bad} is out of range \[0, {N}\)") as exc:
        consume(read_ogb(folder))
    assert f"{edge}:{line}:" in str(exc.value)


def test_split_id_out_of_range(tmp_path):
    folder = make_csv(tmp_path)
    write_gz(folder / "split" / "sales_ranking" / "train.csv.gz", [0, 1, N])
    with pytest.raises(G3InputError, match=rf"train node id {N} is out of range") as exc:
        read_ogb(folder)
    assert exc.value.line == 3


def test_edge_count_disagrees_with_num_edge_list(tmp_path):
    folder = make_csv(tmp_path)
    write_gz(folder / "raw" / "num-edge-list.csv.gz", [len(SRC) + 1])
    src = read_ogb(folder)
    assert src.expected_arcs == len(SRC) + 1
    with pytest.raises(
        G3InputError, match=f"{len(SRC)} edge lines but num-edge-list.csv.gz says {len(SRC) + 1}"
    ):
        consume(src)


@pytest.mark.parametrize("rows", [N - 1, N + 1])
def test_feature_rows_disagree_with_num_node_list(tmp_path, small_blocks, rows):
    folder = make_csv(tmp_path)
    feats = np.ones((rows, 3))
    write_gz(folder / "raw" / "node-feat.csv.gz", [",".join(map(str, r)) for r in feats])
    with pytest.raises(G3InputError, match="feature lines") as exc:
        features_of(read_ogb(folder))
    assert "num-node-list" in str(exc.value) and "node-feat.csv.gz" in str(exc.value)


@pytest.mark.parametrize("rows", [N - 1, N + 1])
def test_label_rows_disagree_with_num_node_list(tmp_path, rows):
    folder = make_csv(tmp_path)
    write_gz(folder / "raw" / "node-label.csv.gz", ["1"] * rows)
    with pytest.raises(G3InputError, match="label lines") as exc:
        read_ogb(folder)
    assert "num-node-list" in str(exc.value) and "node-label.csv.gz" in str(exc.value)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_nonfinite_features(tmp_path, small_blocks, value):
    folder = make_csv(tmp_path)
    corrupt(folder / "raw" / "node-feat.csv.gz", 8, f"0.5,{value},1")
    with pytest.raises(G3InputError, match="is not finite") as exc:
        features_of(read_ogb(folder))
    assert exc.value.line == 8 and "node-feat.csv.gz" in str(exc.value)


def test_empty_label_is_unlabelled_and_multilabel_rejected(tmp_path):
    folder = make_csv(tmp_path)
    write_gz(folder / "raw" / "node-label.csv.gz", ["1", "", "NaN", "2"] + ["0"] * (N - 4))
    assert read_ogb(folder).labels[:4].tolist() == [1, -1, -1, 2]
    write_gz(folder / "raw" / "node-label.csv.gz", ["1,0,1"] * N)
    with pytest.raises(G3InputError, match="multi-label"):
        read_ogb(folder)
    write_gz(folder / "raw" / "node-label.csv.gz", ["1"] * 3 + ["2.5"] + ["0"] * (N - 4))
    with pytest.raises(G3InputError, match="not an integer class id") as exc:
        read_ogb(folder)
    assert exc.value.line == 4


def test_npz_checks(tmp_path, small_blocks):
    folder = make_npz(tmp_path, compressed=False)
    raw = folder / "raw"
    write_gz(raw / "num-edge-list.csv.gz", [len(SRC) + 2])
    with pytest.raises(G3InputError, match="edges but data.npz edge_index holds"):
        read_ogb(folder)
    (raw / "num-edge-list.csv.gz").unlink()

    bad = np.stack([SRC, DST])
    bad[0, 17] = N + 5
    np.savez_compressed(raw / "data.npz", edge_index=bad, node_feat=FEAT, num_nodes=np.array([N]))
    with pytest.raises(G3InputError, match=rf"node id {N + 5} at edge_index\[:, 17\]"):
        consume(read_ogb(folder))

    feat = FEAT.copy()
    feat[6, 2] = np.nan
    np.savez_compressed(
        raw / "data.npz", edge_index=np.stack([SRC, DST]), node_feat=feat, num_nodes=np.array([N])
    )
    with pytest.raises(G3InputError, match=r"row 6 \(node 6\), column 2 is not finite") as exc:
        features_of(read_ogb(folder))
    assert "node_feat" in str(exc.value)

    np.savez(raw / "data.npz", edge_index=np.stack([SRC, DST]), node_feat=FEAT[:-1], num_nodes=np.array([N]))
    with pytest.raises(G3InputError, match=f"node_feat has {N - 1} rows but num_nodes is {N}"):
        read_ogb(folder)

    np.savez(raw / "data.npz", edge_index=np.stack([SRC, DST]), node_feat=FEAT, num_nodes=np.array([N]))
    np.savez(raw / "node-label.npz", node_label=np.zeros((N, 2)))
    with pytest.raises(G3InputError, match="multi-label"):
        read_ogb(folder)
    np.savez(raw / "node-label.npz", node_label=np.zeros((N + 1, 1)))
    with pytest.raises(G3InputError, match=f"node_label has {N + 1} rows"):
        read_ogb(folder)


# --- round trip through the store builder --------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["csv", "npz"])
def test_round_trip_through_store(tmp_path, layout):
    from stages.common.store import GraphStore
    from stages.ingest.build import IngestOptions, build_store

    folder = make_csv(tmp_path) if layout == "csv" else make_npz(tmp_path)
    out = tmp_path / "store"
    build_store(read_ogb(folder), out, IngestOptions())
    store = GraphStore.open(out)
    indptr, indices = store.load_csr()
    keep = SRC != DST
    s, d = SRC[keep], DST[keep]
    s, d = np.concatenate([s, d]), np.concatenate([d, s])  # OGB stores each undirected edge once
    ref = sp.csr_matrix((np.ones(len(s)), (d, s)), shape=(N, N))
    ref.sum_duplicates()
    ref.sort_indices()
    np.testing.assert_array_equal(indptr, ref.indptr)
    np.testing.assert_array_equal(indices, ref.indices)
    np.testing.assert_array_equal(np.asarray(store.features[:]), FEAT)
    np.testing.assert_array_equal(store.load_labels(), np.where(np.isnan(LABELS), -1, LABELS))
    assert store.num_classes == 4
    for part, ids in SPLITS.items():
        np.testing.assert_array_equal(store.split_index(part), ids)
