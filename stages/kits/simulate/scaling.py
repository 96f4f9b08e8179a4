"""The figures `g3 simulate` keeps per system and worker count in its scaling table (simulate.json ``scaling``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

SUMMARY_KEYS = ("epoch_seconds", "throughput", "bytes_per_epoch", "busy_max", "comm_wait_mean", "idle_mean")


def summary(result: dict, extra: tuple[str, ...] = ()) -> dict:
    """One simulated system's epoch, cut to the scaling table's figures (and a model's ``extra`` ones)."""
    return {key: result[key] for key in (*SUMMARY_KEYS, *extra)}


def scaling_rows(
    systems_at: Callable[[int], Iterable[dict]], workers: Iterable[int], extra: tuple[str, ...] = ()
) -> list[dict]:
    """simulate.json's ``scaling``: for each worker count, every system ``systems_at(K)`` simulates, summarised."""
    return [
        {"workers": k, "systems": {r["system"]: summary(r, extra) for r in systems_at(k)}} for k in workers
    ]


def recorded_systems(results: list[dict]) -> list[dict]:
    """The simulated systems as simulate.json keeps them: every figure, the workers' without their timeline
    spans (those go to the timeline plot)."""
    return [
        {k: v for k, v in r.items() if k != "workers"}
        | {"workers": [{k: v for k, v in w.items() if k != "spans"} for w in r["workers"]]}
        for r in results
    ]
