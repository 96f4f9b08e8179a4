"""The ``.npy`` files of shard and plan folders, checked against the shapes, dtypes and checksums their JSON
records.

A folder's JSON (``shard.json``, a plan's ``worker.json``) lists every file as ``{name: {shape, dtype,
sha256}}``. A reader refuses a file whose header disagrees (a truncated, replaced or foreign file) and, when it
reads the data, one whose bytes do not hash to the recorded sha256 (a flipped byte, an id put out of range) —
one line naming it, never a damaged array handed to a kernel. Each file is hashed once per process (hashing
runs at about 1.5 GB/s here: docs/BENCHMARKS.md "Validating what is read"). :func:`load_checked` with ``verify=False``
is the cheap pass a launcher makes over every file before any worker starts; the workers verify the data they load.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from stages.common.errors import G3InputError

_VERIFIED: set[tuple[str, int, int, str]] = set()  # (path, size, mtime_ns, sha256) already hashed here


def file_sha256(path: Path) -> str:
    """``sha256:`` of a file's bytes, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(4 << 20):
            h.update(block)
    return "sha256:" + h.hexdigest()


def digest_path(path: Path) -> Path:
    """Where the sha256 of a file without a JSON of its own (a ``.pt`` of weights or a checkpoint) is kept:
    ``FILE.sha256`` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def write_digest(path: Path, tmp: Path | None = None) -> None:
    """``path``'s sidecar :func:`digest_path` holding the sha256 of ``tmp`` (the bytes about to become ``path``;
    default ``path`` itself), written atomically."""
    from stages.common.atomic import atomic_file

    with atomic_file(digest_path(path)) as t:
        Path(t).write_text(file_sha256(Path(tmp or path)) + "\n")


def check_digest(path: Path) -> None:
    """``path`` matches the sha256 its sidecar records (no sidecar: written before g3 kept them, not checked)."""
    side = digest_path(path)
    if not side.is_file():
        return
    try:
        text = side.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise G3InputError(f"cannot be read ({exc})", path=side) from None
    if not re.fullmatch(r"sha256:[0-9a-f]{64}\n", text):  # exactly as write_digest writes it
        raise G3InputError("is not a sha256 line as g3 writes it (damaged)", path=side)
    expected = text.strip()
    if not Path(path).is_file():
        raise G3InputError("file missing", path=path)
    _verify(Path(path), Path(path).name, expected, Path(path))


def npy_entry(f: Path) -> dict:
    """``{shape, dtype, sha256}`` of one ``.npy`` file, as a folder's JSON lists it."""
    a = np.load(f, mmap_mode="r")
    return {"shape": [int(x) for x in a.shape], "dtype": str(a.dtype), "sha256": file_sha256(f)}


def npy_manifest(folder: Path) -> dict[str, dict]:
    """``{relative path: {shape, dtype, sha256}}`` of every ``.npy`` file below ``folder``."""
    return {str(f.relative_to(folder)): npy_entry(f) for f in sorted(Path(folder).rglob("*.npy"))}


def _entry(manifest: dict | None, name: str, folder: Path) -> dict | None:
    want = (manifest or {}).get(name)
    if want is None:
        return None
    if not (
        isinstance(want, dict) and isinstance(want.get("shape"), list) and isinstance(want.get("dtype"), str)
    ):
        raise G3InputError(f"the folder's JSON entry for {name} is malformed", path=folder)
    return want


def load_checked(
    folder: Path, name: str, manifest: dict | None, mmap: bool = True, verify: bool = True
) -> np.ndarray:
    """``folder/name`` (a relative ``.npy`` path), checked against ``manifest[name]`` when the folder has one:
    header always, the file's sha256 too when ``verify`` (the default: whoever uses the data)."""
    folder = Path(folder)
    f = folder / name
    if not f.is_file():
        raise G3InputError(f"file {name} missing", path=folder)
    try:
        a = np.load(f, mmap_mode="r" if mmap else None)
    except (ValueError, OSError, EOFError) as exc:
        raise G3InputError(f"file {name} is not a readable .npy array ({exc})", path=folder) from None
    want = _entry(manifest, name, folder)
    if want is not None and (list(a.shape) != list(want["shape"]) or str(a.dtype) != want["dtype"]):
        raise G3InputError(
            f"file {name} holds {a.dtype} {list(a.shape)}, its folder's JSON says {want['dtype']} "
            f"{list(want['shape'])} (a damaged or replaced file)",
            path=folder,
        )
    if verify and want is not None and want.get("sha256"):
        _verify(f, name, str(want["sha256"]), folder)
    return a


def _verify(f: Path, name: str, expected: str, folder: Path) -> None:
    st = f.stat()
    key = (str(f.resolve()), st.st_size, st.st_mtime_ns, expected)
    if key in _VERIFIED:
        return
    if file_sha256(f) != expected:
        raise G3InputError(
            f"file {name} does not match the sha256 its folder's JSON records (damaged or altered "
            "after it was written); re-run the command that made it",
            path=folder,
        )
    _VERIFIED.add(key)


def verify_files(folder: Path, manifest: dict | None) -> None:
    """Every file ``manifest`` lists, header and sha256 (each once per process): a rank's own shard and plan
    folder when it starts, so that a damaged file is refused even where this strategy never reads it."""
    for name in manifest or {}:
        load_checked(folder, name, manifest, verify=True)


def id_dtype(largest: int) -> np.dtype:
    """The narrowest of int32 and int64 that holds every value up to ``largest``: what node ids (``largest`` =
    the id bound - 1) and pointers (``largest`` = the last one) are written in to shard and plan folders
    (docs/ARTIFACTS.md: int32 below 2^31)."""
    return np.dtype(np.int32 if int(largest) < 2**31 else np.int64)


def narrow(a: np.ndarray, largest: int | None = None) -> np.ndarray:
    """``a`` (non-negative ids or pointers) in :func:`id_dtype` of ``largest`` (default: its largest value); no
    copy when it has that type already."""
    a = np.asarray(a)
    if largest is None:
        largest = int(a.max()) if a.size else 0
    return a.astype(id_dtype(largest), copy=False)


def release_pages(a: np.ndarray) -> None:
    """Drop the pages of the memory-mapped file under ``a`` from this process (they stay in the page cache, and
    the next read maps them again): a worker streaming its bins from disk reads each bin's slice and lets go of
    it, so its resident memory stays that of one bin instead of growing to the whole file. No-op for an array
    that does not map a file."""
    import mmap

    base: object = a
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is not None and hasattr(mmap, "MADV_DONTNEED"):
        base.madvise(mmap.MADV_DONTNEED)


class MappedReader:
    """Reads of a memory-mapped array whose pages are let go of (:func:`release_pages`) each time about ``budget``
    bytes have been read since the last time: the process's resident share of the file stays near the budget
    while a page read twice within it is not faulted in again."""

    def __init__(self, array: np.ndarray, budget: int = 64 << 20):
        self.array, self.budget, self._read = array, int(budget), 0

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, key) -> np.ndarray:
        return self._read_done(np.array(self.array[key]))  # a copy in memory: the mapping can be let go of

    def rows(self, positions: np.ndarray, take=None) -> np.ndarray:
        """``array[positions]``: by ``take(array, positions)`` (a faster row copy) when given, else numpy's
        fancy indexing."""
        return self._read_done(take(self.array, positions) if take else np.asarray(self.array[positions]))

    def _read_done(self, out: np.ndarray) -> np.ndarray:
        self._read += out.nbytes
        if self._read >= self.budget:
            release_pages(self.array)
            self._read = 0
        return out
