"""Checkpoints: model, optimizer, epoch and RNG states, written atomically; loaded with weights_only=True."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import torch

from ..common.errors import G3InputError

CKPT_RE = re.compile(r"epoch-(\d+)\.pt$")


def _atomic_save(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_weights(path: Path, model: torch.nn.Module) -> None:
    _atomic_save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)


def save_checkpoint(run_dir: Path, epoch: int, model, optimizer, cfg) -> Path:
    path = Path(run_dir) / "checkpoints" / f"epoch-{epoch:05d}.pt"
    state = {
        "epoch": epoch,
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "seed": cfg.seed,
    }
    _atomic_save(state, path)
    return path


def latest_checkpoint(run_dir: Path) -> Path | None:
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := CKPT_RE.search(p.name)))
    return found[-1][1] if found else None


def load_checkpoint(path: Path, model, optimizer) -> int:
    """Restore model and optimizer; returns the epoch the checkpoint was taken after."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise G3InputError(f"cannot read checkpoint: {exc}", path=path) from None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    return int(state["epoch"])


def load_weights(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise G3InputError(f"cannot read weights: {exc}", path=path) from None
