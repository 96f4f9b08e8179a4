"""`g3 eval`: exact full-neighbour inference of RUN's weights with the run's strategy, accuracy per split.

Entry point: :func:`run_eval`. The run's own plan is used with its worker count; another ``--workers K``
evaluates through a temporary K-way chunk partition and ``g3`` plan of the same store and model (every
strategy's inference is exact full-neighbour inference, so any exact strategy measures the same accuracy).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from stages.common.artifact_json import resolve_reference
from stages.common.atomic import check_result, check_writable, target_lock, write_json_atomic
from stages.common.cost import files_bytes, stage_cost
from stages.common.errors import G3InputError
from stages.common.npy import check_digest, digest_path
from stages.common.run_artifact import load_run_meta
from stages.common.settings import check_choices, setting

if TYPE_CHECKING:
    from stages.kits.runtime.config import RuntimeConfig

# torch, the runtime and the training stage are imported where they are needed, not with this module: a new
# evaluation starts the workers' fork server first, so that the server's imports overlap this process's
# (docs/BENCHMARKS.md, "g3 eval start-up").

SPLITS = ("train", "valid", "test")
# the module of the workers' entry (eval_rank), which the fork server preloads
RUNNER = f"{__package__}.runner"
CKPT_GLOB = "epoch-*.pt"


@dataclasses.dataclass
class EvalOptions:
    """Everything `g3 eval` can be told (see ``g3 eval --help``; ``g3.evaluate`` takes the same names)."""

    checkpoint: str | None = setting(
        None,
        "Weights to evaluate: a checkpoint file [default: RUN/model.pt, else the latest checkpoint].",
        path="input",
    )
    split: str = setting("all", "Which split's accuracy to report.", choices=(*SPLITS, "all"))
    workers: int | None = setting(
        None,
        "Worker processes [default: the run's]; another count evaluates through a temporary partition and plan "
        "of the same store (1 = single process).",
    )
    plan: str | None = setting(
        None,
        "The plan the run was trained with [default: the one run.json names, found relative to RUN first]; for "
        "a multi-host run's folder copied back from its host, the plan that was bundled.",
        path="input",
    )
    emulate_link: str | None = setting(
        None,
        "Evaluate on emulated hosts joined by links of RATE (e.g. 1gbit), as `g3 train --emulate-link`.",
        metavar="RATE",
    )
    hosts: int | None = setting(None, "With --emulate-link: emulated hosts [default: one per worker].")
    metric: str | None = setting(
        None,
        "rocauc: each split's ROC-AUC besides the accuracy (binary tasks) [default: the run's --metric].",
        choices=("accuracy", "rocauc"),
    )


def load_run(run: Path) -> dict:
    """run.json, checked (stages.common.run_artifact)."""
    return load_run_meta(run)


def _latest_checkpoint(run: Path) -> Path | None:
    folder = run / "checkpoints"
    found = sorted(p for p in folder.glob(CKPT_GLOB) if ".rank-" not in p.name) if folder.is_dir() else []
    return found[-1] if found else None


def pick_weights(run: Path, checkpoint: str | None) -> Path:
    """An explicit checkpoint, else the final weights, else the latest checkpoint."""
    if checkpoint:
        p = Path(checkpoint)
        if not p.is_file():
            raise G3InputError("no such checkpoint", path=p)
        return p
    if (Path(run) / "model.pt").is_file():
        return Path(run) / "model.pt"
    if digest_path(Path(run) / "model.pt").is_file():  # written after model.pt: the weights were lost since
        raise G3InputError(
            "model.pt is missing (its sha256 file is there: deleted or lost since training ended)", path=run
        )
    ckpt = _latest_checkpoint(Path(run))
    if ckpt is None:
        raise G3InputError("the run has no model.pt and no checkpoint to evaluate", path=run)
    return ckpt


def run_eval(run: str | Path, options: EvalOptions | None = None, *, force: bool = False) -> dict:
    """Evaluate RUN's weights; writes RUN/eval.json (an earlier one only with ``force``) and returns it
    (filtered to ``options.split``). ``options.plan``: the plan the run was trained with, when it is not where
    run.json says (a multi-host run's folder copied back: its node plan stayed on its host);
    ``emulate_link``/``hosts``: on emulated hosts (stages/kits/runtime/launch/launchers.py), as `g3 train
    --emulate-link`."""
    t_stage = time.perf_counter()
    options = options or EvalOptions()
    check_choices(options)
    checkpoint, workers, metric = options.checkpoint, options.workers, options.metric
    run = Path(run)
    meta = load_run(run)
    if workers is not None and workers < 1:
        raise G3InputError("--workers must be >= 1")
    weights = pick_weights(run, checkpoint)
    digest = file_digest(weights)
    metric = metric or (meta.get("config") or {}).get("metric") or "accuracy"  # default: the run's
    earlier = _earlier_evaluation(run / "eval.json", digest, workers, metric)
    if earlier is not None and not force and options.emulate_link is None:
        # the same weights evaluated before: reading the result again needs no --force, no lock and no workers
        return _answer(earlier, run, options.split, reused=True)
    check_writable(run, "eval.json and the workers' logs")
    estimate = check_eval_space(
        run, workers or int(meta["plan"]["num_workers"])
    )  # before the lock is written
    # held while it evaluates: a second `g3 eval` of the run at the same time is refused, not silently replacing
    # the first one's eval.json
    with target_lock(run / "eval.json", "evaluating"):
        return _evaluate(run, meta, options, weights, digest, metric, force, t_stage, estimate)


# what `g3 eval` writes into the run folder at least: eval.json (its schema, weights, strategy, metric and the
# three splits' figures: 0.6 KB on the tiny run) and a log per worker ("started: world K, …")
EVAL_JSON_BYTES = 256
EVAL_LOG_BYTES = 64


def eval_folder_bytes(workers: int) -> dict[str, int]:
    """The least `g3 eval` writes into the run folder with ``workers`` workers, by kind (a lower bound: the file
    system's blocks and the logs' later lines come on top)."""
    return {"eval.json": EVAL_JSON_BYTES, "logs": workers * EVAL_LOG_BYTES}


def check_eval_space(run: Path, workers: int) -> int:
    """Refuse, before any worker starts and before anything is written there, a run folder whose disk cannot
    take :func:`eval_folder_bytes`: one line naming the folder and the figures. Returns the estimate (bytes)."""
    from stages.common.atomic import check_free_space

    parts = eval_folder_bytes(workers)
    check_free_space(run / "eval.json", parts, "this evaluation", "free space on the run's disk")
    return sum(parts.values())


def eval_written_bytes(run: Path) -> int:
    """What the files `g3 eval` writes in the run folder take on disk: eval.json and the workers' logs
    (logs/eval-*), their allocated blocks."""
    return files_bytes([run / "eval.json", *(run / "logs").glob("eval-*")])


def _evaluate(
    run: Path,
    meta: dict,
    options: EvalOptions,
    weights: Path,
    digest: str,
    metric: str,
    force: bool,
    t_stage: float,
    disk_estimate: int = 0,
) -> dict:
    """:func:`run_eval`'s work, with the run's eval.json locked."""
    split, workers, plan = options.split, options.workers, options.plan
    emulate_link, hosts = options.emulate_link, options.hosts
    check_result(run / "eval.json", force, "an evaluation of other weights (or another worker count)")
    plan = Path(plan) if plan else run_plan_path(run, meta)
    if (
        emulate_link is None
    ):  # the local workers' fork server starts while the plan and the weights are checked
        from stages.kits.runtime.launch.processes import (
            INFERENCE_PRELOAD,
            check_workers_fit,
            start_server_early,
        )

        local = workers or int(meta["plan"]["num_workers"])
        check_workers_fit(local, in_process=local == 1)  # before the server takes its memory
        if local > 1:
            # the module of the workers' entry, by name: this process imports it (and torch) only later
            start_server_early([*INFERENCE_PRELOAD, RUNNER])
    from stages.bundle import host_folders
    from stages.eval.runner import eval_rank
    from stages.kits.runtime.launch.launchers import HostFile, make_launcher
    from stages.train import check_plan

    cfg = dataclasses.replace(_inference_config(meta, emulate_link, hosts), metric=metric)
    plan_meta = check_plan(plan, cfg)
    check_trained_with(plan_meta, meta, plan)
    check_weights(weights, plan_meta)
    if plan_meta.get("bundle"):
        raise G3InputError(
            f"this plan is node {plan_meta['bundle']['node']} of a bundle, with only its host's "
            "ranks: give --plan PLAN, the plan that was bundled",
            path=plan,
        )
    k = int(plan_meta["num_workers"])
    tmp = None
    try:
        if workers is not None and workers != k:
            tmp = Path(tempfile.mkdtemp(prefix="g3-eval-"))
            plan, k = _temporary_plan(plan_meta, workers, tmp), workers
            cfg = dataclasses.replace(_inference_config(meta, emulate_link, hosts), metric=metric)
            check_plan(plan, cfg)
        # one worker evaluates in this process; more fork from the server started above
        make_launcher(cfg, k, inference=True, host_folders=host_folders).run(
            eval_rank, k, run, "eval-", plan, cfg, HostFile(str(weights.resolve())), str(weights.resolve())
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    result = json.loads((run / "eval.json").read_text())
    result["weights_sha256"] = digest  # what a later `g3 eval` compares to reuse this result
    result["cost"] = {
        **stage_cost(t_stage),  # this process (one worker evaluates in it; more report no peak)
        "disk_bytes": eval_written_bytes(run),
        "disk_estimate_bytes": disk_estimate,
    }
    write_json_atomic(run / "eval.json", result)
    return _answer(result, run, split, reused=False)


def file_digest(path: Path) -> str:
    """sha256 of a file (a model's weights: megabytes, read once)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _earlier_evaluation(path: Path, digest: str, workers: int | None, metric: str) -> dict | None:
    """An earlier eval.json of the same weights and metric (and worker count, when one is asked for), else
    None."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(earlier, dict) or earlier.get("weights_sha256") != digest:
        return None
    if workers is not None and earlier.get("workers") != workers:
        return None
    if earlier.get("metric", "accuracy") != metric:
        return None
    return earlier


def _answer(result: dict, run: Path, split: str, reused: bool) -> dict:
    """eval.json as returned: its path, whether it was reused, and of its per-split figures (metrics and the
    counts behind them) those of ``split`` only."""
    result = {**result, "path": str(run / "eval.json"), "reused": reused}
    if split != "all":
        for key in ("accuracy", "rocauc", "correct", "labelled"):
            if key in result:
                result[key] = {split: result[key][split]}
    return result


def read_weights(weights: Path) -> dict:
    """The state dict of a weights file or a training checkpoint, its digest checked, read as tensors only (no
    code run); a damaged or foreign file is one line."""
    import torch

    check_digest(weights)
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - anything unreadable is the user's input error
        raise G3InputError(
            f"cannot read the weights: not a file of tensors torch.load reads ({type(exc).__name__})",
            path=weights,
        ) from None
    if isinstance(state, dict) and isinstance(state.get("model"), dict):  # a training checkpoint
        state = state["model"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise G3InputError(
            "holds no weights (expected a state dict of tensors, or a g3 checkpoint)", path=weights
        )
    return state


def check_weights(weights: Path, plan_meta: dict) -> None:
    """The weights file reads as tensors (no code run) and each tensor fits the plan's model (name and shape) —
    checked here, so that a damaged or foreign file is one line, not a failure in every worker."""
    from stages.common.model_spec import ModelSpec
    from stages.kits.runtime.models import model_from_spec

    state = read_weights(weights)
    shapes = {
        k: tuple(v.shape) for k, v in model_from_spec(ModelSpec.from_plan(plan_meta)).state_dict().items()
    }
    for name, tensor in state.items():
        if name not in shapes:
            raise G3InputError(f"holds {name!r}, which the plan's model does not have", path=weights)
        if tuple(tensor.shape) != shapes[name] and tensor.dim() != 2:  # a sharded 2-D slice may be narrower
            raise G3InputError(
                f"{name!r} has shape {tuple(tensor.shape)}, the plan's model {shapes[name]}", path=weights
            )


def run_plan_path(run: Path, meta: dict) -> Path:
    """The run's plan, relative to the run first (moved together), else where it was."""
    plan = resolve_reference(meta["plan"], run, "plan.json")
    if not (plan / "plan.json").is_file():
        raise G3InputError(
            f"the plan it was trained with is neither at {plan} nor at {meta['plan']['path']}: give "
            "--plan PLAN (for a multi-host run, the plan that was bundled)",
            path=run / "run.json",
        )
    return plan


def check_trained_with(plan_meta: dict, run_meta: dict, plan: Path) -> None:
    """The plan is the one the run was trained with, or a node folder of it: same model, strategy, workers and
    partition."""
    checks = [
        ("model", plan_meta["config"], run_meta["plan"]["model"]),
        ("strategy", plan_meta["strategy"], run_meta["strategy"]),
        ("worker count", plan_meta["num_workers"], run_meta["plan"]["num_workers"]),
        ("partition", plan_meta["partition"].get("digest"), run_meta["partition"].get("digest")),
    ]
    for what, have, trained in checks:
        if have != trained:
            raise G3InputError(f"not the plan this run was trained with: its {what} differs", path=plan)


def _inference_config(
    run_meta: dict, emulate_link: str | None = None, hosts: int | None = None
) -> RuntimeConfig:
    """The run's settings (device, dtype, threads, seed, …) with the strategy's default knobs: they change how a
    strategy runs, not what it computes. Where the workers run is this evaluation's choice, not the run's."""
    from stages.kits.runtime.config import RuntimeConfig

    # no strategy knob: each is its strategy's default (the evaluating plan may be another strategy's, which
    # would refuse the run's knobs); the knobs are no field, so none is carried over
    base = {
        k: v
        for k, v in run_meta["config"].items()
        if k in RuntimeConfig.__dataclass_fields__ and k != "knobs"
    }
    return RuntimeConfig(
        **{
            **base,
            "trace": False,
            "master_port": 0,
            "emulate_link": emulate_link,
            "hosts": hosts,
            "emulate_subnet": base.get("emulate_subnet"),
            "max_restarts": 0,
            "emulate_faults": (),
            "network": None,
        }
    )


def _temporary_plan(plan_meta: dict, workers: int, tmp: Path) -> Path:
    """A `workers`-way partition and plan of the run's store by the registered full-graph evaluator
    (the registry's ``EVALUATOR_STRATEGY``), for evaluating with another K."""
    from stages.partition import PartitionOptions, run_partition
    from stages.plan import PlanConfig, run_plan
    from stages.strategies.registry import EVALUATOR_METHOD, EVALUATOR_STRATEGY, strategy_spec

    evaluator = strategy_spec(EVALUATOR_STRATEGY)
    part = tmp / "part"
    run_partition(
        plan_meta["store"]["path"], PartitionOptions(workers=workers, method=EVALUATOR_METHOD), out=part
    )
    c = plan_meta["config"]
    # a run of the evaluator itself keeps its options (g3: its bins); other strategies' options do not apply
    same = plan_meta["strategy"]["options"] if plan_meta["strategy"]["name"] == evaluator.name else {}
    cfg = PlanConfig(
        model=c["model"],
        layers=c["layers"],
        hidden=c["hidden"],
        heads=c["heads"],
        strategy=evaluator.name,
        options={o.name: same.get(o.name) for o in evaluator.plan_options if o.name in same},
    )
    run_plan(part, cfg, out=tmp / "plan")
    return tmp / "plan"
