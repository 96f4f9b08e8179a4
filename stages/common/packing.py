"""Cutting a list of nodes into consecutive runs: by count, or while their summed bytes fit a limit (G3's bins,
NeutronTP's chunks)."""

from __future__ import annotations

import numpy as np

from stages.common.errors import G3InputError


def pack_by_count(n: int, bin_size: int) -> np.ndarray:
    """Bin boundaries over a list of ``n`` nodes: consecutive runs of ``bin_size`` nodes."""
    return np.unique(np.concatenate([np.arange(0, n, bin_size, dtype=np.int64), [n]]))


def pack_by_bytes(cost: np.ndarray, limit: int) -> np.ndarray:
    """Bin boundaries: consecutive nodes while the bin's summed ``cost`` stays within ``limit`` bytes."""
    n = len(cost)
    if n and int(cost.max()) > limit:
        worst = int(np.argmax(cost))
        raise G3InputError(
            f"one node needs {int(cost[worst]):,} bytes, more than the bin limit of {limit:,} bytes; "
            "raise --device-memory or use --bin-size"
        )
    cum = np.concatenate([[0], np.cumsum(cost, dtype=np.int64)])
    bounds = [0]
    while bounds[-1] < n:
        start = bounds[-1]
        end = int(np.searchsorted(cum, cum[start] + limit, side="right")) - 1
        bounds.append(max(end, start + 1))
    return np.asarray(bounds, dtype=np.int64)
