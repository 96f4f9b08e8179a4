"""The whole graph's in-edge CSR kept in a plan folder (``PLAN/topology/``), for strategies whose every worker
holds the whole topology: the planner writes it once from the store, every worker memory-maps it at run time,
so the plan — and every node folder of a bundle of it — trains without the store.

plan.json records the folder as ``{path, num_nodes, num_arcs, files}``; ``files`` lists every ``.npy`` of the
folder with its shape and dtype, checked (headers only) when the CSR is read (docs/ARTIFACTS.md, "Plan").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stages.common.errors import G3InputError
from stages.common.npy import load_checked, npy_manifest

INDPTR = "indptr.npy"


def write_csr(
    folder: Path, indptr: np.ndarray, indices: np.ndarray, indices_file: str = "indices.npy"
) -> dict:
    """``folder/indptr.npy`` (int64 ``[N+1]``) and ``folder/<indices_file>`` (``[arcs]``, the dtype given, rows
    in the order given: arc order is summation order, so a caller keeps the store's for bitwise results); returns
    plan.json's block for it (``path`` relative to the plan folder, ``folder``'s parent)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices)
    folder = Path(folder)
    folder.mkdir()
    np.save(folder / INDPTR, indptr)
    np.save(folder / indices_file, indices)
    return {
        "path": folder.name,
        "num_nodes": len(indptr) - 1,
        "num_arcs": len(indices),
        "files": npy_manifest(folder),
    }


def read_csr(plan_dir: Path, info: dict, indices_file: str = "indices.npy") -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of a CSR :func:`write_csr` wrote into a plan, memory-mapped (read-only, shared by the
    workers of a host through the page cache) and checked against ``info`` (plan.json's block)."""
    folder = Path(plan_dir) / info.get("path", "topology")
    files = info.get("files")
    indptr = load_checked(folder, INDPTR, files)
    indices = load_checked(folder, indices_file, files)
    n, arcs = info.get("num_nodes", -1), info.get("num_arcs", -1)
    if (
        indptr.ndim != 1
        or indices.ndim != 1
        or len(indptr) != n + 1
        or len(indices) != arcs
        or (len(indptr) and (int(indptr[0]) != 0 or int(indptr[-1]) != arcs))
    ):
        raise G3InputError(
            f"the plan's topology does not match plan.json (expected {n} nodes, {arcs} arcs); re-run g3 plan",
            path=folder,
        )
    return indptr, indices
