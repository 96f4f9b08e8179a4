"""Reading a run folder (``g3.run`` v1, written by ``g3 train``): run.json and metrics.jsonl, checked.

run.json is sealed (:mod:`.artifact_json`); metrics.jsonl is appended to while a run trains, so each line
carries its own seal (``content_sha256`` of the record) and is checked where it is read — one JSON object per
epoch with the fields the reader needs — a damaged line is one message naming the file and the line.
"""

from __future__ import annotations

import json
from pathlib import Path

from stages.common.artifact_json import SEAL, load_artifact_json, sealed
from stages.common.errors import G3InputError

RUN_SCHEMA = "g3.run"
RUN_VERSION = 1


def load_run_meta(run: str | Path) -> dict:
    """run.json, checked (seal, schema, version, required keys). A run whose status says ``running`` while no
    process holds its lock was stopped without a word (kill -9 of the launcher, a disk too full to record the
    end): it reads as ``interrupted``."""
    meta = load_artifact_json(run, "run.json", RUN_SCHEMA, RUN_VERSION, "run", "g3 train")
    if meta.get("status") == "running":
        from stages.common.atomic import lock_is_held

        if not lock_is_held(Path(run)):
            meta["status"] = "interrupted"
    return meta


def read_metrics(run: str | Path, need: tuple[str, ...] = ("epoch", "epoch_seconds")) -> list[dict]:
    """metrics.jsonl as one record per epoch, ascending (a resumed run's repeated epochs keep their last record);
    every record an object with the ``need`` fields, ``epoch`` an integer and ``workers`` (when needed) a list of
    objects."""
    run = Path(run)
    path = run / "metrics.jsonl"
    if not path.is_file():
        raise G3InputError("no metrics.jsonl: the run recorded no epoch (did `g3 train` start?)", path=run)
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise G3InputError(f"cannot be read ({exc})", path=path) from None
    by_epoch: dict[int, dict] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise G3InputError(f"not a JSON object: {getattr(exc, 'msg', exc)}", path=path, line=n) from None
        if isinstance(rec, dict) and SEAL in rec and rec[SEAL] != sealed(rec)[SEAL]:
            raise G3InputError(
                "the record does not match its content_sha256 (edited or damaged)", path=path, line=n
            )
        if not isinstance(rec, dict) or any(k not in rec for k in need):
            raise G3InputError(f"an epoch record needs {', '.join(repr(k) for k in need)}", path=path, line=n)
        if not isinstance(rec["epoch"], int) or isinstance(rec["epoch"], bool) or rec["epoch"] < 0:
            raise G3InputError(f"'epoch' is {rec['epoch']!r}, not an epoch number", path=path, line=n)
        if "workers" in need and not (
            isinstance(rec["workers"], list)
            and rec["workers"]
            and all(isinstance(w, dict) for w in rec["workers"])
        ):
            raise G3InputError("'workers' is not a list of per-worker records", path=path, line=n)
        by_epoch[rec["epoch"]] = rec
    if not by_epoch:
        raise G3InputError("metrics.jsonl is empty: the run recorded no epoch", path=path)
    return [by_epoch[e] for e in sorted(by_epoch)]


def calibration_records(run: str | Path) -> tuple[dict, list[dict], list[dict], list[dict]]:
    """What a model calibrates on: run.json, every epoch record (with ``workers``), the steady ones (all after
    the first, which fills caches; the first where it is the only one) and the steady epochs' worker records."""
    info = load_run_meta(run)
    records = read_metrics(run, need=("epoch", "epoch_seconds", "workers"))
    steady = records[1:] or records
    return info, records, steady, [w for r in steady for w in r["workers"]]
