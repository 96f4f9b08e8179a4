"""``bytegnn``: ByteGNN (seed 001 §4.2) — DistDGL's mini-batch training with sampling run as task DAGs by a
pool of threads under ByteGNN's two-level scheduler, on its own partition (``g3 partition --method bytegnn``).

Each step's sampling is one DAG: seed sampling (the step's targets) → one neighbourhood (NSC) task per hop →
feature fetching. Tasks whose inputs are ready wait in one priority queue served by ``--sample-threads``
threads, in ByteGNN's fine-grained order: the DAG with the smaller id (launched earlier) first, then the
cheaper task (NSC: the neighbours of its input nodes; fetching: rows × feature width). A task that needs the
other workers (the remote round of an NSC hop on a partitioned topology, the feature fetch) is a collective:
those run on one communication thread strictly in (DAG id, task) order, which is the same on every rank
whatever the local timing — local tasks of later DAGs proceed meanwhile.

Coarse-grained scheduling (its Algorithm 1) decides when to launch the next DAG: with ``balance`` =
T_sample / (T_train × Q_size) (mean seconds to sample and to train a step; Q_size the finished DAGs waiting),
``f(C_util)`` = 101 − e^(C_util / c), c = 100 / ln 101 (C_util: this process's CPU use over the last interval,
in % of its threads' capacity), and T_gap the milliseconds since the last launch, a DAG is launched when
``T_gap × f(C_util) / 100 × balance ≥ σ`` (``--launch-sigma``; the paper gives no value: σ = 5 launches after
5 ms on an idle CPU with balance 1, later as the CPU fills or finished DAGs pile up), at most
``--max-dags`` launched and not yet trained on, and always when none is under way. ``--scheduler off`` runs the DAGs one after another, every
task in order on one thread.

Sampling draws are counter-based, so neither the order nor the thread that runs a task changes them: the
scheduler on, off, and ``distdgl`` on the same partition train the same model (tested).
"""

from __future__ import annotations

import heapq
import math
import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..neighbor_sampler import block_from_sample, sample_key
from .base import WorkerContext
from .distdgl import DistDglStrategy
from .minibatch import PreparedStep

C_UTIL_SCALE = 100.0 / math.log(101.0)


def launch_score(t_gap_ms: float, c_util: float, t_sample: float, t_train: float, q_size: int) -> float:
    """Algorithm 1's launch-score: T_gap × f(C_util) / 100 × balance (balance infinite with nothing queued)."""
    f = 101.0 - math.exp(min(max(c_util, 0.0), 100.0) / C_UTIL_SCALE)
    balance = math.inf if q_size == 0 or t_train <= 0 else t_sample / (t_train * q_size)
    return t_gap_ms * f / 100.0 * balance


@dataclass
class Dag:
    """One step's sampling: its tasks in order and what they have produced so far."""

    step: int
    epoch: int
    targets: np.ndarray | None = None
    global_targets: int | None = None
    frontier: np.ndarray | None = None
    blocks: list = field(default_factory=list)
    next_task: int = 0
    started: float = 0.0
    result: PreparedStep | None = None


class ByteGnnStrategy(DistDglStrategy):
    name = "bytegnn"

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        opts = ctx.options
        self.scheduler = opts.get("scheduler", "on") == "on"
        self.sigma = float(opts.get("launch_sigma", 5.0))
        self.pool_size = int(opts.get("sample_threads", 2))
        self.max_dags = int(opts.get("max_dags", 4))
        self.t_sample: list[float] = []
        self.t_train: list[float] = []
        self._t_forward = 0.0

    # --- the tasks of a DAG ----------------------------------------------------------------------------
    def _tasks(self) -> list[str]:
        return ["seed", *(f"nsc{h}" for h in range(len(self.fanouts))), "fetch"]

    def _is_collective(self, task: str) -> bool:
        return task == "fetch" or (task.startswith("nsc") and task != "nsc0" and not self.replicated)

    def _cost(self, dag: Dag, task: str) -> int:
        if task == "seed":
            return 0
        if task == "fetch":
            return len(dag.frontier) * self.features.shape[1]
        if self.replicated:
            return int((self.g_indptr[dag.frontier + 1] - self.g_indptr[dag.frontier]).sum())
        return len(dag.frontier) * max(self.fanouts[int(task[3:])], 1)

    def _run(self, dag: Dag, task: str) -> None:
        if task == "seed":
            dag.targets, dag.global_targets = self.batch(dag.epoch, dag.step)
            dag.frontier = dag.targets
        elif task.startswith("nsc"):
            hop = int(task[3:])
            key = sample_key(self.cfg.seed, dag.epoch, dag.step, hop)
            counts, nbrs = self.sample(dag.frontier, self.fanouts[hop], key, remote=hop > 0)
            dag.blocks.append(block_from_sample(dag.frontier, counts, nbrs, self.scratch()))
            dag.frontier = dag.blocks[-1].src
        else:
            x0, degrees, fetched = self.gather_inputs(dag.frontier)
            took = time.perf_counter() - dag.started
            dag.result = PreparedStep(dag.targets, dag.global_targets, dag.blocks[::-1], x0, degrees,
                                      {"sample": took, "fetch": 0.0}, fetched_rows=fetched)

    # --- scheduling -------------------------------------------------------------------------------------
    def _start_sampler(self, epoch: int) -> None:
        self._epoch_runner = EpochRunner(self, epoch)
        self._epoch_runner.start()

    def _next(self, epoch: int, step: int) -> PreparedStep:
        if step == 0:
            self._start_sampler(epoch)
        prep = self._epoch_runner.wait(step)
        self.t_sample.append(prep.seconds["sample"])
        if step == self.steps(epoch) - 1:
            self._epoch_runner.join()
        self._t_forward = time.perf_counter()
        return prep

    def backward(self, grad_logits) -> None:
        super().backward(grad_logits)
        self.t_train.append(time.perf_counter() - self._t_forward)

    def stats(self) -> dict:
        return {**super().stats(), "dag_launches": int(self.timers["dag_launches"]),
                "dags_in_flight_max": int(self.timers["dags_in_flight_max"])}


class EpochRunner:
    """The DAGs of one epoch: a launcher (coarse-grained), a task pool (fine-grained order), one communication
    thread for the collective tasks in (DAG id, task) order, and the finished DAGs by step."""

    def __init__(self, strategy: ByteGnnStrategy, epoch: int):
        self.s, self.epoch = strategy, epoch
        self.steps = strategy.steps(epoch)
        self.tasks = strategy._tasks()
        self.cv = threading.Condition()
        self.ready: list = []  # heap of (dag id, cost, task index) of local tasks whose inputs are ready
        self.dags: dict[int, Dag] = {}
        self.done: dict[int, PreparedStep] = {}
        self.error: BaseException | None = None
        self.launched = 0
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        s = self.s
        if not s.scheduler:  # one thread, DAG after DAG, task after task
            self.threads = [threading.Thread(target=self._guard(self._sequential), daemon=True, name="bytegnn")]
        else:
            self.threads = [threading.Thread(target=self._guard(self._launcher), daemon=True, name="bytegnn-launch"),
                            threading.Thread(target=self._guard(self._communicate), daemon=True, name="bytegnn-comm")]
            self.threads += [threading.Thread(target=self._guard(self._work), daemon=True, name=f"bytegnn-{i}")
                             for i in range(s.pool_size)]
        for t in self.threads:
            t.start()

    def _guard(self, fn):
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # handed to the compute thread
                with self.cv:
                    self.error = self.error or exc
                    self.cv.notify_all()
        return run

    def wait(self, step: int) -> PreparedStep:
        with self.cv:
            while step not in self.done and self.error is None:
                self.cv.wait()
            if self.error is not None:
                raise self.error
            return self.done.pop(step)

    def join(self) -> None:
        with self.cv:
            self.launched = self.steps  # nothing more to launch
            self.cv.notify_all()
        for t in self.threads:
            t.join(timeout=5.0)

    # --- scheduler off ----------------------------------------------------------------------------------
    def _sequential(self) -> None:
        for step in range(self.steps):
            dag = Dag(step, self.epoch, started=time.perf_counter())
            for task in self.tasks:
                self.s._run(dag, task)
            self._finish(dag)
            self.s.timers["dag_launches"] += 1

    # --- scheduler on -----------------------------------------------------------------------------------
    def _launcher(self) -> None:
        s = self.s
        last, cpu0, wall0 = time.perf_counter(), time.process_time(), time.perf_counter()
        capacity = max(1, min(os.cpu_count() or 1, s.pool_size + 1))
        while True:
            with self.cv:
                if self.launched >= self.steps or self.error is not None:
                    return
                in_flight, queued = len(self.dags), len(self.done)
            now, cpu = time.perf_counter(), time.process_time()
            c_util = 100.0 * (cpu - cpu0) / max(now - wall0, 1e-6) / capacity
            cpu0, wall0 = cpu, now
            t_sample = float(np.mean(s.t_sample[-8:])) if s.t_sample else 0.0
            t_train = float(np.mean(s.t_train[-8:])) if s.t_train else 0.0
            score = launch_score((now - last) * 1e3, c_util, t_sample, t_train, queued)
            # always one DAG when none is under way; never more than --max-dags made and not yet trained on
            if in_flight + queued < s.max_dags and (in_flight == 0 or score >= s.sigma):
                self._launch()
                last = time.perf_counter()
            else:
                time.sleep(0.005)

    def _launch(self) -> None:
        with self.cv:
            dag = Dag(self.launched, self.epoch, started=time.perf_counter())
            self.dags[dag.step] = dag
            t = self.s.timers
            t["dags_in_flight_max"] = max(t["dags_in_flight_max"], len(self.dags))
            self.launched += 1
            self.s.timers["dag_launches"] += 1
            self._release(dag)

    def _release(self, dag: Dag) -> None:
        """Make the DAG's next task runnable (caller holds the lock): local ones into the priority queue, a
        collective one waits for the communication thread."""
        if dag.next_task >= len(self.tasks):
            return
        task = self.tasks[dag.next_task]
        if not self.s._is_collective(task):
            heapq.heappush(self.ready, (dag.step, self.s._cost(dag, task), dag.next_task))
        self.cv.notify_all()

    def _work(self) -> None:
        while True:
            with self.cv:
                while not self.ready and self.error is None and not self._all_done():
                    self.cv.wait(timeout=0.05)
                if self.error is not None or (self._all_done() and not self.ready):
                    return
                step, _cost, index = heapq.heappop(self.ready)
                dag = self.dags[step]
            self.s._run(dag, self.tasks[index])
            self._advance(dag)

    def _communicate(self) -> None:
        """Collective tasks strictly in (DAG id, task) order: the same sequence of collectives on every rank."""
        for step in range(self.steps):
            for index, task in enumerate(self.tasks):
                if not self.s._is_collective(task):
                    continue
                with self.cv:
                    while (step not in self.dags or self.dags[step].next_task < index) and self.error is None:
                        self.cv.wait(timeout=0.05)
                    if self.error is not None:
                        return
                    dag = self.dags[step]
                self.s._run(dag, task)
                self._advance(dag)

    def _advance(self, dag: Dag) -> None:
        with self.cv:
            dag.next_task += 1
            if dag.next_task == len(self.tasks):
                self._finish(dag, locked=True)
            else:
                self._release(dag)

    def _finish(self, dag: Dag, locked: bool = False) -> None:
        if not locked:
            with self.cv:
                return self._finish(dag, locked=True)
        self.done[dag.step] = dag.result
        self.dags.pop(dag.step, None)
        self.cv.notify_all()

    def _all_done(self) -> bool:
        return self.launched >= self.steps and not self.dags


STRATEGY = ByteGnnStrategy
