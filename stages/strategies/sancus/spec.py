"""The sancus strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.common.knobs import Layer0CacheKnobs
from stages.kits.simulate.systems import BinsSystem
from stages.strategies.g3 import simulate
from stages.strategies.sancus import plan
from stages.strategies.sancus import simulate as bins
from stages.strategies.spec import AdviseVariant, StrategySpec


def checkpoint_state_bytes(plan_meta: dict, itemsize: int) -> int:
    """A checkpoint's sancus state, all ranks: per hidden layer each rank's cache of its remote rows and the
    epoch each owner last sent (int64 per worker); the drift policies' sent rows come on top."""
    from stages.common.model_spec import ModelSpec

    hidden = ModelSpec.from_plan(plan_meta).widths[1:-1]
    workers = plan_meta["workers"]
    remote = sum(int(w.get("num_remote") or 0) for w in workers)
    return sum(remote * width * itemsize + len(workers) ** 2 * 8 for width in hidden)


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.sancus.runtime import SancusStrategy

    return SancusStrategy


SPEC = StrategySpec(
    name="sancus",
    summary="SANCUS: full-graph training with cached (stale) remote embeddings, skipping sends while "
    "fresh enough (--staleness; epoch:0 is exact).",
    methods=("chunk", "metis", "g3", "random"),
    family="full-graph",
    exactness="exact with --staleness epoch:0; otherwise stale remote embeddings (an approximation)",
    plan=plan.plan,
    plan_options=plan.OPTIONS,
    runtime=runtime_class,
    knobs=Layer0CacheKnobs,
    simulate=simulate.simulate,
    simulates_hosts=True,
    bins_system=BinsSystem(bins.workers, variants=("broadcast", "p2p"), skips_stale_sends=True),
    simulated_as=lambda options, knobs: f"sancus-{options.get('sancus_comm') or 'broadcast'}",
    fits_own_speed=True,
    checkpoint_state_bytes=checkpoint_state_bytes,
    advise_variants=(
        AdviseVariant(
            "broadcast, epoch:1",
            plan_options={"sancus_comm": "broadcast", "staleness": "epoch:1"},
            simulate={"staleness_epochs": 1},
        ),
        AdviseVariant(
            "p2p, epoch:1",
            plan_options={"sancus_comm": "p2p", "staleness": "epoch:1"},
            simulate={"staleness_epochs": 1},
        ),
    ),
)
