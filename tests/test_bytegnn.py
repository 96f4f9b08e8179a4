"""ByteGNN's scheduler (stages/strategies/bytegnn/runtime.py): Algorithm 1's launch rule with injected
measurements, the machine CPU meter, the fine-grained order of a DAG's ready tasks (with requests answered by
the network thread), the `g3 train` knobs, and GCN on a replicated topology bitwise equal to distdgl (rows and
degrees fetched by `features0` requests)."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import flags, g3_partition, g3_plan, g3_train, invoke, ok, weights
from test_train import max_weight_diff

from stages.kits.runtime.config import RuntimeConfig
from stages.strategies.bytegnn.runtime import CpuMeter, DagRunner, LaunchRule, Task, f_cpu, launch_score


# --- Algorithm 1 -------------------------------------------------------------------------------------------
def test_f_cpu_spans_100_to_0_and_is_steep_near_full_use():
    assert f_cpu(0) == pytest.approx(100.0) and f_cpu(100) == 0.0 and f_cpu(150) == 0.0
    assert f_cpu(50) == pytest.approx(101 - 101**0.5)
    assert f_cpu(90) - f_cpu(99) > f_cpu(0) - f_cpu(50)  # exponential: most of the drop is near 100 %


def test_launch_rule_throttles_on_cpu_queue_and_gap():
    cpu = {"value": 0.0}
    rule = LaunchRule(sigma=500.0, max_dags=4, cpu=lambda: cpu["value"])
    rule.launched(0.0)
    # idle CPU, balance 1: T_gap x 100 >= 500 after 5 ms
    assert not rule.should_launch(0.004, 1, 0, 1.0, 1.0)
    assert rule.should_launch(0.006, 1, 0, 1.0, 1.0)
    # two finished DAGs waiting with sampling as fast as training: balance 1/2, so 10 ms are needed
    assert not rule.should_launch(0.008, 1, 2, 1.0, 1.0) and rule.should_launch(0.011, 1, 2, 1.0, 1.0)
    # sampling 4x slower than training: balance 4, launched sooner
    assert rule.should_launch(0.002, 1, 0, 4.0, 1.0)
    # a busy machine: f = 0, nothing launched however long the gap (the queue being empty changes nothing) ...
    cpu["value"] = 100.0
    assert not rule.should_launch(1e6, 1, 0, 1.0, 1.0)
    # ... but one DAG when none is in flight or waiting, and never more than max_dags launched and not taken
    assert rule.should_launch(1e6, 0, 0, 1.0, 1.0)
    cpu["value"] = 0.0
    assert not rule.should_launch(1e6, 2, 2, 1.0, 1.0)
    assert launch_score(7.0, 30.0, 3.0, 2.0, 3) == pytest.approx(7.0 * f_cpu(30.0) * 3.0 / (2.0 * 3))


def test_scheduler_off_runs_one_dag_at_a_time():
    rule = LaunchRule(sigma=0.0, max_dags=3, cpu=lambda: 0.0, sequential=True)
    assert rule.should_launch(0.0, 0, 2, 1.0, 1.0)  # the trainer has two waiting: a third may be made
    assert not rule.should_launch(1e6, 1, 0, 1.0, 1.0)  # one in flight: wait for it
    assert not rule.should_launch(1e6, 0, 3, 1.0, 1.0)  # max_dags waiting


def test_cpu_meter_reads_the_machine_utilisation(tmp_path):
    stat = tmp_path / "stat"

    def write(user, idle, iowait):  # cpu  user nice system idle iowait irq softirq steal
        stat.write_text(f"cpu  {user} 0 0 {idle} {iowait} 0 0 0\ncpu0 0 0 0 0 0 0 0 0\n")

    write(100, 900, 0)
    meter = CpuMeter(window=0.0, stat_path=str(stat))
    write(100 + 75, 900 + 20, 5)  # 75 busy of 100 jiffies (iowait counts as idle)
    time.sleep(0.001)
    assert meter.read() == pytest.approx(75.0)
    write(175, 925 + 100, 0)
    time.sleep(0.001)
    assert meter.read() == pytest.approx(0.0)


# --- fine-grained order ------------------------------------------------------------------------------------
class FakePending:
    def __init__(self, arrays):
        self.arrays = arrays

    def result(self):
        time.sleep(0.01)  # the owner takes a while
        return self.arrays


class FakeStrategy:
    """A strategy whose DAGs are: seed → three tasks of costs 5, 1, 3 (the cost-3 one a request answered on
    the network thread) → end. Every run is logged."""

    def __init__(self, steps: int, scheduler: bool):
        self.scheduler, self.sigma, self.max_dags, self.pool_size = scheduler, 0.0, 2, 1
        self.cpu_meter = SimpleNamespace(read=lambda: 0.0)
        self.t_train, self.timers = [], defaultdict(float)
        self.cfg = RuntimeConfig(timeout=10.0)
        self.n_steps, self.log, self.lock = steps, [], threading.Lock()
        self.answers = {}
        self.counted_step = None  # --count-ops off

    def steps(self, epoch):
        return self.n_steps

    def _task(self, dag, kind, cost, remote=False):
        def run():
            with self.lock:
                self.log.append((dag.id, kind, cost))
            if remote:
                return [
                    (
                        FakePending([np.array([dag.id])]),
                        lambda a: self.answers.__setitem__(dag.id, int(a[0][0])),
                    )
                ]
            return []

        return Task(dag, kind, cost, run)

    def seed_task(self, dag):
        dag.open_fetches = 3
        return self._task(dag, "seed", 0)

    def released(self, task):
        dag = task.dag
        if task.kind == "seed":
            return [
                self._task(dag, "fetch", 5),
                self._task(dag, "fetch", 1),
                self._task(dag, "fetch", 3, remote=True),
            ]
        dag.open_fetches -= 1
        if dag.open_fetches == 0:
            end = self._task(dag, "end", 0)
            inner = end.run

            def run():
                inner()
                dag.result = SimpleNamespace(seconds={"sample": 0.0}, step=dag.id)
                return []

            end.run = run
            return [end]
        return []


@pytest.mark.parametrize("scheduler", [True, False])
def test_ready_tasks_run_by_dag_then_cost_and_requests_complete_on_the_network_thread(scheduler):
    fake = FakeStrategy(steps=3, scheduler=scheduler)
    runner = DagRunner(fake, epoch=0)
    runner.start()
    got = [runner.wait(step).step for step in range(3)]
    runner.join()
    assert got == [0, 1, 2]
    assert fake.answers == {0: 0, 1: 1, 2: 2}  # every reply applied to its own DAG
    for d in range(3):
        mine = [(kind, cost) for dag, kind, cost in fake.log if dag == d]
        assert mine == [("seed", 0), ("fetch", 1), ("fetch", 3), ("fetch", 5), ("end", 0)], mine
    t = fake.timers
    assert t["dag_launches"] == 3 and t["ready_tasks_per_dag_max"] == 3 and t["tasks_fetch"] == 9
    assert t["dags_in_flight_max"] == (2 if scheduler else 1)
    assert not any(th.is_alive() for th in runner.threads)


def test_a_failing_task_reaches_the_trainer():
    fake = FakeStrategy(steps=2, scheduler=True)

    def broken(dag):
        def run():
            raise ValueError("no such node")

        return Task(dag, "seed", 0, run)

    fake.seed_task = broken
    runner = DagRunner(fake, epoch=0)
    runner.start()
    with pytest.raises(ValueError, match="no such node"):
        runner.wait(0)
    runner.stop()
    runner.join()
    assert not any(th.is_alive() for th in runner.threads)


# --- g3 train knobs and a run ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def part(store, tmp_path_factory):
    return g3_partition(store, tmp_path_factory.mktemp("bytegnn") / "part", 2, method="bytegnn")


def _plan(part, out, strategy, *extra):
    sampling = flags(strategy=strategy, hidden=6, fanouts="3,2", batch_size=20, batch_order="local")
    return g3_plan(part, out, *sampling, *extra)


def test_scheduler_knobs_belong_to_g3_train(part, tmp_path):
    r = invoke(["plan", str(part), "--strategy", "bytegnn", "--scheduler", "off", "-o", str(tmp_path / "p")])
    assert r.exit_code == 2 and "--scheduler" in r.output, r.output
    plan = _plan(part, tmp_path / "pb", "bytegnn")
    assert "scheduler" not in json.loads((plan / "plan.json").read_text())["strategy"]["options"]
    for bad, what in [
        (("--max-dags", "0"), "--max-dags must be >= 1"),
        (("--sample-threads", "0"), "--sample-threads"),
        (("--task-nodes", "0"), "--task-nodes"),
        (("--launch-sigma", "-1"), "--launch-sigma"),
    ]:
        r = invoke(["train", str(plan), "--workers", "2", *bad, "-o", str(tmp_path / "r")])
        assert r.exit_code == 2 and what in r.output, (bad, r.output)
    dd = _plan(part, tmp_path / "pd", "distdgl")
    r = invoke(["train", str(dd), "--workers", "2", "--scheduler", "off", "-o", str(tmp_path / "r")])
    assert r.exit_code == 2 and "--scheduler does not apply to the distdgl strategy" in r.output, r.output


def test_gcn_on_a_replicated_topology_equals_distdgl_bitwise(part, tmp_path):
    finals, records = {}, {}
    for strategy, extra in [("distdgl", ()), ("bytegnn", ("--launch-sigma", "0", "--task-nodes", "7"))]:
        plan = _plan(part, tmp_path / f"p-{strategy}", strategy, "--model", "gcn", "--topology", "replicated")
        run = g3_train(plan, tmp_path / f"r-{strategy}", 2, *extra, workers=2)
        finals[strategy] = weights(run)[1]
        records[strategy] = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert max_weight_diff(finals["bytegnn"], finals["distdgl"]) == 0.0
    workers = records["bytegnn"]["workers"]
    assert all(w["dag_launches"] == records["bytegnn"]["steps"] for w in workers)
    assert max(w["ready_tasks_max"] for w in workers) >= 2
    # tasks ran on the pool's threads at once (their sampling kernels release the GIL), and requests were out
    # while other tasks ran; never more at once than the pool has threads (2 by default)
    assert (
        1 <= max(w["running_tasks_max"] for w in workers) <= 2
        and max(w["awaiting_tasks_max"] for w in workers) >= 1
    )
    # the same remote rows as distdgl, asked of their owners (features0 requests) instead of a collective
    assert [w["fetched_rows"] for w in workers] == [w["fetched_rows"] for w in records["distdgl"]["workers"]]
    assert all(w["bytes_sent_per_phase"].get("features0-ids", 0) > 0 for w in workers)
    # each owner queued its peer's requests and answered them by priority (step, cost); distdgl's owners answer
    # first come, first served
    assert all(w["served_queued"] > 0 and w["served_queued_max"] >= 1 for w in workers)
    assert all("served_queued" not in w for w in records["distdgl"]["workers"])
    ok(
        [
            "simulate",
            tmp_path / "p-bytegnn",
            "--run",
            tmp_path / "r-bytegnn",
            "--scaling",
            "2,4",
            "-o",
            tmp_path / "sim",
            "--json",
        ]
    )
    sim = json.loads((tmp_path / "sim" / "simulate.json").read_text())
    assert [x["system"] for x in sim["systems"]] == ["bytegnn", "bytegnn-off"]
    assert sim["rates"]["scheduler"]["ready_tasks_max"] == max(w["ready_tasks_max"] for w in workers)
    for row in sim["scaling"]:  # more threads and DAGs never model a slower epoch
        assert row["systems"]["bytegnn"]["epoch_seconds"] <= row["systems"]["bytegnn-off"]["epoch_seconds"]


# --- g3 simulate -------------------------------------------------------------------------------------------
def test_simulated_scheduler_overlaps_dags_and_threads():
    from stages.kits.simulate.minibatch import MiniBatchProfile
    from stages.strategies.bytegnn.simulate import SchedulerProfile, simulate_bytegnn

    p = MiniBatchProfile(
        strategy="bytegnn",
        workers=2,
        order="local",
        batch_size=10,
        fanouts=[2, 2],
        feat_dim=4,
        num_train=100,
        num_params=10,
        arcs_per_step=1000,
        rows_per_step=100,
        remote_share=0.5,
        t_sample=0.0,
        t_gather=0.0,
        t_compute=1e-6,
        prefetch=True,
        measured_epoch_seconds=1.0,
    )
    s = SchedulerProfile(
        threads=4, max_dags=2, scheduler=True, t_task=1e-5, dags_in_flight_max=2, ready_tasks_max=9
    )
    inf = float("inf")
    # 5 steps of 0.01 CPU s of tasks: 4 threads, no network: 0.0025 s a step; off: 0.01
    on = simulate_bytegnn(p, s, 2, inf, 0.0, scheduler=True)
    off = simulate_bytegnn(p, s, 2, inf, 0.0, scheduler=False)
    assert on["steps"] == 5 and on["epoch_seconds"] == pytest.approx(5 * 0.0025)
    assert off["epoch_seconds"] == pytest.approx(5 * 0.01)
    # 1 ms latency: 2 hops' round trips (4 ms) on each DAG's path, 2 DAGs in flight hide half of it
    on = simulate_bytegnn(p, s, 2, inf, 1e-3, scheduler=True)
    off = simulate_bytegnn(p, s, 2, inf, 1e-3, scheduler=False)
    assert on["step_parts"]["dag_latency"] == pytest.approx(0.0025 + 0.004)
    assert on["step_parts"]["period"] == pytest.approx((0.0025 + 0.004) / 2)
    assert off["step_parts"]["period"] == pytest.approx(0.01 + 0.004)
    # compute-bound: the scheduler cannot help
    p.t_compute = 1e-4
    assert simulate_bytegnn(p, s, 2, inf, 0.0, True)["epoch_seconds"] == pytest.approx(5 * 0.1)
