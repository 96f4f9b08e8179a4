"""Reading and sealing the JSON files of artifacts (partition.json, plan.json, run.json, shard.json, worker.json).

Every JSON g3 writes into an artifact is *sealed*: it carries ``content_sha256``, the sha256 of its own content
(canonical JSON: keys sorted, no spaces, the field itself left out). Whoever reads it checks the seal first, so
an edited, truncated or damaged file is refused with one line naming it — before any field is used — and no
reader needs to defend every field against every edit. A file without the field (written before g3 sealed its
JSON) is read as before; the required keys and their types (:data:`REQUIRED`) are checked either way.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from stages.common.errors import G3InputError

SEAL = "content_sha256"

# The keys every reader of an artifact's JSON relies on, with their JSON types; an artifact's JSON that lacks
# one, or holds another type, is refused naming the key (docs/ARTIFACTS.md lists every field).
_INT, _STR, _OBJ, _LIST = (int,), (str,), (dict,), (list,)
REQUIRED: dict[str, dict[str, tuple[type, ...]]] = {
    "partition.json": {"num_partitions": _INT, "store": _OBJ, "method": _STR},
    "plan.json": {
        "num_workers": _INT,
        "partition": _OBJ,
        "store": _OBJ,
        "config": _OBJ,
        "layers": _LIST,
        "widths": _LIST,
        "workers": _LIST,
    },
    "run.json": {"plan": _OBJ, "status": _STR, "config": _OBJ},
    "shard.json": {"files": _OBJ, "num_owned": _INT},
    "worker.json": {"rank": _INT},
    # a store's g3 attributes (zarr.json's attributes.g3)
    "store": {
        "num_nodes": _INT,
        "num_arcs": _INT,
        "feat_dim": _INT,
        "num_classes": _INT,
        "feature_dtype": _STR,
        "degree": _OBJ,
        "checksums": _OBJ,
    },
}


def _canonical(obj: dict) -> bytes:
    body = {k: v for k, v in obj.items() if k != SEAL}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def sealed(obj: dict) -> dict:
    """``obj`` (plain JSON types) with its ``content_sha256`` (replacing an earlier one)."""
    return {
        **{k: v for k, v in obj.items() if k != SEAL},
        SEAL: "sha256:" + hashlib.sha256(_canonical(obj)).hexdigest(),
    }


def check_json(meta: object, path: Path, required: dict[str, tuple[type, ...]] | None = None) -> dict:
    """``meta`` read from ``path`` is an object, its seal (when it has one) matches its content, and the
    ``required`` keys are there with their types."""
    if not isinstance(meta, dict):
        raise G3InputError(f"holds a JSON {type(meta).__name__}, not an object (damaged?)", path=path)
    if SEAL in meta:
        if not isinstance(meta[SEAL], str) or meta[SEAL] != sealed(meta)[SEAL]:
            raise G3InputError(
                "does not match its content_sha256: the file was edited or damaged after g3 wrote "
                "it; re-run the command that made it",
                path=path,
            )
    for key, types in (required or {}).items():
        if key not in meta:
            raise G3InputError(f"lacks the field {key!r} (damaged, or not written by g3)", path=path)
        value = meta[key]
        if not isinstance(value, types) or (types == _INT and isinstance(value, bool)):
            want = "/".join(
                {int: "integer", str: "string", dict: "object", list: "list", bool: "boolean"}[t]
                for t in types
            )
            raise G3InputError(f"field {key!r} is {json.dumps(value)[:40]}, not a {want}", path=path)
    return meta


def read_json_file(
    path: str | Path, required: dict[str, tuple[type, ...]] | None = None, check: bool = True
) -> dict:
    """A g3 JSON file as a dict: unreadable, not JSON, not an object, seal broken or a required key missing is
    one line naming the file (``required`` defaults to :data:`REQUIRED` for the file's name); ``check`` False:
    only that it is a JSON object (the caller checks the rest once it knows the version)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise G3InputError("file missing", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise G3InputError(f"cannot be read ({exc})", path=path) from None
    try:
        meta = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise G3InputError(f"invalid JSON: {exc}", path=path) from None
    if not check:  # only that it is an object: the caller checks the rest once it knows the version
        if not isinstance(meta, dict):
            raise G3InputError(f"holds a JSON {type(meta).__name__}, not an object (damaged?)", path=path)
        return meta
    return check_json(meta, path, REQUIRED.get(path.name) if required is None else required)


def load_artifact_json(
    folder: str | Path, marker: str, schema: str, version: int | tuple[int, ...], kind: str, stage: str
) -> dict:
    """``folder/marker`` as a dict, refusing a missing file, bad JSON, another schema or a version not in
    ``version`` (one version, or the tuple of those this g3 reads; the newest is the last).

    ``kind`` names the artifact in messages ("partition"), ``stage`` the command that writes it ("g3 partition").
    """
    folder = Path(folder)
    path = folder / marker
    if not path.is_file():
        raise G3InputError(f"not a g3 {kind} (no {marker}; run `{stage}` first)", path=folder)
    meta = read_json_file(path, check=False)  # the version first: another g3's seal or fields may differ
    if meta.get("schema") != schema:
        raise G3InputError(f"not a g3 {kind} (wrong schema)", path=path)
    versions = version if isinstance(version, tuple) else (version,)
    if meta.get("schema_version") not in versions:
        readable = " or ".join(str(v) for v in versions)
        raise G3InputError(
            f"{kind} schema version {meta.get('schema_version')} is not supported (this g3 reads version "
            f"{readable}); re-run `{stage}`",
            path=path,
        )
    return check_json(meta, path, REQUIRED.get(marker))


def reference(target: str | Path, from_dir: str | Path) -> dict:
    """How an artifact refers to another: its absolute ``path`` and its ``relpath`` from the referring folder,
    so that folders moved or copied together (a bundle, another host) still find each other."""
    target = Path(target).resolve()
    return {"path": str(target), "relpath": os.path.relpath(target, Path(from_dir).resolve())}


def resolve_reference(ref: dict, from_dir: str | Path, marker: str) -> Path:
    """Where a reference points now, as an absolute path: ``relpath`` from ``from_dir`` first, then the absolute
    ``path``; the first candidate holding ``marker`` wins (the relative one, when neither does: the reader's
    error then names it)."""
    candidates = []
    if ref.get("relpath"):
        candidates.append(Path(from_dir) / ref["relpath"])
    if ref.get("path"):
        candidates.append(Path(ref["path"]))
    for cand in candidates:
        if (cand / marker).exists():
            return cand.resolve()  # absolute: a path relative to where the reader ran means nothing elsewhere
    return candidates[0] if candidates else Path(from_dir)
