"""Atomic artifact output: build in a temporary directory beside the target, rename on success.

Nothing half-written is ever left at the target path, and an existing target is never replaced unless the
caller passes ``force=True``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import G3InputError


def check_target(target: Path, force: bool) -> None:
    """Refuse an existing target unless ``force``."""
    if target.exists() and not force:
        raise G3InputError("already exists; pass --force to replace it", path=target)


def check_result(path: Path, force: bool, what: str) -> None:
    """Refuse to replace an earlier result file (``eval.json``, ``simulate.json``, ``bench.json``) unless
    ``force``; checked before any work starts."""
    if path.exists() and not force:
        raise G3InputError(f"holds {what}; pass --force to replace it", path=path)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike, force: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success it replaces ``target`` in one rename."""
    target = Path(target)
    check_target(target, force)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        os.rename(target, old)
        os.rename(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, target)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on success its data is flushed to disk (fsync) and it
    replaces ``path`` in one rename, so a reader sees the old file or the whole new one, never a part. Every
    single-file artifact g3 writes goes through here (JSON, checkpoints, weights, traces, the bench graph)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | os.PathLike, obj: object, indent: int | None = 2) -> None:
    """Write JSON to ``path`` through :func:`atomic_file`."""
    with atomic_file(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=indent, sort_keys=False, default=_json_default)
        f.write("\n")


def _json_default(o: object):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
