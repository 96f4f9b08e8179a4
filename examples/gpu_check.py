"""`make gpu-check`: every strategy at K = 1 on CUDA against the same run on the CPU, in one command.

What it runs (each through the real CLI, ``python -m g3cli``: ingest, partition, plan, train):

* every registered strategy with its default partition method and plan options, K = 1, each worker's
  partition resident on the device where its plan says it fits (``g3 train --residency auto``: the device
  path), plus ``g3`` with its device memory set so that the largest layer needs several bins (``g3 (bins)``:
  the partition in host memory, bins streamed in on a copy stream), and ``g3`` and ``distdgl`` at K = 2 on the
  one GPU (``… K=2``: two ranks sharing it over gloo, their rows staged through the host);
* **exactness**, float64 on ``synthetic:tiny``: the CUDA run's final weights against the CPU run's
  (max |Δ| ≤ 1e-9);
* **float32 and time**, on ``synthetic:small`` (100 000 nodes, 2.5 M arcs): the CUDA run's final weights against
  the CPU run's (max |Δ| ≤ 1e-4) and, since float32 rounding alone moves a many-step mini-batch run's weights
  far more than that on any device, each against the CPU float64 run: the CUDA run passes when it is no further
  from it than twice the CPU's own float32 run (``float32_verdict``); the median epoch time (epochs 2..N) on
  both devices; the peak device memory against the plan's bound
  (``device_memory`` of a plan that sizes bins by it, else the plan's per-worker ``memory_bytes``); the
  operations and host synchronisations of one steady step (``g3 train --count-ops``);
* **time on a larger graph** (``synthetic:medium``, 500 K nodes, 25 M arcs, by default: preparing
  ``synthetic:products``, 122 M arcs, takes minutes of a lent machine's 15; ``--graph`` takes it): the same cases on the
  device only (the CPU's exactness is the smaller graphs'), while ``--budget`` allows;
* PyG on the same GPU, same model, when torch_geometric imports there: the full-graph ``SAGEConv`` epoch and
  the ``NeighborLoader`` epoch (fanouts 25,10, batch 1000, its CPU sampling with worker processes; it needs
  pyg-lib or torch-sparse), and each case's epoch over PyG's (``vs_pyg``: full-graph cases against the
  full-graph epoch, mini-batch ones against the loader's). DGL is reported as not installed unless it imports.

The CPU runs go first, several at a time (they share the host's cores); the CUDA runs follow one at a time so
that their epoch times are not disturbed. Every dropout mask is a hash of its coordinates
(stages/kits/runtime/dropout.py) and every neighbour draw a hash too (on the host or the device sampler), so the two
devices compute the same thing.

Without CUDA it prints one line and exits 0 having run nothing. ``--device cpu`` runs the whole procedure with
the CPU standing in for the GPU (the tests use it; the comparisons are then CPU against CPU).

Output (docs/BENCHMARKS.md, "GPU check", documents every field): OUT/gpu-check.json and OUT/gpu-check.md (the
table), OUT/logs/*.log (each command's output).

    python examples/gpu_check.py --out gpu-check            # what `make gpu-check` runs
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.strategies.registry import REFERENCE_STRATEGY, STRATEGIES  # noqa: E402

BINS = STRATEGIES[REFERENCE_STRATEGY]  # the strategy whose plans size bins by device memory (g3)
FORCED = f"{BINS.name} (bins)"  # its case with bins forced below the graph

SCHEMA = "g3.gpu-check/1"
TOL = {"float64": 1e-9, "float32": 1e-4}
SEED, LR, DROPOUT = 3, 0.01, 0.3


@dataclass
class Case:
    """One plan to train on both devices: a strategy, its partition method and plan options."""

    label: str
    strategy: str
    method: str
    options: dict = field(default_factory=dict)  # g3 plan flag -> value
    workers: int = 1


SHARED = ("g3", "distdgl")  # the strategies also run at K = 2 on the one GPU


def cases(bin_memory: str | None) -> list[Case]:
    out = [Case(name, name, info.methods[0]) for name, info in STRATEGIES.items()]
    out += [Case(f"{name} K=2", name, STRATEGIES[name].methods[0], workers=2) for name in SHARED]
    if bin_memory:
        # the bin strategy with a device budget smaller than its one-bin footprint: several bins per layer
        out.append(Case(FORCED, BINS.name, BINS.methods[0], {"--device-memory": bin_memory}))
    return out


class Runner:
    """Runs the CLI as subprocesses (or, ``in_process``, in this process: one interpreter and one fork server
    for every command), each with its own log; failures are kept, never raised."""

    def __init__(self, out: Path, python: str, timeout: float, in_process: bool = False):
        self.out, self.python, self.timeout, self.in_process = out, python, timeout, in_process
        (out / "logs").mkdir(parents=True, exist_ok=True)

    def cli(self, name: str, *args: str, env: dict | None = None) -> tuple[bool, str]:
        log = self.out / "logs" / f"{name}.log"
        cmd = [self.python, "-m", "g3cli", *args]
        t0 = time.perf_counter()
        if self.in_process:
            ok, text = self._here(args, env)
        else:
            ok, text = self._subprocess(cmd, env)
        log.write_text(f"$ {' '.join(cmd)}\n# {time.perf_counter() - t0:.1f} s\n{text}")
        last = [line for line in text.strip().splitlines() if line.strip()]
        return ok, (last[-1] if last else "")

    @staticmethod
    def _here(args, env: dict | None) -> tuple[bool, str]:
        import contextlib
        import traceback

        from click.testing import CliRunner

        from g3cli.main import cli

        with contextlib.chdir(REPO):
            result = CliRunner(env=env).invoke(cli, list(args), prog_name="g3")
        text = result.output
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            text += "".join(traceback.format_exception(result.exception))
        return result.exit_code == 0, text

    def _subprocess(self, cmd: list[str], env: dict | None) -> tuple[bool, str]:
        try:
            p = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                cwd=REPO,
                env={**os.environ, **(env or {})},
            )
            ok, text = p.returncode == 0, p.stdout + p.stderr
        except subprocess.TimeoutExpired as exc:
            ok, text = False, f"timed out after {self.timeout:.0f} s\n{exc.stdout or ''}{exc.stderr or ''}"
        return ok, text


def max_diff(a: Path, b: Path) -> float:
    """Largest |Δ| over every weight of two model.pt files (float64)."""
    wa, wb = (torch.load(p, weights_only=True, map_location="cpu") for p in (a, b))
    if wa.keys() != wb.keys():
        return float("inf")
    return max((wa[k].double() - wb[k].double()).abs().max().item() for k in wa) if wa else 0.0


def run_facts(run: Path) -> dict:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    times = [r["epoch_seconds"] for r in records]
    steady = times[1:] if len(times) > 1 else times
    counted = [w for r in records for w in r["workers"] if "ops_per_step" in w]
    return {
        "epoch_seconds": times,
        "median_epoch_s": statistics.median(steady),
        "peak_memory_bytes": max(int(w["peak_memory_bytes"]) for r in records for w in r["workers"]),
        "test_acc": records[-1].get("test_acc"),
        **(
            {"ops_per_step": counted[0]["ops_per_step"], "sync_ops_per_step": counted[0]["sync_ops_per_step"]}
            if counted
            else {}
        ),
    }


def plan_bound(plan: Path) -> tuple[int | None, str | None]:
    """The plan's own memory bound for one worker: the device budget bins are sized by, else its estimate."""
    meta = json.loads((plan / "plan.json").read_text())
    if meta.get("device_memory"):
        return int(meta["device_memory"]), "device_memory"
    per_worker = [w.get("memory_bytes") for w in meta.get("workers", []) if w.get("memory_bytes")]
    if per_worker:
        return int(max(per_worker)), "memory_bytes"
    return None, None


def one_bin_bytes(plan: Path) -> int:
    """The largest layer's memory when one bin holds a whole worker (from a plan's worker.json)."""
    worker = json.loads((plan / "worker-00000" / "worker.json").read_text())
    return max(int(layer["max_bin_bytes"]) for layer in worker["layers"])


def pyg_epoch(store: Path, device: str, hidden: int, epochs: int) -> dict:
    """PyG's SAGEConv (mean) full-graph epoch on ``device``: the peer figure on the same hardware."""
    import warnings

    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    try:
        from torch_geometric.nn import SAGEConv
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, not raised
        return {"status": "not installed", "note": f"{type(exc).__name__}: {exc}"}
    import numpy as np

    from stages.common.store import GraphStore

    g = GraphStore.open(store)
    indptr, indices = g.load_csr()
    x = torch.from_numpy(np.asarray(g.features[:], dtype=np.float32)).to(device)
    y = torch.from_numpy(g.load_labels().astype(np.int64)).to(device)
    train = torch.from_numpy(g.split_index("train")).to(device)
    train = train[y[train] >= 0]
    n = x.shape[0]
    adj_t = torch.sparse_csr_tensor(
        torch.from_numpy(indptr.astype(np.int64)),
        torch.from_numpy(indices.astype(np.int64)),
        torch.ones(len(indices)),
        (n, n),
        check_invariants=False,
    ).to(device)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = SAGEConv(x.shape[1], hidden, aggr="mean")
            self.c2 = SAGEConv(hidden, g.num_classes, aggr="mean")

        def forward(self):
            h = torch.nn.functional.dropout(self.c1(x, adj_t).relu(), DROPOUT, self.training)
            return self.c2(h, adj_t)

    torch.manual_seed(SEED)
    model = Net().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    times = []
    for _ in range(epochs):
        sync(device)
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model()[train], y[train]).backward()
        opt.step()
        sync(device)
        times.append(time.perf_counter() - t0)
    return _pyg_result(times)


def pyg_loader_epoch(store: Path, device: str, hidden: int, epochs: int) -> dict:
    """PyG's mini-batch epoch: ``NeighborLoader`` (fanouts 25,10, batch 1000, shuffled, CPU sampling in worker
    processes, as PyG's examples run it) feeding GraphSAGE on ``device``; needs pyg-lib or torch-sparse."""
    try:
        from torch_geometric.data import Data
        from torch_geometric.loader import NeighborLoader
        from torch_geometric.nn import GraphSAGE
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, not raised
        return {"status": "not installed", "note": f"{type(exc).__name__}: {exc}"}
    import numpy as np
    import torch_geometric.typing as pyg_typing

    if not (getattr(pyg_typing, "WITH_PYG_LIB", False) or getattr(pyg_typing, "WITH_TORCH_SPARSE", False)):
        return {
            "status": "unavailable",
            "note": "NeighborLoader needs pyg-lib or torch-sparse; neither imports",
        }
    from stages.common.store import GraphStore

    g = GraphStore.open(store)
    indptr, indices = g.load_csr()
    dst = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    data = Data(
        x=torch.from_numpy(np.asarray(g.features[:], dtype=np.float32)),
        y=torch.from_numpy(g.load_labels().astype(np.int64)),
        edge_index=torch.from_numpy(np.stack([np.asarray(indices, dtype=np.int64), dst])),
    )
    train = torch.from_numpy(g.split_index("train"))
    train = train[data.y[train] >= 0]
    try:
        loader = NeighborLoader(
            data,
            num_neighbors=[25, 10],
            batch_size=1000,
            input_nodes=train,
            shuffle=True,
            num_workers=min(4, os.cpu_count() or 1),
            persistent_workers=True,
        )
        next(iter(loader))
    except Exception as exc:  # noqa: BLE001 - no sampler backend (pyg-lib / torch-sparse) and the like
        return {"status": "unavailable", "note": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1]}"}
    torch.manual_seed(SEED)
    model = GraphSAGE(data.num_features, hidden, 2, g.num_classes, dropout=DROPOUT).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    times = []
    for _ in range(epochs):
        sync(device)
        t0 = time.perf_counter()
        for batch in loader:
            batch = batch.to(device, non_blocking=True)
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            torch.nn.functional.cross_entropy(out, batch.y[: batch.batch_size]).backward()
            opt.step()
        sync(device)
        times.append(time.perf_counter() - t0)
    return _pyg_result(times)


def _pyg_result(times: list[float]) -> dict:
    """A PyG peer's figures: its epoch times and their median without the first (warm-up)."""
    import torch_geometric

    return {
        "status": "ok",
        "version": torch_geometric.__version__,
        "epoch_seconds": times,
        "median_epoch_s": statistics.median(times[1:] or times),
    }


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def environment(device: str) -> dict:
    env = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_cores": os.cpu_count(),
        "device": device,
    }
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(
            gpu=p.name,
            gpu_memory_bytes=int(p.total_memory),
            cuda=torch.version.cuda,
            multiprocessors=p.multi_processor_count,
        )
    return env


def prepare(r: Runner, work: Path, graphs: dict[str, str], all_cases: list[Case], parallel: int) -> dict:
    """Ingest each graph and partition it once per (method, worker count), the partitions several at a time."""
    ready = {}
    for key, source in graphs.items():
        store = work / f"{key}.g3"
        ok, last = r.cli(f"ingest-{key}", "ingest", source, str(store), "--force")
        if not ok:
            raise SystemExit(
                f"gpu-check: ingesting {source} failed: {last} (see {r.out}/logs/ingest-{key}.log)"
            )

        def partition(method_k, key=key, store=store):
            method, k = method_k
            part = work / f"{key}.part-{method}-{k}"
            ok, last = r.cli(
                f"partition-{key}-{method}-{k}",
                "partition",
                str(store),
                "--workers",
                str(k),
                "--method",
                method,
                "-o",
                str(part),
                "--force",
                "--seed",
                "1",
            )
            return (key, method, k), (ok, last, part)

        with cf.ThreadPoolExecutor(parallel) as pool:
            ready.update(pool.map(partition, sorted({(c.method, c.workers) for c in all_cases})))
        ready[key] = store
    return ready


def plan_case(
    r: Runner, work: Path, ready: dict, key: str, case: Case, hidden: int
) -> tuple[bool, str, Path]:
    ok, last, part = ready[(key, case.method, case.workers)]
    slug = case.label.replace(" ", "").replace("(", "-").replace(")", "").replace("=", "")
    plan = work / f"{key}.plan-{slug}"
    if not ok:
        return False, f"partition failed: {last}", plan
    opts = [x for kv in case.options.items() for x in kv]
    ok, last = r.cli(
        f"plan-{key}-{slug}",
        "plan",
        str(part),
        "--strategy",
        case.strategy,
        "--model",
        "sage",
        "--hidden",
        str(hidden),
        *opts,
        "-o",
        str(plan),
        "--force",
    )
    return ok, last, plan


def train(
    r: Runner,
    plan: Path,
    run: Path,
    device: str,
    dtype: str,
    epochs: int,
    threads: int,
    workers: int,
    count_ops: bool,
    residency: str = "auto",
) -> tuple[bool, str]:
    return r.cli(
        f"train-{run.name}",
        "train",
        str(plan),
        "--device",
        device,
        "--dtype",
        dtype,
        "--epochs",
        str(epochs),
        "--lr",
        str(LR),
        "--dropout",
        str(DROPOUT),
        "--seed",
        str(SEED),
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--eval-every",
        str(epochs),
        "-o",
        str(run),
        "--force",
        "--residency",
        residency,
        *(("--count-ops",) if count_ops else ()),
    )


def planned_residency(plan: Path) -> str:
    """``device`` when the plan found every worker's partition fits the device, else ``host``: what
    ``--residency auto`` does on a GPU, given explicitly to the CPU standing in for one."""
    workers = json.loads((plan / "plan.json").read_text())["workers"]
    return (
        "device" if all(w.get("residency", {}).get("mode", "device") == "device" for w in workers) else "host"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-check", help="output folder (default: gpu-check)")
    ap.add_argument(
        "--device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="the device under test; cpu stands in for a GPU (tests)",
    )
    ap.add_argument("--exact-graph", default="synthetic:tiny", help="graph of the float64 exactness runs")
    ap.add_argument(
        "--graph",
        default="synthetic:small,synthetic:medium",
        help="graphs of the timed runs, comma-separated: the first is also run on the CPU (float32 "
        "agreement), the others on the device only",
    )
    ap.add_argument("--epochs", type=int, default=4, help="epochs of the runs on the timed graph (exact: 3)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=0, help="CPU runs at a time [default: cores / 4]")
    ap.add_argument("--strategies", default="", help="comma-separated case labels to run [default: all]")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per command")
    ap.add_argument("--cpu-threads", type=int, default=2, help="threads of each CPU run (default: 2)")
    ap.add_argument(
        "--no-float64-reference",
        dest="float64_reference",
        action="store_false",
        help="skip the float64 CPU run of each case on the timed graph (then float32 passes only "
        "within the absolute tolerance)",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=300.0,
        help="seconds of training runs (counted once the graphs are partitioned and planned) after "
        "which no further run starts (the report is still written)",
    )
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="run the g3 commands in this process rather than one interpreter each (their workers are still "
        "processes): less start-up on a small machine; no per-command time limit",
    )
    ap.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device on this machine (torch {torch.__version__}); nothing run.")
        return 0
    out = Path(a.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    (out / "runs.jsonl").write_text("")
    r = Runner(out, a.python, a.timeout, a.in_process)
    t_start = time.perf_counter()
    timed = [g for g in a.graph.split(",") if g]
    # the first timed graph keeps the key "timed" (the CPU comparisons run on it); the others "timed-N"
    timed_keys = ["timed"] + [f"timed-{i}" for i in range(1, len(timed))]
    graphs = {"exact": a.exact_graph, **dict(zip(timed_keys, timed, strict=True))}
    wanted = set(filter(None, a.strategies.split(",")))
    parallel = a.parallel or max(1, (os.cpu_count() or 1) // (a.cpu_threads + 1))
    ready = prepare(
        r,
        work,
        graphs,
        [c for c in cases(None) if not wanted or c.label in wanted or c.label == BINS.name],
        parallel,
    )
    print(f"gpu-check: graphs ingested and partitioned ({time.perf_counter() - t_start:.0f} s)", flush=True)

    # the one-bin plans first: the largest layer's one-bin memory sets the forced-bins budget (a third of it
    # per bin, so the largest layer needs at least three)
    plans = {}
    with cf.ThreadPoolExecutor(parallel) as pool:
        # g3's one-bin plan is made whenever the forced-bins case runs: it sizes that case's budget
        needed = [
            c
            for c in cases(None)
            if not wanted or c.label in wanted or (c.label == BINS.name and FORCED in wanted)
        ]
        todo = {
            (key, case.label): pool.submit(plan_case, r, work, ready, key, case, a.hidden)
            for key in graphs
            for case in needed
        }
        plans.update({k: f.result() for k, f in todo.items()})
    for key in graphs if not wanted or FORCED in wanted else ():
        ok, _, g3_plan = plans[(key, BINS.name)]
        budget = str(2 * one_bin_bytes(g3_plan) // 3) if ok else None
        forced = cases(budget)[-1] if budget else Case(FORCED, BINS.name, BINS.methods[0], {})
        plans[(key, forced.label)] = (
            plan_case(r, work, ready, key, forced, a.hidden)
            if budget
            else (False, "the one-bin g3 plan failed", work / "none")
        )
    every = {
        c.label: c for c in cases("0")
    }  # every label, the forced-bins one included (its budget unused here)
    labels = [label for label in every if not wanted or label in wanted]
    print(f"gpu-check: {len(labels)} plans per graph ({time.perf_counter() - t_start:.0f} s)", flush=True)
    t_train = time.perf_counter()  # --budget counts the training runs, not the graphs' preparation

    # every case: float64 on the small exact graph; float32 (the device under test and the CPU) and a float64
    # CPU reference on the first timed graph; float32 on the device alone on the others
    kinds = (("exact", "float64"), ("timed", "float32")) + (
        (("timed", "float64"),) if a.float64_reference else ()
    )
    jobs = [(key, label, dtype) for label in labels for key, dtype in kinds]
    cpu_threads = a.cpu_threads
    dut = a.device if a.device != "cpu" else "dut"  # with --device cpu the CPU stands in for the device
    results: dict = {}

    def run_one(job, device):
        key, label, dtype = job
        ok, last, plan = plans[(key, label)]
        slug = plan.name.split(".plan-")[-1]
        run = work / f"run-{key}-{slug}-{dtype}-{'cpu' if device == 'cpu' else dut}"
        if not ok:
            facts = {"status": "failed", "note": f"plan failed: {last}"}
        elif time.perf_counter() - t_train > a.budget:
            facts = {"status": "skipped", "note": f"not run: past --budget {a.budget:.0f} s"}
        else:
            t0 = time.perf_counter()
            timed_run = key != "exact" and device == dut
            ok, last = train(
                r,
                plan,
                run,
                a.device if device == dut else "cpu",
                dtype,
                3 if key == "exact" else a.epochs,
                cpu_threads if device == "cpu" else 2,
                every[label].workers,
                count_ops=timed_run,
                residency=planned_residency(plan) if a.device == "cpu" and device == dut else "auto",
            )
            facts = {"status": "ok" if ok else "failed", "run": str(run), "wall_s": time.perf_counter() - t0}
            facts.update(run_facts(run) if ok else {"note": last})
        results[(job, device)] = facts
        with open(out / "runs.jsonl", "a") as f:  # kept as it goes: a run cut short still leaves its figures
            f.write(
                json.dumps(
                    {"case": label, "graph": key, "dtype": dtype, "device": device, **facts}, default=str
                )
                + "\n"
            )
        print(
            f"  {label:<14} {key:<7} {dtype} {device:<4} {facts['status']:<6} {facts.get('wall_s', 0):6.1f} s"
            + (f"  {facts['note']}" if facts.get("note") else ""),
            flush=True,
        )

    # the CPU references and the untimed exactness runs on the device, several at a time; then the timed runs
    # on the device one at a time, alone, the first timed graph's first
    exact_on_dut = [(job, dut) for job in jobs if job[0] == "exact"]
    timed_on_dut = [(job, dut) for job in jobs if job[0] == "timed" and job[2] == "float32"]
    larger_on_dut = [((key, label, "float32"), dut) for key in timed_keys[1:] for label in labels]
    with cf.ThreadPoolExecutor(parallel) as pool:
        list(pool.map(lambda jd: run_one(*jd), [(job, "cpu") for job in jobs] + exact_on_dut))
    print(
        f"gpu-check: CPU references and exactness runs done ({time.perf_counter() - t_start:.0f} s)",
        flush=True,
    )
    for job, device in timed_on_dut + larger_on_dut:
        run_one(job, device)

    peers = {}
    for key in timed_keys:
        if a.device == "cuda":
            peers[key] = {
                "pyg": pyg_epoch(ready[key], a.device, a.hidden, a.epochs),
                "pyg_loader": pyg_loader_epoch(ready[key], a.device, a.hidden, a.epochs),
            }
        else:
            peers[key] = {
                "pyg": {"status": "skipped", "note": "no GPU under test"},
                "pyg_loader": {"status": "skipped", "note": "no GPU under test"},
            }
    rows = [compare(label, results, dut, plans, "timed", peers["timed"]) for label in labels]
    larger = {
        graphs[key]: [
            device_row(label, results.get(((key, label, "float32"), dut)), peers[key]) for label in labels
        ]
        for key in timed_keys[1:]
    }
    try:
        import dgl  # noqa: F401

        dgl_note = {"status": "installed", "note": "DGL imports here but gpu-check does not time it yet"}
    except Exception:  # noqa: BLE001 - absent or broken: reported
        dgl_note = {"status": "not installed"}
    report = {
        "schema": SCHEMA,
        "environment": environment(a.device),
        "tolerance": TOL,
        "settings": {
            "exact_graph": a.exact_graph,
            "graph": timed[0],
            "graphs": timed,
            "epochs": a.epochs,
            "hidden": a.hidden,
            "model": "sage",
            "layers": 2,
            "lr": LR,
            "dropout": DROPOUT,
            "seed": SEED,
            "cpu_threads": a.cpu_threads,
            "device_threads": 2,
        },
        "cases": rows,
        "larger_graphs": larger,
        "peers": {**peers["timed"], "dgl": dgl_note, "per_graph": {graphs[k]: v for k, v in peers.items()}},
        "passed": all(row["passed"] for row in rows),
        "seconds": time.perf_counter() - t_start,
    }
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    table = markdown(report)
    (out / "gpu-check.md").write_text(table)
    print(table)
    return 0


def vs_pyg(label: str, epoch_s: float | None, peers: dict) -> float | None:
    """A case's epoch over PyG's on the same graph and device: the full-graph epoch for full-graph strategies,
    the NeighborLoader's for mini-batch ones (None: no PyG figure)."""
    strategy = label.split(" ")[0]
    peer = peers.get("pyg_loader" if STRATEGIES[strategy].mini_batch else "pyg") or {}
    if epoch_s is None or peer.get("status") != "ok":
        return None
    return epoch_s / peer["median_epoch_s"]


def device_row(label: str, facts: dict | None, peers: dict) -> dict:
    """A case on a device-only graph: its epoch, memory, operation counts and ratio to PyG."""
    if not facts or facts["status"] != "ok":
        return {
            "case": label,
            "status": (facts or {}).get("status", "not run"),
            "note": (facts or {}).get("note"),
        }
    return {
        "case": label,
        "status": "ok",
        "dut_epoch_s": facts["median_epoch_s"],
        "dut_peak_bytes": facts["peak_memory_bytes"],
        "ops_per_step": facts.get("ops_per_step"),
        "sync_ops_per_step": facts.get("sync_ops_per_step"),
        "vs_pyg": vs_pyg(label, facts["median_epoch_s"], peers),
    }


def compare(
    label: str, results: dict, dut: str, plans: dict, key: str = "timed", peers: dict | None = None
) -> dict:
    """One row: exactness in float64, float32 agreement, epoch times and memory on both devices."""
    ex_cpu, ex_dut = (
        results.get((("exact", label, "float64"), "cpu")),
        results.get((("exact", label, "float64"), dut)),
    )
    t_cpu, t_dut = results.get(((key, label, "float32"), "cpu")), results.get(((key, label, "float32"), dut))
    t_ref = results.get(((key, label, "float64"), "cpu"))
    row: dict = {"case": label, "notes": []}
    for name, facts in (
        ("exact cpu", ex_cpu),
        ("exact " + dut, ex_dut),
        ("float32 cpu", t_cpu),
        ("float32 " + dut, t_dut),
        ("float64 cpu", t_ref),
    ):
        if name == "float64 cpu" and facts is None:  # the optional reference (--float64-reference)
            continue
        if not facts or facts["status"] != "ok":
            row["notes"].append(f"{name}: {(facts or {}).get('note', 'not run')}")

    def ok(f):
        return f and f["status"] == "ok"

    row["float64_max_diff"] = (
        max_diff(Path(ex_cpu["run"]) / "model.pt", Path(ex_dut["run"]) / "model.pt")
        if ok(ex_cpu) and ok(ex_dut)
        else None
    )
    row["float32_max_diff"] = (
        max_diff(Path(t_cpu["run"]) / "model.pt", Path(t_dut["run"]) / "model.pt")
        if ok(t_cpu) and ok(t_dut)
        else None
    )
    if ok(t_ref):
        row["float32_cpu_vs_float64"] = (
            max_diff(Path(t_cpu["run"]) / "model.pt", Path(t_ref["run"]) / "model.pt") if ok(t_cpu) else None
        )
        row["float32_dut_vs_float64"] = (
            max_diff(Path(t_dut["run"]) / "model.pt", Path(t_ref["run"]) / "model.pt") if ok(t_dut) else None
        )
    for side, facts in (("cpu", t_cpu), ("dut", t_dut)):
        if ok(facts):
            row[f"{side}_epoch_s"] = facts["median_epoch_s"]
            row[f"{side}_peak_bytes"] = facts["peak_memory_bytes"]
            row[f"{side}_test_acc"] = facts["test_acc"]
    if ok(t_dut):
        row["ops_per_step"], row["sync_ops_per_step"] = (
            t_dut.get("ops_per_step"),
            t_dut.get("sync_ops_per_step"),
        )
        row["vs_pyg"] = vs_pyg(label, t_dut["median_epoch_s"], peers or {})
    plan_ok, _, plan = plans[(key, label)]
    if plan_ok:
        bound, source = plan_bound(plan)
        row["plan_bound_bytes"], row["plan_bound_source"] = bound, source
        row["residency"] = [
            w.get("residency", {}).get("mode")
            for w in json.loads((plan / "plan.json").read_text())["workers"]
        ]
        if bound and row.get("dut_peak_bytes"):
            row["peak_over_bound"] = row["dut_peak_bytes"] / bound
    # a device budget the plan sized its bins by is a promise; a plan's memory_bytes is only an estimate
    # (on the CPU the peak is the process's resident set, torch's own runtime included: not comparable)
    promised = (
        dut == "cuda"
        and row.get("plan_bound_source") == "device_memory"
        and row.get("peak_over_bound") is not None
    )
    row["within_bound"] = row["peak_over_bound"] <= 1.0 if promised else None
    row["float32_passed"] = float32_verdict(row)
    row["passed"] = (
        row["within_bound"] is not False
        and row["float64_max_diff"] is not None
        and row["float64_max_diff"] <= TOL["float64"]
        and row["float32_passed"] is not None
        and not row["notes"]
    )
    return row


def float32_verdict(row: dict) -> str | None:
    """How the float32 runs agree: 'absolute' when the two devices' weights are within TOL['float32'];
    'as the CPU' when they are not, but the device's float32 weights are no further from the float64 run than
    twice the CPU's own float32 error (float32 rounding grows over many optimizer steps whatever the device:
    docs/BENCHMARKS.md, "GPU check"); None (failed) otherwise."""
    diff = row.get("float32_max_diff")
    if diff is not None and diff <= TOL["float32"]:
        return "absolute"
    cpu_err, dev_err = row.get("float32_cpu_vs_float64"), row.get("float32_dut_vs_float64")
    if (
        diff is not None
        and cpu_err is not None
        and dev_err is not None
        and dev_err <= 2 * cpu_err + TOL["float32"]
    ):
        return "as the CPU"
    return None


def _fmt(x, spec=".1e") -> str:
    return "—" if x is None else format(x, spec)


def markdown(report: dict) -> str:
    env = report["environment"]
    head = (
        f"GPU check {env['date']}: {env.get('gpu', env['device'])}, torch {env['torch']}, "
        f"{env['cpu_cores']} CPU cores; SAGE 2 layers hidden {report['settings']['hidden']}, "
        f"{report['settings']['epochs']} epochs on {report['settings']['graph']}\n\n"
    )
    lines = [
        f"| case | residency | f64 max Δ | f32 max Δ | f32 Δ to f64: cpu / dev | epoch cpu "
        f"({report['settings']['cpu_threads']} threads) | epoch dev | speed-up | ÷ PyG | ops / syncs per step "
        "| peak dev | plan bound | passed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["cases"]:
        cpu_t, dev_t = row.get("cpu_epoch_s"), row.get("dut_epoch_s")
        bound = row.get("plan_bound_bytes")
        lines.append(
            f"| {row['case']} | {'/'.join(m or '—' for m in row.get('residency') or []) or '—'} | "
            f"{_fmt(row['float64_max_diff'])} | {_fmt(row['float32_max_diff'])} | "
            f"{_fmt(row.get('float32_cpu_vs_float64'))} / {_fmt(row.get('float32_dut_vs_float64'))} | "
            f"{_fmt(cpu_t and cpu_t * 1e3, '.1f')} ms | {_fmt(dev_t and dev_t * 1e3, '.1f')} ms | "
            f"{_fmt(cpu_t / dev_t if cpu_t and dev_t else None, '.1f')}× | {_fmt(row.get('vs_pyg'), '.2f')}× | "
            f"{_fmt(row.get('ops_per_step'), 'd')} / {_fmt(row.get('sync_ops_per_step'), 'd')} | "
            f"{_fmt(row.get('dut_peak_bytes') and row['dut_peak_bytes'] / 2**20, '.0f')} MiB | "
            f"{_fmt(bound and bound / 2**20, '.0f')} MiB ({row.get('plan_bound_source') or '—'}) | "
            f"{('yes' + (' (f32 as the CPU)' if row['float32_passed'] == 'as the CPU' else '')) if row['passed'] else 'NO'} |"
        )
    notes = [f"- {row['case']}: {n}" for row in report["cases"] for n in row["notes"]]
    text = head + "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else "")
    for graph, rows in (report.get("larger_graphs") or {}).items():
        text += (
            f"\nOn {graph}, the device alone:\n\n| case | epoch dev | ÷ PyG | ops / syncs per step | peak dev |\n"
            "|---|---|---|---|---|\n"
        )
        for row in rows:
            if row["status"] != "ok":
                text += f"| {row['case']} | {row['status']} {row.get('note') or ''} | | | |\n"
                continue
            text += (
                f"| {row['case']} | {row['dut_epoch_s'] * 1e3:.1f} ms | {_fmt(row.get('vs_pyg'), '.2f')}× | "
                f"{_fmt(row.get('ops_per_step'), 'd')} / {_fmt(row.get('sync_ops_per_step'), 'd')} | "
                f"{row['dut_peak_bytes'] / 2**20:.0f} MiB |\n"
            )
    for graph, peers in report["peers"].get("per_graph", {}).items():
        for name, what in (
            ("pyg", "SAGEConv full-graph"),
            ("pyg_loader", "NeighborLoader (25,10, batch 1000)"),
        ):
            peer = peers[name]
            text += (
                f"\nPyG {peer['version']} {what} on {graph}: {peer['median_epoch_s'] * 1e3:.1f} ms per epoch."
                if peer["status"] == "ok"
                else f"\nPyG {what} on {graph}: {peer['status']} {peer.get('note', '')}"
            )
    text += f"\nDGL: {report['peers']['dgl']['status']}.\n"
    return text + f"\nAll passed: {'yes' if report['passed'] else 'NO'} ({report['seconds']:.0f} s)\n"


if __name__ == "__main__":
    sys.exit(main())
