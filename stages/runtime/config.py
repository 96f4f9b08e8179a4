"""How the workers of a run execute: one small dataclass shared by the launcher, the strategies, training and
evaluation (``stages.train.TrainConfig`` and ``stages.eval`` extend it with what only they need).

None in a strategy knob (``pipeline``, ``prefetch``, ``backward``, ``layer0_cache``) means "this strategy's
default": the launcher resolves it (:func:`resolve_knobs`) against the strategies registry, refusing a knob the
plan's strategy does not have.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch

from ..common.errors import G3InputError
from ..common.strategies import STRATEGIES, TRAIN_KNOBS, StrategyInfo
from .pipeline import SCHEDULES

# every --pipeline value some strategy takes: g3's bin schedules (multi, the default, inter, intra, none) and the
# values strategies declare in their registry entry (knob_choices)
PIPELINES = tuple(dict.fromkeys([*SCHEDULES, *(v for s in STRATEGIES.values() for v in s.knob_choices.get("pipeline", ()))]))
KNOB_CHOICES = {"pipeline": tuple(SCHEDULES)}  # a strategy's knob_choices replace these
LAYER0_CACHE = ("auto", "on", "off")
PREFETCH = ("auto", "on", "off")
BACKWARD = ("auto", "recompute", "keep")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
RESIDENCY = ("auto", "device", "host")
def prefetch_depth(prefetch: str | None) -> int:
    """What ``--prefetch`` means to a mini-batch strategy (and to a simulator reading a run's config): how many
    steps the sampler thread prepares ahead, 0 for in the step itself. auto, on and None = 2, off = 0, N = N."""
    mode = prefetch or "auto"
    if mode in ("auto", "on"):
        return 2
    return 0 if mode == "off" else int(mode)


KNOB_DEFAULTS = {"pipeline": "multi", "prefetch": "auto", "backward": "auto", "layer0_cache": "auto",
                 "feature_cache": True, "micro_batches": 1,
                 "scheduler": "on", "sample_threads": 2, "max_dags": 4, "launch_sigma": 500.0, "task_nodes": 256}


def usable_cores() -> int:
    """The cores this process may run on (its affinity: an emulated host's share, a cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def local_workers(world: int) -> int:
    """Workers on this machine: torchrun's LOCAL_WORLD_SIZE, else all of them (``g3 train --workers K``)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world)))


@dataclass
class RuntimeConfig:
    dropout: float = 0.5
    seed: int = 0
    metric: str = "accuracy"  # accuracy | rocauc (binary tasks: ROC-AUC per split besides the accuracy)
    device: str = "cpu"  # cpu | cuda
    dtype: str = "float32"
    threads: int | None = None  # per worker; None: cores / local workers
    timeout: float = 60.0  # seconds a worker waits for a peer before giving up
    master_addr: str = "127.0.0.1"
    master_port: int = 0  # 0: pick a free port
    heap: str = "keep"  # keep | system: freed memory stays in the heap for the next epoch (heap.py)
    trace: bool = False  # time every span; write a Chrome-trace timeline of the last epoch per rank
    # where the workers run (stages/runtime/launch/launchers.py): local processes, or emulated hosts on this machine
    emulate_link: str | None = None  # e.g. "100mbit": one network namespace per host, links shaped to this rate
    hosts: int | None = None  # emulated hosts (None: one per worker)
    emulate_subnet: str | None = None  # the emulated hosts' addresses (None: netemu.DEFAULT_SUBNET)
    max_restarts: int = 0  # emulated hosts: torchrun's --max-restarts (a failed worker group restarts)
    emulate_faults: tuple[str, ...] = ()  # emulated hosts: faults to inject (emulated_hosts.Fault)
    network: dict | None = None  # set by the launcher for its workers: how they are connected (in every epoch record)
    # where a worker's partition lives (RESIDENCY): auto = on the device when it is a GPU and the plan says the
    # partition fits there; device = there whatever the device (the device path, also on the CPU); host = in host
    # memory (the CPU kernels; on a GPU, bins streamed in)
    residency: str = "auto"
    # strategy knobs (None: the strategy's default; see resolve_knobs)
    pipeline: str | None = None
    prefetch: str | None = None  # auto | on | off | N: g3's next-bin gather thread; mini-batch: N steps ahead
    backward: str | None = None  # auto | recompute | keep (each bin's activations; auto: keep for one bin)
    layer0_cache: str | None = None  # auto | on | off: keep layer 0's aggregation of the (fixed) input features
    feature_cache: bool | None = None  # fetch remote input features once (False: every epoch)
    micro_batches: int | None = None  # mini-batch: micro-batches accumulated into each optimizer step
    scheduler: str | None = None  # on | off: ByteGNN's two-level scheduler, or one DAG at a time
    sample_threads: int | None = None  # threads of ByteGNN's sampling task pool
    max_dags: int | None = None  # ByteGNN: DAGs launched and not yet trained on, at most
    launch_sigma: float | None = None  # ByteGNN: σ of Algorithm 1's launch rule
    task_nodes: int | None = None  # ByteGNN: frontier nodes per sampling task

    def resident(self, plan_says: str | None = None) -> bool:
        """Whether a worker runs the device path: its partition, activations and gradients live on its device
        for the whole run. ``plan_says``: the plan's residency for the worker (``"device"`` when the partition
        fits the device memory the plan was made for, ``"host"`` when it does not; None: no record)."""
        if self.residency != "auto":
            return self.residency == "device"
        return self.device == "cuda" and plan_says != "host"

    def layer0_cache_enabled(self, resident: bool = False) -> bool:
        """auto = on, except for bins streamed to a GPU, where the cache would sit on the device outside the
        bins' memory budget (a resident partition's budget counts it)."""
        mode = self.layer0_cache or "auto"
        return mode == "on" or (mode == "auto" and (self.device == "cpu" or resident))

    def prefetch_enabled(self, threads: int, local_workers: int, resident: bool = False) -> bool:
        """Whether ``intra``/``multi`` gather (on CUDA: gather and copy in) the next bin on a second thread.

        auto = on for bins streamed to CUDA, where the copy runs on its own stream while the device computes;
        never for a resident partition (a gather is a device kernel, queued behind the compute anyway); on the
        CPU only when the workers leave a core idle: otherwise the gather thread takes a core from the compute
        kernels and every epoch gets slower (measured: docs/BENCHMARKS.md, "g3's pipeline schedules on one
        machine", "Prefetch on the CPU")."""
        mode = self.prefetch or "auto"
        if mode != "auto":
            return mode == "on"
        if resident:
            return False
        return self.device == "cuda" or threads * local_workers < usable_cores()

    def prefetch_depth(self) -> int:
        """Mini-batch strategies: how many steps the sampler thread prepares ahead (0: in the step itself)."""
        return prefetch_depth(self.prefetch)

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


def resolve_knobs(cfg: RuntimeConfig, info: StrategyInfo) -> None:
    """Fill the strategy knobs the plan's strategy has with their defaults; refuse one it does not have."""
    for knob, flag in TRAIN_KNOBS.items():
        value = getattr(cfg, knob)
        if knob in info.train_knobs:
            choices = info.knob_choices.get(knob) or KNOB_CHOICES.get(knob)
            if value is None:
                setattr(cfg, knob, info.knob_choices[knob][0] if knob in info.knob_choices else KNOB_DEFAULTS[knob])
            elif choices and value not in choices:
                raise G3InputError(f"{flag} {value} does not apply to the {info.name} strategy of this plan "
                                   f"(choose from {', '.join(choices)})")
            elif knob == "prefetch" and value not in PREFETCH and not info.mini_batch:
                raise G3InputError(f"--prefetch {value}: a step count applies to mini-batch strategies; the "
                                   f"{info.name} strategy takes {', '.join(PREFETCH)}")
        elif value is not None:
            raise G3InputError(f"{flag} does not apply to the {info.name} strategy of this plan (it applies to "
                               f"{', '.join(s for s in _strategies_with(knob)) or 'no strategy'})")


def knob_accepts(info: StrategyInfo, knob: str, value) -> bool:
    """Whether the strategy ``info`` takes ``value`` for the train knob ``knob`` (``g3 bench`` passes its
    ``--pipeline`` only to the strategies that take it: g3's schedules are not p3's)."""
    if knob not in info.train_knobs:
        return False
    choices = info.knob_choices.get(knob) or KNOB_CHOICES.get(knob)
    return not choices or value in choices


def parse_knob(knob: str, text: str):
    """A train knob's value from its text (``g3 bench``'s ``NAME{knob=value}``), typed as its default."""
    default = KNOB_DEFAULTS[knob]
    if isinstance(default, bool):
        if text not in ("on", "off", "true", "false"):
            raise ValueError("expected on or off")
        return text in ("on", "true")
    return type(default)(text)


def _strategies_with(knob: str) -> list[str]:
    from ..common.strategies import STRATEGIES

    return [s.name for s in STRATEGIES.values() if knob in s.train_knobs]


def check_runtime(cfg: RuntimeConfig) -> None:
    """Bad runtime settings: one clear line each, before any worker starts."""
    import math

    if cfg.device not in ("cpu", "cuda"):
        raise G3InputError(f"--device {cfg.device} is not one of cpu, cuda")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise G3InputError("--device cuda but CUDA is not available on this machine")
    if cfg.metric not in ("accuracy", "rocauc"):
        raise G3InputError(f"--metric {cfg.metric} is not one of accuracy, rocauc")
    if cfg.residency not in RESIDENCY:
        raise G3InputError(f"--residency {cfg.residency} is not one of {', '.join(RESIDENCY)}")
    if cfg.dtype not in DTYPES:
        raise G3InputError(f"--dtype {cfg.dtype} is not one of {', '.join(DTYPES)}")
    if not (0.0 <= cfg.dropout < 1.0):
        raise G3InputError("--dropout must be in [0, 1)")
    if cfg.prefetch is not None and cfg.prefetch not in PREFETCH and not (cfg.prefetch.isdigit()):
        raise G3InputError(f"--prefetch {cfg.prefetch} is not one of {', '.join(PREFETCH)} or a step count >= 0")
    if cfg.micro_batches is not None and cfg.micro_batches < 1:
        raise G3InputError("--micro-batches must be >= 1")
    for knob in ("sample_threads", "max_dags", "task_nodes"):
        if getattr(cfg, knob) is not None and getattr(cfg, knob) < 1:
            raise G3InputError(f"{TRAIN_KNOBS[knob]} must be >= 1")
    if cfg.launch_sigma is not None and not (math.isfinite(cfg.launch_sigma) and cfg.launch_sigma >= 0):
        raise G3InputError("--launch-sigma must be a finite number >= 0")
    if cfg.scheduler is not None and cfg.scheduler not in ("on", "off"):
        raise G3InputError(f"--scheduler {cfg.scheduler} is not one of on, off")
    if cfg.threads is not None and cfg.threads < 1:
        raise G3InputError("--threads must be >= 1")
    if not (cfg.timeout > 0 and math.isfinite(cfg.timeout)):
        raise G3InputError("--timeout must be a positive number of seconds")
    # values only a worker would have found out about (a traceback per rank, a run folder left behind)
    if not 0 <= cfg.seed < 2**63:
        raise G3InputError(f"--seed must be in [0, 2^63), got {cfg.seed}")
    if not 0 <= cfg.master_port <= 65535:
        raise G3InputError(f"--master-port must be a TCP port in [0, 65535] (0: a free one), got {cfg.master_port}")
    if cfg.master_addr not in ("127.0.0.1", "localhost", "::1") and cfg.emulate_link is None:
        import socket

        try:
            socket.getaddrinfo(cfg.master_addr, None)
        except (OSError, UnicodeError) as exc:
            raise G3InputError(f"--master-addr {cfg.master_addr} does not resolve to an address ({exc})") from None
    if cfg.emulate_link is not None:
        from ..common.units import parse_rate

        try:
            parse_rate(cfg.emulate_link)
        except ValueError as exc:
            raise G3InputError(f"--emulate-link: {exc}") from None
    if cfg.hosts is not None and cfg.hosts < 1:
        raise G3InputError("--hosts must be >= 1")
    if cfg.max_restarts < 0:
        raise G3InputError("--max-restarts must be >= 0")
    if cfg.pipeline is not None and cfg.pipeline not in PIPELINES:
        raise G3InputError(f"--pipeline {cfg.pipeline} is not available (choose from {', '.join(PIPELINES)})")
