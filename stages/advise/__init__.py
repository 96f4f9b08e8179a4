"""`g3 advise STORE`: which strategy, and how many workers, for this graph, model and cluster — predicted,
explained, ranked.

For every registered strategy (stages/strategies/: each entry's ``advise_variants``, its main
options), every worker count K and every link rate it partitions and plans the store (through the stages' own
entry functions, cached), calibrates the simulator on this machine — one short `g3 train --profile` of the bins
strategy's plan gives the compute rates of every full-graph and tensor-parallel model, one short run of each
sampling strategy's plan calibrates its per-step model, as `g3 simulate --run` takes it — and asks `g3 simulate`'s
models (:func:`stages.simulate.simulate_plan`) for the epoch at that K and link rate. Memory per worker comes
from the plan (its bins or chunks sized by ``--device-memory``, else its per-worker estimate). What cannot run
is refused with its reason; what cannot be predicted says why. Ranked best first: fitting and predicted
candidates by predicted epoch time, then those that do not fit, then the rest. Writes ``OUT/advise.json``
(schema ``g3.advise``, docs/ARTIFACTS.md); with ``plans`` every candidate's plan is kept there, ready for
``g3 train PLAN --emulate-link RATE``.

With ``cluster`` (a ``g3.cluster`` file, :mod:`.cluster`) the hosts are not alike: K is the cluster's workers,
every candidate is planned for the smallest device memory among its hosts (so every worker's bins fit), its fit
is checked per host kind, and the simulator gives each worker its host kind's compute speed and link.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from stages.advise.report import print_advice
from stages.common.atomic import check_result, check_work_folder, write_json_atomic
from stages.common.errors import G3InputError
from stages.common.run_artifact import load_run_meta, read_metrics
from stages.common.settings import setting
from stages.common.units import parse_size
from stages.plan import MODELS
from stages.strategies import REFERENCE_STRATEGY, STRATEGIES, knob_declarations, load_plan, strategy_spec

ADVISE_SCHEMA = "g3.advise"
ADVISE_VERSION = 1
DEFAULT_BUDGET = 600.0
CALIBRATION_EPOCHS = 3  # the first epoch is dropped by every model: two steady epochs remain
AUTO_CALIBRATE_LINK = "10gbit"  # fast enough that the calibration runs measure compute, not this link
ANCHOR_FLOOR = (
    0.5  # a negative anchor (the model slower than its calibration run) takes at most half the epoch
)

# epochs of exact full-graph training to the target (`--target-epochs`): one optimizer step each; how the other
# candidates' epochs follow from it is the convergence model (`--convergence`, CONVERGENCE_MODELS)
DEFAULT_TARGET_EPOCHS = 100
DEFAULT_CONVERGENCE = "steps"
CONVERGENCE_MODELS = {
    "steps": (
        "time to target = epochs to target x predicted epoch, where every candidate takes the same number of "
        "optimizer steps as --target-epochs epochs of full-graph training (one step each): a mini-batch candidate "
        "with S steps an epoch needs ceil(target / S) epochs. Exact for the exact full-graph strategies; for "
        "mini-batch ones checked on Tolokers, K = 2 (docs/BENCHMARKS.md 'Time to target'): they needed 1.05-2.5x "
        "the epochs it gives (sampled gradients are noisier than full-graph ones), the 'epochs' model gave "
        "2.25-7x too many"
    ),
    "epochs": (
        "time to target = target epochs x predicted epoch: every candidate is taken to need the same number of "
        "epochs (--target-epochs). Exact for the exact full-graph strategies; overestimates mini-batch ones, "
        "which take several optimizer steps an epoch (2.25-7x on Tolokers, K = 2: docs/BENCHMARKS.md 'Time to "
        "target')"
    ),
}


def parse_links(text: str) -> tuple[str, ...]:
    """``1gbit,10gbit`` → the rates (lower case), each checked as `--emulate-link` checks it; bad input is one
    line naming --link."""
    from stages.kits.runtime.launch.netemu import parse_rate

    out = []
    for part in str(text).split(","):
        part = part.strip().lower()
        if not part:
            continue
        try:
            parse_rate(part)
        except ValueError as exc:
            raise G3InputError(f"--link: {exc}") from None
        if part not in out:
            out.append(part)
    if not out:
        raise G3InputError("--link: no link rate given (examples: 1gbit or 100mbit,10gbit)")
    return tuple(out)


def parse_workers(text: str) -> tuple[int, ...]:
    """``2`` or ``2,4,8``: worker counts >= 1; bad input is one line naming --workers."""
    try:
        ks = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise G3InputError(
            f"--workers: not a list of worker counts: {text!r} (examples: 2 or 2,4,8)"
        ) from None
    if not ks:
        raise G3InputError("--workers: no worker count given")
    if any(k < 1 for k in ks):
        raise G3InputError(f"--workers {text}: worker counts must be at least 1")
    return tuple(dict.fromkeys(ks))


def parse_strategies(text: str | None) -> tuple[str, ...] | None:
    """``g3,distdgl`` → those registered strategies (None: all); an unknown name is one line naming the choices."""
    if text is None or not str(text).strip() or str(text).strip().lower() == "all":
        return None
    names = tuple(dict.fromkeys(x.strip() for x in str(text).split(",") if x.strip()))
    for name in names:
        try:
            strategy_spec(name)
        except G3InputError as exc:
            raise G3InputError(f"--strategies: {exc}") from None
    return names


DEFAULT_WORKERS = (2,)
DEFAULT_LINKS = ("1gbit",)
DEFAULT_DEVICE_MEMORY = "16GiB"


@dataclass
class AdviseOptions:
    """Everything `g3 advise` can be told: each field with a ``setting`` is its option (``g3 advise --help``)."""

    workers: tuple[int, ...] | None = setting(
        None,
        "Worker counts to consider, e.g. 2 or 2,4,8 [default: 2].",
        short="-w",
        parse=parse_workers,
        metavar="K[,K…]",
    )
    links: tuple[str, ...] | None = setting(
        None,
        "Link rates per host and direction to consider, as `g3 train --emulate-link` takes them (100mbit, "
        "1gbit, 10gbit, …) [default: 1gbit].",
        flag="--link",
        parse=parse_links,
        metavar="RATE[,RATE…]",
    )
    device_memory: str | None = setting(
        None,
        "Memory of one worker's device (24GiB, 512MiB, …): g3 and neutrontp size bins and chunks by it; "
        "every candidate's peak memory per worker is checked against it [default: 16GiB].",
        metavar="SIZE",
    )
    # a cluster file (schema g3.cluster, stages/advise/cluster.py): its hosts give K, every worker's link, speed and
    # device memory, in place of workers, links and device_memory
    cluster: str | None = setting(
        None,
        "A cluster of more than one kind of host (a g3.cluster JSON file: per host kind its count, "
        "workers_per_host, device_memory, link and speed relative to this machine; docs/ARTIFACTS.md 'Cluster "
        "file'): K is its workers, each worker gets its host's link, speed and memory. Replaces --workers, "
        "--link and --device-memory.",
        path="input",
        metavar="FILE",
    )
    model: str = setting("sage", "GNN model.", choices=MODELS)
    layers: int = setting(2, "GNN layers L.")
    hidden: int = setting(16, "Hidden width H (per head for GAT).")
    heads: int = setting(8, "GAT attention heads.")
    strategies: tuple[str, ...] | None = setting(
        None,
        "Only these strategies [default: every registered one, each with its main variants].",
        parse=parse_strategies,
        metavar="S[,S…]",
    )
    budget: float = setting(
        DEFAULT_BUDGET,
        "Seconds of calibration runs on this machine at most; strategies whose run would start "
        "after it are listed as not predicted.",
        metavar="SECONDS",
    )
    calibration_epochs: int = setting(
        CALIBRATION_EPOCHS,
        "Epochs of each calibration run (the profile and each sampling strategy's run; the "
        "first is dropped by the models).",
    )
    # run the calibration runs on emulated hosts joined at this rate (`g3 train --emulate-link`: each host its own
    # cores, as the hosts of the cluster would have) instead of as local processes; None or "local": local;
    # "auto": AUTO_CALIBRATE_LINK where this machine can build emulated hosts, else local
    calibrate_link: str | None = setting(
        "auto",
        "Where the calibration runs run: on emulated hosts joined at RATE (`g3 train --emulate-link`: "
        "each host its own cores, as the cluster's hosts have; needs root), or 'local' processes sharing the "
        "machine's cores; 'auto': emulated hosts at 10gbit where this machine can build them, else local.",
        metavar="RATE|local|auto",
    )
    # add to every prediction what its model missed at its calibration point (anchor_seconds); False: the bare model
    anchor: bool = setting(
        True,
        "Add to every prediction what its model missed on its own calibration run (measured minus "
        "modelled epoch there; per step for sampling models); --no-anchor: the bare model.",
    )
    target_epochs: int = setting(
        DEFAULT_TARGET_EPOCHS,
        "Epochs exact full-graph training needs to your target accuracy (one optimizer step each).",
    )
    convergence: str = setting(
        DEFAULT_CONVERGENCE,
        "How the other candidates' epochs to the target follow: 'steps', the same "
        "optimizer steps (a mini-batch candidate with S steps an epoch needs target/S epochs), or 'epochs', the "
        "same epochs for all (checked on a real graph: docs/BENCHMARKS.md 'Time to target').",
        choices=tuple(CONVERGENCE_MODELS),
    )
    plans: str | None = setting(
        None,
        "Keep every candidate's partition and plan here; each ranking entry then names its plan and the "
        "`g3 train PLAN --emulate-link RATE` command that runs it as predicted.",
        path="output",
        metavar="PLANS_DIR",
    )
    cache: str | None = setting(
        None,
        "Partitions, plans, the profile and calibration runs, reused by later calls while the store, model "
        "and options are unchanged [default: OUT/cache].",
        path="output",
    )
    latency: float | None = None  # seconds per message [default: g3 simulate's]

    def resolved(self) -> AdviseOptions:
        """The options with the cluster's defaults filled in: a cluster file gives the workers, links and device
        memory (given beside it, they are refused), otherwise those not given take their defaults."""
        if self.cluster is not None:
            given = [
                flag
                for name, flag in (
                    ("workers", "--workers"),
                    ("links", "--link"),
                    ("device_memory", "--device-memory"),
                )
                if getattr(self, name) is not None
            ]
            if given:
                raise G3InputError(
                    f"--cluster gives the workers, links and device memory: drop {', '.join(given)}"
                )
        return replace(
            self,
            workers=DEFAULT_WORKERS if self.workers is None else self.workers,
            links=DEFAULT_LINKS if self.links is None else self.links,
            device_memory=DEFAULT_DEVICE_MEMORY if self.device_memory is None else self.device_memory,
        )


def resolve_calibrate_link(text: str | None) -> str | None:
    """``auto`` → AUTO_CALIBRATE_LINK where emulated hosts can be built here (root or CAP_NET_ADMIN, ip and tc),
    else None (local processes); ``local`` → None; a rate stays."""
    if text == "auto":
        from stages.kits.runtime.launch.netemu import why_not_available

        return AUTO_CALIBRATE_LINK if why_not_available() is None else None
    return None if text in (None, "local") else text


def _check(options: AdviseOptions, num_nodes: int, cluster=None) -> int:
    from stages.common.model_spec import MODEL_KINDS
    from stages.kits.runtime.launch.netemu import parse_rate

    if not options.workers or any(int(k) < 1 for k in options.workers):
        raise G3InputError("--workers: worker counts must be at least 1")
    if max(options.workers) > num_nodes:
        if cluster is not None:
            raise G3InputError(
                f"its {cluster.workers} workers are more than the store's {num_nodes} nodes",
                path=cluster.path,
            )
        raise G3InputError(
            f"--workers {max(options.workers)}: more workers than the store's {num_nodes} nodes"
        )
    if not options.links:
        raise G3InputError("--link: no link rate given")
    for link in options.links if cluster is None else ():  # a cluster's links are checked by its reader
        try:
            parse_rate(link)
        except ValueError as exc:
            raise G3InputError(f"--link: {exc}") from None
    try:
        memory = parse_size(options.device_memory)
    except ValueError as exc:
        raise G3InputError(f"--device-memory: {exc}") from None
    if memory <= 0:
        raise G3InputError("--device-memory must be positive")
    if options.model not in MODEL_KINDS:
        raise G3InputError(f"--model {options.model}: not a model (choose from {', '.join(MODEL_KINDS)})")
    if options.layers < 1 or options.hidden < 1 or options.heads < 1:
        raise G3InputError("--layers, --hidden and --heads must be at least 1")
    parse_strategies(",".join(options.strategies or ()))
    if not options.budget > 0:
        raise G3InputError("--budget must be positive (seconds of calibration runs)")
    if options.convergence not in CONVERGENCE_MODELS:
        raise G3InputError(
            f"--convergence must be one of {', '.join(CONVERGENCE_MODELS)}, not {options.convergence!r}"
        )
    if options.target_epochs < 1:
        raise G3InputError("--target-epochs must be at least 1")
    if options.calibrate_link not in (None, "local", "auto"):
        try:
            parse_rate(options.calibrate_link)
        except ValueError as exc:
            raise G3InputError(f"--calibrate-link: {exc}") from None
    if options.calibration_epochs < 2:
        raise G3InputError("--calibration-epochs must be at least 2 (the models drop the first epoch)")
    return memory


# ------------------------------------------------------------------------------------------------------------
# The cache: partitions, plans, the profile and calibration runs, reused while what made them is unchanged
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Cache:
    root: Path
    plans: Path
    reused: list[str] = field(default_factory=list)
    made: list[str] = field(default_factory=list)

    def _stamp(self, folder: Path) -> Path:
        """Beside the item (a --plans folder keeps its own stamps, whichever cache a later call uses)."""
        return folder.parent / ".advise-stamps" / f"{folder.name}.json"

    def fresh(self, folder: Path, key: dict, marker: str) -> bool:
        """Whether ``folder`` was made by advise from ``key`` and is still whole (its ``marker`` file there)."""
        stamp = self._stamp(folder)
        if not (folder / marker).is_file() or not stamp.is_file():
            return False
        try:
            ok = json.loads(stamp.read_text()) == json.loads(json.dumps(key, default=str))
        except json.JSONDecodeError:
            return False
        if ok and str(folder) not in self.reused and str(folder) not in self.made:
            self.reused.append(str(folder))
        return ok

    def done(self, folder: Path, key: dict) -> None:
        write_json_atomic(self._stamp(folder), json.loads(json.dumps(key, default=str)))
        self.made.append(str(folder))


ADVISE_MARK = ".g3-advise"  # in every folder g3 advise fills: what --plans and --cache may reuse


def is_advise_folder(folder: Path) -> bool:
    """Whether g3 advise filled ``folder``: its mark, or (folders filled before the mark existed) the stamps it
    keeps beside what it made, in the folder or one of its subfolders."""
    return (
        (folder / ADVISE_MARK).is_file()
        or (folder / ".advise-stamps").is_dir()
        or any((sub / ".advise-stamps").is_dir() for sub in folder.iterdir() if sub.is_dir())
    )


def _store_key(store: Path) -> dict:
    from stages.common.store import GraphStore

    s = GraphStore.open(store)
    return {"path": str(store.resolve()), "checksums": s.meta.get("checksums"), "num_nodes": int(s.num_nodes)}


def _partition(cache: Cache, store: Path, skey: dict, method: str, k: int) -> Path:
    from stages.partition import PartitionOptions, run_partition

    folder = cache.plans / f"part-{method}-k{k}"
    key = {"store": skey, "method": method, "workers": k}
    if not cache.fresh(folder, key, "partition.json"):
        run_partition(store, PartitionOptions(workers=k, method=method), out=folder, force=True)
        cache.done(folder, key)
    return folder


def _own_run(
    cache: Cache, store: Path, skey: dict, name: str, plan_options: dict, options: AdviseOptions, k0: int
) -> tuple[Path, Path]:
    """(plan, run): a short calibration run of strategy ``name``'s own plan at K0, on its default partition
    (cached like every plan and run)."""
    method = STRATEGIES[name].default_method
    part = _partition(cache, store, skey, method, k0)
    plan = _plan(
        cache,
        part,
        {"store": skey, "method": method, "workers": k0},
        name,
        plan_options,
        options,
        options.device_memory,
    )
    run = cache.root / "calibration" / f"{plan.name}.run"
    _train(cache, plan, run, {"plan": str(plan.resolve())}, options)
    return plan, run


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "default"


def _plan(
    cache: Cache,
    part: Path,
    pkey: dict,
    strategy: str,
    plan_options: dict,
    options: AdviseOptions,
    memory_text: str | None,
) -> Path:
    """The plan of ``strategy`` with ``plan_options`` (text) on ``part``, made once."""
    from stages.plan import PlanConfig, run_plan

    info = strategy_spec(strategy)
    given = dict(plan_options)
    if memory_text is not None and any(o.name == "device_memory" and o.layout for o in info.plan_options):
        given["device_memory"] = memory_text
    opts = "-".join(f"{_slug(k)}-{_slug(str(v))}" for k, v in sorted(given.items()))
    folder = cache.plans / (f"{part.name}.plan-{strategy}-{options.model}" + (f"-{opts}" if opts else ""))
    cfg = PlanConfig(
        model=options.model,
        layers=options.layers,
        hidden=options.hidden,
        heads=options.heads,
        strategy=strategy,
        options=given,
    )
    key = {
        "partition": pkey,
        "strategy": strategy,
        "options": given,
        "model": [options.model, options.layers, options.hidden, options.heads],
    }
    if not cache.fresh(folder, key, "plan.json"):
        run_plan(part, cfg, out=folder, force=True)
        cache.done(folder, key)
    return folder


def _train(
    cache: Cache, plan: Path, out: Path, key: dict, options: AdviseOptions, profile: Path | None = None
) -> Path:
    """A short run of ``plan`` (no evaluation): a calibration run, or with ``profile`` the profile it writes."""
    from stages.train import TrainConfig, run_train

    key = {**key, "epochs": options.calibration_epochs, "link": options.calibrate_link}
    marker = profile if profile is not None else out / "run.json"
    if marker.is_file() and cache.fresh(out, key, "run.json"):
        return out
    cfg = TrainConfig(
        epochs=options.calibration_epochs,
        eval_every=0,
        checkpoint_every=0,
        live=False,
        profile=str(profile.resolve()) if profile is not None else None,
        emulate_link=options.calibrate_link,
    )
    if profile is not None and profile.exists():
        profile.unlink()
    run_train(plan, cfg, out=out, force=True)
    cache.done(out, key)
    return out


# ------------------------------------------------------------------------------------------------------------
# Memory and the reason for a place
# ------------------------------------------------------------------------------------------------------------


def plan_memory(meta: dict) -> tuple[int | None, str]:
    """Peak memory of the plan's largest worker, and where it comes from: bins sized by the device (two bins
    resident: one computes while the next is copied in), a plan sized by its ``device_memory`` (chunks: at most
    half each, two resident), else the plan's per-worker estimate (the whole partition as one bin, every layer's
    activations kept for backward)."""
    workers = meta.get("workers") or []
    bins = [
        lay.get("max_bin_bytes")
        for w in workers
        for lay in (w.get("layers") or [])
        if lay.get("max_bin_bytes")
    ]
    if bins:
        return 2 * int(max(bins)), "plan: two of its largest bins (sized by --device-memory)"
    per_worker = [w.get("memory_bytes") for w in workers if w.get("memory_bytes")]
    if per_worker:
        return int(max(per_worker)), "plan: per-worker estimate (memory_bytes)"
    if meta.get("device_memory"):
        return int(meta["device_memory"]), "plan: sized to fit --device-memory (no finer estimate)"
    return None, "the plan has no memory estimate"


def worker_memory(meta: dict) -> list[int | None]:
    """Peak memory of every worker (by rank), from where :func:`plan_memory` takes the plan's: two of the
    worker's largest bins, else its per-worker estimate, else the plan's ``device_memory`` (None: no estimate)."""
    workers = sorted(meta.get("workers") or [], key=lambda w: int(w.get("rank", 0)))
    bins = [
        [lay["max_bin_bytes"] for lay in (w.get("layers") or []) if lay.get("max_bin_bytes")] for w in workers
    ]
    if any(bins):
        return [2 * int(max(b)) if b else None for b in bins]
    if any(w.get("memory_bytes") for w in workers):
        return [int(w["memory_bytes"]) if w.get("memory_bytes") else None for w in workers]
    return [int(meta["device_memory"]) if meta.get("device_memory") else None for _ in workers]


def breakdown(system: dict, epoch: float | None = None) -> dict:
    """Shares of the predicted epoch (``epoch``: the model's, or the model's plus its anchor): computing, waiting
    on the network (and the gradient all-reduce), the rest (idle: waiting for a peer, sampling, the optimizer
    step, and the anchor: what the model missed at its calibration point)."""
    epoch = float(epoch if epoch is not None else system["epoch_seconds"]) or 1e-12
    net = float(system.get("comm_wait_mean") or 0.0) + float(system.get("allreduce_seconds") or 0.0)
    parts = system.get("step_parts") or {}
    if not system.get("comm_wait_mean") and parts.get("network") and system.get("steps"):
        # a model that overlaps the network with sampling (bytegnn's DAGs): at most its period per step
        per_step = min(float(parts["network"]), float(parts.get("period") or parts["network"]))
        net += per_step * int(system["steps"])
    compute = float(system.get("busy_mean") or 0.0)
    net, compute = min(net, epoch), min(compute, epoch)
    return {
        "compute_share": compute / epoch,
        "network_share": net / epoch,
        "other_share": max(0.0, 1.0 - (compute + net) / epoch),
    }


def describe(b: dict, link: str) -> str:
    """What bounds the epoch, from the simulation's breakdown."""
    net, comp, other = b["network_share"], b["compute_share"], b["other_share"]
    if net >= 0.5:
        return f"communication-bound: {net:.0%} of the epoch is waiting on the network at {link}"
    if comp >= 0.5:
        return f"compute-bound: {comp:.0%} of the epoch computes ({net:.0%} network at {link})"
    if other >= 0.5:
        return (
            f"overhead-bound: {other:.0%} of the epoch is neither compute nor transfer (sampling, waiting for "
            f"peers, per-message latency, the overhead measured on the calibration run; {net:.0%} network at "
            f"{link})"
        )
    return f"mixed: {comp:.0%} compute, {net:.0%} network at {link}, {other:.0%} other"


def train_command(plan: str | None, link: str | None, knobs: dict, k: int) -> str | None:
    """``g3 train PLAN --emulate-link RATE [knobs]``; ``link`` None (a cluster of unlike hosts: run it on the
    cluster's hosts): no emulated link."""
    if plan is None:
        return None
    flags = "".join(f" {knob_declarations()[key][0][1].command_line(value)}" for key, value in knobs.items())
    return f"g3 train {plan}" + (f" --emulate-link {link}" if link else "") + flags


# ------------------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Candidate:
    strategy: str
    variant: str
    k: int
    plan_options: dict
    knobs: dict
    simulate: dict
    plan: Path | None = None
    calibration: Path | None = None  # run (sampling strategies) or profile
    refused: str | None = None  # cannot run: why
    unpredicted: str | None = None  # runs, but no prediction: why


def _timed_calibration(work, base: dict, k0: int, failed: str, none: dict) -> tuple[object, dict, float]:
    """One calibration run of `g3 advise`, timed: ``work()`` returns (plan, run, its result, the record's figures);
    a G3InputError is its failure (the result is then the line ``failed: why``, the figures ``none``). Returns
    (the result, calibration.json's record of it, seconds)."""
    t = time.perf_counter()
    try:
        plan, run, result, figures = work()
        status = "ok"
    except G3InputError as exc:
        plan = run = None
        result, figures, status = f"{failed}: {exc}", none, str(exc)
    dt = time.perf_counter() - t
    record = {
        **base,
        "workers": k0,
        "plan": str(plan) if plan else None,
        "run": str(run) if run else None,
        "seconds": round(dt, 3),
        "status": status,
        **figures,
    }
    return result, record, dt


def run_advise(
    store: str | Path,
    options: AdviseOptions,
    out: str | Path | None = None,
    force: bool = False,
    progress=None,
) -> dict:
    """Entry point of `g3 advise`: predict, explain and rank every strategy x variant x K x link rate; writes
    OUT/advise.json [default: STORE.advise beside the store] and returns it."""
    from stages.common.progress import make_progress
    from stages.common.store import GraphStore

    t0 = time.perf_counter()
    options = options.resolved()
    store = Path(store)
    if not (store / "zarr.json").is_file():
        raise G3InputError("not a g3 store (no zarr.json; make one with `g3 ingest`)", path=store)
    gs = GraphStore.open(store)
    # every candidate reads the whole store: a damaged array is the user's one input error, not a refusal of
    # every candidate after minutes of calibration
    bad = gs.verify()
    if bad:
        raise G3InputError(
            f"array {', '.join(bad)} does not match its checksum (damaged or edited since "
            "`g3 ingest`); ingest the graph again",
            path=store,
        )
    cluster = None
    if options.cluster:
        from stages.advise.cluster import load_cluster

        cluster = load_cluster(options.cluster)
        # K = the cluster's workers; one "link" column: the cluster; plans sized by the smallest device memory
        options = replace(
            options,
            workers=(cluster.workers,),
            links=(cluster.label,),
            device_memory=cluster.smallest_memory().device_memory,
        )
    memory = _check(options, int(gs.num_nodes), cluster)
    options = replace(options, calibrate_link=resolve_calibrate_link(options.calibrate_link))
    out = Path(out) if out else store.parent / f"{store.name}.advise"
    if out.exists() and not out.is_dir():
        raise G3InputError("is a file, not a folder: -o takes the folder advise.json goes in", path=out)
    inputs = (store, *((options.cluster,) if options.cluster else ()))
    check_work_folder(out, "-o", lambda f: (f / "advise.json").is_file() or is_advise_folder(f), inputs)
    check_result(out / "advise.json", force, "an earlier advice")
    cache_root = Path(options.cache) if options.cache else out / "cache"
    for folder, flag in ((options.cache, "--cache"), (options.plans, "--plans")):
        if folder:
            check_work_folder(Path(folder), flag, is_advise_folder, inputs)
    cache = Cache(cache_root, Path(options.plans) if options.plans else cache_root / "plans")
    for folder in (cache.root, cache.plans):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ADVISE_MARK).touch()
    skey = _store_key(store)
    names = list(options.strategies) if options.strategies else list(STRATEGIES)
    ks = sorted(options.workers)
    k0 = next((k for k in ks if k >= 2), 2)  # calibration runs: one worker moves nothing to measure

    # candidates ------------------------------------------------------------------------------------------
    cands: list[Candidate] = []
    for name in names:
        info = STRATEGIES[name]
        for v in info.advise_variants:
            for k in ks:
                c = Candidate(name, v.label, k, dict(v.plan_options), dict(v.train_knobs), dict(v.simulate))
                if options.model not in info.models:
                    why = f"{name} does not train {options.model} (it trains {', '.join(info.models)})"
                    c.refused = why + (f": {info.notes[0]}" if info.notes else "")
                elif info.simulate is None:
                    c.unpredicted = f"g3 simulate has no model of {name}"
                cands.append(c)

    bins = strategy_spec(REFERENCE_STRATEGY)  # its profile times the kernels every prediction starts from
    progress = progress if progress is not None else make_progress()
    calib: dict = {
        "profile": None,
        "runs": [],
        "budget_seconds": options.budget,
        "epochs": options.calibration_epochs,
    }
    with progress:
        # partitions and plans ----------------------------------------------------------------------------
        todo = [c for c in cands if c.refused is None]
        task = progress.add_task("advise: partitions and plans", total=len(todo))
        plans: dict = {}
        for c in todo:
            info = STRATEGIES[c.strategy]
            key = (c.strategy, json.dumps(c.plan_options, sort_keys=True), c.k)
            if key not in plans:
                try:
                    part = _partition(cache, store, skey, info.default_method, c.k)
                    pkey = {"store": skey, "method": info.default_method, "workers": c.k}
                    plans[key] = _plan(
                        cache, part, pkey, c.strategy, c.plan_options, options, options.device_memory
                    )
                except G3InputError as exc:
                    plans[key] = exc
            got = plans[key]
            if isinstance(got, G3InputError):
                c.refused = f"cannot be planned: {got}"
            else:
                c.plan = got
            progress.advance(task)

        # calibration: the profile of the bins strategy's plan at K0, a short run of each sampling plan ------
        need_profile = any(
            c.refused is None and c.unpredicted is None and not STRATEGIES[c.strategy].mini_batch
            for c in cands
        )
        runs_needed: dict = {}
        for c in cands:
            if c.refused is None and c.unpredicted is None and STRATEGIES[c.strategy].mini_batch:
                runs_needed.setdefault(
                    (c.strategy, json.dumps(c.plan_options, sort_keys=True)), c.plan_options
                )
        speed_needed: dict = {}  # strategies whose compute speed a run of their own plan fits (fits_own_speed)
        for c in cands:
            if c.refused is None and c.unpredicted is None and STRATEGIES[c.strategy].fits_own_speed:
                speed_needed.setdefault(
                    (c.strategy, json.dumps(c.plan_options, sort_keys=True)), (c.plan_options, c.simulate)
                )
        jobs = (1 if need_profile else 0) + len(runs_needed) + len(speed_needed)
        task = progress.add_task(f"advise: calibration runs (budget {options.budget:.0f} s)", total=jobs)
        spent = 0.0
        calib_dir = cache.root / "calibration"
        profile_path: Path | None = None
        profile_error: str | None = None
        if need_profile:
            t = time.perf_counter()
            try:
                part = _partition(cache, store, skey, bins.default_method, k0)
                pkey = {"store": skey, "method": bins.default_method, "workers": k0}
                variant = bins.advise_variants[0]
                try:
                    plan = _plan(
                        cache, part, pkey, bins.name, variant.plan_options, options, options.device_memory
                    )
                except (
                    G3InputError
                ):  # too little memory for bins of one node: profile a plan sized by default
                    plan = _plan(cache, part, pkey, bins.name, variant.plan_options, options, None)
                profile_path = calib_dir / f"profile-{plan.name}.json"
                run = calib_dir / f"profile-{plan.name}.run"
                _train(
                    cache,
                    plan,
                    run,
                    {"plan": str(plan.resolve()), "profile": True},
                    options,
                    profile=profile_path,
                )
                # the model is checked (and anchored) on a plain run: a profiled run is traced, and slower
                run = calib_dir / f"{plan.name}.run"
                _train(cache, plan, run, {"plan": str(plan.resolve())}, options)
            except G3InputError as exc:
                profile_error = f"the profile run failed: {exc}"
                profile_path = None
            dt = time.perf_counter() - t
            spent += dt
            calib["profile"] = {
                "plan": str(plan) if profile_path else None,
                "path": str(profile_path) if profile_path else None,
                "workers": k0,
                "seconds": round(dt, 3),
                "status": "ok" if profile_path else profile_error,
                "model_check": model_check(plan, run, k0, options, cache, profile=profile_path)
                if profile_path
                else None,
            }
            progress.advance(task)
        calibration_runs: dict = {}
        for (name, okey), plan_options in runs_needed.items():
            if spent >= options.budget:
                calibration_runs[(name, okey)] = f"not calibrated: --budget {options.budget:g} s spent"
                calib["runs"].append(
                    {"strategy": name, "plan_options": plan_options, "status": "skipped (budget)"}
                )
                progress.advance(task)
                continue

            def own_run(name=name, plan_options=plan_options):
                plan, run = _own_run(cache, store, skey, name, plan_options, options, k0)
                check = model_check(plan, run, k0, options, cache)
                return plan, run, (plan, run, check), {"model_check": check}

            calibration_runs[(name, okey)], record, dt = _timed_calibration(
                own_run,
                {"strategy": name, "plan_options": plan_options},
                k0,
                "the calibration run failed",
                {"model_check": None},
            )
            spent += dt
            calib["runs"].append(record)
            progress.advance(task)
        speed_fits: dict = {}
        for (name, okey), (plan_options, simulate) in speed_needed.items():
            if profile_path is None or spent >= options.budget:
                why = "no profile" if profile_path is None else f"--budget {options.budget:g} s spent"
                speed_fits[(name, okey)] = f"compute speed not fitted: {why}"
                calib["runs"].append(
                    {
                        "strategy": name,
                        "plan_options": plan_options,
                        "purpose": "compute speed",
                        "status": f"skipped ({why})",
                    }
                )
                progress.advance(task)
                continue

            def speed_run(name=name, plan_options=plan_options, simulate=simulate):
                plan, run = _own_run(cache, store, skey, name, plan_options, options, k0)
                fit = fit_compute_speed(plan, run, k0, options, cache, profile_path, simulate)
                if fit is None:
                    raise G3InputError("its run recorded no compute time to fit", path=run)
                check = model_check(
                    plan, run, k0, options, cache, profile=profile_path, speed=fit["speed"], simulate=simulate
                )
                return plan, run, (fit, check), {"speed_fit": fit, "model_check": check}

            base = {"strategy": name, "plan_options": plan_options, "purpose": "compute speed"}
            speed_fits[(name, okey)], record, dt = _timed_calibration(
                speed_run, base, k0, "compute speed not fitted", {"speed_fit": None, "model_check": None}
            )
            spent += dt
            calib["runs"].append(record)
            progress.advance(task)
        calib["spent_seconds"] = round(spent, 3)

        # predictions --------------------------------------------------------------------------------------
        entries = []
        live = [c for c in cands if c.refused is None]
        task = progress.add_task("advise: simulating", total=len(live) * len(options.links))
        sims: dict = {}
        for c in cands:
            info = STRATEGIES[c.strategy]
            meta = load_plan(c.plan)[0] if c.plan else None
            peak, source = plan_memory(meta) if meta else (None, "not planned")
            fits = None if peak is None else peak <= memory
            hosts = cluster.fit(worker_memory(meta)) if cluster is not None and meta else None
            if hosts is not None:  # every host kind's workers within its own device
                fits = None if any(h["fits"] is None for h in hosts) else all(h["fits"] for h in hosts)
            for link in options.links:
                e = _entry(c, info, link, peak, source, fits, options, cluster, hosts)
                if c.refused is None:
                    if c.unpredicted is None:
                        _predict(
                            c,
                            info,
                            link,
                            e,
                            meta,
                            options,
                            profile_path,
                            profile_error,
                            (calib["profile"] or {}).get("model_check"),
                            calibration_runs,
                            cache,
                            sims,
                            cluster,
                            speed_fits,
                        )
                    else:
                        e["status"], e["reason"] = "not predicted", f"not predicted: {c.unpredicted}"
                    progress.advance(task)
                entries.append(e)

    ranking = rank(entries, memory)
    result = {
        "schema": ADVISE_SCHEMA,
        "schema_version": ADVISE_VERSION,
        "store": {
            "path": str(store),
            "name": gs.name,
            "num_nodes": int(gs.num_nodes),
            "num_arcs": int(gs.num_arcs),
        },
        "model": {
            "model": options.model,
            "layers": options.layers,
            "hidden": options.hidden,
            "heads": options.heads,
        },
        "workers": ks,
        "links": list(options.links),
        "device_memory_bytes": memory,
        "latency_seconds": _latency(options),
        "cluster": cluster.to_json() if cluster is not None else None,
        "calibration": {
            **calib,
            "calibration_workers": k0,
            "calibrate_link": options.calibrate_link,
            "notes": [
                "rates measured on this machine: the profile (full-graph and tensor-parallel "
                "models) and each sampling strategy's run are at K0 workers, "
                + (
                    f"on emulated hosts at {options.calibrate_link}"
                    if options.calibrate_link
                    else "local processes over the loopback"
                )
                + "; the models carry them to every K and link rate (docs/DESIGN.md 'Simulator')"
            ],
        },
        "time_to_target": {
            "model": options.convergence,
            "epochs": options.target_epochs,
            "note": CONVERGENCE_MODELS[options.convergence],
        },
        "cache": {
            "path": str(cache.root),
            "plans": str(cache.plans),
            "reused": cache.reused,
            "made": cache.made,
        },
        "ranking": ranking,
        "seconds": round(time.perf_counter() - t0, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "advise.json", result)
    result["path"] = str(out)
    return result


def _simulate_run(
    plan: Path,
    run: Path,
    k: int,
    options: AdviseOptions,
    cache: Cache,
    profile: Path | None,
    speed: float = 1.0,
    simulate: dict | None = None,
) -> tuple[str, dict]:
    """The modelled system of a calibration run: the plan simulated at the run's K and network (the calibration
    link, or the loopback: no bandwidth limit) with the run's train knobs and the variant's ``simulate`` options
    (bns-gcn's boundary sampling, sancus's staleness), every worker at ``speed``."""
    from stages.kits.runtime.launch.netemu import parse_rate
    from stages.plan import parse_options
    from stages.simulate import SimulateOptions, simulate_plan

    meta = load_plan(plan)[0]
    info = strategy_spec(meta["strategy"]["name"])
    knobs = {
        key: value
        for key, value in (load_run_meta(run).get("config") or {}).items()
        if key in info.train_knobs and value is not None
    }
    bandwidth = parse_rate(options.calibrate_link) / 8 if options.calibrate_link else math.inf
    so = SimulateOptions(
        workers=k,
        bandwidth=bandwidth,
        latency=_latency(options),
        scaling=(),
        profile=str(profile) if profile else None,
        run=None if profile else str(run),
        cache=str(cache.root / "simcache"),
        worker_speed=None if speed == 1.0 else (speed,) * k,
        **(simulate or {}),
    )
    sim, _ = simulate_plan(plan, so, out=run.parent / "sim")
    want = info.simulated_as(parse_options(info.name, {}) | meta["strategy"]["options"], knobs)
    return want, next(x for x in sim["systems"] if x["system"] == want)


def model_check(
    plan: Path,
    run: Path,
    k: int,
    options: AdviseOptions,
    cache: Cache,
    profile: Path | None = None,
    speed: float = 1.0,
    simulate: dict | None = None,
) -> dict | None:
    """How well the model reproduces the calibration run it was calibrated on: its epoch at the run's K and
    network (the calibration link, or the loopback: no bandwidth limit) against the run's mean epoch after the
    first. A large error here means the model misses something this machine does (docs/BENCHMARKS.md)."""
    try:
        records = read_metrics(run)
        steady = [r["epoch_seconds"] for r in records[1:]] or [r["epoch_seconds"] for r in records]
        measured = sum(steady) / len(steady)
        want, system = _simulate_run(plan, run, k, options, cache, profile, speed, simulate)
    except (G3InputError, OSError, KeyError, StopIteration, ValueError):
        return None
    predicted = float(system["epoch_seconds"])
    return {
        "system": want,
        "measured_epoch_seconds": measured,
        "predicted_epoch_seconds": predicted,
        "steps": system.get("steps"),
        "error": (predicted - measured) / measured if measured > 0 else None,
        "network": options.calibrate_link or "loopback (no bandwidth limit)",
    }


def fit_compute_speed(
    plan: Path,
    run: Path,
    k: int,
    options: AdviseOptions,
    cache: Cache,
    profile: Path,
    simulate: dict | None = None,
) -> dict | None:
    """The compute speed, relative to the profile's rates, at which the model computes what ``run`` computed:
    the model's mean busy seconds per worker for the run's plan, K and network over the run's mean
    ``compute_seconds`` per worker and epoch after the first (the first fills caches: neutrontp's layer 0). The
    model then runs every worker at that speed (``worker_speed``, as a cluster's slower hosts), so its compute
    follows the plan to every K; None where the run recorded no compute."""
    try:
        records = read_metrics(run, need=("epoch", "epoch_seconds", "workers"))
        steady = records[1:] or records
        per_epoch = [
            sum(float(w.get("compute_seconds") or 0.0) for w in r["workers"]) / len(r["workers"])
            for r in steady
            if r["workers"]
        ]
        measured = sum(per_epoch) / len(per_epoch) if per_epoch else 0.0
        want, system = _simulate_run(plan, run, k, options, cache, profile, simulate=simulate)
        modelled = float(system.get("busy_mean") or 0.0)
    except (G3InputError, OSError, KeyError, StopIteration, ValueError):
        return None
    if measured <= 0 or modelled <= 0:
        return None
    return {
        "system": want,
        "speed": modelled / measured,
        "measured_compute_seconds": measured,
        "modelled_compute_seconds": modelled,
    }


def _latency(options: AdviseOptions) -> float:
    from stages.simulate import SimulateOptions

    return options.latency if options.latency is not None else SimulateOptions().latency


def _entry(
    c: Candidate,
    info,
    link: str,
    peak,
    source: str,
    fits,
    options: AdviseOptions,
    cluster=None,
    hosts: list[dict] | None = None,
) -> dict:
    e = {
        "strategy": c.strategy,
        "variant": c.variant,
        "family": info.family,
        "workers": c.k,
        "link": link,
        "plan_options": c.plan_options,
        "train_options": c.knobs,
        "status": "refused",
        "predicted_epoch_seconds": None,
        "bytes_per_epoch": None,
        "peak_memory_bytes": peak,
        "memory_source": source,
        "fits": fits,
        "time_to_target_seconds": None,
        "epochs_to_target": None,
        "optimizer_steps_per_epoch": None,
        "breakdown": None,
        "model_epoch_seconds": None,
        "anchor_seconds": None,
        "simulated_system": None,
        "model_check_error": None,
        "compute_speed": None,
        "exactness": info.exactness,
        "reason": c.refused,
    }
    if cluster is not None:
        e["hosts"] = hosts  # per host kind: its device memory, its workers' peak, whether it fits
        short = next((h for h in hosts or () if h["fits"] is False), None)
        if short is not None:
            from stages.common.units import human_bytes

            kind = next(x for x in cluster.kinds if x.name == short["name"])
            e["misfit"] = (
                f"on host kind {kind.name!r} ({kind.count} host{'s' if kind.count > 1 else ''}, "
                f"{human_bytes(kind.memory_bytes)} per worker) its workers need "
                f"{human_bytes(short['peak_memory_bytes'])}"
            )
    if options.plans and c.plan is not None:
        e["plan"] = str(c.plan)
        e["train_command"] = train_command(str(c.plan), None if cluster is not None else link, c.knobs, c.k)
    return e


def _predict(
    c: Candidate,
    info,
    link: str,
    e: dict,
    meta: dict,
    options: AdviseOptions,
    profile_path,
    profile_error,
    profile_check,
    calibration_runs: dict,
    cache: Cache,
    sims: dict,
    cluster=None,
    speed_fits: dict | None = None,
) -> None:
    from stages.kits.runtime.launch.netemu import parse_rate
    from stages.simulate import SimulateOptions, simulate_plan

    speed = 1.0
    if info.fits_own_speed:
        got = (speed_fits or {}).get((c.strategy, json.dumps(c.plan_options, sort_keys=True)))
        if isinstance(got, tuple):  # its own run's speed and check, in place of the profile plan's check
            speed, profile_check = float(got[0]["speed"]), got[1]
            e["compute_speed"] = speed
        else:  # predicted from the profile's rates as they are
            e["compute_speed_note"] = got or "compute speed not fitted: no run of its own plan"
    if info.mini_batch:
        got = calibration_runs.get((c.strategy, json.dumps(c.plan_options, sort_keys=True)))
        if not isinstance(got, tuple):
            e["status"], e["reason"] = "not predicted", f"not predicted: {got or 'no calibration run'}"
            return
        plan, run, profile, check = got[0], got[1], None, got[2]
    else:
        if profile_path is None:
            e["status"], e["reason"] = "not predicted", f"not predicted: {profile_error or 'no profile'}"
            return
        plan, run, profile, check = c.plan, None, profile_path, profile_check
    if cluster is None:
        per_worker = {"bandwidth": parse_rate(link) / 8}
        if speed != 1.0:
            per_worker["worker_speed"] = (speed,) * c.k
    else:  # each rank its host kind's link and speed, and its host (docs/DESIGN.md "Advisor")
        per_worker = {
            "bandwidth": cluster.slowest_link().link_bits / 8,
            "worker_bandwidth": cluster.link_bytes(),
            "worker_speed": tuple(speed * s for s in cluster.speeds()),
            "worker_hosts": tuple(cluster.rank_hosts()),
        }
    so = SimulateOptions(
        workers=c.k,
        latency=_latency(options),
        profile=str(profile) if profile else None,
        run=str(run) if run else None,
        scaling=(),
        cache=str(cache.root / "simcache"),
        **per_worker,
        **c.simulate,
    )
    key = (str(plan), c.k, link, json.dumps(c.simulate, sort_keys=True), speed)
    if key not in sims:
        try:
            sims[key] = simulate_plan(plan, so, out=cache.root / "sim")[0]
        except G3InputError as exc:
            sims[key] = exc
    result = sims[key]
    if isinstance(result, G3InputError):
        e["status"], e["reason"] = "not predicted", f"not predicted: {result}"
        return
    from stages.plan import parse_options

    parsed = parse_options(c.strategy, {k: v for k, v in c.plan_options.items()})
    want = info.simulated_as(parsed, c.knobs) if info.simulated_as else None
    system = next((s for s in result["systems"] if s["system"] == want), None)
    if system is None:
        e["status"], e["reason"] = "not predicted", f"not predicted: the model has no system {want!r}"
        return
    model = float(system["epoch_seconds"])
    anchor = anchor_seconds(check, system) if options.anchor else 0.0
    epoch = max(model + anchor, model * ANCHOR_FLOOR)
    b = breakdown(system, epoch)
    e.update(
        status="ok" if e["fits"] is not False else "does not fit",
        predicted_epoch_seconds=epoch,
        model_epoch_seconds=model,
        anchor_seconds=epoch - model,
        bytes_per_epoch=int(system["bytes_per_epoch"]),
        breakdown=b,
        simulated_system=want,
        time_to_target_seconds=epoch * epochs_to_target(system, options),
        epochs_to_target=epochs_to_target(system, options),
        optimizer_steps_per_epoch=updates_per_epoch(system),
        reason=describe(b, link if cluster is None else f"{cluster.name}'s links"),
        model_check_error=(check or {}).get("error"),
    )


def updates_per_epoch(system: dict) -> float:
    """Optimizer steps a modelled epoch takes: a mini-batch model's steps (the updates it takes, where it says:
    clustergcn skips a step with no training node), one for full-graph training."""
    return float(system.get("optimizer_steps") or system.get("steps") or 1)


def epochs_to_target(system: dict, options: AdviseOptions) -> int:
    """Epochs this candidate needs under the convergence model (CONVERGENCE_MODELS)."""
    if options.convergence == "epochs":
        return options.target_epochs
    return max(1, math.ceil(options.target_epochs / updates_per_epoch(system)))


def anchor_seconds(check: dict | None, system: dict) -> float:
    """What the model misses at its calibration point, carried to this candidate: the calibration run's measured
    epoch minus the model's epoch for that run (model_check), per step of a sampling model (scaled by this
    epoch's steps over the calibration's), per epoch otherwise. Zero without a check."""
    if not check or check.get("predicted_epoch_seconds") is None:
        return 0.0
    residual = float(check["measured_epoch_seconds"]) - float(check["predicted_epoch_seconds"])
    if check.get("steps") and system.get("steps"):
        residual *= int(system["steps"]) / int(check["steps"])
    return residual


def rank(entries: list[dict], memory: int) -> list[dict]:
    """Best first: predicted and fitting by epoch time; then predicted but not fitting; then not predicted; then
    refused. Each entry's reason says why it is where it is."""
    from stages.common.units import human_bytes

    def tier(e):
        if e["status"] == "ok":
            return 0
        if e["status"] == "does not fit":
            return 1
        return 2 if e["status"] == "not predicted" else 3

    order = sorted(
        entries,
        key=lambda e: (
            tier(e),
            e["predicted_epoch_seconds"] if e["predicted_epoch_seconds"] is not None else math.inf,
            e["strategy"],
            e["variant"],
            e["workers"],
        ),
    )
    best = next((e for e in order if e["status"] == "ok"), None)
    for i, e in enumerate(order, start=1):
        e["rank"] = i
        if e["status"] == "ok":
            lead = (
                "fastest predicted epoch"
                if e is best
                else f"{e['predicted_epoch_seconds'] / best['predicted_epoch_seconds']:.2f}x the best's epoch"
            )
            e["reason"] = f"{lead}; {e['reason']}"
        elif e["status"] == "does not fit" and e.get("misfit"):
            e["reason"] = f"does not fit: {e['misfit']} ({e['memory_source']}); predicted: {e['reason']}"
        elif e["status"] == "does not fit":
            e["reason"] = (
                f"does not fit: needs {human_bytes(e['peak_memory_bytes'])} per worker, the device has "
                f"{human_bytes(memory)} ({e['memory_source']}); predicted: {e['reason']}"
            )
        elif e["status"] == "refused" and e["reason"] and not e["reason"].startswith("refused"):
            e["reason"] = f"refused: {e['reason']}"
    return order


__all__ = [
    "print_advice",
    "run_advise",
    "AdviseOptions",
    "resolve_calibrate_link",
    "AUTO_CALIBRATE_LINK",
    "parse_links",
    "parse_workers",
    "parse_strategies",
    "plan_memory",
    "worker_memory",
    "breakdown",
    "rank",
    "ADVISE_SCHEMA",
    "ADVISE_VERSION",
    "CONVERGENCE_MODELS",
    "epochs_to_target",
]
