"""Reading the JSON marker file of an artifact (partition.json, plan.json, run.json) with its schema check."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import G3InputError


def load_artifact_json(folder: str | Path, marker: str, schema: str, version: int | tuple[int, ...], kind: str,
                       stage: str) -> dict:
    """``folder/marker`` as a dict, refusing a missing file, bad JSON, another schema or a version not in
    ``version`` (one version, or the tuple of those this g3 reads; the newest is the last).

    ``kind`` names the artifact in messages ("partition"), ``stage`` the command that writes it ("g3 partition").
    """
    folder = Path(folder)
    path = folder / marker
    if not path.is_file():
        raise G3InputError(f"not a g3 {kind} (no {marker}; run `{stage}` first)", path=folder)
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise G3InputError(f"invalid JSON: {exc}", path=path) from None
    if not isinstance(meta, dict) or meta.get("schema") != schema:
        raise G3InputError(f"not a g3 {kind} (wrong schema)", path=path)
    versions = version if isinstance(version, tuple) else (version,)
    if meta.get("schema_version") not in versions:
        readable = " or ".join(str(v) for v in versions)
        raise G3InputError(
            f"{kind} schema version {meta.get('schema_version')} is not supported (this g3 reads version "
            f"{readable}); re-run `{stage}`",
            path=path,
        )
    return meta


def reference(target: str | Path, from_dir: str | Path) -> dict:
    """How an artifact refers to another: its absolute ``path`` and its ``relpath`` from the referring folder,
    so that folders moved or copied together (a bundle, another host) still find each other."""
    target = Path(target).resolve()
    return {"path": str(target), "relpath": os.path.relpath(target, Path(from_dir).resolve())}


def resolve_reference(ref: dict, from_dir: str | Path, marker: str) -> Path:
    """Where a reference points now: ``relpath`` from ``from_dir`` first, then the absolute ``path``; the
    first candidate holding ``marker`` wins (the relative one, when neither does: the reader's error then names
    it)."""
    candidates = []
    if ref.get("relpath"):
        candidates.append(Path(from_dir) / ref["relpath"])
    if ref.get("path"):
        candidates.append(Path(ref["path"]))
    for cand in candidates:
        if (cand / marker).exists():
            return cand
    return candidates[0] if candidates else Path(from_dir)
