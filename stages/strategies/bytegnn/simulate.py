"""`g3 simulate` model of the ``bytegnn`` strategy: its sampling DAGs under the two-level scheduler.

Calibrated on a run of a bytegnn plan (``--run RUN``), like the model of ``distdgl``
(:mod:`stages.kits.simulate.minibatch`: steps per epoch by batch order, arcs and source rows per worker-step, the
remote share growing as (K−1)/K, the gradient all-reduce), with the sampling side replaced by the scheduler:

    cpu       = arcs × t_task        t_task: the pool's CPU seconds in tasks per sampled arc (task_cpu_seconds)
    network   = (H_remote + 1) × 2 × latency + remote bytes / bandwidth
                 one request round trip per hop that reaches other workers' nodes (every hop but the targets'),
                 plus the last chunks' fetch; the other fetches run under the next hop's sampling
    latency   = cpu / P + network                               one DAG, its tasks on P = --sample-threads
    period    = max(cpu / P, remote bytes / bandwidth, latency / D)
                 D DAGs in flight (--max-dags; Algorithm 1 launches while the trainer would otherwise wait)
    step      = max(period, compute) + all-reduce

``--scheduler off`` is P = D = 1 (one DAG at a time on one thread, still prepared ahead of the compute).
Both are reported (systems ``bytegnn`` with the run's settings and ``bytegnn-off``), at K and in the scaling
table. Assumptions, in the result's notes: each pool thread has a core of its own (no contention between
sampling and training: the launch rule's throttle never binds), rates do not change with K, no imbalance.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from stages.common.errors import G3InputError
from stages.common.run_artifact import calibration_records
from stages.kits.simulate.engine import Network
from stages.kits.simulate.minibatch import (
    MiniBatchProfile,
    epoch_result,
    remote_share,
    run_minibatch_simulation,
    worker_record,
)
from stages.kits.simulate.network import allreduce_seconds
from stages.kits.simulate.scaling import at_k_and_scaling


@dataclass
class SchedulerProfile:
    threads: int  # --sample-threads of the run
    max_dags: int
    scheduler: bool
    t_task: float  # CPU seconds of the pool's tasks per sampled arc
    dags_in_flight_max: int  # measured
    ready_tasks_max: int  # measured

    @classmethod
    def from_run(cls, run: Path) -> SchedulerProfile:
        info, _, _, workers = calibration_records(run)
        if not workers or "task_cpu_seconds" not in workers[0]:
            raise G3InputError(
                "--run: the run has no task statistics (train the bytegnn plan again)", path=run
            )
        cfg = info.get("config") or {}
        return cls(
            threads=int(cfg.get("sample_threads") or 2),
            max_dags=int(cfg.get("max_dags") or 4),
            scheduler=(cfg.get("scheduler") or "on") == "on",
            t_task=sum(w["task_cpu_seconds"] for w in workers)
            / max(sum(w["sampled_arcs"] for w in workers), 1),
            dags_in_flight_max=max(w["dags_in_flight_max"] for w in workers),
            ready_tasks_max=max(w["ready_tasks_max"] for w in workers),
        )


def simulate_bytegnn(
    p: MiniBatchProfile,
    s: SchedulerProfile,
    k: int,
    bandwidth: float,
    latency: float,
    scheduler: bool,
    net=None,
) -> dict:
    """The modelled epoch at ``k`` workers (a system entry of simulate.json). ``net``: per-worker links and speeds
    (a cluster of unlike hosts, as :func:`.minibatch.simulate_minibatch`): each worker's task CPU and compute
    ÷ its speed, its remote bytes from its peers evenly at the slower link of each pair; the slowest worker's
    step bounds every step."""
    net = net or Network(bandwidth, latency)
    latency = net.latency
    local = p.order == "local"
    steps = math.ceil(p.num_train / (k * p.batch_size if local else p.batch_size))
    scale = 1.0 if local else p.workers / k
    arcs, rows = p.arcs_per_step * scale, p.rows_per_step * scale
    remote = rows * remote_share(p, k)
    answers = (p.fanouts[1] + 1) * 8 if len(p.fanouts) > 1 and p.fanouts[1] > 0 else 0  # sized by the draw
    remote_bytes = remote * (p.feat_dim * 4 + answers) if k > 1 else 0.0
    threads, dags = (s.threads, s.max_dags) if scheduler else (1, 1)
    per = []  # per worker: its step and the parts of it
    for w in range(k):
        speed = net.speed(w)
        cpu = arcs * s.t_task / speed
        link = net.peer_transfer(remote_bytes, w, k) if k > 1 else 0.0
        network = (len(p.fanouts) * 2 * latency + link) if k > 1 else 0.0
        dag_latency = cpu / threads + network
        period = max(cpu / threads, link, dag_latency / dags)
        compute = arcs * p.t_compute / speed
        per.append(
            {
                "step": max(period, compute),
                "sampling_cpu": cpu,
                "dag_latency": dag_latency,
                "period": period,
                "compute": compute,
                "network": network,
                "link": link,
            }
        )
    slowest = max(per, key=lambda x: x["step"])
    allreduce = allreduce_seconds(p.num_params, k, net)
    epoch = steps * (slowest["step"] + allreduce)
    name = "bytegnn" if scheduler else "bytegnn-off"
    workers = [
        worker_record(r, steps, epoch, x["compute"], 0.0, allreduce, x["link"], steps * remote_bytes)
        for r, x in enumerate(per)
    ]
    sent = int(steps * remote_bytes * k)
    figures = dict(
        comm_wait_mean=0.0,
        step_parts={
            **{key: slowest[key] for key in ("sampling_cpu", "dag_latency", "period", "compute", "network")},
            "allreduce": allreduce,
            "dags_in_flight": dags,
            "threads": threads,
        },
    )
    return epoch_result(name, k, epoch, p.num_train, steps, allreduce, sent, workers, **figures)


def simulate(plan: Path, meta: dict, options, out: Path, replan) -> tuple[dict, None]:
    """`g3 simulate PLAN` of a bytegnn plan (its spec\'s ``simulate``)."""
    result = run_minibatch_simulation(plan, meta, options, out)  # checks --run, calibrates the profile
    run = Path(options.run)
    p = MiniBatchProfile(**result["rates"]["profile"])
    s = SchedulerProfile.from_run(run)
    result["systems"], result["scaling"] = at_k_and_scaling(
        options,
        result["workers"],
        lambda kk, net: [
            simulate_bytegnn(p, s, kk, options.bandwidth, options.latency, on, net=net)
            for on in (True, False)
        ],
    )
    result["rates"]["scheduler"] = asdict(s)
    result["rates"]["notes"] = result["rates"]["notes"][:1] + [
        "bytegnn: its run's --sample-threads and --max-dags; bytegnn-off: one DAG at a time on one thread",
        "assumes each sampling thread has a core of its own (no contention with training: Algorithm 1's CPU "
        "throttle never binds), rates independent of K, no imbalance between workers",
        "remote share of source rows grows as a random partition's (K-1)/K, scaled to the run's measured share",
    ]
    return result, None
