"""The bytegnn strategy's `g3 train` knobs: its two-level scheduler (ByteGNN §4.2, Algorithm 1) and its pools."""

from __future__ import annotations

from dataclasses import dataclass

from stages.common.knobs import SamplingKnobs, TrainKnob, at_least_one, finite_non_negative, knob


def _count(name: str, default: int, help: str) -> TrainKnob:
    """A knob counting threads, DAGs or nodes: at least one."""
    return TrainKnob(name, int, default, help, metavar="N", check=at_least_one)


@dataclass(frozen=True)
class ByteGnnKnobs(SamplingKnobs):
    prefetch: str = "auto"  # not a knob of bytegnn: its sampler thread always leads by two steps
    scheduler: str = knob(
        TrainKnob(
            "scheduler",
            str,
            "on",
            choices=("on", "off"),
            help="ByteGNN's two-level scheduler: each step's sampling a DAG of chunk tasks on a thread pool, "
            "launched by Algorithm 1's launch-score; off = one DAG at a time on one thread. The same model "
            "either way.",
        )
    )
    sample_threads: int = knob(
        _count(
            "sample_threads",
            2,
            "Threads of the sampling task pool (besides a launcher and a network thread).",
        )
    )
    max_dags: int = knob(_count("max_dags", 4, "At most N DAGs launched and not yet trained on."))
    launch_sigma: float = knob(
        TrainKnob(
            "launch_sigma",
            float,
            500.0,
            metavar="SIGMA",
            check=finite_non_negative,
            help="σ of Algorithm 1: launch a DAG when T_gap[ms] x f(C_util) x balance >= SIGMA (500: after 5 ms "
            "on an idle CPU with balance 1; docs/DESIGN.md).",
        )
    )
    task_nodes: int = knob(
        _count("task_nodes", 256, "Frontier nodes per sampling task (a chunk of one owner's nodes).")
    )
