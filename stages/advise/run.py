"""`g3 advise STORE`: which strategy, and how many workers, for this graph, model and cluster — predicted,
explained, ranked.

For every registered strategy (each spec's ``advise_variants``: its main options), every worker count K and every link rate it partitions and plans the store (through the stages' own
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
is checked per host kind, and the simulator gives each worker its host kind's compute speed and link."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from stages.advise.calibration import (
    ADVISE_MARK,
    Cache,
    cached_partition,
    cached_plan,
    fit_compute_speed,
    is_advise_folder,
    model_check,
    own_plan_run,
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
    memory = check_options(options, int(gs.num_nodes), cluster)
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
    skey = store_key(store)
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
                    part = cached_partition(cache, store, skey, info.default_method, c.k)
                    pkey = {"store": skey, "method": info.default_method, "workers": c.k}
                    plans[key] = cached_plan(
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
                part = cached_partition(cache, store, skey, bins.default_method, k0)
                pkey = {"store": skey, "method": bins.default_method, "workers": k0}
                variant = bins.advise_variants[0]
                try:
                    plan = cached_plan(
                        cache, part, pkey, bins.name, variant.plan_options, options, options.device_memory
                    )
                except (
                    G3InputError
                ):  # too little memory for bins of one node: profile a plan sized by default
                    plan = cached_plan(cache, part, pkey, bins.name, variant.plan_options, options, None)
                profile_path = calib_dir / f"profile-{plan.name}.json"
                run = calib_dir / f"profile-{plan.name}.run"
                train_calibration(
                    cache,
                    plan,
                    run,
                    {"plan": str(plan.resolve()), "profile": True},
                    options,
                    profile=profile_path,
                )
                # the model is checked (and anchored) on a plain run: a profiled run is traced, and slower
                run = calib_dir / f"{plan.name}.run"
                train_calibration(cache, plan, run, {"plan": str(plan.resolve())}, options)
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
                plan, run = own_plan_run(cache, store, skey, name, plan_options, options, k0)
                check = model_check(plan, run, k0, options, cache)
                return plan, run, (plan, run, check), {"model_check": check}

            calibration_runs[(name, okey)], record, dt = timed_calibration(
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
                plan, run = own_plan_run(cache, store, skey, name, plan_options, options, k0)
                fit = fit_compute_speed(plan, run, k0, options, cache, profile_path, simulate)
                if fit is None:
                    raise G3InputError("its run recorded no compute time to fit", path=run)
                check = model_check(
                    plan, run, k0, options, cache, profile=profile_path, speed=fit["speed"], simulate=simulate
                )
                return plan, run, (fit, check), {"speed_fit": fit, "model_check": check}

            base = {"strategy": name, "plan_options": plan_options, "purpose": "compute speed"}
            speed_fits[(name, okey)], record, dt = timed_calibration(
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
                e = entry(c, info, link, peak, source, fits, options, cluster, hosts)
                if c.refused is None:
                    if c.unpredicted is None:
                        predict(
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
        "latency_seconds": latency(options),
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
