"""The figures `g3 simulate` keeps per system and worker count in its scaling table (simulate.json ``scaling``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from stages.kits.simulate.engine import Network
from stages.kits.simulate.network import network

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


def at_k_and_scaling(
    options, k: int, systems_at: Callable[[int, Network | None], list[dict]], extra: tuple[str, ...] = ()
) -> tuple[list[dict], list[dict]]:
    """A model's systems at ``k`` workers on ``options``' network at K (a cluster's per-worker links, speeds
    and hosts), and the scaling table of ``options.scaling``, every other K on uniform links (``net`` None);
    ``systems_at(K, net)`` simulates them."""
    main = systems_at(k, network(options, k))
    return main, scaling_rows(lambda kk: main if kk == k else systems_at(kk, None), options.scaling, extra)


def recorded_systems(results: list[dict]) -> list[dict]:
    """The simulated systems as simulate.json keeps them: every figure, the workers' without their timeline
    spans (those go to the timeline plot)."""
    return [
        {k: v for k, v in r.items() if k != "workers"}
        | {"workers": [{k: v for k, v in w.items() if k != "spans"} for w in r["workers"]]}
        for r in results
    ]
