"""The hopgnn strategy's spec: its parts and declarations, as every stage reads them."""

from __future__ import annotations

from stages.common.knobs import SamplingKnobs
from stages.strategies.distdgl.plan import plan as plan_distdgl
from stages.strategies.hopgnn import plan, simulate
from stages.strategies.spec import StrategySpec


def runtime_class():  # imported when a worker asks for it (see StrategySpec.runtime)
    from stages.strategies.hopgnn.runtime import HopGnnStrategy

    return HopGnnStrategy


SPEC = StrategySpec(
    name="hopgnn",
    summary="HopGNN: the model migrates to the features — distdgl's global batches as per-root "
    "micrographs trained in K time steps on their home servers (--pregather, --merge, "
    "--migrate; --batch-order local-only: each server its own roots).",
    methods=("distdgl", "metis", "g3"),
    exactness="as distdgl --batch-order global (migration, pre-gathering and merging change where work "
    "runs, not the gradients); --batch-order local-only trains on batches stratified by "
    "partition (a different model)",
    plan=plan_distdgl,
    plan_options=plan.OPTIONS,
    summary_rows=plan.summary_rows,
    runtime=runtime_class,
    simulate=simulate.simulate,
    family="mini-batch",
    knobs=SamplingKnobs,
    peer_options=("fanouts", "batch_size"),
)
