"""`make gpu-check`: g3's strategies on CUDA, timed, with PyG on the same GPU, and checked against the CPU.

By default it fits a lent GPU machine's few minutes (``--budget``, 300 s, preparation included; its estimate is
printed before it starts, and what does not fit is trimmed): ``g3``, ``bns-gcn`` and ``distdgl`` at K = 1 on
``synthetic:small`` and ``synthetic:medium``. In this order, each step as the budget allows:

1. per timed graph: ingest, partition (only the methods the cases use) and plan; each case trained on the
   device (float32, the partition resident where its plan says it fits: ``--residency auto``), one steady step
   counted (``g3 train --count-ops``: operations, host synchronisations, host → device copies, the sampler's
   share); PyG on the same graph and settings: the full-graph ``SAGEConv`` epoch on the device and, where the
   peer runner (stages/bench/peers/pyg_runner.py) has a mini-batch mode and ``NeighborLoader`` has a sampler
   (pyg-lib or torch-sparse), its mini-batch epoch at the ``distdgl`` plan's fanouts and batch size (on the
   first timed graph: its CPU sampling is slow on larger ones);
2. the CPU references, several at a time: **exactness**, float64 on ``synthetic:tiny``, CPU against the device
   (final weights, max |Δ| ≤ 1e-9); **float32** on the first timed graph on the CPU (max |Δ| ≤ 1e-4 to the
   device, else ``float32_verdict``), and for the mini-batch cases a float64 CPU run there (float32 rounding
   alone moves a many-step mini-batch run's weights far more than 1e-4 on any device: the device passes when it
   is no further from it than twice the CPU's own float32 run).

``--full`` is the thorough sweep for a longer stay (``--budget`` 1500 s): every registered strategy, ``g3
(bins)`` (g3 with its device memory set so that the largest layer needs ≥ 3 bins: bins streamed on a copy
stream) and ``g3`` / ``distdgl`` at K = 2 on the one GPU (``… K=2``: two ranks sharing it over gloo), the same
steps, the PyG mini-batch epoch on every timed graph.

Each finished step rewrites OUT/gpu-check.json (atomically) and OUT/gpu-check.md at once, and each run adds a
line to OUT/runs.jsonl, so a run cut short keeps what it measured. Every dropout mask is a hash of its
coordinates and every neighbour draw a hash too (host or device sampler), so the two devices compute the same.

No package index is needed: a bundle of the project's dependencies that are pure Python (and a few small
compiled ones for one CPython version), made here by ``make gpu-bundle`` (``--make-bundle``) and carried, is
unpacked and put on the path (``--bundle``, default .gpu-bundle/); what is still missing is named in one line.
Without CUDA it prints one line and exits 0 having run nothing. ``--device cpu`` runs the whole procedure with
the CPU standing in for the GPU (the tests use it; the comparisons are then CPU against CPU). ``--dry-run``
prints the steps and their estimate and exits.

Output (docs/BENCHMARKS.md, "GPU check", documents every field): OUT/gpu-check.json, OUT/gpu-check.md (the
table), OUT/runs.jsonl, OUT/logs/*.log (each command's output); the graphs, plans and runs in OUT/work (``--work``).

    python examples/gpu_check.py --out gpu-check            # what `make gpu-check` runs
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SCHEMA = "g3.gpu-check/2"
TOL = {"float64": 1e-9, "float32": 1e-4}
SEED, LR, DROPOUT = 3, 0.01, 0.3
DEVICE_THREADS = 2  # threads of each run on the device under test (and of the PyG mini-batch peer)

BINS = "g3"  # the strategy whose plans size bins by device memory
FORCED = f"{BINS} (bins)"  # its case with bins forced below the graph
DEFAULT = ("g3", "bns-gcn", "distdgl")  # the default run's cases (K = 1)
SHARED = ("g3", "distdgl")  # --full: also run at K = 2 on the one GPU
PEER_RUNNER = REPO / "stages" / "bench" / "peers" / "pyg_runner.py"

# ---------------------------------------------------------------------------------------------------------
# The bundle: what the GPU machine's Python may lack, brought along without a package index.

# the project's dependencies that are pure Python (any interpreter), by distribution name
BUNDLE_PURE = (
    "click",
    "rich",
    "markdown-it-py",
    "mdurl",
    "pygments",
    "zarr",
    "donfig",
    "tqdm",
    "packaging",
    "typing-extensions",
)
# small compiled ones, for one CPython version (--bundle-python): zarr's codecs and checksums, donfig's YAML
# (pure fallback inside), METIS (--full's K = 2 partitions), psutil (abi3: any CPython 3)
BUNDLE_COMPILED = ("numcodecs", "google-crc32c", "pyyaml", "pymetis", "psutil")
# modules a g3 command imports, and whether each is compiled (a bundle cannot bring numpy, scipy, numba, …)
NEEDED = {
    "numpy": "compiled",
    "scipy": "compiled",
    "numba": "compiled",
    "pyarrow": "compiled",
    "psutil": "compiled",
    "numcodecs": "compiled",
    "google_crc32c": "compiled",
    "yaml": "compiled",
    "click": "pure",
    "rich": "pure",
    "zarr": "pure",
    "donfig": "pure",
    "tqdm": "pure",
}
NEEDED_FULL = {"pymetis": "compiled"}  # METIS partitions at K = 2, clustergcn's plan


def make_bundle(folder: Path, python_version: str) -> int:
    """``make gpu-bundle``: download the wheels of BUNDLE_PURE (any interpreter) and BUNDLE_COMPILED (CPython
    ``python_version``, manylinux x86-64) into ``folder``/wheels, at the versions installed here."""
    from importlib import metadata

    def pinned(dist: str) -> str:
        try:
            return f"{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            return dist

    wheels = folder / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for old in wheels.glob("*.whl"):
        old.unlink()
    pip = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(wheels),
    ]
    platforms = (
        "manylinux_2_28_x86_64",
        "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
        "manylinux2010_x86_64",
    )
    compiled = ["--python-version", python_version, "--implementation", "cp"]
    compiled += [x for p in platforms for x in ("--platform", p)]
    for extra, dists in (([], BUNDLE_PURE), (compiled, BUNDLE_COMPILED)):
        p = subprocess.run([*pip, *extra, *map(pinned, dists)], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"gpu-bundle: pip download failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
            return 1
    got = sorted(wheels.glob("*.whl"))
    size = sum(w.stat().st_size for w in got)
    print(
        f"gpu-bundle: {len(got)} wheels, {size / 2**20:.1f} MiB in {wheels} (compiled ones for CPython {python_version})"
    )
    return 0


def wheel_fits(name: str) -> bool:
    """Whether a wheel (by its file name's tags) installs on this interpreter: pure, or CPython of this
    version (or abi3 from an older one) for this machine's architecture on Linux."""
    parts = name[: -len(".whl")].split("-")
    if len(parts) < 5:
        return False
    py, abi, plat = parts[-3:]
    if plat == "any":
        return abi == "none" and any(t.startswith("py3") or t == "py2.py3" for t in py.split("."))
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if platform.python_implementation() != "CPython" or not sys.platform.startswith("linux"):
        return False
    if not any(
        p.endswith("_" + platform.machine()) or p == "linux_" + platform.machine() for p in plat.split(".")
    ):
        return False
    if abi == "abi3":
        return any(t.startswith("cp3") and int(t[3:] or 0) <= sys.version_info.minor for t in py.split("."))
    return here in py.split(".") and abi in (here, here + "m")


def bundle_site() -> Path:
    """Where the bundle is unpacked: a cache outside the checkout (the carried folder stays wheels only)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "g3-gpu-bundle"


def use_bundle(folder: Path, root: Path | None = None) -> list[str]:
    """Unpack the bundle's wheels that fit this interpreter (a wheel is a zip of what an install puts in
    site-packages) into ``root``/site-<tag> [default: bundle_site()], once, and put that first on this
    process's path and on PYTHONPATH (the g3 commands and their workers). Returns the wheels used."""
    wheels = sorted(p.name for p in (folder / "wheels").glob("*.whl") if wheel_fits(p.name))
    if not wheels:
        return []
    site = (root or bundle_site()) / f"site-{sys.implementation.cache_tag}"
    stamp = site / ".wheels"
    if not stamp.is_file() or stamp.read_text().split() != wheels:
        for name in wheels:
            with zipfile.ZipFile(folder / "wheels" / name) as z:
                z.extractall(site)
        stamp.write_text("\n".join(wheels) + "\n")
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
    return wheels


def missing_modules(full: bool) -> list[str]:
    """The modules a g3 command needs that this Python cannot import, each with its kind and whether the
    bundle brings it."""
    import importlib

    bundled = {"numcodecs", "google_crc32c", "yaml", "pymetis", "psutil"}  # BUNDLE_COMPILED's modules
    out = []
    for module, kind in {**NEEDED, **(NEEDED_FULL if full else {})}.items():
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - absent, or present and broken (a wheel for another Python)
            why = "" if isinstance(exc, ModuleNotFoundError) else f", {type(exc).__name__}"
            where = "bundled" if kind == "pure" or module in bundled else "not bundled: install it"
            out.append(f"{module} ({kind}{why}; {where})")
    return out


# ---------------------------------------------------------------------------------------------------------
# The cases


@dataclass
class Case:
    """One plan to train on both devices: a strategy, its partition method and plan options."""

    label: str
    strategy: str
    method: str
    options: dict = field(default_factory=dict)  # g3 plan flag -> value
    workers: int = 1


def strategies() -> dict:
    from stages.strategies.registry import STRATEGIES

    return STRATEGIES


def cases(bin_memory: str | None = None, full: bool = True) -> list[Case]:
    """The cases of ``--full`` (every strategy, K = 2 of SHARED, and with ``bin_memory`` the forced-bins one),
    else the default run's."""
    reg = strategies()
    if not full:
        return [Case(name, name, reg[name].methods[0]) for name in DEFAULT]
    out = [Case(name, name, info.methods[0]) for name, info in reg.items()]
    out += [Case(f"{name} K=2", name, reg[name].methods[0], workers=2) for name in SHARED]
    out.append(Case(FORCED, BINS, reg[BINS].methods[0], {"--device-memory": bin_memory or "0"}))
    return out


def mini_batch(label: str) -> bool:
    return strategies()[label.split(" ")[0]].mini_batch


# ---------------------------------------------------------------------------------------------------------
# Estimates: seconds on the lent GPU machine (H200, 16 cores) as a fixed part and a part per million arcs (A) or
# nodes (N). A train command's fixed part (interpreter, CUDA torch, fork server, workers, numba's kernels, CUDA's
# context, evaluation, the model written) is what the two H200 runs (2026-11-27: 10 cases, 423 s; 2026-11-28: 4
# cases, 185 s) took beyond their epochs, about 20 s; the host stages are this project's 2-core machine's
# (2026-12-03). Those two runs' configurations estimate at 509 s and 152 s (`--dry-run --parallel 5`): the
# model errs by about a fifth either way, and a step that no longer fits the budget by the clock is skipped.

EST_INGEST = (2.0, 1.2)  # fixed, per M arcs
EST_PARTITION = (3.0, 0.15)
EST_PLAN = {"g3": (2.5, 0.4)}  # g3 plans its bins over every arc
EST_PLAN_OTHER = (2.5, 0.05)
EST_TRAIN = {"cuda": (20.0, 0.1), "cpu": (15.0, 0.1)}  # a train command's fixed part, and loading per M arcs
# one epoch: full-graph per M arcs, mini-batch per M nodes (its batches), by device (the CPU at 2 threads)
EST_EPOCH_FULL = {"cuda": (0.005, 0.01), "cpu": (0.01, 0.05)}
EST_EPOCH_MINI = {"cuda": 9.0, "cpu": 12.0}
# strategies slower than the model above: their epoch's factor (the 2026-11-27 H200 run)
EST_FACTOR = {"neutrontp": 4.0, "sancus": 1.5, "bytegnn": 4.0, "hopgnn": 3.0, "p3": 2.0, "clustergcn": 3.0}
EST_PYG = (5.0, 0.2)  # PyG full-graph, in this process: import, load, CSR on the device, epochs
EST_PYG_MINI = (10.0, 0.1, 20.0)  # the runner: export, start (fixed, per M arcs) and per epoch per M nodes
PYG_MINI_EPOCHS = 3  # the mini-batch peer's epochs (a warm-up and two timed)


def graph_size(source: str) -> tuple[float, float, bool]:
    """(M nodes, M arcs, known) of a graph source: a synthetic preset's, else a guess of products' size."""
    m = re.fullmatch(r"synthetic:(\w+)", source)
    if m:
        from stages.ingest.synthetic import PRESETS

        spec = PRESETS.get(m.group(1))
        if spec:
            return spec.nodes / 1e6, spec.nodes * spec.avg_degree / 1e6, True
    return 2.45, 124.0, False


def est_prepare(size, labels: list[Case]) -> float:
    n, a, _ = size
    ingest = EST_INGEST[0] + EST_INGEST[1] * a
    part = EST_PARTITION[0] + EST_PARTITION[1] * a
    plans = [EST_PLAN.get(c.strategy, EST_PLAN_OTHER) for c in labels]
    plan = max(f + p * a for f, p in plans) if plans else 0.0
    return ingest + part + plan * (2 if any(c.label == FORCED for c in labels) else 1)


def est_train(case: Case, size, epochs: int, device: str) -> float:
    n, a, _ = size
    fixed, per_arc = EST_TRAIN[device]
    if mini_batch(case.label):
        epoch = EST_EPOCH_MINI[device] * n
    else:
        epoch = EST_EPOCH_FULL[device][0] + EST_EPOCH_FULL[device][1] * a
    epoch *= EST_FACTOR.get(case.strategy, 1.0) * (5.0 if case.label == FORCED else 1.0)
    return (fixed + per_arc * a) * (1.5 if case.workers > 1 else 1.0) + epochs * epoch


def group_estimate(estimates: list[float], parallel: int) -> float:
    """Runs ``parallel`` at a time: at least the longest, at least the total shared out."""
    return max(max(estimates, default=0.0), sum(estimates) / max(1, parallel))


# ---------------------------------------------------------------------------------------------------------
# Running g3's commands


class Runner:
    """Runs the CLI as subprocesses (or, ``in_process``, in this process: one interpreter and one fork server
    for every command), each with its own log; failures are kept, never raised."""

    def __init__(self, out: Path, python: str, timeout: float, in_process: bool = False):
        self.out, self.python, self.timeout, self.in_process = out, python, timeout, in_process
        (out / "logs").mkdir(parents=True, exist_ok=True)

    def cli(
        self, name: str, *args: str, env: dict | None = None, timeout: float | None = None
    ) -> tuple[bool, str]:
        log = self.out / "logs" / f"{name}.log"
        cmd = [self.python, "-m", "g3cli", *args]
        t0 = time.perf_counter()
        if self.in_process:
            ok, text = self._here(args, env)
        else:
            ok, text = self._subprocess(cmd, env, min(self.timeout, timeout or self.timeout))
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
        if result.exit_code == 130:  # g3 took a SIGTERM or SIGINT meant for the check: the check stops
            raise KeyboardInterrupt
        text = result.output
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            text += "".join(traceback.format_exception(result.exception))
        return result.exit_code == 0, text

    def _subprocess(self, cmd: list[str], env: dict | None, timeout: float) -> tuple[bool, str]:
        with subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        ) as proc:
            LIVE.add(proc)
            try:
                out, err = proc.communicate(timeout=timeout)
                ok, text = proc.returncode == 0, out + err
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                ok, text = False, f"timed out after {timeout:.0f} s\n{out}{err}"
            finally:
                LIVE.discard(proc)
        return ok, text


LIVE: set = set()  # the g3 commands running now (a check cut short passes its signal on to them)


def max_diff(a: Path, b: Path) -> float:
    """Largest |Δ| over every weight of two model.pt files (float64)."""
    wa, wb = (torch.load(p, weights_only=True, map_location="cpu") for p in (a, b))
    if wa.keys() != wb.keys():
        return float("inf")
    return max((wa[k].double() - wb[k].double()).abs().max().item() for k in wa) if wa else 0.0


COUNTS = (
    "ops_per_step",
    "sync_ops_per_step",
    "h2d_copies_per_step",
    "sampler_ops_per_step",
    "cuda_syncs_per_step",
)


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
        **({k: counted[0][k] for k in COUNTS if k in counted[0]} if counted else {}),
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


def planned_residency(plan: Path) -> str:
    """``device`` when the plan found every worker's partition fits the device, else ``host``: what
    ``--residency auto`` does on a GPU, given explicitly to the CPU standing in for one."""
    workers = json.loads((plan / "plan.json").read_text())["workers"]
    return (
        "device" if all(w.get("residency", {}).get("mode", "device") == "device" for w in workers) else "host"
    )


# ---------------------------------------------------------------------------------------------------------
# PyG on the same graph


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
    import torch_geometric

    return {
        "status": "ok",
        "device": device,
        "version": torch_geometric.__version__,
        "epoch_seconds": times,
        "median_epoch_s": statistics.median(times[1:] or times),
    }


def runner_modes(python: str) -> set[str]:
    """What the PyG peer runner offers, from its --help: ``mini-batch`` (--fanouts), ``device`` (--device)."""
    if not PEER_RUNNER.is_file():
        return set()
    p = subprocess.run(
        [python, str(PEER_RUNNER), "--help"],
        capture_output=True,
        text=True,
        cwd=PEER_RUNNER.parent,
        timeout=120,
    )
    return {m for m, flag in (("mini-batch", "--fanouts"), ("device", "--device")) if flag in p.stdout}


def pyg_sampler() -> str | None:
    """Why PyG's NeighborLoader cannot sample here (None: it can: pyg-lib or torch-sparse imports)."""
    try:
        import torch_geometric.typing as pyg_typing
    except Exception as exc:  # noqa: BLE001 - absent or broken: reported
        return f"torch_geometric does not import ({type(exc).__name__})"
    if getattr(pyg_typing, "WITH_PYG_LIB", False) or getattr(pyg_typing, "WITH_TORCH_SPARSE", False):
        return None
    return "NeighborLoader needs pyg-lib or torch-sparse; neither imports"


def pyg_minibatch(
    python: str,
    graph_file: Path,
    device: str,
    modes: set[str],
    fanouts,
    batch_size: int,
    hidden: int,
    epochs: int,
    log: Path,
    timeout: float,
) -> dict:
    """PyG's mini-batch epoch through the peer runner of `g3 bench` (NeighborLoader: its CPU sampling, as PyG
    runs it), at the given fanouts and batch size; on ``device`` where the runner takes --device, else on the
    CPU (said in ``device``)."""
    cmd = [python, str(PEER_RUNNER), str(graph_file.resolve()), "--model", "sage", "--layers", "2"]
    cmd += ["--hidden", str(hidden), "--epochs", str(epochs), "--lr", str(LR), "--dropout", str(DROPOUT)]
    cmd += ["--seed", str(SEED), "--threads", str(DEVICE_THREADS)]
    cmd += ["--fanouts", ",".join(map(str, fanouts)), "--batch-size", str(batch_size)]
    ran_on = device if "device" in modes else "cpu"
    if "device" in modes:
        cmd += ["--device", device]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=PEER_RUNNER.parent, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "note": f"timed out after {timeout:.0f} s"}
    log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"status": "failed", "note": f"exit {p.returncode}: {err}"}
    res = json.loads(lines[-1])
    return {
        "status": "ok",
        "device": ran_on,
        "version": res.get("version"),
        "epoch_seconds": res["epoch_seconds"],
        "median_epoch_s": res["median_epoch_seconds"],
        "threads": res.get("threads"),
        "fanouts": list(fanouts),
        "batch_size": batch_size,
        "sampler": res.get("sampler"),
        "test_acc": res.get("test_acc"),
    }


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def environment(device: str, bundle: list[str]) -> dict:
    env = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_cores": os.cpu_count(),
        "device": device,
        "bundle": bundle,
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


# ---------------------------------------------------------------------------------------------------------
# The check: its steps in order, each run as the budget allows, the report rewritten after each


@dataclass
class Step:
    name: str
    phase: str  # "preparation", "device runs", "PyG", "CPU references"
    estimate: float
    run: Callable[[], None]
    jobs: list = field(default_factory=list)  # the training runs it holds: (graph key, case, dtype, device)
    prepares: str | None = None  # the graph key it prepares
    peer: tuple[str, str] | None = None  # (graph key, peer name) it measures
    status: str = "pending"  # pending, done, skipped, trimmed
    seconds: float | None = None
    note: str | None = None


class Check:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.out = Path(a.out)
        self.work = Path(a.work) if a.work else self.out / "work"
        self.dut = (
            a.device if a.device != "cpu" else "dut"
        )  # with --device cpu the CPU stands in for the device
        timed = [g for g in a.graph.split(",") if g]
        # the first timed graph keeps the key "timed" (the CPU comparisons run on it); the others "timed-N"
        self.timed_keys = ["timed"] + [f"timed-{i}" for i in range(1, len(timed))]
        self.graphs = {"exact": a.exact_graph, **dict(zip(self.timed_keys, timed, strict=True))}
        self.sizes = {key: graph_size(src) for key, src in self.graphs.items()}
        every = {c.label: c for c in cases(None, full=True)}
        wanted = [s.strip() for s in a.strategies.split(",") if s.strip()]
        unknown = [w for w in wanted if w not in every]
        if unknown:
            raise SystemExit(f"gpu-check: unknown case {', '.join(unknown)} (cases: {', '.join(every)})")
        default = [c.label for c in cases(None, full=a.full)]
        self.labels = [label for label in every if label in (wanted or default)]
        self.case = {label: every[label] for label in self.labels}
        self.parallel = a.parallel or max(1, (os.cpu_count() or 1) // (a.cpu_threads + 1))
        self.budget = a.budget if a.budget is not None else (1500.0 if a.full else 300.0)
        self.ready: dict = {}  # graph key -> store; (key, method, workers) -> (ok, last line, partition)
        self.plans: dict = {}  # (key, label) -> (ok, last line, plan folder)
        self.unprepared: dict = {}  # graph key -> why it has no plans
        self.results: dict = {}  # (key, label, dtype, device) -> facts
        self.peers: dict = {key: {} for key in self.timed_keys}
        self.lock = threading.RLock()
        self.state = "planned"
        self.t_start = time.perf_counter()
        self.modes = runner_modes(a.python) if any(mini_batch(x) for x in self.labels) else set()
        self.sampler = pyg_sampler() if "mini-batch" in self.modes and a.device == "cuda" else None
        self.bundle: list[str] = []
        self.steps = self.make_steps()

    # -- the steps -------------------------------------------------------------------------------------
    def make_steps(self) -> list[Step]:
        a, steps = self.a, []
        for key in self.timed_keys:
            graph, size = self.graphs[key], self.sizes[key]
            prep = est_prepare(size, self.plan_cases())
            steps.append(
                Step(f"prepare {graph}", "preparation", prep, lambda key=key: self.prepare(key), prepares=key)
            )
            for label in self.labels:
                job = (key, label, "float32", self.dut)
                est = est_train(self.case[label], size, a.epochs, "cuda" if a.device == "cuda" else "cpu")
                steps.append(
                    Step(
                        f"{label} on {graph}, {self.dut}",
                        "device runs",
                        est,
                        lambda job=job: self.train_one(job),
                        [job],
                    )
                )
            n, arcs, _ = size
            steps.append(
                Step(
                    f"PyG full-graph on {graph}",
                    "PyG",
                    EST_PYG[0] + EST_PYG[1] * arcs if a.device == "cuda" else 0.0,
                    lambda key=key: self.peer(key, "pyg"),
                    peer=(key, "pyg"),
                )
            )
            # the mini-batch peer (CPU sampling: slow on larger graphs) on the first timed graph; all with --full
            if any(mini_batch(x) for x in self.labels) and (key == "timed" or a.full):
                runs = a.device == "cuda" and "mini-batch" in self.modes and self.sampler is None
                est = (
                    EST_PYG_MINI[0] + EST_PYG_MINI[1] * arcs + PYG_MINI_EPOCHS * EST_PYG_MINI[2] * n
                    if runs
                    else 0.0
                )
                steps.append(
                    Step(
                        f"PyG mini-batch on {graph}",
                        "PyG",
                        est,
                        lambda key=key: self.peer(key, "pyg_minibatch"),
                        peer=(key, "pyg_minibatch"),
                    )
                )
        # the references, several at a time, exactness first: float64 on the exact graph on both devices, float32
        # on the CPU, and a float64 CPU run for the mini-batch cases (their float32 rounding alone moves weights
        # beyond the absolute tolerance on any device: float32_verdict compares each device's error to it)
        jobs = [("exact", label, "float64", dev) for label in self.labels for dev in ("cpu", self.dut)]
        jobs += [("timed", label, "float32", "cpu") for label in self.labels]
        jobs += [("timed", label, "float64", "cpu") for label in self.labels if self.reference(label)]
        steps.append(
            Step(
                f"prepare {a.exact_graph}",
                "preparation",
                est_prepare(self.sizes["exact"], self.plan_cases()),
                lambda: self.prepare("exact"),
                prepares="exact",
            )
        )
        est = group_estimate([self.job_estimate(j) for j in jobs], self.parallel)
        steps.append(Step("CPU references", "CPU references", est, lambda: self.run_group(jobs), jobs))
        return steps

    def reference(self, label: str) -> bool:
        """Whether a case's float32 runs are judged against a float64 CPU run (mini-batch cases)."""
        return self.a.float64_reference and mini_batch(label)

    def plan_cases(self) -> list[Case]:
        """The cases to plan on every graph: the chosen ones, and g3's one-bin plan where the forced-bins case is
        chosen (it sets that case's device budget)."""
        out = list(self.case.values())
        if FORCED in self.case and BINS not in self.case:
            out.append(cases(None, full=False)[0])  # the default run's first case is g3's
        return out

    def job_estimate(self, job) -> float:
        key, label, _, device = job
        dev = "cuda" if device == self.dut and self.a.device == "cuda" else "cpu"
        return est_train(self.case[label], self.sizes[key], 3 if key == "exact" else self.a.epochs, dev)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def left(self) -> float:
        return max(10.0, self.budget - self.elapsed())

    def trim(self) -> list[Step]:
        """Mark the steps that cannot end within the budget by the estimates (the later, the less they matter:
        the order is the priority), and those that need a graph whose preparation is trimmed; returns them."""
        t, trimmed, gone = 0.0, [], set()
        for step in self.steps:
            needs = {job[0] for job in step.jobs} | ({step.peer[0]} if step.peer else set())
            if needs & gone or t + step.estimate > self.budget:
                step.status, trimmed = "trimmed", [*trimmed, step]
                gone |= {step.prepares} if step.prepares else set()
            else:
                t += step.estimate
        return trimmed

    def estimate(self) -> dict:
        kept = [s for s in self.steps if s.status != "trimmed"]
        phases: dict = {}
        for s in kept:
            phases[s.phase] = phases.get(s.phase, 0.0) + s.estimate
        return {
            "total_s": round(sum(phases.values()), 1),
            "by_phase": {k: round(v, 1) for k, v in phases.items()},
        }

    # -- running ----------------------------------------------------------------------------------------
    def run(self) -> int:
        self.work.mkdir(parents=True, exist_ok=True)
        (self.out / "runs.jsonl").write_text("")
        self.r = Runner(self.out, self.a.python, self.a.timeout, self.a.in_process)
        self.state = "running"
        self.t_start = time.perf_counter()
        self.write()
        for step in self.steps:
            if step.status == "trimmed":
                self.skip(step, f"trimmed before the start to fit --budget {self.budget:.0f} s")
                continue
            left = self.budget - self.elapsed()
            if step.estimate > left:
                self.skip(
                    step, f"not run: estimated {step.estimate:.0f} s, {max(0.0, left):.0f} s of --budget left"
                )
                continue
            t0 = time.perf_counter()
            step.run()
            step.status, step.seconds = "done", time.perf_counter() - t0
            if step.jobs and all(self.results[job]["status"] == "skipped" for job in step.jobs):
                step.status = "skipped"  # each run found its graph unprepared or the budget spent
            print(
                f"gpu-check: {step.name}: {step.seconds:.0f} s (estimated {step.estimate:.0f} s; {self.elapsed():.0f} s in all)",
                flush=True,
            )
            self.write()
        self.state = "done"
        table = self.write()
        print(table)
        return 0

    def skip(self, step: Step, note: str) -> None:
        step.status = "skipped" if step.status != "trimmed" else "trimmed"
        step.note = note
        for job in step.jobs:
            self.record(job, {"status": "skipped", "note": note})
        if step.prepares:
            self.unprepared[step.prepares] = note
        if step.peer:
            self.peers[step.peer[0]][step.peer[1]] = {"status": "skipped", "note": note}
        print(f"gpu-check: {step.name}: {note}", flush=True)
        self.write()

    def prepare(self, key: str) -> None:
        """Ingest a graph, partition it once per (method, worker count) its cases use and plan each case, the
        partitions and plans several at a time."""
        r, work, source = self.r, self.work, self.graphs[key]
        store = work / f"{key}.g3"
        ok, last = r.cli(f"ingest-{key}", "ingest", source, str(store), "--force", timeout=self.left())
        if not ok:
            self.unprepared[key] = f"ingesting {source} failed: {last} (see logs/ingest-{key}.log)"
            print(f"gpu-check: {self.unprepared[key]}", flush=True)
            return
        self.ready[key] = store
        need = self.plan_cases()

        def partition(method_k):
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
                timeout=self.left(),
            )
            return (key, method, k), (ok, last, part)

        with cf.ThreadPoolExecutor(self.parallel) as pool:
            self.ready.update(pool.map(partition, sorted({(c.method, c.workers) for c in need})))
            plain = [c for c in need if c.label != FORCED]
            self.plans.update(
                zip(
                    [(key, c.label) for c in plain],
                    pool.map(lambda c: self.plan_case(key, c), plain),
                    strict=True,
                )
            )
        if FORCED in self.case:
            # a third of g3's one-bin footprint per bin: the largest layer needs at least three bins
            ok, _, g3_plan = self.plans[(key, BINS)]
            if ok:
                forced = cases(str(2 * one_bin_bytes(g3_plan) // 3), full=True)[-1]
                self.plans[(key, FORCED)] = self.plan_case(key, forced)
            else:
                self.plans[(key, FORCED)] = (False, "the one-bin g3 plan failed", work / "none")

    def plan_case(self, key: str, case: Case) -> tuple[bool, str, Path]:
        ok, last, part = self.ready[(key, case.method, case.workers)]
        slug = case.label.replace(" ", "").replace("(", "-").replace(")", "").replace("=", "")
        plan = self.work / f"{key}.plan-{slug}"
        if not ok:
            return False, f"partition failed: {last}", plan
        opts = [x for kv in case.options.items() for x in kv]
        ok, last = self.r.cli(
            f"plan-{key}-{slug}",
            "plan",
            str(part),
            "--strategy",
            case.strategy,
            "--model",
            "sage",
            "--hidden",
            str(self.a.hidden),
            *opts,
            "-o",
            str(plan),
            "--force",
            timeout=self.left(),
        )
        return ok, last, plan

    def run_group(self, jobs: list) -> None:
        with cf.ThreadPoolExecutor(self.parallel) as pool:
            list(pool.map(self.train_one, jobs))

    def train_one(self, job) -> None:
        key, label, dtype, device = job
        a, est = self.a, self.job_estimate(job)
        plan = self.plans.get((key, label))
        if key in self.unprepared or plan is None:
            why = self.unprepared.get(key, "its graph was not prepared")
            facts = {"status": "skipped" if "budget" in why else "failed", "note": f"not run: {why}"}
        elif not plan[0]:
            facts = {"status": "failed", "note": f"plan failed: {plan[1]}"}
        elif est > self.budget - self.elapsed():
            left = max(0.0, self.budget - self.elapsed())
            facts = {
                "status": "skipped",
                "note": f"not run: estimated {est:.0f} s, {left:.0f} s of --budget left",
            }
        else:
            plan_dir = plan[2]
            slug = plan_dir.name.split(".plan-")[-1]
            run = self.work / f"run-{key}-{slug}-{dtype}-{'cpu' if device == 'cpu' else self.dut}"
            on_dut = device == self.dut
            epochs = 3 if key == "exact" else a.epochs
            t0 = time.perf_counter()
            ok, last = self.r.cli(
                f"train-{run.name}",
                "train",
                str(plan_dir),
                "--device",
                a.device if on_dut else "cpu",
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
                str(self.case[label].workers),
                "--threads",
                str(DEVICE_THREADS if on_dut else a.cpu_threads),
                "--eval-every",
                str(epochs),
                "-o",
                str(run),
                "--force",
                "--residency",
                planned_residency(plan_dir) if a.device == "cpu" and on_dut else "auto",
                *(("--count-ops",) if on_dut and key != "exact" else ()),
                timeout=self.left(),
            )
            facts = {
                "status": "ok" if ok else "failed",
                "run": str(run),
                "wall_s": time.perf_counter() - t0,
                "estimate_s": est,
            }
            facts.update(run_facts(run) if ok else {"note": last})
        self.record(job, facts)
        if facts["status"] != "skipped":
            print(
                f"  {label:<14} {self.graphs[key]:<18} {dtype} {device:<4} {facts['status']:<6} {facts.get('wall_s', 0):6.1f} s"
                + (f"  {facts['note']}" if facts.get("note") else ""),
                flush=True,
            )

    def record(self, job, facts: dict) -> None:
        key, label, dtype, device = job
        with self.lock:
            self.results[job] = facts
            with open(self.out / "runs.jsonl", "a") as f:  # a line per run as it ends
                line = {"case": label, "graph": self.graphs[key], "dtype": dtype, "device": device, **facts}
                f.write(json.dumps(line, default=str) + "\n")
            self.write()

    def peer(self, key: str, name: str) -> None:
        a, graph = self.a, self.graphs[key]
        if a.device != "cuda":
            res = {"status": "skipped", "note": "no GPU under test"}
        elif key not in self.ready:
            res = {
                "status": "skipped",
                "note": f"not run: {self.unprepared.get(key, 'its graph was not prepared')}",
            }
        elif name == "pyg":
            res = pyg_epoch(self.ready[key], a.device, a.hidden, a.epochs)
        elif "mini-batch" not in self.modes:
            res = {
                "status": "skipped",
                "note": f"the peer runner ({PEER_RUNNER.relative_to(REPO)}) has no mini-batch mode",
            }
        elif self.sampler:
            res = {"status": "unavailable", "note": self.sampler}
        else:
            from stages.bench.export import export_graph

            label = next(x for x in self.labels if mini_batch(x))
            plan = self.plans.get((key, label))
            options = (
                json.loads((plan[2] / "plan.json").read_text())["strategy"]["options"]
                if plan and plan[0]
                else {}
            )
            npz = export_graph(self.ready[key], self.work / f"{key}.npz")
            res = pyg_minibatch(
                a.python,
                npz,
                a.device,
                self.modes,
                options.get("fanouts", [25, 10]),
                options.get("batch_size", 1000),
                a.hidden,
                PYG_MINI_EPOCHS,
                self.out / "logs" / f"pyg-minibatch-{key}.log",
                self.left(),
            )
        self.peers[key][name] = res
        print(
            f"  PyG {name:<14} {graph:<18} {res['status']}" + (f"  {res['note']}" if res.get("note") else ""),
            flush=True,
        )

    # -- the report -------------------------------------------------------------------------------------
    def report(self) -> dict:
        a, dut = self.a, self.dut
        peers = {key: dict(v) for key, v in self.peers.items()}
        rows = [
            compare(
                label, self.results, dut, self.plans, peers.get("timed", {}), self.reference(label), a.device
            )
            for label in self.labels
        ]
        larger = {
            self.graphs[key]: [
                device_row(
                    label, self.results.get((key, label, "float32", dut)), peers.get(key, {}), a.device
                )
                for label in self.labels
            ]
            for key in self.timed_keys[1:]
        }
        verdicts = [row["passed"] for row in rows]
        return {
            "schema": SCHEMA,
            "state": self.state,
            "environment": environment(a.device, self.bundle),
            "tolerance": TOL,
            "settings": {
                "full": a.full,
                "cases": self.labels,
                "budget_s": self.budget,
                "exact_graph": a.exact_graph,
                "graph": self.graphs["timed"],
                "graphs": [self.graphs[k] for k in self.timed_keys],
                "epochs": a.epochs,
                "hidden": a.hidden,
                "model": "sage",
                "layers": 2,
                "lr": LR,
                "dropout": DROPOUT,
                "seed": SEED,
                "cpu_threads": a.cpu_threads,
                "device_threads": DEVICE_THREADS,
                "float64_reference": a.float64_reference,
            },
            "estimate": {
                **self.estimate(),
                "steps": [
                    {
                        "name": s.name,
                        "phase": s.phase,
                        "estimate_s": round(s.estimate, 1),
                        "status": s.status,
                        "seconds": None if s.seconds is None else round(s.seconds, 1),
                        **({"note": s.note} if s.note else {}),
                    }
                    for s in self.steps
                ],
            },
            "cases": rows,
            "larger_graphs": larger,
            "peers": {
                **peers.get("timed", {}),
                "dgl": DGL,
                "per_graph": {self.graphs[k]: v for k, v in peers.items()},
            },
            "passed": False if False in verdicts else (None if None in verdicts or not verdicts else True),
            "seconds": self.elapsed(),
        }

    def write(self) -> str:
        """gpu-check.json and gpu-check.md as they stand, each replaced at once (a reader never sees half)."""
        with self.lock:
            report = self.report()
            table = markdown(report)
            for name, text in (
                ("gpu-check.json", json.dumps(report, indent=1, default=str) + "\n"),
                ("gpu-check.md", table),
            ):
                tmp = self.out / f".{name}.tmp"
                tmp.write_text(text)
                os.replace(tmp, self.out / name)
            return table


def _dgl() -> dict:
    try:
        import dgl  # noqa: F401

        return {"status": "installed", "note": "DGL imports here but gpu-check does not time it yet"}
    except Exception:  # noqa: BLE001 - absent or broken: reported
        return {"status": "not installed"}


DGL: dict = {}


def vs_pyg(label: str, epoch_s: float | None, peers: dict, device: str) -> float | None:
    """A case's epoch over PyG's on the same graph and device: the full-graph epoch for full-graph strategies,
    the mini-batch one for mini-batch strategies (None: no PyG figure on that device)."""
    peer = peers.get("pyg_minibatch" if mini_batch(label) else "pyg") or {}
    if epoch_s is None or peer.get("status") != "ok" or peer.get("device") != device:
        return None
    return epoch_s / peer["median_epoch_s"]


def counts(facts: dict) -> dict:
    return {k: facts.get(k) for k in COUNTS if k in facts}


def device_row(label: str, facts: dict | None, peers: dict, device: str) -> dict:
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
        **counts(facts),
        "vs_pyg": vs_pyg(label, facts["median_epoch_s"], peers, device),
    }


def compare(
    label: str,
    results: dict,
    dut: str,
    plans: dict,
    peers: dict | None = None,
    reference: bool = True,
    device: str = "cuda",
    key: str = "timed",
) -> dict:
    """One row: exactness in float64, float32 agreement, epoch times and memory on both devices. ``passed``:
    True, False (a run failed or a comparison did), or None (not checked: a run it needs has not run)."""
    ex_cpu, ex_dut = (
        results.get(("exact", label, "float64", "cpu")),
        results.get(("exact", label, "float64", dut)),
    )
    t_cpu, t_dut = results.get((key, label, "float32", "cpu")), results.get((key, label, "float32", dut))
    t_ref = results.get((key, label, "float64", "cpu"))
    row: dict = {"case": label, "notes": []}
    needed = {"exact cpu": ex_cpu, "exact " + dut: ex_dut, "float32 cpu": t_cpu, "float32 " + dut: t_dut}
    if reference:
        needed["float64 cpu"] = t_ref
    for name, facts in needed.items():
        if facts and facts["status"] != "ok":
            row["notes"].append(f"{name}: {facts.get('note', facts['status'])}")

    def ok(f):
        return bool(f) and f["status"] == "ok"

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
        row.update(counts(t_dut))
        row["vs_pyg"] = vs_pyg(label, t_dut["median_epoch_s"], peers or {}, device)
    plan_ok, _, plan = plans.get((key, label), (False, None, None))
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
    failed = any(f and f["status"] == "failed" for f in needed.values())
    if failed or row["within_bound"] is False or (row["float64_max_diff"] or 0.0) > TOL["float64"]:
        row["passed"] = False
    elif not all(ok(f) for f in needed.values()):
        row["passed"] = None  # not checked: a run it needs was skipped or has not run yet
    else:
        row["passed"] = row["float32_passed"] is not None
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


def _counts(row: dict) -> str:
    return " / ".join(
        _fmt(row.get(k), "d") for k in ("ops_per_step", "sync_ops_per_step", "h2d_copies_per_step")
    )


def _passed(row: dict) -> str:
    if row["passed"] is None:
        return "—"
    return (
        ("yes" + (" (f32 as the CPU)" if row["float32_passed"] == "as the CPU" else ""))
        if row["passed"]
        else "NO"
    )


def markdown(report: dict) -> str:
    env, settings = report["environment"], report["settings"]
    state = {"running": " (running)", "cut short": " (cut short)", "done": ""}.get(report["state"], "")
    head = (
        f"GPU check {env['date']}{state}: {env.get('gpu', env['device'])}, torch {env['torch']}, "
        f"{env['cpu_cores']} CPU cores; SAGE 2 layers hidden {settings['hidden']}, "
        f"{settings['epochs']} epochs on {', '.join(settings['graphs'])}\n\n"
    )
    lines = [
        f"| case | residency | f64 max Δ | f32 max Δ | f32 Δ to f64: cpu / dev | epoch cpu "
        f"({settings['cpu_threads']} threads) | epoch dev | speed-up | ÷ PyG | ops / syncs / h2d per step "
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
            f"{_counts(row)} | {_fmt(row.get('dut_peak_bytes') and row['dut_peak_bytes'] / 2**20, '.0f')} MiB | "
            f"{_fmt(bound and bound / 2**20, '.0f')} MiB ({row.get('plan_bound_source') or '—'}) | {_passed(row)} |"
        )
    notes = [f"- {row['case']}: {n}" for row in report["cases"] for n in row["notes"]]
    text = head + "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else "")
    for graph, rows in (report.get("larger_graphs") or {}).items():
        text += (
            f"\nOn {graph}, the device alone:\n\n| case | epoch dev | ÷ PyG | ops / syncs / h2d per step | peak dev |\n"
            "|---|---|---|---|---|\n"
        )
        for row in rows:
            if row["status"] != "ok":
                text += f"| {row['case']} | {row['status']} {row.get('note') or ''} | | | |\n"
                continue
            text += (
                f"| {row['case']} | {row['dut_epoch_s'] * 1e3:.1f} ms | {_fmt(row.get('vs_pyg'), '.2f')}× | "
                f"{_counts(row)} | {row['dut_peak_bytes'] / 2**20:.0f} MiB |\n"
            )
    for graph, peers in report["peers"].get("per_graph", {}).items():
        for name, what in (("pyg", "SAGEConv full-graph"), ("pyg_minibatch", "NeighborLoader mini-batch")):
            peer = peers.get(name)
            if not peer:
                continue
            if peer["status"] == "ok":
                how = (
                    f" ({','.join(map(str, peer['fanouts']))}, batch {peer['batch_size']})"
                    if "fanouts" in peer
                    else ""
                )
                text += f"\nPyG {peer['version']} {what}{how} on {graph}, {peer['device']}: {peer['median_epoch_s'] * 1e3:.1f} ms per epoch."
            else:
                text += f"\nPyG {what} on {graph}: {peer['status']}: {peer.get('note', '')}"
    text += f"\nDGL: {report['peers']['dgl'].get('status', '—')}.\n"
    steps = report["estimate"]["steps"]
    left_out = [f"{s['name']} ({s['status']})" for s in steps if s["status"] in ("skipped", "trimmed")]
    text += (
        f"\nSteps: {sum(s['status'] == 'done' for s in steps)} of {len(steps)} done in {report['seconds']:.0f} s "
        f"(estimated {report['estimate']['total_s']:.0f} s, --budget {settings['budget_s']:.0f} s)"
        + (f"; not run: {', '.join(left_out)}" if left_out else "")
        + "\n"
    )
    verdict = {True: "yes", False: "NO", None: "not checked"}[report["passed"]]
    return text + f"\nAll passed: {verdict} ({report['seconds']:.0f} s)\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-check", help="output folder (default: gpu-check)")
    ap.add_argument(
        "--device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="the device under test; cpu stands in for a GPU (tests)",
    )
    ap.add_argument(
        "--full", action="store_true", help="the thorough sweep: every strategy, g3 (bins), K = 2 cases"
    )
    ap.add_argument("--exact-graph", default="synthetic:tiny", help="graph of the float64 exactness runs")
    ap.add_argument(
        "--graph",
        default="synthetic:small,synthetic:medium",
        help="graphs of the timed runs, comma-separated: the first is also run on the CPU (float32 "
        "agreement), the others on the device only",
    )
    ap.add_argument("--epochs", type=int, default=4, help="epochs of the runs on the timed graphs (exact: 3)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument(
        "--parallel", type=int, default=0, help="CPU runs at a time [default: cores / (threads + 1)]"
    )
    ap.add_argument(
        "--strategies",
        default="",
        help="comma-separated case labels to run [default: g3, bns-gcn, distdgl; all with --full]",
    )
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
        default=None,
        help="seconds for the whole check, preparation included [default: 300; 1500 with --full]: the steps that "
        "do not fit by their estimate are trimmed before the start, and a step that no longer fits is skipped",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the steps and their estimate, run nothing")
    ap.add_argument(
        "--work",
        default="",
        help="folder of the graphs, partitions, plans and runs (scratch: hundreds of MiB) [default: OUT/work]",
    )
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="run the g3 commands in this process rather than one interpreter each (their workers are still "
        "processes): less start-up on a small machine; no per-command time limit",
    )
    ap.add_argument(
        "--bundle",
        default=str(REPO / ".gpu-bundle"),
        help="folder of carried wheels (make gpu-bundle): unpacked and put on the path [default: .gpu-bundle]",
    )
    ap.add_argument(
        "--make-bundle", action="store_true", help="download the bundle's wheels into --bundle and exit"
    )
    ap.add_argument("--bundle-python", default="3.12", help="CPython version of the bundle's compiled wheels")
    ap.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.make_bundle:
        return make_bundle(Path(a.bundle), a.bundle_python)
    if a.device == "cuda" and not torch.cuda.is_available() and not a.dry_run:
        print(f"gpu-check: no CUDA device on this machine (torch {torch.__version__}); nothing run.")
        return 0
    bundle = use_bundle(Path(a.bundle))
    missing = missing_modules(a.full)
    if missing:
        print(
            f"gpu-check: {sys.executable} (Python {platform.python_version()}) cannot import {', '.join(missing)}"
            f"{f' with the {len(bundle)} bundled wheels of {a.bundle}' if bundle else ''} (the bundled ones: "
            f"`make gpu-bundle GPU_BUNDLE_PY={sys.version_info.major}.{sys.version_info.minor}` here, carry "
            ".gpu-bundle/); nothing run."
        )
        return 1
    DGL.update(_dgl())
    check = Check(a)
    check.bundle = bundle
    trimmed = check.trim()
    est = check.estimate()
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in est["by_phase"].items())
    kept = [s for s in check.steps if s.status != "trimmed"]
    print(
        f"gpu-check: {len(kept)} steps, estimated {est['total_s']:.0f} s ({phases}) of --budget {check.budget:.0f} s"
        + (f"; {len(bundle)} bundled wheels" if bundle else ""),
        flush=True,
    )
    if trimmed:
        print(
            f"gpu-check: trimmed to fit --budget: {'; '.join(f'{s.name} ({s.estimate:.0f} s)' for s in trimmed)}",
            flush=True,
        )
    if not any(s.phase == "device runs" for s in kept):
        first = next(s for s in check.steps if s.phase == "device runs")
        print(
            f"gpu-check: refused: no device run fits --budget {check.budget:.0f} s (the first, {first.name}, "
            f"is estimated at {first.estimate:.0f} s after its graph's preparation)"
        )
        return 2
    if a.dry_run:
        for s in check.steps:
            print(
                f"  {s.estimate:6.0f} s  {s.phase:<15} {s.name}{'  (trimmed)' if s.status == 'trimmed' else ''}"
            )
        return 0

    def cut_short(signum, frame):  # killed at a time limit: what was measured stays, marked as cut short
        check.state = "cut short"
        if check.lock.acquire(timeout=5):
            check.write()
        for proc in list(LIVE):
            proc.send_signal(signum)  # g3 ends its workers on SIGTERM
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, cut_short)
    try:
        return check.run()
    except KeyboardInterrupt:
        check.state = "cut short"
        check.write()
        print(
            f"gpu-check: cut short after {check.elapsed():.0f} s; {check.out}/gpu-check.json holds what it measured"
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
