"""`g3 info`: a summary of any g3 artifact, as a plain dict (the CLI renders it)."""

from __future__ import annotations

import json
from pathlib import Path

from stages.common.artifact_json import check_json, read_json_file
from stages.common.errors import G3InputError
from stages.common.store import GraphStore


def artifact_kind(path: Path) -> str:
    """Which g3 artifact PATH is: store, partition, plan or run."""
    if not path.exists():
        raise G3InputError("no such file or folder", path=path)
    for marker, kind in (("partition.json", "partition"), ("plan.json", "plan"), ("run.json", "run")):
        if (path / marker).is_file():
            return kind
    if (path / "zarr.json").is_file():
        return "store"
    raise G3InputError("not a g3 artifact (no zarr.json, partition.json, plan.json or run.json)", path=path)


def store_summary(store: GraphStore, verify: bool = False) -> dict:
    m = store.meta
    out = {
        "kind": "store",
        "path": str(store.path),
        "name": store.name,
        "schema": m["schema"],
        "schema_version": m["schema_version"],
        "num_nodes": store.num_nodes,
        "num_arcs": store.num_arcs,
        "directed": m["directed"],
        "degree": m["degree"],
        "feat_dim": store.feat_dim,
        "feature_dtype": m["feature_dtype"],
        "features": m["features"],
        "num_classes": store.num_classes,
        "num_labeled": m["num_labeled"],
        "labels": m["labels"],
        "split_sizes": m["split_sizes"],
        "removed": m["removed"],
        "source": m["source"],
        "size_on_disk": store.size_on_disk(),
        "cost": m.get("cost"),  # what `g3 ingest` took (stores made before it was recorded: None)
    }
    if verify:
        bad = store.verify()
        out["checksums_ok"] = not bad
        if bad:
            raise G3InputError(f"checksum mismatch in {', '.join(bad)}", path=store.path)
    return out


def summarize(path: str | Path, verify: bool = False) -> dict:
    path = Path(path)
    kind = artifact_kind(path)
    if kind == "store":
        return store_summary(GraphStore.open(path), verify=verify)
    if kind == "plan":  # the reader fills in the strategy of plans older than strategies
        from stages.strategies.registry import load_plan

        data = load_plan(path)[0]
        data.setdefault("path", str(path))
    elif kind == "partition":
        from stages.common.partition_artifact import load_partition_meta

        data = load_partition_meta(path)
    else:
        from stages.common.run_artifact import load_run_meta

        data = load_run_meta(path)
    data["kind"] = kind
    if kind == "run":
        data["progress"] = run_progress(path)
    return data


def run_progress(run: Path) -> dict:
    """What a run's metrics.jsonl (and eval.json) say so far: epochs done, the last loss and accuracies, the
    median epoch time (without the first epoch, which compiles), bytes sent and the largest peak memory."""
    import statistics

    records = []
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a crash: what came before still counts
                break
            if not isinstance(rec, dict) or not isinstance(rec.get("epoch_seconds"), (int, float)):
                raise G3InputError("an epoch record needs 'epoch_seconds' (damaged?)", path=metrics)
            check_json(rec, metrics)  # the line's seal
            records.append(rec)
    out: dict = {"epochs_done": len(records)}
    if records:
        steady = records[1:] or records
        out["last_loss"] = records[-1].get("loss")
        for split in ("train", "valid", "test"):
            values = [r[f"{split}_acc"] for r in records if r.get(f"{split}_acc") is not None]
            out[f"{split}_acc"] = values[-1] if values else None
        out["median_epoch_seconds"] = statistics.median(r["epoch_seconds"] for r in steady)
        out["bytes_sent_per_epoch"] = statistics.median(r.get("bytes_sent", 0) for r in steady)
        workers = [w for r in records for w in r.get("workers") or [] if isinstance(w, dict)]
        out["peak_memory_bytes"] = max((int(w.get("peak_memory_bytes", 0)) for w in workers), default=0)
    if (run / "eval.json").is_file():
        try:
            out["eval"] = read_json_file(run / "eval.json", required={}).get("accuracy")
        except G3InputError:
            out["eval"] = None
    return out
