"""Where the workers of a run execute: one component that `g3 train`, `g3 eval` and `g3 bench` choose from.

* :class:`LocalLauncher` — K processes on this machine, talking over loopback (``spawn_workers``);
* :class:`~stages.kits.runtime.launch.emulated_hosts.EmulatedHostsLauncher` — H emulated hosts on this machine, each a
  network namespace with its own cores and a link shaped to a rate, one torchrun agent per host
  (``--emulate-link RATE``, docs/DESIGN.md "Emulated hosts");
* under ``torchrun`` on real hosts, `g3 train` runs the one rank of its process itself (stages/train).

Every launcher runs the same entry, ``entry(rank, world, init_method, plan_dir, run_dir, cfg, *extra)``
(``train_rank``, ``eval_rank``), so nothing else — the loop, the strategies, the transport — knows where its
workers run. An argument in ``extra`` that is an input file every host must hold a copy of is passed as a
:class:`HostFile`; the launcher hands the entry a path to that file on the rank's host.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from stages.common.errors import G3InputError
from stages.kits.runtime.config import RuntimeConfig
from stages.kits.runtime.launch.processes import INFERENCE_PRELOAD, HostFile, run_in_process, spawn_workers


class LocalLauncher:
    """K processes on this machine (forked from one server), rendezvous on ``cfg.master_addr`` (loopback).

    ``inference``: the job only evaluates (`g3 eval`): one rank runs in this process instead of a worker (unless
    this process is in a process group already), and the fork server this process starts imports what inference
    needs, not training's optimizer machinery."""

    def __init__(self, inference: bool = False):
        self.inference = inference

    def describe(self, world: int) -> dict:
        return {"kind": "local", "workers": world}

    def run(
        self, entry, world: int, run_dir: Path, prefix: str, plan: Path, cfg: RuntimeConfig, *extra
    ) -> dict:
        """Run ``entry`` on every rank; returns what the launcher measured besides the workers (nothing here)."""
        args = [str(a.path) if isinstance(a, HostFile) else a for a in extra]
        if self.inference and world == 1 and not _process_group_exists():
            import torch

            # the rank sets its own thread count; the caller's (a Python session) is restored
            threads = torch.get_num_threads()
            # the allocator's policy is process-wide and cannot be undone: the caller's process keeps its own (one
            # forward pass gains nothing from keeping freed memory for a next epoch)
            here = dataclasses.replace(cfg, heap="system")
            try:
                run_in_process(
                    entry,
                    run_dir,
                    prefix,
                    here.master_addr,
                    here.master_port,
                    str(plan),
                    str(run_dir),
                    here,
                    *args,
                )
            finally:
                torch.set_num_threads(threads)
            return {}
        spawn_workers(
            entry,
            world,
            run_dir,
            prefix,
            cfg.master_addr,
            cfg.master_port,
            str(plan),
            str(run_dir),
            cfg,
            *args,
            timeout=cfg.wait_seconds(),  # the heartbeat watchdog: a minute, streamed or not
            preload=INFERENCE_PRELOAD if self.inference else None,
        )
        return {}


def _process_group_exists() -> bool:
    """This process already belongs to a process group (g3's Python API called inside a distributed job): a rank
    run here could not start its own, so it runs in a worker process."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def make_launcher(cfg: RuntimeConfig, world: int, inference: bool = False, host_folders=None):
    """The launcher ``cfg`` asks for: emulated hosts with ``cfg.emulate_link``, else local processes
    (``inference``: see :class:`LocalLauncher`). ``host_folders(plan, hosts, out)``: what emulated hosts hold
    on their disks, each host's folder and its ranks (`g3 bundle`'s node folders, given by the stage that
    launches: the runtime calls no stage)."""
    if not cfg.emulate_link:
        for name, flag in (
            ("hosts", "--hosts"),
            ("emulate_faults", "--emulate-fault"),
            ("max_restarts", "--max-restarts"),
        ):
            if getattr(cfg, name):
                raise G3InputError(f"{flag} applies to emulated hosts: give --emulate-link RATE too")
        return LocalLauncher(inference)
    from stages.kits.runtime.launch.emulated_hosts import EmulatedHostsLauncher

    return EmulatedHostsLauncher.from_config(
        cfg, world, host_folders, preload=INFERENCE_PRELOAD if inference else None
    )
