"""What `g3 train` writes into its run folder, at least, estimated from the plan and the settings before any worker
starts (:func:`run_folder_bytes`), so that a disk that cannot take it is refused in one line
(:func:`check_run_space`) instead of a worker failing with ENOSPC epochs in.

A lower bound, by construction: each part counts the tensors' bytes the files must hold (the model's weights from
the plan's model spec, built on torch's ``meta`` device, which allocates nothing; Adam's two moments per
parameter; the RNG state; what the strategy declares of its ranks' own state) and the least that the
formats add (a ``torch.save`` file's fixed records, a digest file, a metrics line's keys); the file system's
rounding to blocks, the logs' later lines and anything a strategy does not declare come on top. So a run is never
refused that would fit; on a small run the actual bytes are within a small factor of it (tests/test_run_disk.py).
"""

from __future__ import annotations

from pathlib import Path

from stages.common.atomic import check_free_space
from stages.common.model_spec import ModelSpec
from stages.train.config import TrainConfig

# the least a ``torch.save`` file holds besides its tensors' bytes (its zip's pickle, version, byte-order and
# serialization records and central directory: 1.26 KB for an empty dict with torch 2.x), and per tensor (its
# zip entry's local header and directory record, ≥ 100 bytes)
TORCH_FILE_BYTES = 1024
TORCH_TENSOR_BYTES = 64
DIGEST_FILE_BYTES = 72  # FILE.pt.sha256: "sha256:" + 64 hex digits + newline
RNG_STATE_BYTES = 5056  # torch.get_rng_state() of the CPU generator (a checkpoint's torch_rng)
RUN_JSON_BYTES = 1024  # run.json: schema, references, the config's every setting (3.4 KB on the tiny run)
METRICS_LINE_BYTES = 48  # a metrics.jsonl line's own keys: epoch, loss, epoch_seconds, workers
METRICS_WORKER_BYTES = 200  # a worker's record in it: the names of its dozen figures alone take 150 bytes
LOG_BYTES = 64  # a rank's log: its "started: world K, …" line


def model_sizes(meta: dict) -> tuple[int, int, int]:
    """(values in the plan's model's state dict, of which parameters, its tensors), from its spec on torch's
    ``meta`` device: nothing allocated, the shapes exactly those the workers build."""
    import torch

    from stages.kits.runtime.models import model_from_spec

    with torch.device("meta"):
        model = model_from_spec(ModelSpec.from_plan(meta))
    state = model.state_dict()
    return sum(t.numel() for t in state.values()), sum(p.numel() for p in model.parameters()), len(state)


def checkpoints_written(cfg: TrainConfig, start_epoch: int) -> int:
    """How many checkpoints epochs ``start_epoch``..``cfg.epochs - 1`` write (every ``--checkpoint-every``)."""
    every = cfg.checkpoint_every or 0
    if not every:
        return 0
    return sum(1 for e in range(start_epoch, cfg.epochs) if (e + 1) % every == 0)


def run_folder_bytes(meta: dict, cfg: TrainConfig, start_epoch: int = 0) -> dict[str, int]:
    """The least `g3 train` writes into the run folder, by kind, for the plan ``meta`` with the settings ``cfg``
    from epoch ``start_epoch`` on (a ``--resume`` counts only the epochs left). With K workers: init.pt (a new
    run) and model.pt, the whole model each; per checkpoint the weights and Adam's two moments (on the first rank
    of the host, or sharded over the ranks' own files: either way three values per parameter), the RNG state and
    what the strategy declares of its ranks' own state; run.json, a metrics line per epoch, a log per rank."""
    from stages.strategies.registry import strategy_spec

    item = 8 if cfg.dtype == "float64" else 4
    state, params, entries = model_sizes(meta)
    weights_file = TORCH_FILE_BYTES + state * item + entries * TORCH_TENSOR_BYTES + DIGEST_FILE_BYTES
    spec = strategy_spec(meta["strategy"]["name"])
    own = spec.checkpoint_state_bytes(meta, item) if spec.checkpoint_state_bytes else 0
    checkpoint = weights_file + 2 * params * item + RNG_STATE_BYTES + own
    epochs = max(cfg.epochs - start_epoch, 0)
    k = int(meta["num_workers"])
    return {
        "init.pt": weights_file if start_epoch == 0 else 0,
        "model.pt": weights_file,
        "checkpoints": checkpoints_written(cfg, start_epoch) * checkpoint,
        "metrics": epochs * (METRICS_LINE_BYTES + k * METRICS_WORKER_BYTES),
        "run.json and logs": RUN_JSON_BYTES + k * LOG_BYTES,
    }


def resume_epoch(run_dir: Path) -> int:
    """The epoch a ``--resume`` of ``run_dir`` starts at: after its newest checkpoint (0 where it has none;
    ``check_resume`` refuses that later)."""
    from stages.train.checkpoint import checkpoint_epoch, latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    return checkpoint_epoch(ckpt) + 1 if ckpt is not None else 0


# what only the host of rank 0 writes into its run folder under torchrun (each host keeps its own folder)
FIRST_HOST_ONLY = ("init.pt", "model.pt", "metrics")


def check_run_space(run_dir: Path, meta: dict, cfg: TrainConfig, first_host: bool = True) -> int:
    """Refuse, before any worker starts and before anything is written there, a run folder whose disk has less
    free than :func:`run_folder_bytes`: one line naming the folder, the figures and what to change. Returns the
    estimate (bytes), which run.json's ``cost`` keeps beside what the run wrote. ``first_host`` False: a torchrun
    host other than rank 0's, whose folder takes its checkpoints, run.json and logs only."""
    start = resume_epoch(run_dir) if cfg.resume else 0
    parts = run_folder_bytes(meta, cfg, start)
    if not first_host:
        parts = {name: n for name, n in parts.items() if name not in FIRST_HOST_ONLY}
    epochs = cfg.epochs - start
    check_free_space(
        run_dir,
        parts,
        f"this training ({epochs} epoch{'s' if epochs != 1 else ''}, "
        f"{checkpoints_written(cfg, start)} checkpoints)",
        "free space, give -o a folder on another disk, or checkpoint less often (--checkpoint-every)",
    )
    return sum(parts.values())
