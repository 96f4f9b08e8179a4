"""A streamed g3 worker gives its spilled rows and gradients back to the file system as soon as backward has read
them (``release_rows``): the same model bit for bit, and less held in ``TMPDIR`` at once than every spilled array."""

from __future__ import annotations

import json

import numpy as np
import torch
from test_train import pipeline

from stages.common.plan_artifact import WorkerPlan
from stages.strategies.g3 import runtime as g3_runtime

HIDDEN, CLASSES, FEATURES, ITEM = 6, 4, 10, 8  # tests/test_train.py's model over the small store, in float64


def test_released_rows_train_the_same_model_in_less_scratch(store, tmp_path):
    """Three layers (two hidden), K = 2: the streamed weights equal the in-memory run's bitwise; each worker's
    TMPDIR peak is below what every spilled array held at once (all hidden rows and gradients, logits, remote
    features, backward's receives: what a worker that releases nothing holds at layer 1's backward) and within
    15 % of the estimate the plan and the TMPDIR check use."""
    streamed = pipeline(
        store, tmp_path / "streamed", 2, "g3", "sage", 3, "12", extra_train=("--stream-bins", "on")
    )
    in_memory = pipeline(
        store,
        tmp_path / "memory",
        2,
        "g3",
        "sage",
        3,
        "12",
        extra_train=("--stream-bins", "off", "--layer0-cache", "off", "--backward", "recompute"),
    )
    final = torch.load(streamed / "model.pt", weights_only=True)
    kept = torch.load(in_memory / "model.pt", weights_only=True)
    assert final.keys() == kept.keys()
    assert all(torch.equal(final[name], kept[name]) for name in final)
    workers = json.loads((streamed / "metrics.jsonl").read_text().splitlines()[-1])["workers"]
    for rank, w in enumerate(workers):
        plan = WorkerPlan(tmp_path / "streamed" / "plan", rank)
        owned, remote = int(plan.meta["num_owned"]), int(plan.meta["num_remote"])
        local = owned + remote
        bwd_recv = sum(len(plan.table(f"bwd_recv_{li}").nodes) * HIDDEN for li in (1, 2))
        everything = (2 * 2 * local * HIDDEN + owned * CLASSES + remote * FEATURES + bwd_recv) * ITEM
        assert w["scratch_peak_bytes"] < everything, (w, everything)
        assert 0.85 <= w["scratch_peak_bytes"] / w["scratch_estimate_bytes"] <= 1.15, w


def test_release_rows_punches_whole_pages_once():
    """Released pages read as zeros and leave the meter once; rows sharing a page with live rows stay; an array
    that is not spilled is left alone."""
    page = g3_runtime.mmap.PAGESIZE
    width = page // 8  # float64: one row a page
    live0 = g3_runtime.SPILLED.live
    t = g3_runtime.spilled_zeros(8, width, torch.float64)
    t.fill_(1.0)
    assert g3_runtime.SPILLED.live == live0 + 8 * page
    g3_runtime.release_rows(t, 2, 4)
    g3_runtime.release_rows(t[2:6], 0, 2)  # the same rows through a view: counted once
    assert g3_runtime.SPILLED.live == live0 + 6 * page
    assert float(t[2:4].abs().sum()) == 0 and bool((t[:2] == 1).all()) and bool((t[4:] == 1).all())
    g3_runtime.release_rows(t[:, : width // 2])  # not whole rows: left alone
    g3_runtime.release_rows(torch.ones(4, width, dtype=torch.float64))  # not spilled
    g3_runtime.release_rows(t)
    assert g3_runtime.SPILLED.live == live0 and float(t.abs().sum()) == 0
    del t
    assert g3_runtime.SPILLED.live == live0
    half = g3_runtime.spilled_zeros(3, width // 2, torch.float64)  # 1.5 pages: the partial last page goes too
    g3_runtime.release_rows(half, 1)
    assert g3_runtime.SPILLED.live == live0 + page  # row 1 shares page 0 with row 0: only page 1
    del half
    assert g3_runtime.SPILLED.live == live0 and np.isfinite(g3_runtime.SPILLED.peak)
