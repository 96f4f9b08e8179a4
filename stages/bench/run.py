"""`g3 bench STORE`: training strategies side by side, next to DGL and PyG, on the same graph and model.

Systems, all timed the same way (median of the epochs after the first, which is warm-up and fetches the
input features):

* every ``--strategies`` spec with each ``--workers K`` (its partition, plan and ``g3 train`` run; the thread
  budget split over the workers): :mod:`.runs`;
* g3 single-process full-graph (g3's layers and kernels on one whole-graph block: :mod:`.single`);
* PyG (``pip install 'g3[peers]'`` / ``make peers``): standard layers on a ``torch.sparse`` CSR adjacency,
  run as a subprocess of this Python (stages/bench/peers/pyg_runner.py); its mini-batch mode (``NeighborLoader``)
  needs torch-sparse or pyg-lib besides (``make peers-minibatch`` builds torch-sparse from source);
* DGL (``make peers-dgl`` builds ``.venv-dgl`` with torch 2.2.1 + dgl 2.1.0): run as a subprocess of that
  environment's Python (stages/bench/peers/dgl_runner.py).

Every entry records its epoch times; the strategies also bytes sent per epoch, final test accuracy and peak
memory per worker, the peers their final test accuracy. The peers read the graph from a neutral ``.npz``
exported once (:mod:`.export`). A peer that is not installed gets a row saying so. Output: ``bench.json``,
``bench.png`` and a terminal table (docs/ARTIFACTS.md, "Bench output").
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from stages.bench.export import export_graph, read_graph
from stages.bench.runs import check_candidate, entry, parse_spec, run_strategy, split_specs
from stages.common.atomic import check_result, check_work_folder, write_json_atomic
from stages.common.errors import G3InputError
from stages.common.settings import setting
from stages.common.store import GraphStore
from stages.common.units import parse_size
from stages.strategies.registry import REFERENCE_STRATEGY, knob_values, strategy_spec

BENCH_SCHEMA = "g3.bench"
BENCH_VERSION = 2  # 2: entries of several strategies (strategy, method, bytes, accuracy, memory)
REPO = Path(__file__).resolve().parents[2]
PEERS_DIR = Path(__file__).resolve().parent / "peers"
PEERS = ("pyg", "dgl")
INSTALL_HINT = {"pyg": "make peers", "dgl": "make peers-dgl"}
# what a peer's mini-batch mode needs besides: PyG's NeighborLoader samples with pyg-lib or torch-sparse, neither
# with a wheel for g3's torch (`make peers-minibatch` builds torch-sparse from source)
MINIBATCH_HINT = {"pyg": "make peers-minibatch"}
PEER_NAMES = {"pyg": "PyG", "dgl": "DGL"}


def parse_worker_counts(text: str) -> tuple[int, ...]:
    """``1,2,4`` → the worker counts (each >= 1)."""
    try:
        ks = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ValueError(f"expected a comma-separated list of integers, got {text!r}") from None
    if not ks:
        raise ValueError("give at least one worker count, e.g. 1,2,4")
    if any(k < 1 for k in ks):
        raise ValueError("worker counts must be >= 1")
    return ks


def parse_peers(text: str) -> tuple[str, ...]:
    """``pyg,dgl`` (or ``none``) → the peers to run."""
    t = str(text).strip().lower()
    if t in ("", "none"):
        return ()
    out = tuple(p.strip() for p in t.split(",") if p.strip())
    for p in out:
        if p not in PEERS:
            raise ValueError(f"{p!r} is not one of {', '.join(PEERS)} (or 'none')")
    return out


def parse_link_rates(text: str) -> tuple[str, ...]:
    """``100mbit,1gbit`` → the emulated link rates, each once, as `g3 train --emulate-link` names them."""
    from stages.common.units import parse_rate, rate_label

    return tuple(dict.fromkeys(rate_label(parse_rate(t)) for t in str(text).split(",") if t.strip()))


@dataclass
class BenchOptions:
    """What `g3 bench` is told: each field with a ``setting`` is its option."""

    model: str = setting(
        "sage",
        "GNN model of every system (the peers use their standard SAGEConv / GCNConv / GATConv).",
        choices=("sage", "gcn", "gat"),
    )
    layers: int = setting(2, "Number of GNN layers.")
    hidden: int = setting(16, "Hidden width (per head for GAT).")
    heads: int = setting(8, "GAT attention heads.")
    strategies: tuple[str, ...] = setting(
        ("g3",),
        "Training strategies to run side by side with each --workers K, comma-separated specs "
        "NAME[@METHOD][{option=value,...}]: the strategy, the partition method (default: the strategy's own, see "
        "`g3 plan --help`) and `g3 plan` options without the dashes, e.g. "
        "'g3,bns-gcn,bns-gcn@chunk,bns-gcn{boundary-sample=0.1},sancus{staleness=drift:0.02,sancus-comm=p2p}'.",
        parse=lambda text: tuple(split_specs(text)),
        cli_default="g3",
    )
    workers: tuple[int, ...] = setting(
        (1, 2, 4),
        "Worker counts of every strategy (partition, plan, train), comma-separated.",
        parse=parse_worker_counts,
        cli_default="1,2,4",
    )
    epochs: int = setting(
        5, "Epochs per system; the median excludes the first (warm-up) when there are several."
    )
    threads: int | None = setting(
        None, "Total threads of every system (g3 splits them over its workers) [default: all cores]."
    )
    lr: float = setting(0.01, "Adam learning rate (every system).")
    dropout: float = setting(0.5, "Dropout between layers (every system).")
    pipeline: str = setting(
        "multi",
        "The bin schedule of g3 and the chunk pipeline of neutrontp (see g3 train --help).",
        choices=knob_values("pipeline"),
    )
    bin_size: int | None = setting(
        None, "The g3 strategy's plan: fixed nodes per bin [default: from memory]."
    )
    device_memory: int | None = setting(
        None,
        "Device memory per worker of the plans that size bins or chunks by it (g3, neutrontp), e.g. 8GiB "
        "[default: auto].",
        parse=parse_size,
    )
    peers: tuple[str, ...] = setting(
        PEERS,
        "Peers to run: pyg, dgl (comma-separated) or none. PyG needs `make peers`, DGL `make peers-dgl`.",
        parse=parse_peers,
        cli_default="pyg,dgl",
    )
    single: bool = setting(True, "Also run single-process g3 full-graph training (--no-single: skip it).")
    dgl_python: str | None = setting(
        None,
        "Python of the DGL environment [default: $G3_DGL_PYTHON, else .venv-dgl/bin/python].",
        path="input",
    )
    timeout: float = setting(3600.0, "Seconds allowed per peer run.")
    links: tuple[str, ...] = setting(
        (),
        "Run every strategy on emulated hosts joined by links of each RATE (e.g. 100mbit,1gbit,10gbit; `g3 "
        "train --emulate-link`, needs root): one table per rate, one of epoch time against the rate, and "
        "bench-links.png. The peers and single-process g3 run once, without a network.",
        flag="--emulate-link",
        parse=parse_link_rates,
        metavar="RATE[,RATE…]",
    )
    hosts: int | None = setting(
        None, "With --emulate-link: emulated hosts of every run [default: one per worker]."
    )
    trace: bool = setting(
        False,
        "Train every strategy with `g3 train --trace`: the share of its communication hidden under compute "
        "goes into bench.json (tracing costs a little time per span).",
    )


def median_epoch(times: list[float]) -> float | None:
    """Median epoch time without the first (warm-up) epoch, when there is more than one."""
    if not times:
        return None
    return float(statistics.median(times[1:] if len(times) > 1 else times))


# ------------------------------------------------------------------------------------------------------------
# g3 single-process
# ------------------------------------------------------------------------------------------------------------


def run_single(graph: dict, o: BenchOptions, threads: int) -> dict:
    from stages.bench.single import train_single

    res = train_single(graph, o.model, o.layers, o.hidden, o.heads, o.epochs, o.lr, o.dropout, threads)
    return entry(
        "g3-single",
        "g3, single process, full graph",
        workers=1,
        threads=threads,
        epoch_seconds=res["epoch_seconds"],
        test_acc=res["test_acc"],
        note="one whole-graph block, no runtime",
    )


# ------------------------------------------------------------------------------------------------------------
# Peers
# ------------------------------------------------------------------------------------------------------------


def peer_python(peer: str, o: BenchOptions) -> Path | None:
    """The interpreter that runs ``peer``, or None when the peer is not installed."""
    if peer == "pyg":
        return Path(sys.executable) if importlib.util.find_spec("torch_geometric") is not None else None
    py = Path(o.dgl_python or os.environ.get("G3_DGL_PYTHON") or REPO / ".venv-dgl" / "bin" / "python")
    return py if py.is_file() and os.access(py, os.X_OK) else None


def not_installed(peer: str, why: str = "", hint: str | None = None, mode: str = "") -> dict:
    note = f"{PEER_NAMES[peer]}: not installed ({hint or INSTALL_HINT[peer]})"
    label = PEER_NAMES[peer] + mode
    return entry(peer, label, "not installed", note=note + (f" — {why}" if why else ""), workers=1)


def run_peer(
    peer: str,
    graph_file: Path,
    o: BenchOptions,
    threads: int,
    log_dir: Path,
    minibatch: tuple[tuple[int, ...], int] | None = None,
) -> dict:
    """Run a peer's runner script as a subprocess on the neutral graph; its JSON line becomes the entry.
    ``minibatch``: (fanouts, batch size) — the peer's own neighbour sampler and loader instead of full-graph
    training (DGL's NeighborSampler + DataLoader, PyG's NeighborLoader)."""
    py = peer_python(peer, o)
    if py is None:
        return not_installed(peer)

    def failed(note: str, label: str = PEER_NAMES[peer], **kw) -> dict:
        return entry(peer, label, "failed", note=note, workers=1, **kw)

    script = PEERS_DIR / f"{peer}_runner.py"
    if not script.is_file():
        return failed(f"runner script missing: {script}")
    cmd = [str(py), str(script), str(Path(graph_file).resolve())]
    for name in ("model", "layers", "hidden", "heads", "epochs", "lr", "dropout"):
        cmd += [f"--{name}", str(getattr(o, name))]
    cmd += ["--threads", str(threads)]
    mode = ""
    if minibatch:
        cmd += ["--fanouts", ",".join(map(str, minibatch[0])), "--batch-size", str(minibatch[1])]
        mode = f" mini-batch ({','.join(map(str, minibatch[0]))}) B={minibatch[1]}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), DGLBACKEND="pytorch")
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=o.timeout, cwd=str(PEERS_DIR)
        )
    except subprocess.TimeoutExpired:
        return failed(f"timed out after {o.timeout:.0f} s")
    log_name = f"{peer}{'-minibatch' if minibatch else ''}.log"
    (log_dir / log_name).write_text(
        f"$ {' '.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        if "ModuleNotFoundError" in err or "ImportError" in err:
            return not_installed(peer, err, MINIBATCH_HINT.get(peer) if minibatch else None, mode)
        return failed(f"exit {proc.returncode}: {err}", PEER_NAMES[peer] + mode, log=str(log_dir / log_name))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return failed("no JSON result on stdout")
    res = json.loads(lines[-1])
    label = f"{PEER_NAMES[peer]} {res.get('version', '')}".strip() + mode
    return entry(
        peer,
        label,
        workers=1,
        threads=res.get("threads", threads),
        epoch_seconds=res["epoch_seconds"],
        version=res.get("version"),
        torch=res.get("torch"),
        test_acc=res.get("test_acc"),
        mode=res.get("mode", "full-graph"),
        seeds_per_second=res.get("seeds_per_second"),
        # the runner's own process: its graph, model and activations (one worker)
        peak_memory_bytes=[int(res["peak_memory_bytes"])] if res.get("peak_memory_bytes") else None,
        load_seconds=res.get("load_seconds"),
        load_peak_memory_bytes=res.get("load_peak_memory_bytes"),
        note=f"torch {res.get('torch')}" + (f", {res['adjacency']}" if res.get("adjacency") else ""),
    )


# ------------------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------------------


def finish(entries: list[dict]) -> dict:
    """Medians and ratios (to one-worker g3 and to DGL) of every entry; the goal check."""
    for e in entries:
        e["median_epoch_seconds"] = median_epoch(e["epoch_seconds"]) if e["status"] == "ok" else None
    # one-worker g3 on the same link (emulated hosts: each rate has its own)
    refs_g3 = {}
    for e in entries:
        if (
            e["system"] == REFERENCE_STRATEGY
            and e.get("workers") == 1
            and e["median_epoch_seconds"]
            and not e.get("options")
        ):
            refs_g3.setdefault(e.get("link"), e)
    ref_g3 = refs_g3.get(None) or next(iter(refs_g3.values()), None)
    ref_dgl = next(
        (
            e
            for e in entries
            if e["system"] == "dgl"
            and e["median_epoch_seconds"]
            and e.get("mode", "full-graph") == "full-graph"
        ),
        None,
    )
    for e in entries:
        m = e["median_epoch_seconds"]
        ref = refs_g3.get(e.get("link"), ref_g3)
        e["vs_g3_1"] = m / ref["median_epoch_seconds"] if m and ref else None
        e["vs_dgl"] = m / ref_dgl["median_epoch_seconds"] if m and ref_dgl else None
    goal = None
    if ref_g3 and ref_dgl:
        goal = {
            "g3_1_worker": ref_g3["median_epoch_seconds"],
            "dgl": ref_dgl["median_epoch_seconds"],
            "met": ref_g3["median_epoch_seconds"] <= ref_dgl["median_epoch_seconds"],
        }
    return {"entries": entries, "goal": goal}


def peer_modes(specs) -> list[tuple[tuple[int, ...], int] | None]:
    """How the peers run: full-graph (None) when a full-graph strategy is benchmarked or none is, and once per
    distinct (fanouts, batch size) of the mini-batch strategies, with their plans' values (the options each
    strategy's spec gives: ``peer_setup``)."""
    modes: list = []
    for spec in specs:
        strategy = strategy_spec(spec.name)
        parse = {o.name: o.parse for o in strategy.plan_options}
        opts = {o.name: o.parse(o.default) for o in strategy.plan_options if o.default is not None}
        opts.update({k: parse[k](v) for k, v in spec.options if k in parse})  # train knobs do not matter here
        setup = strategy.peer_setup(opts)
        if setup is None:  # full-graph, or clustergcn's cluster batches: nothing to match
            continue
        mode = (tuple(setup[0]), int(setup[1]))
        if mode not in modes:
            modes.append(mode)
    if not modes or any(not strategy_spec(s.name).mini_batch for s in specs):
        modes.insert(0, None)
    return modes


def run_bench(
    store_path: str | Path, o: BenchOptions, out: str | Path | None = None, force: bool = False
) -> dict:
    """Entry point of `g3 bench`. OUT keeps its partitions and plans between invocations (reused while they
    match the store and the options); an earlier ``bench.json`` is replaced only with ``force``."""
    store = GraphStore.open(store_path)
    if o.model not in ("sage", "gcn", "gat"):
        raise G3InputError(f"unknown --model {o.model!r}")
    if o.epochs < 1 or o.layers < 1 or o.hidden < 1 or any(k < 1 for k in o.workers):
        raise G3InputError("--epochs, --layers, --hidden and --workers must be >= 1")
    for p in o.peers:
        if p not in PEERS:
            raise G3InputError(f"unknown peer {p!r} (choose from {', '.join(PEERS)})")
    specs = [parse_spec(s) for s in o.strategies]
    if not specs and not o.single and not o.peers:
        raise G3InputError("nothing to benchmark: no --strategies, --no-single and --peers none")
    if o.threads is not None and o.threads < 1:
        raise G3InputError("--threads must be >= 1")
    if not (o.timeout > 0 and math.isfinite(o.timeout)):
        raise G3InputError("--timeout must be a positive number of seconds")
    for spec in specs:  # every candidate's plan options and train settings, before the first run starts
        check_candidate(o, spec)
    threads = o.threads or os.cpu_count() or 1
    out = (Path(out) if out else Path(store.path).parent / f"{Path(store.path).name}.bench").resolve()
    check_work_folder(
        out, "-o", lambda f: (f / "bench.json").is_file() or any(f.glob("*.bench-stamp.json")), (store.path,)
    )
    check_result(out / "bench.json", force, "an earlier benchmark")
    out.mkdir(parents=True, exist_ok=True)
    load_before = list(os.getloadavg())
    t0 = time.perf_counter()
    graph_file = export_graph(store.path, out / "graph.npz")
    if o.links:
        from stages.kits.runtime.launch.netemu import parse_rate, why_not_available

        for link in o.links:
            try:
                parse_rate(link)
            except ValueError as exc:
                raise G3InputError(f"--emulate-link: {exc}") from None
        reason = why_not_available()
        if reason:
            raise G3InputError(f"--emulate-link: the emulated network cannot be built here: {reason}")
    entries = [
        run_strategy(store, o, spec, k, out, threads, link)
        for spec in specs
        for k in o.workers
        for link in (o.links or (None,))
    ]
    if o.single:
        entries.append(run_single(read_graph(graph_file), o, threads))
    modes = peer_modes(specs)
    for peer in o.peers:
        for mb in modes:
            entries.append(run_peer(peer, graph_file, o, threads, out / "logs", minibatch=mb))
    result = {
        "schema": BENCH_SCHEMA,
        "schema_version": BENCH_VERSION,
        "store": store.summary(),
        "options": asdict(o),
        "threads": threads,
        "graph_file": str(graph_file),
        **finish(entries),
        "load_average": {"before": load_before, "after": list(os.getloadavg())},
        "cpu_count": os.cpu_count(),
        "seconds": round(time.perf_counter() - t0, 1),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    from stages.bench.report import plot_bench

    plot_bench(result, out / "bench.png")
    result["files"] = {"json": str(out / "bench.json"), "png": str(out / "bench.png")}
    if len(o.links) > 1:
        from stages.bench.report import plot_links

        plot_links(result, out / "bench-links.png")
        result["files"]["links_png"] = str(out / "bench-links.png")
    write_json_atomic(out / "bench.json", result)
    result["path"] = str(out)
    return result
