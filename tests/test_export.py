"""`g3 export --format pyg`: PyG's own GraphSAGE / GCN / GAT, built from the exported constructor call and loaded
with the exported state dict, compute what g3 computes (its predictions) — tested against PyG's layers, not g3's.
Skipped with the reason where torch_geometric is not installed (`make peers` installs it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_train import invoke

import g3

tg = pytest.importorskip(
    "torch_geometric",
    reason="torch_geometric is not installed (make peers): the export is checked against PyG's own models",
)


@pytest.fixture(scope="module")
def part(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    store = g3.ingest("synthetic:tiny", root / "s.g3")
    return store, g3.partition(store, workers=2, out=root / "s.part")


@pytest.mark.slow
@pytest.mark.parametrize("model,heads", [("sage", 1), ("gcn", 1), ("gat", 2)])
def test_pyg_computes_what_g3_computes(part, tmp_path, model, heads):
    from stages.common.store import GraphStore

    store, partition = part
    plan = g3.plan(partition, strategy="bns-gcn", model=model, hidden=6, heads=heads, out=tmp_path / "plan")
    run = g3.train(plan, epochs=2, lr=0.05, dropout=0.2, threads=1, dtype="float64", out=tmp_path / "run")
    r = invoke(["export", str(run.path), "--format", "pyg", "-o", str(tmp_path / "w.pt")])
    assert r.exit_code == 0, r.output
    spec = json.loads((tmp_path / "w.pt.json").read_text())
    pyg = getattr(tg.nn.models, spec["class"])(**spec["kwargs"]).double()
    pyg.load_state_dict(torch.load(tmp_path / "w.pt", weights_only=True))  # strict: every parameter, no other
    pyg.eval()
    g = GraphStore.open(store)
    indptr, indices = (np.asarray(a, dtype=np.int64) for a in g.load_csr())
    dst = np.repeat(
        np.arange(len(indptr) - 1), np.diff(indptr)
    )  # in-edge CSR: row v lists the sources into v
    edge_index = torch.from_numpy(np.stack([indices, dst]))
    x = torch.from_numpy(np.asarray(g.features[:])).double()
    with torch.no_grad():
        theirs = pyg(x, edge_index)
    ours = g3.predict(run)
    assert torch.allclose(theirs, ours, atol=1e-9, rtol=0), (theirs - ours).abs().max()
    r = invoke(["export", str(run.path), "-o", str(tmp_path / "w.pt")])
    assert r.exit_code == 2 and "--force" in r.output
