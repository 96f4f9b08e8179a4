"""Baseline node partitions: ``random`` (hashed ids) and ``chunk`` (contiguous id ranges)."""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on uint64 (wrapping arithmetic): a fixed, well-mixed hash."""
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def random_partition(num_nodes: int, k: int, seed: int) -> np.ndarray:
    """Partition of each node = hash(node id mixed with the seed) mod K (int32 [N]); the same on every machine."""
    salt = splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
    ids = np.arange(num_nodes, dtype=np.uint64)
    return (splitmix64(ids ^ salt) % np.uint64(k)).astype(np.int32)


def chunk_bounds(num_nodes: int, k: int) -> np.ndarray:
    """Starts of K contiguous id ranges of equal size (sizes differ by at most one), plus N (int64 [K+1])."""
    return (np.arange(k + 1, dtype=np.int64) * num_nodes) // k


def chunk_partition(num_nodes: int, k: int) -> np.ndarray:
    """Partition i owns ids ``[bounds[i], bounds[i+1])`` (int32 [N])."""
    return np.repeat(np.arange(k, dtype=np.int32), np.diff(chunk_bounds(num_nodes, k)))


def assign_random(graphs, store, o, timing: dict, progress) -> tuple[np.ndarray, dict]:
    return random_partition(graphs.num_nodes, o.workers, o.seed), {}


def assign_chunk(graphs, store, o, timing: dict, progress) -> tuple[np.ndarray, dict]:
    return chunk_partition(graphs.num_nodes, o.workers), {}
