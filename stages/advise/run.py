"""`g3 advise STORE`: which strategy, and how many workers, for this graph, model and cluster — predicted,
explained, ranked.

Every strategy's variants (each spec's ``advise_variants``) at every K and link rate are partitioned and planned
through the stages' own entries (cached: :mod:`.calibration`), the simulator is calibrated on this machine
(:func:`_calibrate`) and `g3 simulate`'s models (:func:`stages.simulate.simulate_plan`) predict each epoch; memory
per worker comes from the plan (:mod:`.predict`). Writes ``OUT/advise.json`` (schema ``g3.advise``,
docs/ARTIFACTS.md); with ``plans`` every candidate's plan is kept there, ready for ``g3 train PLAN
--emulate-link RATE``.

With ``cluster`` (a ``g3.cluster`` file, :mod:`.cluster`) the hosts are not alike: K is the cluster's workers,
every candidate is planned for the smallest device memory among its hosts (so every worker's bins fit), its fit
is checked per host kind, and the simulator gives each worker its host kind's compute speed and link."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from stages.advise.calibration import (
    ADVISE_MARK,
    Cache,
    cached_plan,
    fit_compute_speed,
    is_advise_folder,
    model_check,
    store_key,
    timed_calibration,
    train_calibration,
)
from stages.advise.options import (
    ADVISE_SCHEMA,
    ADVISE_VERSION,
    CONVERGENCE_MODELS,
    AdviseOptions,
    check_options,
    latency,
    resolve_calibrate_link,
)
from stages.advise.predict import Candidate, entry, plan_memory, predict, rank, worker_memory
from stages.common.atomic import check_result, check_work_folder, write_json_atomic
from stages.common.errors import G3InputError
from stages.strategies.registry import REFERENCE_STRATEGY, STRATEGIES, load_plan, strategy_spec


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

    t0 = time.perf_counter()
    store = Path(store)
    gs = _open_store(store)
    options, cluster = _on_cluster(options.resolved())
    memory = check_options(options, int(gs.num_nodes), cluster)
    options = replace(options, calibrate_link=resolve_calibrate_link(options.calibrate_link))
    out, cache = _folders(store, options, out, force)
    work = Work(store, store_key(store), options, cache, sorted(options.workers))
    cands = candidates(options, work.ks)
    with progress if progress is not None else make_progress() as shown:
        _plan_candidates(cands, work, shown)
        calib = _calibrate(cands, work, shown)
        entries = _predict_candidates(cands, work, calib, cluster, memory, shown)
    result = {
        "schema": ADVISE_SCHEMA,
        "schema_version": ADVISE_VERSION,
        "store": {
            "path": str(store),
            "name": gs.name,
            "num_nodes": int(gs.num_nodes),
            "num_arcs": int(gs.num_arcs),
        },
        "model": {key: getattr(options, key) for key in ("model", "layers", "hidden", "heads")},
        "workers": work.ks,
        "links": list(options.links),
        "device_memory_bytes": memory,
        "latency_seconds": latency(options),
        "cluster": cluster.to_json() if cluster is not None else None,
        "calibration": _calibration_record(calib, work),
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
        "ranking": rank(entries, memory),
        "seconds": round(time.perf_counter() - t0, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "advise.json", result)
    result["path"] = str(out)
    return result


@dataclass
class Work:
    """What every phase of an advice works on: the store, the options, the cache, the worker counts and K0, the
    worker count the calibration runs at (one worker moves nothing to measure)."""

    store: Path
    skey: dict
    options: AdviseOptions
    cache: Cache
    ks: list[int]

    @property
    def k0(self) -> int:
        return next((k for k in self.ks if k >= 2), 2)

    def plan(self, strategy: str, plan_options: dict, k: int, memory_text: str | None) -> Path:
        """The cached plan of ``strategy`` on its default partition into ``k``."""
        method = STRATEGIES[strategy].default_method
        return cached_plan(
            self.cache, self.store, self.skey, method, k, strategy, plan_options, self.options, memory_text
        )

    def own_plan_run(self, strategy: str, plan_options: dict) -> tuple[Path, Path]:
        """(plan, run): a short calibration run of the strategy's own plan at K0 (cached like every plan)."""
        plan = self.plan(strategy, plan_options, self.k0, self.options.device_memory)
        run = self.cache.root / "calibration" / f"{plan.name}.run"
        train_calibration(self.cache, plan, run, {"plan": str(plan.resolve())}, self.options)
        return plan, run


@dataclass
class Calibration:
    """What the calibration runs gave: advise.json's record, the profile (or why none), each sampling strategy's
    run and each strategy's fitted compute speed (or why not)."""

    record: dict
    profile: Path | None = None
    profile_error: str | None = None
    runs: dict = field(default_factory=dict)
    speeds: dict = field(default_factory=dict)


def _open_store(store: Path):
    """The store, every array checked against its checksum: a damaged array is the user's one input error, not a
    refusal of every candidate after minutes of calibration."""
    from stages.common.store import GraphStore

    if not (store / "zarr.json").is_file():
        raise G3InputError("not a g3 store (no zarr.json; make one with `g3 ingest`)", path=store)
    gs = GraphStore.open(store)
    bad = gs.verify()
    if bad:
        raise G3InputError(
            f"array {', '.join(bad)} does not match its checksum (damaged or edited since "
            "`g3 ingest`); ingest the graph again",
            path=store,
        )
    return gs


def _on_cluster(options: AdviseOptions):
    """The options and the cluster of ``--cluster`` (None: alike hosts): K is the cluster's workers, its one
    "link" column the cluster, plans sized by the smallest device memory."""
    if not options.cluster:
        return options, None
    from stages.advise.cluster import load_cluster

    cluster = load_cluster(options.cluster)
    options = replace(
        options,
        workers=(cluster.workers,),
        links=(cluster.name,),
        device_memory=cluster.smallest_memory().device_memory,
    )
    return options, cluster


def _folders(store: Path, options: AdviseOptions, out: str | Path | None, force: bool) -> tuple[Path, Cache]:
    """The output folder and the cache, checked to be this command's (or empty) before any work."""
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
    return out, cache


def candidates(options: AdviseOptions, ks: list[int]) -> list[Candidate]:
    """Every strategy x advise variant x K, refused where the strategy does not train the model, unpredicted
    where it has no simulator."""
    out = []
    for name in options.strategies or STRATEGIES:
        spec = STRATEGIES[name]
        for v in spec.advise_variants:
            for k in ks:
                c = Candidate(name, v.label, k, dict(v.plan_options), dict(v.train_knobs), dict(v.simulate))
                if options.model not in spec.models:
                    why = f"{name} does not train {options.model} (it trains {', '.join(spec.models)})"
                    c.refused = why + (f": {spec.notes[0]}" if spec.notes else "")
                elif spec.simulate is None:
                    c.unpredicted = f"g3 simulate has no model of {name}"
                out.append(c)
    return out


def _plan_candidates(cands: list[Candidate], work: Work, progress) -> None:
    """Each candidate's partition and plan (one per strategy, options and K), or why it cannot be planned."""
    todo = [c for c in cands if c.refused is None]
    task = progress.add_task("advise: partitions and plans", total=len(todo))
    plans: dict = {}
    for c in todo:
        key = (*c.options_key, c.k)
        if key not in plans:
            try:
                plans[key] = work.plan(c.strategy, c.plan_options, c.k, work.options.device_memory)
            except G3InputError as exc:
                plans[key] = exc
        got = plans[key]
        if isinstance(got, G3InputError):
            c.refused = f"cannot be planned: {got}"
        else:
            c.plan = got
        progress.advance(task)


def _calibrate(cands: list[Candidate], work: Work, progress) -> Calibration:
    """The calibration runs the predictions need, within --budget: the profile of the reference strategy's plan
    at K0 (every full-graph and tensor-parallel model's rates), a short run of each sampling plan (its step
    model), and a run of each plan whose kernels the profile does not time (its compute speed)."""
    live = [c for c in cands if c.refused is None and c.unpredicted is None]
    runs_needed: dict = {}
    speed_needed: dict = {}
    for c in live:
        spec = STRATEGIES[c.strategy]
        if spec.mini_batch:
            runs_needed.setdefault(c.options_key, c.plan_options)
        if spec.fits_own_speed:
            speed_needed.setdefault(c.options_key, (c.plan_options, c.simulate))
    need_profile = any(not STRATEGIES[c.strategy].mini_batch for c in live)
    o = work.options
    calib = Calibration(
        {"profile": None, "runs": [], "budget_seconds": o.budget, "epochs": o.calibration_epochs}
    )
    jobs = int(need_profile) + len(runs_needed) + len(speed_needed)
    task = progress.add_task(f"advise: calibration runs (budget {o.budget:.0f} s)", total=jobs)
    spent = 0.0
    if need_profile:
        spent += _profile(calib, work)
        progress.advance(task)
    for (name, okey), plan_options in runs_needed.items():
        spent += _step_model_run(calib, work, name, okey, plan_options, spent)
        progress.advance(task)
    for (name, okey), (plan_options, simulate) in speed_needed.items():
        spent += _speed_run(calib, work, name, okey, plan_options, simulate, spent)
        progress.advance(task)
    calib.record["spent_seconds"] = round(spent, 3)
    return calib


def _profile(calib: Calibration, work: Work) -> float:
    """The reference strategy's profile at K0 (its compute rates) and a plain run that checks and anchors the
    model; returns the seconds it took."""
    reference = strategy_spec(REFERENCE_STRATEGY)
    cache, o, k0 = work.cache, work.options, work.k0
    calib_dir = cache.root / "calibration"
    t = time.perf_counter()
    plan = run = None
    try:
        variant = reference.advise_variants[0]
        try:
            plan = work.plan(reference.name, variant.plan_options, k0, o.device_memory)
        except G3InputError:  # too little memory for bins of one node: profile a plan sized by default
            plan = work.plan(reference.name, variant.plan_options, k0, None)
        calib.profile = calib_dir / f"profile-{plan.name}.json"
        stamp = {"plan": str(plan.resolve())}
        train_calibration(
            cache,
            plan,
            calib_dir / f"profile-{plan.name}.run",
            {**stamp, "profile": True},
            o,
            profile=calib.profile,
        )
        # the model is checked (and anchored) on a plain run: a profiled run is traced, and slower
        run = calib_dir / f"{plan.name}.run"
        train_calibration(cache, plan, run, stamp, o)
    except G3InputError as exc:
        calib.profile_error = f"the profile run failed: {exc}"
        calib.profile = None
    dt = time.perf_counter() - t
    calib.record["profile"] = {
        "plan": str(plan) if calib.profile else None,
        "path": str(calib.profile) if calib.profile else None,
        "workers": k0,
        "seconds": round(dt, 3),
        "status": "ok" if calib.profile else calib.profile_error,
        "model_check": model_check(plan, run, k0, o, cache, profile=calib.profile) if calib.profile else None,
    }
    return dt


def _step_model_run(
    calib: Calibration, work: Work, name: str, okey, plan_options: dict, spent: float
) -> float:
    """A short run of a sampling strategy's plan, which calibrates its step model; returns its seconds."""
    o = work.options
    if spent >= o.budget:
        calib.runs[(name, okey)] = f"not calibrated: --budget {o.budget:g} s spent"
        calib.record["runs"].append(
            {"strategy": name, "plan_options": plan_options, "status": "skipped (budget)"}
        )
        return 0.0

    def own_run():
        plan, run = work.own_plan_run(name, plan_options)
        check = model_check(plan, run, work.k0, o, work.cache)
        return plan, run, (plan, run, check), {"model_check": check}

    base = {"strategy": name, "plan_options": plan_options}
    calib.runs[(name, okey)], record, dt = timed_calibration(
        own_run, base, work.k0, "the calibration run failed", {"model_check": None}
    )
    calib.record["runs"].append(record)
    return dt


def _speed_run(
    calib: Calibration, work: Work, name: str, okey, plan_options: dict, simulate: dict, spent: float
) -> float:
    """A short run of a plan whose kernels the profile does not time, which fits its compute speed against the
    profile's rates; returns its seconds."""
    o, profile = work.options, calib.profile
    base = {"strategy": name, "plan_options": plan_options, "purpose": "compute speed"}
    if profile is None or spent >= o.budget:
        why = "no profile" if profile is None else f"--budget {o.budget:g} s spent"
        calib.speeds[(name, okey)] = f"compute speed not fitted: {why}"
        calib.record["runs"].append({**base, "status": f"skipped ({why})"})
        return 0.0

    def speed_run():
        plan, run = work.own_plan_run(name, plan_options)
        fit = fit_compute_speed(plan, run, work.k0, o, work.cache, profile, simulate)
        if fit is None:
            raise G3InputError("its run recorded no compute time to fit", path=run)
        check = model_check(
            plan, run, work.k0, o, work.cache, profile=profile, speed=fit["speed"], simulate=simulate
        )
        return plan, run, (fit, check), {"speed_fit": fit, "model_check": check}

    calib.speeds[(name, okey)], record, dt = timed_calibration(
        speed_run, base, work.k0, "compute speed not fitted", {"speed_fit": None, "model_check": None}
    )
    calib.record["runs"].append(record)
    return dt


def _predict_candidates(cands, work: Work, calib: Calibration, cluster, memory: int, progress) -> list[dict]:
    """An entry per candidate and link rate: its memory per worker against the device's, and its prediction."""
    o = work.options
    task = progress.add_task("advise: simulating", total=sum(c.refused is None for c in cands) * len(o.links))
    sims: dict = {}
    entries = []
    for c in cands:
        spec = STRATEGIES[c.strategy]
        meta = load_plan(c.plan)[0] if c.plan else None
        peak, source = plan_memory(meta) if meta else (None, "not planned")
        fits = None if peak is None else peak <= memory
        hosts = cluster.fit(worker_memory(meta)) if cluster is not None and meta else None
        if hosts is not None:  # every host kind's workers within its own device
            fits = None if any(h["fits"] is None for h in hosts) else all(h["fits"] for h in hosts)
        for link in o.links:
            e = entry(c, spec, link, peak, source, fits, o, cluster, hosts)
            if c.refused is None:
                if c.unpredicted is None:
                    check = (calib.record["profile"] or {}).get("model_check")
                    predict(
                        c, spec, link, e, meta, o, calib.profile, calib.profile_error, check,
                        calib.runs, work.cache, sims, cluster, calib.speeds,
                    )  # fmt: skip
                else:
                    e["status"], e["reason"] = "not predicted", f"not predicted: {c.unpredicted}"
                progress.advance(task)
            entries.append(e)
    return entries


def _calibration_record(calib: Calibration, work: Work) -> dict:
    o = work.options
    where = (
        f"on emulated hosts at {o.calibrate_link}"
        if o.calibrate_link
        else "local processes over the loopback"
    )
    return {
        **calib.record,
        "calibration_workers": work.k0,
        "calibrate_link": o.calibrate_link,
        "notes": [
            "rates measured on this machine: the profile (full-graph and tensor-parallel models) and each sampling "
            f"strategy's run are at K0 workers, {where}; the models carry them to every K and link rate "
            "(docs/DESIGN.md 'Simulator')"
        ],
    }
