"""Checkpoints: the replicated model, optimizer, epoch and RNG states (one copy on every host: the first process
of each writes it, so any host can resume), and each rank's own file where it has something of its own — the
strategy's state (caches, a sampler's position) and the parameters the strategy shards with their optimizer
state; written atomically, loaded with weights_only=True. Resuming starts from the newest checkpoint every
rank has (:func:`agreed_checkpoint`, a collective) and is bitwise: every tensor is restored as saved."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from stages.common.atomic import atomic_file
from stages.common.errors import G3InputError
from stages.common.npy import check_digest, write_digest

CKPT_RE = re.compile(r"epoch-(\d+)\.pt$")


def _save(obj, path: Path) -> None:
    """``obj`` to ``path`` atomically, then its sha256 beside it (FILE.pt.sha256: readers verify it). In that
    order: a crash between leaves a file without its digest (read unverified), never a digest without its file
    — which is therefore damage (:func:`check_checkpoints`)."""
    with atomic_file(path) as tmp:
        torch.save(obj, tmp)
    write_digest(path)


def save_weights(path: Path, weights: torch.nn.Module | dict) -> None:
    """A model's weights (or a state dict, e.g. a strategy's :meth:`full_state_dict`) as a plain state dict."""
    state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
    _save({k: v.detach().cpu() for k, v in state.items()}, path)


def rank_state_path(ckpt: Path, rank: int) -> Path:
    """The strategy state of ``rank`` beside checkpoint ``ckpt`` (``epoch-NNNNN.rank-RRRRR.pt``)."""
    return ckpt.with_name(ckpt.name.removesuffix(".pt") + f".rank-{rank:05d}.pt")


def checkpoint_path(run_dir: Path, epoch: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"epoch-{epoch:05d}.pt"


def host_leader(rank: int) -> bool:
    """The first process of its host (torchrun's LOCAL_RANK 0; rank 0 of local workers, which share a folder)."""
    return int(os.environ.get("LOCAL_RANK", rank)) == 0


RANK_FILE_FORMAT = 2  # {format, strategy, sharded, sharded_optimizer}; format 1 was the strategy state alone


def has_rank_state(strategy) -> bool:
    """Whether each rank writes its own checkpoint file (strategy state or sharded parameters)."""
    return bool(strategy.state_dict()) or bool(strategy.sharded_parameters())


def save_checkpoint(run_dir: Path, epoch: int, model, optimizer, cfg, strategy, rank: int) -> Path:
    """Every rank with state of its own writes its own file; the first process of every host the replicated
    weights and optimizer state (each host can resume by itself)."""
    path = checkpoint_path(run_dir, epoch)
    sharded = set(strategy.sharded_parameters())
    if has_rank_state(strategy):
        params = dict(model.named_parameters())
        _save(
            {
                "format": RANK_FILE_FORMAT,
                "strategy": strategy.state_dict(),
                "sharded": {n: params[n].detach().cpu() for n in sorted(sharded)},
                "sharded_optimizer": {
                    n: _tensors(optimizer.state.get(params[n], {})) for n in sorted(sharded)
                },
            },
            rank_state_path(path, rank),
        )
    if host_leader(rank):
        _save(
            {
                "epoch": epoch,
                "model": {k: v.detach().cpu() for k, v in model.state_dict().items() if k not in sharded},
                "optimizer": _replicated_optimizer_state(model, optimizer, sharded),
                "torch_rng": torch.get_rng_state(),
                "seed": cfg.seed,
            },
            path,
        )
    return path


def _tensors(state: dict) -> dict:
    return {k: v.detach().cpu().clone() if torch.is_tensor(v) else v for k, v in state.items()}


def _replicated_optimizer_state(model, optimizer, sharded: set[str]) -> dict:
    """The optimizer's state dict without the sharded parameters' entries (each rank keeps its own)."""
    state = optimizer.state_dict()
    if sharded:
        index = {n: i for i, (n, _) in enumerate(model.named_parameters())}
        drop = {index[n] for n in sharded}
        state["state"] = {i: v for i, v in state["state"].items() if i not in drop}
    return state


def checkpoint_epoch(path: Path) -> int:
    """The epoch a checkpoint file was taken after, from its name."""
    return int(CKPT_RE.search(Path(path).name).group(1))


def agreed_checkpoint(run_dir: Path, rank: int, has_state: bool) -> int:
    """The epoch of the newest checkpoint every rank has — its host's weights, and its own state file where the
    strategy keeps one — or -1 (collective: the minimum over ranks of each one's newest)."""
    import torch.distributed as dist

    folder = Path(run_dir) / "checkpoints"
    epochs = (
        sorted((int(m.group(1)) for p in folder.iterdir() if (m := CKPT_RE.search(p.name))), reverse=True)
        if folder.is_dir()
        else []
    )
    mine = next(
        (e for e in epochs if not has_state or rank_state_path(checkpoint_path(run_dir, e), rank).is_file()),
        -1,
    )
    if dist.is_initialized():
        from stages.kits.runtime.strategy import collective_device

        t = torch.tensor([mine], dtype=torch.int64, device=collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        mine = int(t.item())
    return mine


def check_checkpoints(run_dir: Path) -> None:
    """Every checkpoint file whose digest is in the run's checkpoints/ is there too (g3 writes a digest only after
    its file: a digest alone means the file was deleted or lost since)."""
    folder = Path(run_dir) / "checkpoints"
    for side in sorted(folder.glob("*.pt.sha256")) if folder.is_dir() else []:
        if not side.with_name(side.name.removesuffix(".sha256")).is_file():
            raise G3InputError(
                f"{side.name.removesuffix('.sha256')} is missing (its sha256 file is there: "
                "deleted or lost since it was written)",
                path=folder,
            )


def latest_checkpoint(run_dir: Path) -> Path | None:
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := CKPT_RE.search(p.name)))
    return found[-1][1] if found else None


def _load(path: Path, what: str) -> dict:
    check_digest(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise G3InputError(f"cannot read {what}: {exc}", path=path) from None


def load_checkpoint(path: Path, model, optimizer, strategy=None, rank: int = 0) -> int:
    """Restore model, optimizer and (when given) this rank's strategy state and sharded parameters; returns the
    epoch the checkpoint was taken after."""
    state = _load(path, "checkpoint")
    sharded = set(strategy.sharded_parameters()) if strategy is not None else set()
    missing, unexpected = model.load_state_dict(state["model"], strict=False)
    if unexpected or set(missing) - sharded:
        raise G3InputError(
            f"checkpoint does not match the model: missing {sorted(set(missing) - sharded)}, "
            f"unexpected {sorted(unexpected)}",
            path=path,
        )
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if strategy is not None:
        own = rank_state_path(path, rank)
        mine = _load(own, "rank state") if own.is_file() else {}
        if mine.get("format") != RANK_FILE_FORMAT:  # format 1: the strategy state alone
            mine = {"strategy": mine, "sharded": {}, "sharded_optimizer": {}}
        if set(mine["sharded"]) != sharded:
            raise G3InputError(
                f"rank {rank}'s checkpoint holds sharded parameters {sorted(mine['sharded'])}, the "
                f"strategy shards {sorted(sharded)}",
                path=own,
            )
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in mine["sharded"].items():
                params[name].copy_(value)
                optimizer.state[params[name]] = {
                    k: v.to(params[name].device) if torch.is_tensor(v) and v.dim() else v
                    for k, v in mine["sharded_optimizer"][name].items()
                }
        strategy.load_state_dict(mine["strategy"])
    return int(state["epoch"])
