"""Training configuration: one small dataclass, shared by the launcher, the loop and the strategies."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch

PIPELINES = ("multi", "inter", "intra", "none")
LAYER0_CACHE = ("auto", "on", "off")
PREFETCH = ("auto", "on", "off")
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def local_workers(world: int) -> int:
    """Workers on this machine: torchrun's LOCAL_WORLD_SIZE, else all of them (``g3 train --workers K``)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world)))


@dataclass
class TrainConfig:
    epochs: int = 10
    lr: float = 0.01
    weight_decay: float = 0.0
    dropout: float = 0.5
    seed: int = 0
    workers: int | None = None  # None: the plan's worker count
    device: str = "cpu"  # cpu | cuda
    eval_every: int = 1  # 0: never
    checkpoint_every: int = 0  # 0: never
    resume: bool = False
    pipeline: str = "multi"
    trace: bool = False  # write a Chrome-trace timeline of one epoch per rank
    profile: str | None = None  # write PROFILE.json (compute rates, for `g3 simulate`) from the last epoch
    feature_cache: bool = True
    layer0_cache: str = "auto"  # auto | on | off: keep layer 0's aggregation of the (fixed) input features
    prefetch: str = "auto"  # auto | on | off: intra/multi gather the next bin on a second thread
    dtype: str = "float32"
    threads: int | None = None  # per worker; None: cores / local workers
    timeout: float = 60.0  # seconds a worker waits for a peer before giving up
    master_addr: str = "127.0.0.1"
    master_port: int = 0  # 0: pick a free port
    strategy: str = "g3"
    backward: str = "recompute"  # recompute | keep (each bin's activations)
    task: str = "train"  # train | eval (forward only, for `g3 eval`)
    weights: str | None = None  # eval: the weights to load
    live: bool = True  # rich live display on rank 0
    heap: str = "keep"  # keep | system: freed memory stays in the heap for the next epoch (stages/train/heap.py)

    def layer0_cache_enabled(self) -> bool:
        """auto = on for the CPU; on CUDA the cache would sit on the device outside the bins' memory budget."""
        return self.layer0_cache == "on" or (self.layer0_cache == "auto" and self.device == "cpu")

    def prefetch_enabled(self, threads: int, local_workers: int) -> bool:
        """Whether ``intra``/``multi`` gather (on CUDA: gather and copy in) the next bin on a second thread.

        auto = on for CUDA, where the copy runs on its own stream while the device computes; on the CPU only
        when the workers leave a core idle: otherwise the gather thread takes a core from the compute kernels
        and every epoch gets slower (measured, docs/BENCHMARKS.md "Prefetch on the CPU")."""
        if self.prefetch != "auto":
            return self.prefetch == "on"
        return self.device == "cuda" or threads * local_workers < (os.cpu_count() or 1)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def device_for(self, rank: int) -> str:
        if self.device == "cuda":
            local = int(os.environ.get("LOCAL_RANK", rank))
            return f"cuda:{local % max(1, torch.cuda.device_count())}"
        return "cpu"

    def to_dict(self) -> dict:
        return asdict(self)
