"""Partitioning a graph METIS cannot hold: coarsened by size-constrained label propagation, METIS on the clusters,
projected back (stages/kits/partition/coarsen.py, `g3 partition --metis-memory`).

What must hold: the clusters respect their size cap; contraction keeps every arc between clusters (the coarse
arc weights sum to the fine edge cut of the clustering); the projected partition's weights per constraint are
the coarse partition's, so it is balanced within METIS's tolerance; its cut stays within 1.5× METIS's on the
whole graph; the same seed gives the same partition; and the stage says what it did.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import flags, invoke, ok, synthetic_store

from stages.common.store import GraphStore
from stages.kits.partition.coarsen import contract, propagate
from stages.kits.partition.graph import load_graphs
from stages.kits.partition.metis import metis_partition


@pytest.fixture(scope="module")
def community_store(tmp_path_factory) -> Path:
    """3,000 nodes in 12 communities, average degree 20: ~60,000 arcs."""
    spec = dict(nodes=3000, avg_degree=20, feat_dim=4, num_classes=3, communities=12, seed=3)
    return synthetic_store(tmp_path_factory.mktemp("bounded") / "g", **spec)


def fine_cut(graphs, part: np.ndarray) -> int:
    src = np.repeat(np.arange(graphs.num_nodes), np.diff(graphs.sym_indptr))
    return int((part[src] != part[graphs.sym_indices]).sum())


def test_label_propagation_keeps_every_cluster_under_its_cap_and_contraction_keeps_every_arc(community_store):
    g = load_graphs(GraphStore.open(community_store))
    weights = np.ones(g.num_nodes, dtype=np.int64)
    labels = propagate(g.sym_indptr, g.sym_indices, None, weights, cap=50, seed=1)
    sizes = np.bincount(labels)
    assert sizes.max() <= 50 and len(sizes) < g.num_nodes / 5  # merged, never past the cap
    assert np.array_equal(np.unique(labels), np.arange(len(sizes)))  # numbered densely
    ptr, idx, w = contract(g.sym_indptr, g.sym_indices, None, labels)
    assert int(w.sum()) == fine_cut(g, labels)  # every arc between two clusters, counted once
    src = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    assert not (src == idx).any()  # no arc inside a cluster
    pairs = src * len(sizes) + idx
    assert (np.diff(pairs) > 0).all()  # rows sorted, each pair once
    again = propagate(g.sym_indptr, g.sym_indices, None, weights, cap=50, seed=1)
    assert np.array_equal(labels, again)  # the seed decides


@pytest.mark.parametrize("constraints", [1, 2])
def test_metis_on_the_clusters_balances_like_metis_and_cuts_about_as_much(community_store, constraints):
    g = load_graphs(GraphStore.open(community_store))
    k = 4
    weights = None if constraints == 1 else np.stack([np.ones(g.num_nodes, np.int64), g.degree], axis=1)
    ubvec = None if constraints == 1 else [1.05, 1.05]
    whole = metis_partition(g, k, 2, vertex_weights=weights, ubvec=ubvec)
    g.metis_arc_budget = len(g.sym_indices) // 10
    coarse = metis_partition(g, k, 2, vertex_weights=weights, ubvec=ubvec)
    assert len(g.coarsenings) == 1 and g.coarsenings[0]["coarse_arcs"] <= g.metis_arc_budget
    assert np.array_equal(
        coarse, metis_partition(g, k, 2, vertex_weights=weights, ubvec=ubvec)
    )  # deterministic
    columns = np.ones((g.num_nodes, 1), np.int64) if weights is None else weights
    for j in range(columns.shape[1]):
        per_part = np.bincount(coarse, weights=columns[:, j], minlength=k)
        assert per_part.max() / per_part.mean() <= 1.08, (
            j,
            per_part,
        )  # METIS's 1.03/1.05 and the granularity
    assert fine_cut(g, coarse) <= 1.5 * fine_cut(g, whole)


def test_the_stage_coarsens_when_metis_would_need_more_than_it_may_hold(community_store, tmp_path):
    out = tmp_path / "part"
    r = ok(["partition", community_store, *flags(workers=3, method="metis", metis_memory="1MiB"), "-o", out])
    assert "coarsened" in r.output and "METIS ran on" in r.output
    record = json.loads((out / "partition.json").read_text())["metis_memory"]
    assert record["bytes"] == 1 << 20 and record["from"] == "--metis-memory"
    assert record["arc_budget"] == (1 << 20) // record["bytes_per_arc"]
    (c,) = record["coarsened"]
    assert c["coarse_arcs"] <= record["arc_budget"] < c["fine_arcs"]
    whole = tmp_path / "whole"
    ok(["partition", community_store, "--workers", "3", "--method", "metis", "-o", whole])
    assert json.loads((whole / "partition.json").read_text())["metis_memory"]["coarsened"] == []


@pytest.mark.parametrize("value, says", [("0", "at least 1 MiB"), ("lots", "not a size")])
def test_a_metis_memory_that_makes_no_sense_is_refused_in_one_line(community_store, tmp_path, value, says):
    r = invoke(
        ["partition", community_store, "--workers", "2", "--metis-memory", value, "-o", tmp_path / "p"]
    )
    assert r.exit_code == 2 and says in r.output, r.output
    assert not (tmp_path / "p").exists()


def test_contraction_merged_block_by_block_is_the_same(community_store, monkeypatch):
    """Contraction merges its blocks' cluster pairs as it goes (what it holds stays near the coarse graph's
    size): tiny blocks, merged many times over, give the graph one block gives."""
    from stages.kits.partition import coarsen

    g = load_graphs(GraphStore.open(community_store))
    labels = np.arange(g.num_nodes, dtype=np.int64) // 7
    whole = contract(g.sym_indptr, g.sym_indices, None, labels)
    monkeypatch.setattr(coarsen, "BLOCK_ARCS", 16)
    blocks = contract(g.sym_indptr, g.sym_indices, None, labels)
    assert all(np.array_equal(a, b) for a, b in zip(whole, blocks, strict=True))
    weights = np.arange(len(g.sym_indices), dtype=np.int64) % 5 + 1
    monkeypatch.setattr(coarsen, "BLOCK_ARCS", 1 << 22)
    whole_w = contract(g.sym_indptr, g.sym_indices, weights, labels)
    monkeypatch.setattr(coarsen, "BLOCK_ARCS", 16)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(whole_w, contract(g.sym_indptr, g.sym_indices, weights, labels), strict=True)
    )
