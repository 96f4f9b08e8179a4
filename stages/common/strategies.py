"""The registry of training strategies: one entry per system, naming its planner and its runtime module.

A strategy is how a distributed training system executes a plan: ``g3 plan --strategy NAME`` runs the
planner ``stages.plan.<planner>`` (its ``OPTIONS`` become ``g3 plan`` options, its ``plan`` function writes
the worker folders), and ``g3 train`` / ``g3 eval`` run ``stages.runtime.strategies.<runtime>``'s
``STRATEGY`` class behind the interface of ``stages.runtime.strategies.base``. Adding a strategy is one
entry here plus those two modules: the training loop, the CLI, eval, bench and report read everything they
need from the plan and this registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .errors import G3InputError
from .knobs import (
    BACKWARD,
    FEATURE_CACHE,
    LAYER0_CACHE,
    MICRO_BATCHES,
    PIPELINE,
    PREFETCH,
    TrainKnob,
    at_least_one,
    finite_non_negative,
)


@dataclass(frozen=True)
class PlanOption:
    """One ``g3 plan`` option of a strategy. ``parse(text)`` turns the command-line text into the value kept in
    plan.json (a ValueError's message becomes the one-line error); ``default`` is that value's text form."""

    name: str  # key in plan.json's strategy options
    flag: str  # the command-line flag
    default: str | None
    help: str
    parse: Callable[[str], object] = str
    metavar: str = "VALUE"
    # False: the option changes only what plan.json records, not how a run of the plan computes or moves data
    # (``g3 advise`` then reuses one calibration run across its values)
    layout: bool = True


def positive_int(what: str) -> Callable[[str], int]:
    """A :class:`PlanOption` parser of an integer >= 1 (``what`` names it in the error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError("expected a positive integer") from None
        if value < 1:
            raise ValueError(f"{what} must be at least 1")
        return value

    return parse


def count_or_auto(what: str) -> Callable[[str], int | None]:
    """A :class:`PlanOption` parser of a node count >= 1 or ``auto`` (None); ``what`` names it in the error."""

    def parse(text: str) -> int | None:
        if text in (None, "auto"):
            return None
        try:
            n = int(text)
        except ValueError:
            raise ValueError("expected a node count or 'auto'") from None
        if n < 1:
            raise ValueError(f"{what} must be at least 1 node")
        return n

    return parse


def one_of(*choices: str) -> Callable[[str], str]:
    """A :class:`PlanOption` parser of one of ``choices`` (kept as the text)."""

    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected {', '.join(choices[:-1])} or {choices[-1]}")
        return text

    return parse


def on_off(text: str) -> bool:
    """A :class:`PlanOption` parser of on | off (kept as a bool)."""
    if text not in ("on", "off"):
        raise ValueError("expected on or off")
    return text == "on"


def choice_option(name: str, default: str, choices: tuple[str, ...], help: str, **more) -> PlanOption:
    """A `g3 plan` option ``--name`` taking one of ``choices``; ``("on", "off")`` is kept as a bool."""
    parse = on_off if choices == ("on", "off") else one_of(*choices)
    return PlanOption(
        name, "--" + name.replace("_", "-"), default, help, parse=parse, metavar="|".join(choices), **more
    )


@dataclass(frozen=True)
class AdviseVariant:
    """One configuration of a strategy that `g3 advise` predicts: ``plan_options`` by name as `g3 plan` takes
    them (text), ``train_knobs`` by the names of the strategy's knobs (``StrategyInfo.knobs``), and ``simulate``: the fields of
    ``stages.simulate.SimulateOptions`` that model them (e.g. bns-gcn's boundary sample ratio)."""

    label: str = "default"
    plan_options: dict = field(default_factory=dict)
    train_knobs: dict = field(default_factory=dict)
    simulate: dict = field(default_factory=dict)


FAMILIES = ("full-graph", "mini-batch", "tensor-parallel")


@dataclass(frozen=True)
class StrategyInfo:
    name: str
    summary: str  # one line for `g3 plan --help`
    methods: tuple[str, ...]  # partition methods it runs on; the first is the default (`g3 bench`)
    exactness: str  # what it computes, against single-process full-graph training
    planner: str  # module under stages.plan
    runtime: str  # module under stages.runtime.strategies
    # the `g3 train` knobs it has (stages/common/knobs.py): how it runs, not what it computes
    knobs: tuple[TrainKnob, ...] = ()
    models: tuple[str, ...] = ("sage", "gcn", "gat")  # model kinds it trains (`g3 plan --model`)
    mini_batch: bool = False
    samples_neighbours: bool = (
        False  # neighbour sampling with --fanouts/--batch-size (peers match it, simulate models it)
    )
    profiles: bool = True  # `g3 train --profile` can fit per-bin rates from its trace
    notes: tuple[str, ...] = field(default_factory=tuple)
    # `g3 simulate`: the module under stages.simulate that models it (its ``simulate(plan, meta, options, out)``
    # returns simulate.json's body and the systems with their timeline spans); None: no model
    simulator: str | None = None
    # its plans cut every layer into bins with P2P tables: the workload the `bins` simulator runs every
    # full-graph system on (a plan for another K is planned with this strategy)
    bins: bool = False
    # the exact full-graph evaluator: `g3 eval` at another worker count plans this strategy on a partition of
    # this method (None: not the evaluator)
    evaluator_method: str | None = None
    # `g3 bench` peers (DGL, PyG) run mini-batch with (fanouts, batch size): the plan options that give them
    peer_options: tuple[str, ...] = ()
    # the name `g3 simulate` gives the system that runs a plan of this strategy with these plan options and
    # `g3 train` knobs (None: its knob's default), to set a prediction beside a run (examples/simulate_vs_emulated.py)
    simulated_as: Callable[[dict, dict], str] | None = None
    # `g3 advise`: the family it belongs to (FAMILIES) and the configurations it predicts (its main options)
    family: str = "full-graph"
    advise_variants: tuple[AdviseVariant, ...] = (AdviseVariant(),)
    # `g3 advise`: its model's compute rates come from the bins strategy's profile, but its kernels are not the
    # ones that profile times (neutrontp aggregates whole-graph column slices of the input width; bns-gcn and
    # sancus run each layer as one block, without g3's bins), so a short run of its own plan fits its compute
    # speed against the profile's rates (and anchors it) before it is predicted
    advise_fits_speed: bool = False

    @property
    def train_knobs(self) -> tuple[str, ...]:
        """The names of its knobs."""
        return tuple(k.name for k in self.knobs)

    def knob(self, name: str) -> TrainKnob | None:
        """Its declaration of the knob ``name`` (None: it does not have that knob)."""
        return next((k for k in self.knobs if k.name == name), None)

    def simulator_module(self):
        return importlib.import_module(f"stages.simulate.{self.simulator}") if self.simulator else None

    def plan_summary(self, plan: dict) -> tuple[list[tuple[str, str]], dict | None]:
        """What `g3 info` / `g3 plan` print about a plan of this strategy beyond the common fields: (label, text)
        rows and a table (``title``, ``columns``, ``rows`` of text) or None, from the planner's optional
        ``summary_rows(plan)`` and ``summary_table(plan)``."""
        planner = self.planner_module()
        rows = planner.summary_rows(plan) if hasattr(planner, "summary_rows") else []
        table = planner.summary_table(plan) if hasattr(planner, "summary_table") else None
        return rows, table

    def planner_module(self):
        return importlib.import_module(f"stages.plan.{self.planner}")

    def runtime_class(self):
        return importlib.import_module(f"stages.runtime.strategies.{self.runtime}").STRATEGY

    def options(self) -> tuple[PlanOption, ...]:
        return tuple(self.planner_module().OPTIONS)

    @property
    def default_method(self) -> str:
        return self.methods[0]


# the knobs some strategies declare for themselves, or their variant of a shared one (stages/common/knobs.py)
G3_PREFETCH = replace(
    PREFETCH,
    choices=("auto", "on", "off"),
    check=None,
    metavar=None,
    help="g3: under --pipeline intra/multi, gather (on CUDA also copy in) the next bin on a second thread while "
    "one computes. 'auto' = on for cuda; on the CPU only when the workers leave a core idle (threads x local "
    "workers < cores): otherwise the thread takes a core from the compute kernels and epochs get slower.",
)
NEUTRONTP_PIPELINE = replace(
    PIPELINE,
    help="neutrontp: 'none' = one bulk all-to-all per split/gather; any other value = the inter-chunk pipeline "
    "(NeutronTP §4.2.2: the split of the next chunk and the gather of the last run on a communication thread "
    "while a chunk aggregates; the same model, bitwise).",
)
NEUTRONTP_LAYER0_CACHE = replace(
    LAYER0_CACHE,
    help="neutrontp (naive TP): layer 0's aggregation of the feature slices and its gather into owned rows happen in "
    "the first epoch only, unless 'off'.",
)
P3_PIPELINE = replace(
    PIPELINE,
    choices=("none", "p3"),
    default="none",
    help="p3: 'p3' = P3's staleness with weight stashing: batch t computes with the weights before update t-3 and "
    "its gradient updates the current ones (P3 Eq. 3, a different model); the next three batches' partials "
    "travel while this one computes its data-parallel phase (up to four batches in flight).",
)
BYTEGNN_KNOBS = (
    TrainKnob(
        "scheduler",
        str,
        "on",
        choices=("on", "off"),
        help="ByteGNN's two-level scheduler: each step's sampling a DAG of chunk tasks on a thread pool, "
        "launched by Algorithm 1's launch-score; off = one DAG at a time on one thread. The same model "
        "either way.",
    ),
    TrainKnob(
        "sample_threads",
        int,
        2,
        metavar="N",
        check=at_least_one,
        help="Threads of the sampling task pool (besides a launcher and a network thread).",
    ),
    TrainKnob(
        "max_dags",
        int,
        4,
        metavar="N",
        check=at_least_one,
        help="At most N DAGs launched and not yet trained on.",
    ),
    TrainKnob(
        "launch_sigma",
        float,
        500.0,
        metavar="SIGMA",
        check=finite_non_negative,
        help="σ of Algorithm 1: launch a DAG when T_gap[ms] x f(C_util) x balance >= SIGMA (500: after 5 ms "
        "on an idle CPU with balance 1; docs/DESIGN.md).",
    ),
    TrainKnob(
        "task_nodes",
        int,
        256,
        metavar="N",
        check=at_least_one,
        help="Frontier nodes per sampling task (a chunk of one owner's nodes).",
    ),
)


STRATEGIES: dict[str, StrategyInfo] = {
    s.name: s
    for s in (
        StrategyInfo(
            name="g3",
            summary="G3: bins within device memory, peer-to-peer sharing per bin, multi-level pipeline (exact).",
            methods=("g3", "metis", "random", "chunk"),
            exactness="exact: the same model as single-process full-graph training",
            planner="g3",
            runtime="g3",
            knobs=(PIPELINE, G3_PREFETCH, BACKWARD, LAYER0_CACHE, FEATURE_CACHE),
            models=("sage", "gcn", "gat", "dgcn"),
            simulator="bins",
            bins=True,
            evaluator_method="chunk",
            simulated_as=lambda options, knobs: f"g3-{knobs.get('pipeline') or 'multi'}",
            advise_variants=(
                AdviseVariant("pipeline multi", train_knobs={"pipeline": "multi"}),
                AdviseVariant("pipeline none", train_knobs={"pipeline": "none"}),
            ),
        ),
        StrategyInfo(
            name="bns-gcn",
            summary="BNS-GCN: layer-synchronous boundary exchange, whole partition at once; --boundary-sample P "
            "(P = 1: exact; on a chunk partition: NeutronStar as G3 ran it).",
            methods=("metis", "chunk", "g3", "random"),
            exactness="exact with --boundary-sample 1; P < 1 samples boundary nodes (an approximation)",
            planner="bns_gcn",
            runtime="bns_gcn",
            knobs=(LAYER0_CACHE,),
            simulator="bins",
            simulated_as=lambda options, knobs: "bns-gcn",
            advise_fits_speed=True,
            advise_variants=(
                AdviseVariant(
                    "boundary sample 1 (exact)",
                    plan_options={"boundary_sample": "1"},
                    simulate={"boundary_sample": 1.0},
                ),
                AdviseVariant(
                    "boundary sample 0.1",
                    plan_options={"boundary_sample": "0.1"},
                    simulate={"boundary_sample": 0.1},
                ),
            ),
        ),
        StrategyInfo(
            name="sancus",
            summary="SANCUS: full-graph training with cached (stale) remote embeddings, skipping sends while "
            "fresh enough (--staleness; epoch:0 is exact).",
            methods=("chunk", "metis", "g3", "random"),
            exactness="exact with --staleness epoch:0; otherwise stale remote embeddings (an approximation)",
            planner="sancus",
            runtime="sancus",
            knobs=(LAYER0_CACHE,),
            simulator="bins",
            simulated_as=lambda options, knobs: f"sancus-{options.get('sancus_comm') or 'broadcast'}",
            advise_fits_speed=True,
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
        ),
        StrategyInfo(
            name="distdgl",
            summary="DistDGL: mini-batch training, neighbour sampling (--fanouts, --batch-size, --batch-order), "
            "remote neighbours sampled by their owners, features fetched by id, all-reduce per step.",
            methods=("distdgl", "metis", "random", "g3", "chunk", "bytegnn", "p3"),
            exactness="samples neighbours (an approximation); --fanouts -1 with one batch of every training node "
            "is exact full-graph training; evaluation is exact full-neighbour inference",
            planner="distdgl",
            runtime="distdgl",
            knobs=(PREFETCH, MICRO_BATCHES),
            mini_batch=True,
            samples_neighbours=True,
            simulator="minibatch",
            peer_options=("fanouts", "batch_size"),
            simulated_as=lambda options, knobs: "distdgl",
            family="mini-batch",
        ),
        StrategyInfo(
            name="bytegnn",
            summary="ByteGNN: DistDGL's sampling as task DAGs on a thread pool under its two-level scheduler "
            "(g3 train --scheduler, --launch-sigma), on its K-hop block partition.",
            methods=("bytegnn", "distdgl", "metis", "random", "g3", "chunk"),
            exactness="as distdgl (the scheduler only reorders work): samples neighbours; --fanouts -1 with one "
            "batch of every training node is exact full-graph training",
            planner="bytegnn",
            runtime="bytegnn",
            mini_batch=True,
            samples_neighbours=True,
            knobs=BYTEGNN_KNOBS,
            simulator="bytegnn",
            peer_options=("fanouts", "batch_size"),
            family="mini-batch",
            simulated_as=lambda options, knobs: (
                "bytegnn" if (knobs.get("scheduler") or "on") == "on" else "bytegnn-off"
            ),
        ),
        StrategyInfo(
            name="neutrontp",
            summary="NeutronTP: tensor parallelism on a feature split — every worker aggregates its column slice "
            "over the whole graph chunk by chunk; --tp naive (all-to-all to row blocks and back per layer) "
            "or decoupled (an MLP, then L propagation rounds: 4 collectives per epoch).",
            methods=("feature",),
            exactness="--tp naive: exact (the same model as single-process full-graph training); --tp decoupled "
            "trains a different model, the decoupled GCN (dgcn: an MLP followed by Â^L), exactly",
            planner="neutrontp",
            runtime="neutrontp",
            knobs=(NEUTRONTP_PIPELINE, NEUTRONTP_LAYER0_CACHE),
            models=("sage", "gcn", "dgcn"),
            profiles=False,
            simulator="tensor_parallel",
            simulated_as=lambda options, knobs: (
                f"neutrontp-{options.get('tp') or 'naive'}"
                + ("" if knobs.get("pipeline") == "none" else "+pipe")
            ),
            family="tensor-parallel",
            advise_fits_speed=True,
            advise_variants=(
                AdviseVariant("naive, pipelined"),
                AdviseVariant("naive, bulk", train_knobs={"pipeline": "none"}),
            ),
        ),
        StrategyInfo(
            name="clustergcn",
            summary="ClusterGCN: each worker's nodes cut into METIS clusters; a step trains on the subgraph of "
            "--clusters-per-batch clusters (other arcs dropped), no exchange, all-reduce per step.",
            methods=("metis", "distdgl", "g3", "random", "chunk", "bytegnn"),
            exactness="drops the arcs between clusters and workers (an approximation); one worker with one "
            "cluster is full-graph training; evaluation is exact full-neighbour inference",
            planner="clustergcn",
            runtime="clustergcn",
            knobs=(PREFETCH,),
            mini_batch=True,
            family="mini-batch",
            simulator="clustergcn",
            simulated_as=lambda options, knobs: "clustergcn",
        ),
        StrategyInfo(
            name="p3",
            summary="P3: structure hashed, features split by column; layer 1 model-parallel (the structure "
            "pushed, partial activations pulled, gradients pushed back), layers 2+ data-parallel; "
            "g3 train --pipeline p3: P3's delay-3 staleness with weight stashing, four batches in flight.",
            methods=("p3",),
            exactness="as distdgl on the same batches (samples neighbours; exact against distdgl --batch-order "
            "global); --pipeline p3 updates with gradients three steps stale (P3 Eq. 3, an "
            "approximation)",
            planner="p3",
            runtime="p3",
            knobs=(PREFETCH, P3_PIPELINE),
            models=("sage", "gcn"),
            mini_batch=True,
            samples_neighbours=True,
            simulator="p3",
            peer_options=("fanouts", "batch_size"),
            simulated_as=lambda options, knobs: (
                "p3" if knobs.get("pipeline") in (None, "none") else "p3-pipelined"
            ),
            family="mini-batch",
            advise_variants=(
                AdviseVariant("unpipelined", train_knobs={"pipeline": "none"}),
                AdviseVariant("pipelined (delay 3)", train_knobs={"pipeline": "p3"}),
            ),
            notes=(
                "GAT is not built: its attention logits would need every head's scalars summed across the "
                "column slices per arc endpoint before the softmax, which P3 does not describe",
            ),
        ),
        StrategyInfo(
            name="hopgnn",
            summary="HopGNN: the model migrates to the features — distdgl's global batches as per-root "
            "micrographs trained in K time steps on their home servers (--pregather, --merge, "
            "--migrate; --batch-order local-only: each server its own roots).",
            methods=("distdgl", "metis", "g3"),
            exactness="as distdgl --batch-order global (migration, pre-gathering and merging change where work "
            "runs, not the gradients); --batch-order local-only trains on batches stratified by "
            "partition (a different model)",
            planner="hopgnn",
            runtime="hopgnn",
            simulator="hopgnn",
            simulated_as=lambda options, knobs: "hopgnn",
            family="mini-batch",
            knobs=(PREFETCH,),
            mini_batch=True,
            samples_neighbours=True,
            peer_options=("fanouts", "batch_size"),
        ),
    )
}


# plans and runs written before strategies existed were all this strategy's
LEGACY_STRATEGY = "g3"
# the project's own system: `g3 bench` reports every entry against it at one worker (and its goal against DGL)
REFERENCE_STRATEGY = "g3"


def knob_declarations() -> dict[str, list[tuple[StrategyInfo, TrainKnob]]]:
    """Every `g3 train` knob by name, with each strategy's declaration of it (registry order). Read at each call,
    so a strategy registered later (a test's fixture) is seen."""
    out: dict[str, list[tuple[StrategyInfo, TrainKnob]]] = {}
    for info in STRATEGIES.values():
        for knob in info.knobs:
            out.setdefault(knob.name, []).append((info, knob))
    return out


def knob_values(name: str) -> tuple[str, ...]:
    """Every value some strategy takes for the text knob ``name`` (e.g. every --pipeline)."""
    return tuple(dict.fromkeys(v for _, k in knob_declarations().get(name, ()) for v in k.choices))


def full_graph_evaluator() -> StrategyInfo:
    """The strategy `g3 eval` plans to evaluate a run with another worker count (exact full-graph inference)."""
    return next(s for s in STRATEGIES.values() if s.evaluator_method)


def bins_strategy() -> StrategyInfo:
    """The strategy whose plans are the bins workload of the `bins` simulator."""
    return next(s for s in STRATEGIES.values() if s.bins)


def strategy_info(name: str) -> StrategyInfo:
    """The registered strategy ``name``; an unknown name is bad input (one line naming the choices)."""
    if name not in STRATEGIES:
        raise G3InputError(f"unknown strategy {name!r} (choose from {', '.join(STRATEGIES)})")
    return STRATEGIES[name]


def option_text(value: object) -> str | None:
    """The command-line text of a value as plan.json keeps it (the inverse of the options' parsers)."""
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict) and set(value) == {"policy", "bound"}:
        return f"{value['policy']}:{value['bound']}"
    return str(value)


def check_stored_options(strategy: str, stored: object, where: object) -> None:
    """A plan's recorded strategy options are what `g3 plan` itself writes: each one of the strategy's, parsed
    back from its text by the same parser as on the command line and equal to the recorded value — a plan
    sealed by another tool or edited and re-sealed is refused here, in one line, not in a worker."""
    info = strategy_info(strategy)
    if not isinstance(stored, dict):
        raise G3InputError("the strategy's options are not an object", path=where)
    own = {o.name: o for o in info.options()}
    for name, value in stored.items():
        opt = own.get(name)
        if opt is None:
            raise G3InputError(
                f"records option {name!r}, which the {strategy} strategy does not have", path=where
            )
        try:
            again = opt.parse(option_text(value))
        except (ValueError, TypeError) as exc:
            raise G3InputError(f"records {opt.flag} {value!r}: {exc}", path=where) from None
        if again != value:
            raise G3InputError(
                f"records {opt.flag} {value!r}, which `g3 plan` would record as {again!r}", path=where
            )


def check_partition_method(info: StrategyInfo, method: str | None, part: object) -> None:
    """Refuse a partition the strategy cannot run on, naming what to run instead."""
    if method in info.methods:
        return
    others = [s.name for s in STRATEGIES.values() if method in s.methods]
    instead = f"`g3 partition STORE --workers K --method {info.default_method}`"
    also = f"; a {method} partition runs {', '.join(others)}" if others else ""
    raise G3InputError(
        f"strategy {info.name} runs on {', '.join(info.methods)} partitions, not {method}: run {instead}{also}",
        path=part,
    )
