"""The bytegnn strategy's entry in the registry: what every stage needs to know about it."""

from __future__ import annotations

from ..knobs import TrainKnob, at_least_one, finite_non_negative
from .info import StrategyInfo

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

INFO = StrategyInfo(
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
)
