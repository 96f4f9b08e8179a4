"""Plans for another worker count, for the simulators: the plan's store partitioned again with its partition method
and parameters, and planned with a strategy, its options and the plan's model (`g3 partition` and `g3 plan`
through their entries), in a cache folder — made once, then reused while what made them is unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from stages.common.atomic import write_json_atomic
from stages.common.errors import G3InputError
from stages.common.partition_artifact import load_partition_meta
from stages.common.plan_artifact import load_plan_meta
from stages.partition import PartitionOptions, run_partition
from stages.plan import PlanConfig, run_plan
from stages.strategies.registry import partition_method

# (k, strategy, its plan options) -> the folder of the plan for k workers
Replan = Callable[[int, str, dict], Path]


def replanner(meta: dict, cache: Path) -> Replan:
    """The :data:`Replan` of the plan whose plan.json is ``meta``, keeping its partitions and plans in ``cache``
    (``part-METHOD-K`` and ``part-METHOD-K.plan-STRATEGY-MODEL``, each with the stamp of what made it)."""
    part_meta = load_partition_meta(meta["partition"]["path"])
    method, params = part_meta["method"], part_meta.get("parameters", {})
    # the method's own options, as the plan's partition had them (every other option keeps its default)
    same = {f: params[f] for f in partition_method(method).options if params.get(f) is not None}
    config = {key: meta["config"][key] for key in ("model", "layers", "hidden", "heads")}
    store = meta["store"]

    def replan(k: int, strategy: str, options: dict) -> Path:
        part = cache / f"part-{method}-{k}"
        made = {"store": store.get("checksums"), "method": method, "parameters": same, "workers": k}
        if not _fresh(part / "simulate-cache.json", made, load_partition_meta, part):
            cache.mkdir(parents=True, exist_ok=True)
            run_partition(
                store["path"], PartitionOptions(workers=k, method=method, **same), out=part, force=True
            )
            write_json_atomic(part / "simulate-cache.json", made)
        plan = cache / f"{part.name}.plan-{strategy}-{config['model']}"
        want = {"partition": made, "config": config, "strategy": strategy, "options": options}
        if not _fresh(plan / "simulate-cache.json", want, load_plan_meta, plan):
            run_plan(part, PlanConfig(**config, strategy=strategy, options=options), out=plan, force=True)
            write_json_atomic(plan / "simulate-cache.json", want)
        return plan

    return replan


def _fresh(stamp: Path, want: dict, load: Callable, folder: Path) -> bool:
    """The folder was made from ``want`` (its stamp says so) and still reads as its artifact."""
    if not stamp.is_file() or json.loads(stamp.read_text()) != json.loads(json.dumps(want)):
        return False
    try:
        load(folder)
    except G3InputError:  # damaged or removed since: made again
        return False
    return True
