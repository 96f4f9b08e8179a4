"""``bytegnn``: ByteGNN (seed 001 §4.2) — DistDGL's mini-batch training with each step's sampling run as a DAG of
small tasks on a pool of threads under ByteGNN's two-level scheduler, on its own partition
(``g3 partition --method bytegnn``).

**The DAG of a step** (001 §4.2.1, Figure 9, supervised): a *seed* task (the step's targets), then per hop
one *NSC* task per frontier chunk, a *merge* task per hop, one *fetch* task per NSC task, and an *end* task::

    seed ─▶ NSC(hop 0, chunk 0..c) ─▶ merge(hop 0) ─▶ NSC(hop 1, chunk 0..c') ─▶ merge(hop 1) ─▶ … ─▶ end
      └▶ fetch(targets)   └▶ fetch(chunk's new neighbours)        └▶ fetch(…)                      ▲ (all fetches)

The paper makes one NSC and one feature-fetching instance per sampled vertex and hop; g3 makes one per
*chunk* of a hop's frontier (``g3 train --task-nodes``, nodes of one owner), because a Python task per vertex
would cost more than the draw. A chunk's fetch is released the moment its NSC task finishes ("each small task
of Feature Fetching can start immediately when the corresponding small NSC task finishes") and fetches the
chunk's sampled neighbours not yet claimed by an earlier fetch of the same DAG (a per-DAG mask, so no row is
fetched twice). The *merge* task is g3's addition: the message-flow block of a hop numbers new sources in
order of first appearance over the whole frontier, so the hop's chunks are joined (in frontier order) before
the next hop's chunks exist. *end* assembles the first block's source rows from the fetched rows.

**Fine-grained scheduling** (§4.2.2): a task enters one priority queue when its parents are done and the
pool's threads (``--sample-threads``) take the task of the DAG launched first (smallest id), then the cheaper
one. Costs as the paper: NSC = the in-degrees of the chunk's nodes (a chunk another worker owns: nodes ×
fanout, its degrees being unknown here); fetch = rows × feature width; merge = sampled arcs; seed and end 0.
A chunk another worker owns is a request to that owner's sampling server (``sample``; the service of
:mod:`stages.kits.runtime.sampling_service`, started by :class:`DistDglStrategy`) and a fetch of rows another worker
owns is a ``features0`` request (served by the same service, as distdgl pulls its rows; it also carries the
rows' global degrees for GCN): the pool thread only sends it, one network thread takes the replies (in the order sent)
and completes the task — the paper's "network operations processed concurrently with the CPU operations".
The owner schedules what it serves the same way: a request carries its DAG's (epoch, step, cost) and the
owner's ``--sample-threads`` serving threads answer its queue oldest step first, then the cheaper
(``serving_threads``; distdgl's owners answer first come, first served).
No other worker takes part: there is no collective on the sampling side.

**Coarse-grained scheduling** (Algorithm 1): a launcher thread launches the next DAG when ::

    launch_score = T_gap × f(C_util) × balance ≥ σ        (σ: --launch-sigma, default 500)
    balance = T_sample / (T_train × Q_size),  f(C) = 101 − e^(C / c),  c = 100 / ln 101

and otherwise sleeps 5 ms, as the algorithm. g3's choices where the paper is silent:

* units: T_gap in milliseconds since the last launch, C_util in % — so σ = 500 launches after 5 ms on an
  idle CPU with balance 1, and never at 100 %;
* C_util: the machine's CPU utilisation (``/proc/stat`` over the last window of at least 50 ms; elsewhere
  this process's CPU time over the machine's cores) — sampling contends with every worker on the machine;
* T_sample: mean latency (launch → end) of the last 8 DAGs; T_train: the trainer's mean time per step over
  the last 8 steps; balance = 1 until both are measured;
* Q_size = 0 (the trainer takes every DAG as it finishes) would divide by zero and never throttle; g3 takes
  max(Q_size, 1), the paper's formula for every Q_size ≥ 1;
* ``more_dag`` is also false while ``--max-dags`` DAGs are in flight (memory bound), and a DAG is launched
  regardless of the score when none is in flight or queued (at C_util = 100 % the score is 0 for ever).

``--scheduler off`` runs one DAG at a time, its tasks on one thread in the same order, remote replies
awaited in the task. Sampling draws are counter-based (by node, hop and step), so neither the order, the chunk
nor the thread that runs a task changes them: scheduler on, off and ``distdgl`` on the same partition train
bitwise the same model (tested). The epoch records' scheduler counters are listed in docs/ARTIFACTS.md.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from stages.kits.runtime.device.op_counter import OpCount, OpCounter
from stages.kits.runtime.device.sampler import block_arrays, here_first
from stages.kits.runtime.device.sampler import regroup as device_regroup
from stages.kits.runtime.device.sampler import sample_rows as device_sample_rows
from stages.kits.runtime.minibatch import PreparedStep
from stages.kits.runtime.neighbor_sampler import (
    SampledBlock,
    block_from_sample,
    sample_key,
    sample_rows,
    signed64,
)
from stages.kits.runtime.strategy import WorkerContext
from stages.strategies.bytegnn.knobs import ByteGnnKnobs
from stages.strategies.distdgl.runtime import DistDglStrategy, regroup

C_UTIL_SCALE = 100.0 / math.log(101.0)  # c of f(C_util): f(0) = 100, f(100) = 0
LAUNCH_POLL_SECONDS = 0.005  # Algorithm 1's sleep(5ms)
MEAN_OF_LAST = 8  # T_sample, T_train: means of the last 8 DAGs / steps


def f_cpu(c_util: float) -> float:
    """Algorithm 1's f(C_util) = 101 − e^(C_util / c): 100 on an idle CPU, 0 on a busy one (e^(100/c) rounds
    above 101: clipped at 0)."""
    return max(0.0, 101.0 - math.exp(min(max(c_util, 0.0), 100.0) / C_UTIL_SCALE))


def launch_score(t_gap_ms: float, c_util: float, t_sample: float, t_train: float, q_size: int) -> float:
    """Algorithm 1's launch-score T_gap × f(C_util) × balance, balance = T_sample / (T_train × max(Q_size, 1))
    (1 until both times are measured)."""
    if t_sample > 0 and t_train > 0:
        balance = t_sample / (t_train * max(q_size, 1))
    else:
        balance = 1.0
    return t_gap_ms * f_cpu(c_util) * balance


class CpuMeter:
    """C_util in %: the machine's CPU utilisation over the last complete window of at least ``window`` s
    (``/proc/stat``); without it this process's CPU time over the machine's cores."""

    def __init__(self, window: float = 0.05, stat_path: str = "/proc/stat"):
        self.window, self.stat_path = window, stat_path
        self.cores = os.cpu_count() or 1
        self.last = self._read()
        self.last_t = time.perf_counter()
        self.value = 0.0

    def _read(self) -> tuple[float, float]:
        """(busy, total) CPU time counters of the machine, or (this process's CPU s, cores × wall s)."""
        try:
            with open(self.stat_path) as f:
                fields = [float(x) for x in f.readline().split()[1:9]]
            idle = fields[3] + fields[4]  # idle + iowait
            return sum(fields) - idle, sum(fields)
        except (OSError, ValueError, IndexError):
            return time.process_time(), time.perf_counter() * self.cores

    def read(self) -> float:
        now = time.perf_counter()
        if now - self.last_t >= self.window:
            cur = self._read()
            busy, total = cur[0] - self.last[0], cur[1] - self.last[1]
            if total > 0:
                self.value = min(100.0, max(0.0, 100.0 * busy / total))
                self.last, self.last_t = cur, now
        return self.value


class LaunchRule:
    """Algorithm 1 with ``--max-dags`` and the liveness rule (module docstring); measurements injected so the
    rule is testable without a clock."""

    def __init__(self, sigma: float, max_dags: int, cpu: Callable[[], float], sequential: bool = False):
        self.sigma, self.max_dags, self.cpu, self.sequential = sigma, max_dags, cpu, sequential
        self.last_launch = time.perf_counter()

    def should_launch(self, now: float, in_flight: int, queued: int, t_sample: float, t_train: float) -> bool:
        if in_flight + queued >= self.max_dags:
            return False
        if in_flight == 0 and (queued == 0 or self.sequential):  # --scheduler off: one DAG at a time
            return True
        if self.sequential:
            return False
        score = launch_score((now - self.last_launch) * 1e3, self.cpu(), t_sample, t_train, queued)
        return score >= self.sigma

    def launched(self, now: float) -> None:
        self.last_launch = now


# --- the DAG -----------------------------------------------------------------------------------------------
@dataclass
class Dag:
    """One step's sampling DAG: what its tasks have produced so far."""

    id: int  # launch order (= the step): the fine-grained scheduler's first key
    epoch: int
    started: float
    targets: np.ndarray | None = None
    global_targets: int | None = None
    hop: int = 0
    frontier: np.ndarray | None = None
    frontier_ids: np.ndarray | None = None  # resident: the device frontier's ids on the host, read once a hop
    parts: list = field(default_factory=list)  # per chunk of the hop: (positions, counts, neighbours)
    parts_left: int = 0
    blocks: list = field(default_factory=list)
    claimed: np.ndarray | None = None  # bool [num_nodes]: rows some fetch task of this DAG has taken
    fetched: list = field(default_factory=list)  # (global ids, rows, degrees or None) per fetch
    remote_rows: int = 0
    open_fetches: int = 0
    sampled: bool = False  # every hop merged
    ready: int = 0  # tasks of this DAG in the ready queue now
    lock: threading.Lock = field(default_factory=threading.Lock)
    result: PreparedStep | None = None
    ops: OpCount | None = None  # --count-ops: what its tasks dispatched, on whichever thread ran them


@dataclass
class Task:
    """One task of a DAG: ``run()`` does its CPU work and returns the requests it sent (each with what to do
    with the reply); the task is done when they are answered."""

    dag: Dag
    kind: str  # seed | nsc | merge | fetch | end
    cost: int
    run: Callable[[], list]
    index: int = -1  # an NSC task's chunk
    waits: int = 0


class ByteGnnStrategy(DistDglStrategy):
    name = "bytegnn"
    knobs: ByteGnnKnobs
    # resident: the tasks' draws, merges and gathers run on the device (torch operations from the pool's threads),
    # the DAG, its scheduler and the owners' requests as on the host

    def __init__(self, ctx: WorkerContext, model):
        super().__init__(ctx, model)
        self.scheduler = self.knobs.scheduler == "on"
        self.sigma = float(self.knobs.launch_sigma)
        self.pool_size = int(self.knobs.sample_threads)
        self.max_dags = int(self.knobs.max_dags)
        self.task_nodes = int(self.knobs.task_nodes)
        self.width = self.features.shape[1]
        self.t_train: deque[float] = deque(maxlen=MEAN_OF_LAST)
        self._took_step: float | None = None
        self._runner: DagRunner | None = None
        self.cpu_meter = CpuMeter()
        # the service (DistDglStrategy's) serves `sample` and `features0` (its rows) from the start

    def serving_threads(self, ctx: WorkerContext) -> int:
        """With the scheduler on, an owner schedules the requests it serves as its own tasks: ``--sample-threads``
        threads answer them oldest step first, then the cheaper (001 §4.2.2's priority, applied where the
        work runs)."""
        return int(ctx.knobs.sample_threads) if ctx.knobs.scheduler == "on" else 0

    def request_priority(self, dag: Dag, cost: int) -> tuple[int, int, int] | None:
        """A request's priority at its owner (the fine-grained scheduler's key: the step, then the cost); None
        with the scheduler off (answered first come, first served)."""
        return (dag.epoch, dag.id, int(cost)) if self.scheduler else None

    def reset_stats(self) -> None:
        super().reset_stats()
        if self.service is not None:
            self.service.reset_schedule_stats()

    # --- the tasks ---------------------------------------------------------------------------------------
    def seed_task(self, dag: Dag) -> Task:
        def run() -> list:
            dag.targets, dag.global_targets = self.batch(dag.epoch, dag.id)
            dag.frontier = dag.targets
            dag.claimed = np.zeros(self.num_nodes, dtype=bool)
            if self.on_device is not None:  # the frontier and the claims live on the device
                dag.frontier = torch.as_tensor(dag.targets).to(self.device, torch.int64)
                dag.claimed = torch.zeros(self.num_nodes, dtype=torch.bool, device=self.device)
            return []

        return Task(dag, "seed", 0, run)

    def hop_tasks(self, dag: Dag) -> list[Task]:
        """The NSC tasks of the DAG's current hop: its frontier cut into chunks of one owner each (the whole
        CSR is here with a replicated topology: chunks by position only)."""
        frontier, hop = dag.frontier, dag.hop
        # the owners decide the chunks: the ids leave the device once a hop
        if isinstance(frontier, torch.Tensor):
            frontier = dag.frontier_ids = frontier.cpu().numpy()
        if self.replicated or self.service is None:
            owner = np.full(len(frontier), self.rank, dtype=np.int64)
        else:
            owner = self.book.owner[frontier]
        order = np.argsort(owner, kind="stable")
        cuts = np.flatnonzero(np.diff(owner[order])) + 1
        pieces = []
        for group in np.split(order, cuts) if len(order) else []:
            pieces += np.array_split(group, math.ceil(len(group) / self.task_nodes))
        dag.parts, dag.parts_left = [None] * len(pieces), len(pieces)
        return [self.nsc_task(dag, hop, i, at, int(owner[at[0]])) for i, at in enumerate(pieces)]

    def nsc_task(self, dag: Dag, hop: int, index: int, at: np.ndarray, owner: int) -> Task:
        """A chunk's draw here (own nodes; on the device when resident), or its owner's answer (entering the
        device when resident)."""
        fanout, key, g = self.fanouts[hop], sample_key(self.cfg.seed, dag.epoch, dag.id, hop), self.on_device
        pos = at if g is None else torch.from_numpy(at).to(self.device)

        def keep(counts, picks) -> None:
            if g is None:
                dag.parts[index] = (at, counts.astype(np.int64), picks.astype(np.int64))
            else:
                dag.parts[index] = (
                    pos,
                    *(torch.as_tensor(a).to(self.device, torch.int64) for a in (counts, picks)),
                )

        if owner != self.rank:
            ids = dag.frontier[at] if g is None else dag.frontier_ids[at]
            return self._ask_owner_task(dag, index, owner, ids, fanout, key, keep)
        nodes = dag.frontier[pos]
        sample = sample_rows if g is None else device_sample_rows
        if g is not None:
            indptr, nbrs, rows = g.indptr, g.nbrs, nodes if g.row_of is None else g.row_of[nodes]
        elif self.replicated:
            indptr, nbrs, rows = self.g_indptr, self.g_nbrs, nodes
        else:
            indptr, nbrs, rows = self.indptr, self.nbrs, self.book.local[nodes]

        def draw() -> list:
            keep(*sample(indptr, nbrs, rows, nodes, fanout, key))
            return []

        return Task(dag, "nsc", int((indptr[rows + 1] - indptr[rows]).sum()), draw, index)

    def merge_task(self, dag: Dag) -> Task:
        """Join the hop's chunks in frontier order into its block; the sources are the next hop's frontier."""

        def run() -> list:
            on_device = self.on_device is not None
            cat, join = (torch.cat, device_regroup) if on_device else (np.concatenate, regroup)
            if dag.parts:
                counts, picks = join(*(cat([p[i] for p in dag.parts]) for i in range(3)))
            elif on_device:
                counts = picks = torch.zeros(0, dtype=torch.int64, device=self.device)
            else:
                counts = picks = np.zeros(0, dtype=np.int64)
            if on_device:
                arrays = block_arrays(dag.frontier, counts, picks, self._device_scratch())
                dag.blocks.append(SampledBlock(dag.frontier, *arrays))
            else:
                dag.blocks.append(block_from_sample(dag.frontier, counts, picks, self.scratch()))
            dag.frontier, dag.hop, dag.parts = dag.blocks[-1].src, dag.hop + 1, []
            return []

        return Task(dag, "merge", sum(len(p[2]) for p in dag.parts if p is not None), run)

    def _ask_owner_task(
        self, dag: Dag, index: int, owner: int, nodes: np.ndarray, fanout: int, key, keep
    ) -> Task:
        """The sampling task of a chunk of frontier ``nodes`` another worker owns: one ``sample`` request to
        it, whose reply (counts, neighbours) ``keep`` takes."""
        cost = len(nodes) * (fanout if fanout > 0 else 1)

        def ask() -> list:
            p = self.service.submit(
                owner,
                "sample",
                [fanout, signed64(key)],
                [nodes.astype(self.wire_ids)],
                priority=self.request_priority(dag, cost),
            )
            return [(p, lambda arrays: keep(arrays[0], arrays[1]))]

        return Task(dag, "nsc", cost, ask, index)

    def fetch_task(self, dag: Dag, candidates: np.ndarray) -> Task:
        """The input rows of ``candidates`` no other fetch of this DAG has taken: own rows copied here (gathered
        on the device when resident), the others asked of their owners (one ``features0`` request per owner)."""

        def run() -> list:
            g = self.on_device
            if g is None:
                ids = self._claim(dag, np.unique(candidates))
                here = self.book.owner[ids] == self.rank
                local = self.book.local[ids[here]]
                degrees = self.own_degrees(local) if self.needs_degrees else None
                self._keep_rows(dag, ids[here], self.features[torch.from_numpy(local)], degrees)
                return self._ask_owners_for_rows(dag, ids[~here])
            ids = self._claim(dag, torch.unique(torch.as_tensor(candidates).to(self.device, torch.int64)))
            rows = g.input_row_of[ids]
            order, n_here = here_first(rows)
            mine = ids[order[:n_here]]
            local = rows[order[:n_here]]
            degrees = None if g.degrees is None else g.degrees.index_select(0, local)
            self._keep_rows(dag, mine, g.features.index_select(0, local), degrees)
            return self._ask_owners_for_rows(
                dag, ids[order[n_here:]].cpu().numpy()
            )  # their ids leave the device

        return Task(dag, "fetch", len(candidates) * self.width, run)

    @staticmethod
    def _claim(dag: Dag, wanted):
        """The ids of ``wanted`` (unique; host or device) no earlier fetch of the DAG took, now taken."""
        with dag.lock:
            ids = wanted[~dag.claimed[wanted]]
            dag.claimed[ids] = True
        return ids

    def _keep_rows(self, dag: Dag, ids, rows: torch.Tensor, degrees, remote: bool = False) -> None:
        with dag.lock:
            dag.fetched.append((ids, rows, degrees))
            dag.remote_rows += len(ids) if remote else 0

    def end_task(self, dag: Dag) -> Task:
        """The step's inputs: the first block's sources' rows, in their order, from the fetched rows."""

        def run() -> list:  # host arrays or device tensors, in torch operations
            ids = torch.cat([torch.as_tensor(f[0]) for f in dag.fetched])
            by_id = torch.argsort(ids, stable=True)
            at = by_id[torch.searchsorted(ids[by_id], torch.as_tensor(dag.blocks[-1].src))]
            x0 = torch.cat([f[1] for f in dag.fetched])[at]
            degrees = None
            if self.needs_degrees:
                degrees = torch.cat([torch.as_tensor(f[2], dtype=torch.int64) for f in dag.fetched])[at]
            self._finish(dag, x0, degrees)
            return []

        return Task(dag, "end", 0, run)

    def _finish(self, dag: Dag, x0: torch.Tensor, degrees) -> None:
        """The DAG's step, ready to train on: its blocks (outermost first), input rows and degrees."""
        took = time.perf_counter() - dag.started
        dag.result = PreparedStep(
            dag.targets,
            dag.global_targets,
            dag.blocks[::-1],
            x0,
            degrees,
            {"sample": took, "fetch": 0.0},
            fetched_rows=dag.remote_rows,
        )

    def _device_scratch(self) -> torch.Tensor:
        """This thread's relabelling scratch on the device (all −1 between uses)."""
        a = getattr(self._scratch, "device_array", None)
        if a is None:
            a = self._scratch.device_array = torch.full(
                (self.num_nodes,), -1, dtype=torch.int64, device=self.device
            )
        return a

    def _ask_owners_for_rows(self, dag: Dag, ids: np.ndarray) -> list:
        """One ``features0`` request per owner of ``ids`` (other workers'), prioritised by the DAG's launch
        order; a reply's rows (and degrees) are kept, on the device when resident. The (request, completion)
        pairs to wait on."""
        owner = self.book.owner[ids]

        def arrive(theirs: np.ndarray, arrays: list[np.ndarray]) -> None:
            def to(a: np.ndarray) -> torch.Tensor:
                return torch.from_numpy(a) if self.on_device is None else torch.from_numpy(a).to(self.device)

            degrees = to(arrays[1].astype(np.int64)) if self.needs_degrees else None
            self._keep_rows(dag, to(theirs), to(arrays[0]), degrees, True)

        waits = []
        for q in np.unique(owner):
            theirs = ids[owner == q]
            p = self.service.submit(
                int(q),
                "features0",
                [],
                [theirs.astype(self.wire_ids)],
                priority=self.request_priority(dag, len(theirs) * self.width),
            )
            waits.append((p, lambda arrays, theirs=theirs: arrive(theirs, arrays)))
        return waits

    def released(self, task: Task) -> list[Task]:
        """What finishing ``task`` releases (called under the runner's lock): a chunk's fetch when its NSC task
        is done, the hop's merge when its last NSC task is, the next hop after a merge, end after the last
        merge and the last fetch."""
        dag, out = task.dag, []
        if task.kind == "seed":
            dag.open_fetches += 1
            out = [self.fetch_task(dag, dag.targets), *self.hop_tasks(dag)]
        elif task.kind == "nsc":
            dag.parts_left -= 1
            dag.open_fetches += 1
            out = [self.fetch_task(dag, dag.parts[task.index][2])]
        elif task.kind == "merge":
            if dag.hop < len(self.fanouts):
                out = self.hop_tasks(dag)
            else:
                dag.sampled = True
        elif task.kind == "fetch":
            dag.open_fetches -= 1
        if task.kind in ("seed", "nsc", "merge") and not dag.sampled and dag.parts_left == 0:
            out.append(self.merge_task(dag))  # the hop's last chunk (or an empty frontier)
        if task.kind in ("merge", "fetch") and dag.sampled and dag.open_fetches == 0:
            out.append(self.end_task(dag))
        return out

    # --- the compute thread's side -------------------------------------------------------------------------
    def _next(self, epoch: int, step: int, micro: int = 0) -> PreparedStep:
        now = time.perf_counter()
        if step == 0:
            self._took_step = None
            self.batch(epoch, 0)  # the epoch's permutation, once, before the tasks read it
            self._runner = DagRunner(self, epoch)
            self._runner.start()
        elif self._took_step is not None:
            self.t_train.append(now - self._took_step)
        prep = self._runner.wait(step)
        if step == self.steps(epoch) - 1:
            self._runner.join()
        self._took_step = time.perf_counter()
        return prep

    def stats(self) -> dict:
        t = self.timers
        return {
            **super().stats(),
            "dag_launches": int(t["dag_launches"]),
            "dags_in_flight_max": int(t["dags_in_flight_max"]),
            # three different counts: tasks waiting for a thread (the backlog), executing at once on the
            # pool's threads (the concurrency), waiting for the owners' replies (the network in flight)
            "ready_tasks_max": int(t["ready_tasks_max"]),
            "running_tasks_max": int(t["running_tasks_max"]),
            "awaiting_tasks_max": int(t["awaiting_tasks_max"]),
            "ready_tasks_per_dag_max": int(t["ready_tasks_per_dag_max"]),
            "sampling_tasks": int(t["tasks_nsc"]),
            "fetch_tasks": int(t["tasks_fetch"]),
            "task_cpu_seconds": t["task_cpu"],
            # as an owner (scheduler on): the peers' requests it queued, the most queued at once, and those
            # answered ahead of one that arrived earlier (by the older step or the lower cost)
            **(
                {f"served_{k}": int(v) for k, v in self.service.schedule_stats.items()}
                if self.service is not None and self.service.serve_threads
                else {}
            ),
        }

    def close(self) -> None:
        if self._runner is not None:
            self._runner.stop()
        super().close()


class DagRunner:
    """One epoch's DAGs: a launcher (coarse-grained, Algorithm 1), a pool of threads serving one priority queue
    of ready tasks (fine-grained: (DAG id, cost)), a network thread completing the tasks whose requests are
    answered, and the finished DAGs by step. ``--scheduler off``: one DAG at a time, one thread, replies
    awaited in the task."""

    def __init__(self, strategy: ByteGnnStrategy, epoch: int):
        self.s, self.epoch = strategy, epoch
        self.steps = strategy.steps(epoch)
        self.on = strategy.scheduler
        self.cv = threading.Condition()
        self.ready: list = []  # heap of (DAG id, cost, sequence, task)
        self.running = 0  # tasks a pool thread is executing now
        self.awaiting = 0  # tasks whose requests are out, waiting for the owners' replies
        self.seq = itertools.count()
        self.replies: queue.Queue = queue.Queue()  # (task, pending, apply), in the order sent
        self.dags: dict[int, Dag] = {}  # launched, not finished
        self.done: dict[int, PreparedStep] = {}  # finished, not yet taken by the trainer
        self.t_sample: deque[float] = deque(maxlen=MEAN_OF_LAST)
        self.launched = 0
        self.error: BaseException | None = None
        self.stopped = False
        self.rule = LaunchRule(
            strategy.sigma, strategy.max_dags, strategy.cpu_meter.read, sequential=not self.on
        )
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        pool = self.s.pool_size if self.on else 1
        targets = [("launch", self._launcher)] + [(f"task-{i}", self._work) for i in range(pool)]
        if self.on:
            targets.append(("net", self._network))
        for name, fn in targets:
            t = threading.Thread(target=self._guard(fn), daemon=True, name=f"bytegnn-{name}")
            self.threads.append(t)
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

    # --- the trainer's side ---------------------------------------------------------------------------------
    def wait(self, step: int) -> PreparedStep:
        with self.cv:
            while step not in self.done and self.error is None:
                self.cv.wait()
            if self.error is not None:
                raise self.error
            prep = self.done.pop(step)
            self.cv.notify_all()  # a queue slot is free
            return prep

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=self.s.cfg.wait_seconds())

    def stop(self) -> None:
        with self.cv:
            self.stopped = True
            self.cv.notify_all()

    def _over(self) -> bool:
        return self.error is not None or self.stopped or (self.launched == self.steps and not self.dags)

    # --- coarse-grained: when to launch the next DAG --------------------------------------------------------
    def _launcher(self) -> None:
        s = self.s
        while True:
            with self.cv:
                if self.error is not None or self.stopped or self.launched == self.steps:
                    return
                in_flight, queued = len(self.dags), len(self.done)
                t_sample = float(np.mean(self.t_sample)) if self.t_sample else 0.0
            t_train = float(np.mean(s.t_train)) if s.t_train else 0.0
            now = time.perf_counter()
            if self.rule.should_launch(now, in_flight, queued, t_sample, t_train):
                self._launch(now)
            else:
                with self.cv:  # Algorithm 1's sleep(5 ms); a finished or taken DAG wakes it sooner
                    self.cv.wait(LAUNCH_POLL_SECONDS)

    def _launch(self, now: float) -> None:
        with self.cv:
            dag = Dag(self.launched, self.epoch, started=now)
            self.dags[dag.id] = dag
            self.launched += 1
            self.rule.launched(now)
            t = self.s.timers
            t["dag_launches"] += 1
            t["dags_in_flight_max"] = max(t["dags_in_flight_max"], len(self.dags))
            self._push([self.s.seed_task(dag)])

    # --- fine-grained: ready tasks by (DAG id, cost) ---------------------------------------------------------
    def _push(self, tasks: list[Task]) -> None:
        """Make ``tasks`` ready (caller holds the lock)."""
        t = self.s.timers
        for task in tasks:
            heapq.heappush(self.ready, (task.dag.id, task.cost, next(self.seq), task))
            task.dag.ready += 1
            t["ready_tasks_per_dag_max"] = max(t["ready_tasks_per_dag_max"], task.dag.ready)
            t[f"tasks_{task.kind}"] += 1
        t["ready_tasks_max"] = max(t["ready_tasks_max"], len(self.ready))
        self.cv.notify_all()

    def _work(self) -> None:
        while True:
            with self.cv:
                while not self.ready and not self._over():
                    self.cv.wait(0.05)
                if not self.ready:
                    return
                *_, task = heapq.heappop(self.ready)
                task.dag.ready -= 1
                self.running += 1
                t = self.s.timers
                t["running_tasks_max"] = max(t["running_tasks_max"], self.running)
            c0 = time.thread_time()
            try:
                waits = self._counted(task, task.run)
            finally:
                with self.cv:
                    self.running -= 1
                    self.s.timers["task_cpu"] += time.thread_time() - c0
            if not waits:
                self._complete(task)
            elif not self.on:  # one thread: the task waits for its replies
                for pending, apply in waits:
                    self._counted(task, apply, pending.result())
                self._complete(task)
            else:
                with self.cv:
                    task.waits = len(waits)
                    self.awaiting += 1
                    t = self.s.timers
                    t["awaiting_tasks_max"] = max(t["awaiting_tasks_max"], self.awaiting)
                for pending, apply in waits:
                    self.replies.put((task, pending, apply))

    def _network(self) -> None:
        """Take the replies in the order the requests were sent; a task is done with its last reply."""
        while True:
            try:
                task, pending, apply = self.replies.get(timeout=0.05)
            except queue.Empty:
                with self.cv:
                    if self._over():
                        return
                continue
            self._counted(task, apply, pending.result())
            with self.cv:
                task.waits -= 1
                last = task.waits == 0
                self.awaiting -= last
            if last:
                self._complete(task)

    def _counted(self, task: Task, fn, *args):
        """``fn(*args)`` for ``task``, counted on this thread when its DAG is the step ``--count-ops`` counts (the
        compute thread's counter adds the DAG's count when it takes the step)."""
        if (self.epoch, task.dag.id) != self.s.counted_step:
            return fn(*args)
        with OpCounter(self.s.device) as counter:
            out = fn(*args)
        with self.cv:
            task.dag.ops = task.dag.ops or OpCount()
            task.dag.ops.add(counter.count)
        return out

    def _complete(self, task: Task) -> None:
        with self.cv:
            if task.kind == "end":
                dag = task.dag
                dag.result.ops = dag.ops
                self.done[dag.id] = dag.result
                self.dags.pop(dag.id)
                self.t_sample.append(dag.result.seconds["sample"])
                self.cv.notify_all()
            else:
                self._push(self.s.released(task))


STRATEGY = ByteGnnStrategy
