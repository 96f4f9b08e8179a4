"""The ``.npy`` files of shard and plan folders, checked against the shapes and dtypes their JSON records.

A folder's JSON (``shard.json``, a plan's ``worker.json``) lists every file as ``{name: {shape, dtype}}``; a
reader opens a file memory-mapped (only its header is read) and refuses one whose header disagrees — a
truncated, replaced or foreign file is one line naming it, never a wrong-sized array handed to a kernel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import G3InputError


def npy_manifest(folder: Path) -> dict[str, dict]:
    """``{relative path: {shape, dtype}}`` of every ``.npy`` file below ``folder`` (headers only)."""
    out = {}
    for f in sorted(Path(folder).rglob("*.npy")):
        a = np.load(f, mmap_mode="r")
        out[str(f.relative_to(folder))] = {"shape": [int(x) for x in a.shape], "dtype": str(a.dtype)}
    return out


def load_checked(folder: Path, name: str, manifest: dict | None, mmap: bool = True) -> np.ndarray:
    """``folder/name`` (a relative ``.npy`` path), checked against ``manifest[name]`` when the folder has one."""
    f = Path(folder) / name
    if not f.is_file():
        raise G3InputError(f"file {name} missing", path=folder)
    try:
        a = np.load(f, mmap_mode="r" if mmap else None)
    except (ValueError, OSError, EOFError) as exc:
        raise G3InputError(f"file {name} is not a readable .npy array ({exc})", path=folder) from None
    want = (manifest or {}).get(name)
    if want is not None and (list(a.shape) != list(want["shape"]) or str(a.dtype) != want["dtype"]):
        raise G3InputError(f"file {name} holds {a.dtype} {list(a.shape)}, its folder's JSON says {want['dtype']} "
                           f"{list(want['shape'])} (a damaged or replaced file)", path=folder)
    return a
