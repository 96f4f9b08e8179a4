"""Usage: python examples/simulate_vs_emulated.py BENCH_DIR [--profile PROFILE.json] [--latency 50us]
                                               [--calibrate-on 10gbit]

`g3 simulate`'s prediction beside each run of a `g3 bench --emulate-link` folder: for every entry that ran on
emulated hosts, its plan is simulated at the entry's link rate and host count, and the system that runs the
plan as it was trained (the registry's ``simulated_as``: g3 with its ``--pipeline``, sancus with its
``--sancus-comm``, …) is set beside the measured median epoch. Strategies whose work is bins (g3, bns-gcn,
sancus) and neutrontp take their compute rates from ``--profile`` (`g3 train PLAN --profile`); sampling
strategies are calibrated on the same spec's run at ``--calibrate-on`` (the fastest link: the least network in
the calibration), as `g3 simulate --run` is. Writes a Markdown table to stdout: link, K, hosts, strategy,
measured and predicted epoch, the error. Nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def entry_knobs(e: dict) -> tuple[dict, dict]:
    """(plan options, train knobs) of a bench entry, as the registry's ``simulated_as`` takes them."""
    from stages.strategies.registry import strategy_spec

    info = strategy_spec(e["strategy"])
    opts = {k: v for k, v in (e.get("options") or {}).items() if k not in info.train_knobs}
    knobs = {k: v for k, v in (e.get("options") or {}).items() if k in info.train_knobs}
    run = json.loads((Path(e["run"]) / "run.json").read_text())
    knobs.setdefault("pipeline", run["config"].get("pipeline"))
    plan_opts = {**(run.get("strategy") or {}).get("options", {}), **opts}
    return plan_opts, knobs


def predict(
    e: dict, bench: dict, profile: str | None, latency: float, calibration_run: str | None
) -> float | None:
    from stages.kits.runtime.launch.netemu import parse_rate
    from stages.simulate import SimulateOptions, run_simulate
    from stages.strategies.registry import strategy_spec

    info = strategy_spec(e["strategy"])
    if info.simulated_as is None:
        return None
    plan_opts, knobs = entry_knobs(e)
    run = json.loads((Path(e["run"]) / "run.json").read_text())
    plan = Path(run["plan"]["path"])
    hosts = e.get("hosts") if info.simulates_hosts else None
    # the plan's own schedule where it has one (g3's --pipeline); every schedule otherwise
    pipelines = (knobs["pipeline"],) if info.bins_system and knobs.get("pipeline") else ()
    opts = SimulateOptions(
        workers=e["workers"],
        bandwidth=parse_rate(e["link"]) / 8,
        latency=latency,
        profile=profile if not info.mini_batch else None,
        pipelines=pipelines,
        scaling=(),
        hosts=hosts,
        run=calibration_run if info.mini_batch else None,
        cache=str(Path(bench["path"]) / "simcache"),
    )
    with tempfile.TemporaryDirectory() as tmp:
        result = run_simulate(plan, opts, out=Path(tmp) / "sim", force=True)
    want = info.simulated_as(plan_opts, knobs)
    return next((s["epoch_seconds"] for s in result["systems"] if s["system"] == want), None)


def spec_of(e: dict) -> str:
    opts = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in (e.get("options") or {}).items())
    return f"`{e['strategy']}@{e['method']}" + (f" {{{opts}}}" if opts else "") + "`"


def main(argv: list[str] | None = None) -> int:
    from stages.simulate import parse_latency

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a `g3 bench --emulate-link` output folder")
    ap.add_argument("--profile", default=None, help="PROFILE.json of the K's g3 plan (`g3 train --profile`)")
    ap.add_argument(
        "--latency", default="100us", help="per-message latency of the model (default: 100us, calibration.py)"
    )
    ap.add_argument(
        "--calibrate-on", default="10gbit", help="the link whose runs calibrate sampling strategies"
    )
    ap.add_argument(
        "--strategies",
        default=None,
        help="only the entries of these strategies (comma-separated), e.g. to simulate bns-gcn and "
        "sancus with a profile of a bns-gcn run (whole-partition rates, no recomputed backward)",
    )
    args = ap.parse_args(argv)
    bench = json.loads((args.folder / "bench.json").read_text())
    bench["path"] = str(args.folder)
    latency = parse_latency(args.latency)
    runs = {
        (e["label"].rsplit(", ", 1)[0], e.get("link")): e["run"] for e in bench["entries"] if e.get("run")
    }
    print(
        "| link | K | hosts | strategy | measured epoch (s): median, mean | predicted (s) | error: of the median, of the mean |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for e in bench["entries"]:
        if e["status"] != "ok" or not e.get("link") or not e.get("median_epoch_seconds"):
            continue
        if args.strategies and e["strategy"] not in args.strategies.split(","):
            continue
        calibration = runs.get((e["label"].rsplit(", ", 1)[0], args.calibrate_on))
        try:
            p = predict(e, bench, args.profile, latency, calibration)
        except Exception as exc:  # a strategy the simulator refuses: say so in the row
            print(
                f"| {e['link']} | {e['workers']} | {e['hosts']} | {spec_of(e)} | {e['median_epoch_seconds']:.3f} | "
                f"not simulated: {str(exc).splitlines()[0]} | - |"
            )
            continue
        # the mean of the steady epochs is what the model predicts (a sancus epoch is the mean of a sending and
        # a skipping one, and the median of an alternating run is one or the other)
        steady = e["epoch_seconds"][1:] or e["epoch_seconds"]
        m = sum(steady) / len(steady)
        med = e["median_epoch_seconds"]
        err = "-" if p is None else f"{100 * (p - med) / med:+.0f} %, {100 * (p - m) / m:+.0f} %"
        print(
            f"| {e['link']} | {e['workers']} | {e['hosts']} | {spec_of(e)} | {e['median_epoch_seconds']:.3f}, "
            f"{m:.3f} | {'-' if p is None else f'{p:.3f}'} | {err} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
