"""Checkpoints: model, optimizer, epoch and RNG states (one copy on every host: the first process of each
writes it, so any host can resume), and each rank's strategy state (caches, a sampler's position) where it has
one; written atomically, loaded with weights_only=True. Resuming starts from the newest checkpoint every
rank has (:func:`agreed_checkpoint`, a collective)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from ..common.atomic import atomic_file
from ..common.errors import G3InputError

CKPT_RE = re.compile(r"epoch-(\d+)\.pt$")


def _save(obj, path: Path) -> None:
    with atomic_file(path) as tmp:
        torch.save(obj, tmp)


def save_weights(path: Path, model: torch.nn.Module) -> None:
    _save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)


def rank_state_path(ckpt: Path, rank: int) -> Path:
    """The strategy state of ``rank`` beside checkpoint ``ckpt`` (``epoch-NNNNN.rank-RRRRR.pt``)."""
    return ckpt.with_name(ckpt.name.removesuffix(".pt") + f".rank-{rank:05d}.pt")


def checkpoint_path(run_dir: Path, epoch: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"epoch-{epoch:05d}.pt"


def host_leader(rank: int) -> bool:
    """The first process of its host (torchrun's LOCAL_RANK 0; rank 0 of local workers, which share a folder)."""
    return int(os.environ.get("LOCAL_RANK", rank)) == 0


def save_checkpoint(run_dir: Path, epoch: int, model, optimizer, cfg, strategy, rank: int) -> Path:
    """Every rank with strategy state writes its own file; the first process of every host the weights and
    optimizer (replicated: each host can resume by itself)."""
    path = checkpoint_path(run_dir, epoch)
    state = strategy.state_dict()
    if state:
        _save(state, rank_state_path(path, rank))
    if host_leader(rank):
        _save({
            "epoch": epoch,
            "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "optimizer": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "seed": cfg.seed,
        }, path)
    return path


def checkpoint_epoch(path: Path) -> int:
    """The epoch a checkpoint file was taken after, from its name."""
    return int(CKPT_RE.search(Path(path).name).group(1))


def agreed_checkpoint(run_dir: Path, rank: int, has_state: bool) -> int:
    """The epoch of the newest checkpoint every rank has — its host's weights, and its own state file where the
    strategy keeps one — or -1 (collective: the minimum over ranks of each one's newest)."""
    import torch.distributed as dist

    folder = Path(run_dir) / "checkpoints"
    epochs = sorted((int(m.group(1)) for p in folder.iterdir() if (m := CKPT_RE.search(p.name))),
                    reverse=True) if folder.is_dir() else []
    mine = next((e for e in epochs if not has_state or rank_state_path(checkpoint_path(run_dir, e), rank).is_file()), -1)
    if dist.is_initialized():
        from ..runtime.strategies.base import collective_device

        t = torch.tensor([mine], dtype=torch.int64, device=collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        mine = int(t.item())
    return mine


def latest_checkpoint(run_dir: Path) -> Path | None:
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := CKPT_RE.search(p.name)))
    return found[-1][1] if found else None


def _load(path: Path, what: str) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise G3InputError(f"cannot read {what}: {exc}", path=path) from None


def load_checkpoint(path: Path, model, optimizer, strategy=None, rank: int = 0) -> int:
    """Restore model, optimizer and (when given) this rank's strategy state; returns the epoch the checkpoint
    was taken after."""
    state = _load(path, "checkpoint")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if strategy is not None:
        own = rank_state_path(path, rank)
        strategy.load_state_dict(_load(own, "strategy state") if own.is_file() else {})
    return int(state["epoch"])


def load_weights(path: Path) -> dict:
    return _load(path, "weights")
