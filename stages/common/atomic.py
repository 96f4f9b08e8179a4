"""Atomic artifact output: build in a temporary directory beside the target, rename on success.

Nothing half-written is ever left at the target path, and an existing target is never replaced unless the
caller passes ``force=True``: a writer holds a lock on the target (``.NAME.lock`` beside it, an advisory
``flock``) from its first check to the rename, so a second writer to the same target is refused at once, and
the target is checked again under the lock right before the rename. Files and folders are ``fsync``ed before
the rename that publishes them, so a crash leaves the old artifact or the whole new one.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from stages.common.errors import G3InputError

# the file that makes a folder an artifact of each kind (what `--force` may replace)
ARTIFACT_MARKERS = {
    "store": "zarr.json",
    "partition": "partition.json",
    "plan": "plan.json",
    "run": "run.json",
    "bundle": "bundle.json",
    "logits": "zarr.json",
}


FILE = "file"  # the kind of a single-file output (check_target): a folder in its place is refused


def _is_artifact(folder: Path, kind: str) -> bool:
    """Whether ``folder`` is a g3 artifact of ``kind``: its marker file, and for the two zarr kinds the node
    type in it (a store is a zarr group, `g3 predict`'s logits a zarr array)."""
    marker = folder / ARTIFACT_MARKERS[kind]
    if not marker.is_file():
        return False
    if kind not in ("store", "logits"):
        return True
    try:
        node = json.loads(marker.read_text()).get("node_type")
    except (OSError, ValueError, AttributeError):
        return False
    return node == ("group" if kind == "store" else "array")


def check_target(target: Path, force: bool, kind: str | None = None, inputs: Iterable = ()) -> None:
    """Refuse an existing target unless ``force``, and a target that cannot be a folder's entry (a file where a
    parent folder should be). With ``force``, an existing target is replaced only if it is an artifact of
    ``kind`` (an empty folder too) and neither one of the command's ``inputs`` nor a folder holding one (paths
    compared resolved, symbolic links followed): ``--force`` never destroys an input or the user's files."""
    target = Path(target)
    if target.exists() or target.is_symlink():
        if not force:
            raise G3InputError("already exists; pass --force to replace it", path=target)
        check_replaceable(target, kind, inputs)
    make_parent(target)


def check_replaceable(target: Path, kind: str | None, inputs: Iterable = ()) -> None:
    """What ``--force`` may replace (see :func:`check_target`); one line naming the target otherwise."""
    where = Path(target).resolve()
    for given, what in _inputs_touched(where, inputs):
        raise G3InputError(
            f"{what} an input of this command ({given}): --force never replaces an input; "
            "choose another output",
            path=target,
        )
    if kind == FILE:  # a file output (`g3 export`): a folder there is never replaced by a file
        if where.is_dir():
            raise G3InputError(
                "is a folder: give the file to write (--force replaces only an earlier file)", path=target
            )
        return
    if kind is None:
        return
    if where.is_dir() and (_is_artifact(where, kind) or not any(where.iterdir())):
        return
    found = (
        "a file"
        if not where.is_dir()
        else next(
            (f"a g3 {other}" for other in ARTIFACT_MARKERS if _is_artifact(where, other)),
            "a folder of other files",
        )
    )
    raise G3InputError(
        f"is {found}, not a g3 {kind}: --force replaces only an earlier {kind}; remove it yourself "
        "or choose another output",
        path=target,
    )


def _inputs_touched(where: Path, inputs: Iterable) -> Iterator[tuple[object, str]]:
    """Each input that the resolved path ``where`` is (``"is"``), holds (``"holds"``) or lies inside
    (``"is part of"``), with that relation."""
    for given in inputs:
        if given is None:
            continue
        source = Path(given).resolve()
        if source == where or where in source.parents or source in where.parents:
            yield given, "is" if source == where else "holds" if where in source.parents else "is part of"


def check_work_folder(
    folder: Path, flag: str, ours: Callable[[Path], bool], inputs: Iterable = (), inside_ok: bool = False
) -> None:
    """A folder a command fills and reuses across calls (``g3 advise --plans``, ``--cache``): new, empty, or one
    that ``ours(folder)`` recognises as this command's; never an input, a folder holding one or one inside one
    (symbolic links followed) — the command writes into it and replaces what it made there before.
    ``inside_ok``: a folder inside an input is allowed (``g3 report``'s ``RUN/report``), still only new, empty or
    the command's own."""
    for given, what in _inputs_touched(Path(folder).resolve(), inputs):
        if inside_ok and what == "is part of":
            continue
        raise G3InputError(
            f"{flag}: {what} an input of this command ({given}); choose another folder", path=folder
        )
    if not folder.exists():
        return
    if not folder.is_dir():
        raise G3InputError(f"{flag} takes a folder, and this is a file", path=folder)
    if any(folder.iterdir()) and not ours(folder):
        raise G3InputError(
            f"{flag}: holds files this command did not make; give a new or empty folder, or one an "
            "earlier run of it filled",
            path=folder,
        )


def make_parent(target: Path) -> None:
    """Create ``target``'s parent folders; a file in the way is bad input naming it."""
    for ancestor in (target.parent, *target.parent.parents):
        if ancestor.exists():
            if not ancestor.is_dir():
                raise G3InputError(f"{ancestor} is a file, not a folder: cannot write here", path=target)
            break
    target.parent.mkdir(parents=True, exist_ok=True)


def check_writable(folder: Path, what: str) -> None:
    """``folder`` takes new files (``what`` says which): a read-only file system or a folder without write
    permission is one line naming it, before any work (not a worker that cannot open its log)."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".g3-write-check-"):
            pass
    except OSError as exc:
        raise G3InputError(f"cannot write {what} here ({exc.strerror or exc})", path=folder) from None


def check_result(path: Path, force: bool, what: str) -> None:
    """Refuse to replace an earlier result file (``eval.json``, ``simulate.json``, ``bench.json``) unless
    ``force``; checked before any work starts."""
    if path.exists() and not force:
        raise G3InputError(f"holds {what}; pass --force to replace it", path=path)


@contextlib.contextmanager
def target_lock(target: Path, what: str = "writing") -> Iterator[None]:
    """Hold the advisory lock of ``target`` (``.NAME.lock`` beside it); another holder is bad input, at once.

    The lock file is removed when the lock is released, so finished work leaves nothing beside its artifact.
    That is safe because a locker checks, once it holds the lock, that the name still refers to the file it
    locked (a holder may have removed it meanwhile) and otherwise tries again on the new file."""
    import fcntl

    make_parent(target)
    lock = target.parent / f".{target.name}.lock"
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a full or read-only disk: named by the target the user gave
            raise OSError(exc.errno, exc.strerror, str(target)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise G3InputError(
                f"another g3 process is {what} this (its lock .{target.name}.lock is held); wait "
                "for it or choose another output",
                path=target,
            ) from None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the file we locked was removed by its last holder: lock the current one
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # still holding the lock: nobody can be between open and the check above
        os.close(fd)  # closing releases the lock


def remove_earlier_attempts(target: Path) -> None:
    """Remove the work folders (``.NAME.tmp-*``) that earlier attempts at ``target`` left beside it — killed, or
    failed and kept for their logs. Called with ``target``'s lock held: no live attempt owns one of them."""
    for folder in target.parent.glob(f".{glob.escape(target.name)}.tmp-*"):
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)


def lock_is_held(target: Path) -> bool:
    """Whether a live process holds ``target``'s lock (a run.json that says `running` while nobody holds its
    folder's lock was left by a launcher that was killed)."""
    import fcntl

    lock = Path(target).parent / f".{Path(target).name}.lock"
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """Flush every file below ``folder`` and every folder's entries to disk."""
    for root, _dirs, files in os.walk(folder):
        for name in files:
            fsync_path(Path(root, name))
        fsync_path(Path(root))


def fsync_path(path: Path) -> None:
    """Flush a file's data, or a folder's entries (a rename into it, a new file), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_dir(
    target: str | os.PathLike, force: bool = False, kind: str | None = None, inputs: Iterable = ()
) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success it replaces ``target`` in one rename (see the module
    docstring: locked, checked again at the rename, fsynced). ``kind``/``inputs``: what ``force`` may replace
    (:func:`check_target`)."""
    target = Path(target)
    check_target(target, force, kind, inputs)
    try:
        with target_lock(target):
            check_target(target, force, kind, inputs)
            remove_earlier_attempts(target)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
            try:
                yield tmp
                fsync_tree(tmp)
                publish_dir(tmp, target, force)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    except OSError as exc:
        raise as_environment_error(exc, target) from None


def as_environment_error(exc: OSError, target: Path) -> OSError:
    """What the machine refused while ``target`` was written, with an errno and the path the user gave: a copy
    of several files (shutil.Error: a list of errors) as its first, and a short write without an errno (numpy's
    ``tofile``: "12121 requested and 4064 written") as the disk being full when its filesystem has no room."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        why = str(exc.args[0][0][2])
        for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            if f"[Errno {code}]" in why:
                return OSError(code, os.strerror(code), str(target))
        return OSError(errno.EIO, f"copying into it failed: {why}", str(target))
    if exc.errno is None and "requested and" in str(exc):
        with contextlib.suppress(OSError):
            if shutil.disk_usage(target.parent).free < (1 << 20):
                return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
        return OSError(errno.EIO, f"a write stopped short ({exc})", str(target))
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        # a write refused: named by the target, whatever file (ours, or a copy's source) the error names
        return OSError(exc.errno, os.strerror(exc.errno), str(target))
    return exc


def publish_dir(tmp: Path, target: Path, force: bool) -> None:
    """Rename the finished ``tmp`` to ``target``: an existing target only with ``force`` (checked again now:
    something may have appeared there meanwhile), the old one removed after the new one is in place."""
    if target.exists() or target.is_symlink():
        if not force:
            raise G3InputError(
                "appeared while this artifact was being built; pass --force to replace it", path=target
            )
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        os.rename(target, old)
        os.rename(tmp, target)
        if old.is_symlink() or old.is_file():  # a link is removed, never what it points to
            old.unlink()
        else:
            shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, target)
    fsync_path(target.parent)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on success its data is flushed to disk (fsync) and it
    replaces ``path`` in one rename, so a reader sees the old file or the whole new one, never a part. Every
    single-file artifact g3 writes goes through here (JSON, checkpoints, weights, traces, the bench graph)."""
    path = Path(path)
    make_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        fsync_path(Path(tmp))
        os.replace(tmp, path)
        fsync_path(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(
    path: str | os.PathLike, obj: object, indent: int | None = 2, seal: bool = False
) -> None:
    """Write JSON to ``path`` through :func:`atomic_file`; ``seal``: with the ``content_sha256`` of what it holds
    (an artifact's own JSON: :func:`stages.common.artifact_json.sealed`), so that a reader can tell an edited or
    damaged file from the one g3 wrote."""
    if seal:
        from stages.common.artifact_json import sealed

        obj = sealed(json.loads(json.dumps(obj, default=json_default)))
    with atomic_file(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=indent, sort_keys=False, default=json_default)
        f.write("\n")


def json_default(o: object):
    """A numpy number or array, or a path, as plain JSON (``json.dump``'s ``default``)."""
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


def free_bytes(folder: Path) -> int:
    """Free bytes on the file system that holds ``folder``, or would hold it (its nearest existing parent's)."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def check_free_space(
    out: Path, parts: dict[str, int], what: str, advice: str = "free space or write elsewhere"
) -> None:
    """Refuse, before any work, an output whose file system has less free space than ``parts`` (bytes ``what``
    writes at least, by kind) add up to: one line with the figures, naming the output and ``advice``."""
    from stages.common.units import human_bytes

    need = sum(parts.values())
    free = free_bytes(Path(out).resolve().parent)
    if need > free:
        detail = ", ".join(f"{name} {human_bytes(n)}" for name, n in parts.items() if n)
        raise G3InputError(
            f"the disk holding it has {human_bytes(free)} free, and {what} writes at least "
            f"{human_bytes(need)} there ({detail}): {advice}",
            path=out,
        )
