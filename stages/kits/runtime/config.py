"""How the workers of a run execute: one small dataclass shared by the launcher, the strategies, training and
evaluation (``stages.train.TrainConfig`` and ``stages.eval`` extend it with what only they need).

The strategy knobs given (``--pipeline``, ``--prefetch``, …) are kept by name in ``cfg.knobs``; the launcher
resolves them against the plan's strategy (``stages.strategies.resolve_knobs``) into that strategy's typed knobs,
which its runtime reads (``WorkerContext.knobs``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import torch

from stages.common.errors import G3InputError
from stages.common.settings import check_choices, setting
from stages.kits.runtime.heap import HEAP_POLICIES

DTYPES = {"float32": torch.float32, "float64": torch.float64}
RESIDENCY = ("auto", "device", "host")
# how long a worker waits for a peer where --timeout is not given: a minute finds a lost peer soon; a streamed
# layer (a worker reading its bins from disk) took more than that on 2 cores with 8 workers at 300 M arcs
PEER_WAIT_SECONDS = 60.0
STREAMED_PEER_WAIT_SECONDS = 1800.0


def local_workers(world: int) -> int:
    """Workers on this machine: torchrun's LOCAL_WORLD_SIZE, else all of them (``g3 train --workers K``)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world)))


@dataclass
class RuntimeConfig:
    """How the workers run (docs/DESIGN.md): each field a `g3 train` option (``setting``) or set by the launcher."""

    dropout: float = setting(
        0.5, "Dropout between layers; masks depend only on (seed, epoch, layer, node id), not on K."
    )
    seed: int = setting(0, "Seed of the initial weights and dropout masks.")
    metric: str = setting(
        "accuracy",
        "Evaluation metric besides accuracy: rocauc adds each split's ROC-AUC (binary tasks, e.g. the "
        "imbalanced Tolokers) to the metrics records.",
        choices=("accuracy", "rocauc"),
    )
    device: str = setting(
        "cpu",
        "Compute device (cuda: one GPU per rank, nccl for all-reduce, gloo for P2P host buffers).",
        choices=("cpu", "cuda"),
    )
    # where a worker's partition lives
    residency: str = setting(
        "auto",
        "Where each worker's partition, activations and gradients live. 'device': on the compute device "
        "for the whole run, computed by the device's own kernels with no copy in or out (the device path; on the "
        "CPU it runs what a GPU runs, for checking it). 'host': in host memory, the CPU kernels; on a GPU each "
        "layer or bin is copied in and out (g3's bins on a copy stream). 'auto': 'device' on a GPU where the plan "
        "found the partition fits the device memory (g3 plan --device-memory), else 'host'.",
        choices=RESIDENCY,
    )
    trace: bool = setting(
        False,
        "Time every span of every epoch but the first: the shares of communication time hidden under "
        "compute, spent blocked on messages and overlapping the runtime's data movement go to each epoch's "
        "metrics record, and the last epoch's timeline to RUN/trace/rank-N.json (Chrome trace, for Perfetto or "
        "chrome://tracing).",
    )
    heap: str = setting(
        "keep",
        "Host memory of each worker process: 'keep' = the C library's malloc serves every block from the "
        "heap and keeps freed memory there, so each epoch reuses the pages of the last instead of mapping, "
        "faulting in and zeroing them again (about 20 % faster epochs measured on one worker; the resident set "
        "stays near its peak); 'system' = the C library's defaults. Linux/glibc only; elsewhere both mean the "
        "defaults.",
        choices=HEAP_POLICIES,
    )
    dtype: str = setting(
        "float32", "Floating-point type of weights and embeddings.", choices=tuple(sorted(DTYPES))
    )
    threads: int | None = setting(None, "Torch threads per worker [default: cores / workers].")
    timeout: float | None = setting(
        None,
        "Seconds a worker waits for a peer before the run fails [default: 60; 30 minutes for a worker that "
        "streams its bins (g3 --stream-bins), whose layers can take minutes where workers outnumber cores — a "
        "worker that stops answering is still stopped by the launcher after 60 s without a heartbeat].",
    )
    master_addr: str = setting(
        "127.0.0.1", "Rendezvous address for local workers (loopback unless told otherwise)."
    )
    master_port: int = setting(0, "Rendezvous port (0: a free port).")
    # where the workers run (stages/kits/runtime/launch/launchers.py): local processes, or emulated hosts on this machine
    emulate_link: str | None = setting(
        None,
        "Run the workers on emulated hosts of this machine, joined by links of RATE per host and direction "
        "(e.g. 100mbit, 1gbit, 10gbit): one network namespace per host with its own cores, one torchrun agent per "
        "host, each host reading only its own copy of the plan. Needs root (or CAP_NET_ADMIN). Results equal a "
        "local run's; epoch times include the network's (docs/DESIGN.md, 'Emulated hosts').",
        metavar="RATE",
    )
    hosts: int | None = setting(
        None,
        "With --emulate-link: emulated hosts; each runs K/H workers, which talk over its loopback [default: "
        "one host per worker].",
    )
    emulate_subnet: str | None = setting(
        None,
        "With --emulate-link: the hosts' addresses (host n is address 100+n) [default: 198.18.0.0/24, set "
        "aside for benchmarking by RFC 2544].",
        metavar="CIDR",
    )
    max_restarts: int = setting(
        0,
        "With --emulate-link: a worker group that lost a worker, or a host whose agent died, is restarted up to "
        "N times and resumes from the newest checkpoint every host has.",
    )
    emulate_faults: tuple[str, ...] = setting(
        (),
        "With --emulate-link (repeatable): link-down:HOST:EPOCH:SECONDS takes HOST's link down half an epoch "
        "after epoch EPOCH for SECONDS; kill-agent:HOST:EPOCH kills HOST's torchrun agent then (a crashed host, "
        "started again under --max-restarts).",
        flag="--emulate-fault",
        metavar="SPEC",
    )
    # set by the launcher for its workers: how they are connected (in every epoch record)
    network: dict | None = None
    # the strategy knobs given, by name (None or absent: the strategy's default; see the module's docstring)
    knobs: dict = field(default_factory=dict)

    def __post_init__(self):
        self.knobs = dict(self.knobs)  # a copy's knobs are its own (dataclasses.replace)

    def resident(self, plan_says: str | None = None) -> bool:
        """Whether a worker runs the device path: its partition, activations and gradients live on its device
        for the whole run. ``plan_says``: the plan's residency for the worker (``"device"`` when the partition
        fits the device memory the plan was made for, ``"host"`` when it does not; None: no record)."""
        if self.residency != "auto":
            return self.residency == "device"
        return self.device == "cuda" and plan_says != "host"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def wait_seconds(self, streamed: bool = False) -> float:
        """How long a worker waits for a peer: ``--timeout``, else a minute, or half an hour where it streams."""
        if self.timeout is not None:
            return float(self.timeout)
        return STREAMED_PEER_WAIT_SECONDS if streamed else PEER_WAIT_SECONDS

    def device_for(self, rank: int) -> str:
        if self.device == "cuda":
            local = int(os.environ.get("LOCAL_RANK", rank))
            return f"cuda:{local % max(1, torch.cuda.device_count())}"
        return "cpu"

    def settings(self) -> dict:
        """The settings but the knobs, one key per field (run.json adds one per knob: the train stage)."""
        out = asdict(self)
        out.pop("knobs")
        return out


def check_runtime(cfg: RuntimeConfig) -> None:
    """Bad runtime settings: one clear line each, before any worker starts."""
    import math

    check_choices(cfg)  # device, metric, residency, dtype, heap: their declared values
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise G3InputError("--device cuda but CUDA is not available on this machine")
    if not (0.0 <= cfg.dropout < 1.0):
        raise G3InputError("--dropout must be in [0, 1)")
    if cfg.threads is not None and cfg.threads < 1:
        raise G3InputError("--threads must be >= 1")
    if cfg.timeout is not None and not (cfg.timeout > 0 and math.isfinite(cfg.timeout)):
        raise G3InputError("--timeout must be a positive number of seconds")
    # values only a worker would have found out about (a traceback per rank, a run folder left behind)
    if not 0 <= cfg.seed < 2**63:
        raise G3InputError(f"--seed must be in [0, 2^63), got {cfg.seed}")
    if not 0 <= cfg.master_port <= 65535:
        raise G3InputError(
            f"--master-port must be a TCP port in [0, 65535] (0: a free one), got {cfg.master_port}"
        )
    if cfg.master_addr not in ("127.0.0.1", "localhost", "::1") and cfg.emulate_link is None:
        import socket

        try:
            socket.getaddrinfo(cfg.master_addr, None)
        except (OSError, UnicodeError) as exc:
            raise G3InputError(
                f"--master-addr {cfg.master_addr} does not resolve to an address ({exc})"
            ) from None
    if cfg.emulate_link is not None:
        from stages.common.units import parse_rate

        try:
            parse_rate(cfg.emulate_link)
        except ValueError as exc:
            raise G3InputError(f"--emulate-link: {exc}") from None
    if cfg.hosts is not None and cfg.hosts < 1:
        raise G3InputError("--hosts must be >= 1")
    if cfg.max_restarts < 0:
        raise G3InputError("--max-restarts must be >= 0")
