"""Every stage records what it cost — wall time and peak resident memory of its processes — in its artifact, and
`g3 info` shows it (so a user sizes a machine from what their run took)."""

from __future__ import annotations

import json
import shutil

import pytest
from test_train import invoke

from stages.common.cost import process_peak_bytes


@pytest.mark.slow
def test_each_stage_records_its_time_and_peak_memory_and_info_shows_it(tiny_store, tmp_path):
    store = tmp_path / "s.g3"
    r = invoke(["ingest", "synthetic:tiny", str(store)])
    assert r.exit_code == 0, r.output
    part, plan, run = tmp_path / "p", tmp_path / "P", tmp_path / "R"
    for args in (
        ["partition", str(store), "--workers", "2", "-o", str(part)],
        ["plan", str(part), "--hidden", "4", "-o", str(plan)],
        ["train", str(plan), "--epochs", "1", "--threads", "1", "-o", str(run)],
        ["eval", str(run)],
    ):
        r = invoke(args)
        assert r.exit_code == 0, r.output
    zattrs = json.loads((store / "zarr.json").read_text())["attributes"]["g3"]
    costs = {
        "store": zattrs["cost"],
        "partition": json.loads((part / "partition.json").read_text())["cost"],
        "plan": json.loads((plan / "plan.json").read_text())["cost"],
        "run": json.loads((run / "run.json").read_text())["cost"],
        "eval": json.loads((run / "eval.json").read_text())["cost"],
    }
    for kind, cost in costs.items():
        assert cost["seconds"] > 0 and cost["peak_memory_bytes"] >= cost["process_peak_bytes"] > 10 * 2**20, (
            kind
        )
        assert cost["peak_memory_bytes"] == cost["process_peak_bytes"] + cost["workers_peak_bytes"], kind
    # training's two workers report their own peaks, added to the command's
    assert costs["run"]["workers_peak_bytes"] > 2 * 10 * 2**20
    assert (
        process_peak_bytes() >= costs["plan"]["process_peak_bytes"]
    )  # this process ran the in-process stages
    for artifact in (store, part, plan, run):
        r = invoke(["info", str(artifact)])
        assert r.exit_code == 0 and "made in " in r.output and "peak memory" in r.output, (artifact, r.output)
    # an artifact from before costs were recorded reads as before
    from stages.common.artifact_json import sealed

    old = tmp_path / "old.g3"
    shutil.copytree(tiny_store, old)
    meta = json.loads((old / "zarr.json").read_text())
    meta["attributes"]["g3"] = sealed(
        {k: v for k, v in meta["attributes"]["g3"].items() if k not in ("cost", "content_sha256")}
    )
    (old / "zarr.json").write_text(json.dumps(meta))
    r = invoke(["info", str(old)])
    assert r.exit_code == 0 and "made in" not in r.output, r.output
