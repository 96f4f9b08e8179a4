"""`g3 advise`'s cache of partitions, plans and calibration runs, and what the runs fit: each model checked on
the run it was calibrated on, and the compute speed of strategies whose kernels the profile does not time."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from stages.advise.options import AdviseOptions, latency
from stages.common.atomic import write_json_atomic
from stages.common.errors import G3InputError
from stages.common.run_artifact import load_run_meta, read_metrics
from stages.common.units import parse_rate
from stages.strategies.registry import load_plan, strategy_spec


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


def store_key(store: Path) -> dict:
    from stages.common.store import GraphStore

    s = GraphStore.open(store)
    return {"path": str(store.resolve()), "checksums": s.meta.get("checksums"), "num_nodes": int(s.num_nodes)}


def cached_partition(cache: Cache, store: Path, skey: dict, method: str, k: int) -> Path:
    from stages.partition import PartitionOptions, run_partition

    folder = cache.plans / f"part-{method}-k{k}"
    key = {"store": skey, "method": method, "workers": k}
    if not cache.fresh(folder, key, "partition.json"):
        run_partition(store, PartitionOptions(workers=k, method=method), out=folder, force=True)
        cache.done(folder, key)
    return folder


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "default"


def cached_plan(
    cache: Cache,
    store: Path,
    skey: dict,
    method: str,
    k: int,
    strategy: str,
    plan_options: dict,
    options: AdviseOptions,
    memory_text: str | None,
) -> Path:
    """The plan of ``strategy`` with ``plan_options`` (text) on the store's ``method`` partition into ``k``, each
    made once."""
    from stages.plan import PlanConfig, run_plan

    part = cached_partition(cache, store, skey, method, k)
    info = strategy_spec(strategy)
    given = dict(plan_options)
    if memory_text is not None and any(o.name == "device_memory" and o.layout for o in info.plan_options):
        given["device_memory"] = memory_text
    opts = "-".join(f"{slug(k)}-{slug(str(v))}" for k, v in sorted(given.items()))
    folder = cache.plans / (f"{part.name}.plan-{strategy}-{options.model}" + (f"-{opts}" if opts else ""))
    model = {key: getattr(options, key) for key in ("model", "layers", "hidden", "heads")}
    key = {
        "partition": {"store": skey, "method": method, "workers": k},
        "strategy": strategy,
        "options": given,
        "model": list(model.values()),
    }
    if not cache.fresh(folder, key, "plan.json"):
        run_plan(part, PlanConfig(**model, strategy=strategy, options=given), out=folder, force=True)
        cache.done(folder, key)
    return folder


def train_calibration(
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


def timed_calibration(work, base: dict, k0: int, failed: str, none: dict) -> tuple[object, dict, float]:
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


def simulate_run(
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
        latency=latency(options),
        scaling=(),
        profile=str(profile) if profile else None,
        run=None if profile else str(run),
        cache=str(cache.root / "simcache"),
        worker_speed=None if speed == 1.0 else (speed,) * k,
        **(simulate or {}),
    )
    sim, _ = simulate_plan(plan, so, out=run.parent / "sim")
    want = info.simulated_system(parse_options(info.name, {}) | meta["strategy"]["options"], knobs)
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
        want, system = simulate_run(plan, run, k, options, cache, profile, speed, simulate)
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
        want, system = simulate_run(plan, run, k, options, cache, profile, simulate=simulate)
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
