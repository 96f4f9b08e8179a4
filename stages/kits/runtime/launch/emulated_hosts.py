"""Emulated hosts: a run's workers on H hosts of an emulated network on this machine (``--emulate-link RATE``).

Each host is a network namespace with its own share of the cores and one link, shaped to RATE in each
direction, to a switch the hosts share (:mod:`.netemu`). The run is a multi-host run as on a real cluster:

* the plan is cut into one folder per host by ``g3 bundle``; host n reads only its folder (its shards, its
  ranks' plan folders, its copies of input files) and writes only its run folder — host 0's is the run folder
  itself, the others' are gathered into it when the run ends (logs, per-rank checkpoint state);
* the workers fork from the fork server (:mod:`.processes`), each entering its host's namespace
  (:func:`.host_worker.forked`, ``setns``) with the environment torchrun would give it; the group's store is
  served by rank 0 on its host's address. Where a host may have to start again (``--max-restarts``, a
  ``kill-agent`` fault), one torchrun agent per host starts its workers instead, rendezvous over the emulated
  network (c10d, served by host 0's agent: ``--rdzv-conf is_host=1`` there, since every namespace has the
  machine's host name; ``--local-addr`` on every host, or its workers would dial ``localhost`` for the store).
  Forking spares each run two interpreters per host and one per worker, each importing torch;
* gloo talks over the host's NIC (``GLOO_SOCKET_IFNAME=eth0``), and workers on one host over its loopback;
* workers on a host use its cores: threads default to the host's cores over its workers.

Nothing else knows: the entry, loop, strategies and transport run as under torchrun on real hosts, and give
the same weights, bit for bit, as local workers with the same thread count.

Faults (``--emulate-fault``, for studying failures; tests use them):

* ``link-down:HOST:EPOCH:SECONDS`` — HOST's link goes down half an epoch after epoch EPOCH is recorded, for
  SECONDS (TCP retransmits: the run continues, bitwise unchanged, while SECONDS is under ``--timeout``);
* ``kill-agent:HOST:EPOCH`` — HOST's torchrun agent is SIGKILLed then. A host whose agent dies is a crashed
  host: what is left of it is killed, and it is started again while ``--max-restarts`` allows (counted per
  host, as torchrun counts its worker-group restarts); the group restarts and resumes from the newest
  checkpoint every host has. Host 0 serves the rendezvous and cannot be killed.

Clean-up: every namespace, process and host folder goes when the run ends, fails or is interrupted; a launcher
killed with SIGKILL leaves them to the next launcher or ``g3 cluster clean`` (names carry the launcher's pid).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import pickle
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from stages.common.errors import G3InputError, G3RuntimeError
from stages.kits.runtime.config import RuntimeConfig
from stages.kits.runtime.launch.netemu import (
    DEFAULT_SUBNET,
    NIC,
    PREFIX,
    EmulatedNetwork,
    clean_stale,
    host_cores,
    parse_rate,
    pid_alive,
    rate_label,
    why_not_available,
)
from stages.kits.runtime.launch.processes import (
    BAD_INPUT,
    ENVIRONMENT,
    STARTUP_GRACE,
    HostFile,
    heartbeat_path,
    log_path,
    main_without_a_file,
    preload_for,
    start_method,
)

RDZV_PORT = 29400  # every host has its own port space: the rendezvous port is always free
POLL_SECONDS = 0.2
HOSTS_DIR = re.compile(rf"^\.{PREFIX}(\d+)-hosts-")


@dataclass(frozen=True)
class Fault:
    kind: str  # link-down | kill-agent
    host: int
    epoch: int
    seconds: float = 0.0

    @classmethod
    def parse(cls, text: str, hosts: int) -> Fault:
        parts = text.split(":")
        try:
            if parts[0] == "link-down" and len(parts) == 4:
                fault = cls("link-down", int(parts[1]), int(parts[2]), float(parts[3]))
            elif parts[0] == "kill-agent" and len(parts) == 3:
                fault = cls("kill-agent", int(parts[1]), int(parts[2]))
            else:
                raise ValueError
        except ValueError:
            raise G3InputError(
                f"--emulate-fault {text!r} is not link-down:HOST:EPOCH:SECONDS or kill-agent:HOST:EPOCH"
            ) from None
        if not 0 <= fault.host < hosts:
            raise G3InputError(f"--emulate-fault {text!r}: host {fault.host} is not one of the {hosts} hosts")
        if fault.kind == "kill-agent" and fault.host == 0:
            raise G3InputError(
                f"--emulate-fault {text!r}: host 0 serves the rendezvous; its agent's death ends "
                "the job (kill another host's)"
            )
        if fault.epoch < 0 or not (math.isfinite(fault.seconds) and fault.seconds >= 0):
            raise G3InputError(f"--emulate-fault {text!r}: EPOCH and SECONDS must be finite and >= 0")
        return fault


@dataclass
class _Host:
    n: int
    folder: Path  # its node folder of the bundle: plan/, partition/, inputs/, job.pkl, host.log
    run_dir: Path  # where its ranks write (host 0: the run folder itself)
    ranks: list[int]
    cores: list[int]
    restarts: int = 0
    agent: subprocess.Popen | None = None
    workers: list = field(default_factory=list)  # its ranks' processes, forked into its namespace (no agent)

    def poll(self) -> int | None:
        """The host's exit code: its agent's, or its first failed worker's (0: every worker ended well; None:
        still running)."""
        if self.agent is not None:
            return self.agent.poll()
        codes = [p.exitcode for p in self.workers]
        failed = [c for c in codes if c not in (None, 0)]
        return failed[0] if failed else (0 if None not in codes else None)

    def running_ranks(self) -> list[int]:
        if self.agent is not None:
            return self.ranks if self.agent.poll() is None else []
        return [r for r, p in zip(self.ranks, self.workers, strict=True) if p.exitcode is None]


@dataclass
class EmulatedHostsLauncher:
    rate_bits: int
    hosts: int
    subnet: str
    max_restarts: int
    faults: tuple[Fault, ...] = ()
    live: bool = False
    preload: list[str] | None = None  # what the fork server imports if this launcher starts it
    # (plan, hosts, out) -> [(folder, ranks)] per host: what each host's disk holds (g3 bundle's node folders)
    host_folders: Callable[[Path, int, Path], list[tuple[Path, list[int]]]] | None = None
    net: EmulatedNetwork = field(init=False)
    _world: int = field(init=False, default=0)
    _job: str = field(init=False, default="")  # the rendezvous id: the run's host folder, unique per launch
    _entry: Callable | None = field(init=False, default=None)

    def __post_init__(self):
        self.net = EmulatedNetwork(self.hosts, self.rate_bits, self.subnet)

    @classmethod
    def from_config(
        cls, cfg: RuntimeConfig, world: int, host_folders=None, preload: list[str] | None = None
    ) -> EmulatedHostsLauncher:
        try:
            rate = parse_rate(cfg.emulate_link)
        except ValueError as exc:
            raise G3InputError(f"--emulate-link: {exc}") from None
        hosts = cfg.hosts or world
        if world % hosts:
            raise G3InputError(
                f"--hosts {hosts} does not divide the plan's {world} workers (every host runs the "
                "same number of workers)"
            )
        faults = tuple(Fault.parse(f, hosts) for f in cfg.emulate_faults)
        if host_folders is None:
            raise G3InputError("--emulate-link: this command cannot run on emulated hosts")
        launcher = cls(
            rate,
            hosts,
            cfg.emulate_subnet or DEFAULT_SUBNET,
            cfg.max_restarts,
            faults,
            live=bool(getattr(cfg, "live", False)),
            preload=preload,
            host_folders=host_folders,
        )
        reason = why_not_available()
        if reason:  # after the options are checked, before anything is written
            raise G3InputError(f"--emulate-link: the emulated network cannot be built here: {reason}")
        return launcher

    def describe(self, world: int) -> dict:
        return {
            "kind": "emulated-hosts",
            **self.net.describe(),
            **self.network_record(world),
            "max_restarts": self.max_restarts,
            "workers_started_by": "torchrun agents" if self.uses_agents else "fork server",
            "faults": [
                f"{f.kind}:{f.host}:{f.epoch}" + (f":{f.seconds:g}" if f.kind == "link-down" else "")
                for f in self.faults
            ],
        }

    @property
    def uses_agents(self) -> bool:
        """Whether torchrun agents start the hosts' workers: only where a host may have to start again."""
        return self.max_restarts > 0 or any(f.kind == "kill-agent" for f in self.faults)

    def network_record(self, world: int) -> dict:
        """What every epoch record of the run says about the network (``cfg.network``)."""
        return {
            "link": rate_label(self.rate_bits),
            "hosts": self.hosts,
            "workers_per_host": world // self.hosts,
            "cores": host_cores(self.hosts),
        }

    # ----------------------------------------------------------------------------------------------------------

    def run(
        self, entry, world: int, run_dir: Path, prefix: str, plan: Path, cfg: RuntimeConfig, *extra
    ) -> dict:
        """Run ``entry`` on the emulated hosts; returns what the links carried (bytes per host)."""
        # absolute: the agents start in their hosts' folders
        run_dir, plan = Path(run_dir).resolve(), Path(plan).resolve()
        clean_stale()
        clean_stale_host_folders(run_dir.parent)
        work = Path(
            tempfile.mkdtemp(prefix=f".{PREFIX}{os.getpid()}-hosts-{run_dir.name}-", dir=run_dir.parent)
        )
        self._world, self._job, self._entry = world, work.name, entry
        with _stderr_appending() if self.live else contextlib.nullcontext():
            failure, carried = self._run_hosts(world, run_dir, prefix, plan, cfg, extra, entry, work)
        if failure is not None:
            raise failure
        return {"link_bytes": carried}

    def _run_hosts(
        self, world, run_dir, prefix, plan, cfg, extra, entry, work: Path
    ) -> tuple[Exception | None, dict]:
        """Prepare, start and supervise the hosts; everything they made is removed whatever happens."""
        hosts: list[_Host] = []
        try:
            hosts = self._prepare(world, run_dir, prefix, plan, cfg, extra, entry, work)
            self.net.create()
            for host in hosts:
                self._start_agent(host) if self.uses_agents else self._fork_workers(host, hosts)
            failure = self._supervise(hosts, run_dir, prefix, cfg.wait_seconds())
            carried = self.net.port_bytes()
        finally:
            for host in hosts:
                self._stop_host(host)
            try:
                if hosts:
                    _gather(hosts, run_dir, prefix)
            finally:
                self.net.destroy()
                shutil.rmtree(work, ignore_errors=True)
        return failure, carried

    def _prepare(self, world, run_dir, prefix, plan, cfg, extra, entry, work: Path) -> list[_Host]:
        """The bundle's node folders as the hosts' disks, each with its job file and copies of input files."""
        folders = self.host_folders(plan, self.hosts, work / "bundle")
        cores = host_cores(self.hosts)
        host_cfg = replace(cfg, network=self.network_record(world))
        hosts = []
        for n, (folder, ranks) in enumerate(folders):
            host_run = run_dir if n == 0 else folder / "run"
            if n:  # a resumed run: every host starts from the run's checkpoints, as a host that kept its disk
                if getattr(cfg, "resume", False) and (run_dir / "checkpoints").is_dir():
                    shutil.copytree(run_dir / "checkpoints", host_run / "checkpoints")
                host_run.mkdir(parents=True, exist_ok=True)
            args = []
            for a in extra:
                if isinstance(a, HostFile):
                    copy = folder / "inputs" / Path(a.path).name
                    copy.parent.mkdir(exist_ok=True)
                    shutil.copy2(a.path, copy)
                    a = str(copy)
                args.append(a)
            job = {
                "entry": entry,
                "ranks": ranks,
                "world": world,
                "prefix": prefix,
                "plan": str(folder / "plan"),
                "run_dir": str(host_run),
                "cfg": host_cfg,
                "extra": args,
                "launcher_pid": os.getpid(),
                # rank 0 writes its standard error (the live display) where a local rank 0 would: the launcher's
                "console": f"/proc/{os.getpid()}/fd/2" if self.live and 0 in ranks else None,
            }
            (folder / "job.pkl").write_bytes(pickle.dumps(job))
            hosts.append(_Host(n, folder, host_run, ranks, cores[n]))
        return hosts

    def _host_env(self, host: _Host) -> dict:
        """What every worker on ``host`` has in its environment, however it is started."""
        return {
            "GLOO_SOCKET_IFNAME": NIC,
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": str(max(1, len(host.cores) // len(host.ranks))),
            # c10d warns at every connection that an emulated address has no host name
            "TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR"),
        }

    def _start_agent(self, host: _Host) -> None:
        """Host ``host``'s torchrun agent, in its namespace, on its cores, from its folder."""
        per_host = self._world // self.hosts
        net = self.net
        join_timeout = 600
        cmd = [*net.exec_prefix(host.n)]
        if shutil.which("taskset"):
            cmd += ["taskset", "-c", ",".join(map(str, host.cores))]
        # the agent's log folder is in the host's folder, removed with it (else a torchelastic_* stays in /tmp)
        options = (
            f"--nnodes {self.hosts} --nproc-per-node {per_host} --rdzv-backend c10d "
            f"--rdzv-endpoint {net.address(0)}:{RDZV_PORT} "
            f"--rdzv-conf is_host={int(host.n == 0)},join_timeout={join_timeout} --local-addr {net.address(host.n)} "
            f"--max-restarts {self.max_restarts} --monitor-interval 0.5"
        )
        cmd += [sys.executable, "-m", "torch.distributed.run", *options.split(), "--rdzv-id", self._job]
        cmd += [
            "--log-dir",
            str(host.folder / "torchelastic"),
            "-m",
            "stages.kits.runtime.launch.host_worker",
        ]
        cmd.append(str(host.folder / "job.pkl"))
        env = {
            **os.environ,
            **self._host_env(host),
            # a fresh store (and port) per attempt, served by the group's rank 0: an agent started again after
            # its host crashed counts restarts from 0, so the agent store's per-attempt keys would not match
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            "G3_HOST_RESTARTS": str(host.restarts),  # host_worker.py: a restarted host's workers resume
        }
        with open(host.folder / "host.log", "ab") as log:  # the agent's own messages and its workers' output
            host.agent = subprocess.Popen(
                cmd,
                cwd=host.folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def _fork_workers(self, host: _Host, hosts: list[_Host]) -> None:
        """Host ``host``'s workers, forked from the fork server into its namespace (:func:`.host_worker.forked`);
        the environment is what torchrun gives a worker, the group's store served by rank 0 on its host."""
        import multiprocessing

        from stages.kits.runtime.launch import host_worker

        ctx = multiprocessing.get_context(start_method(preload_for(self._entry, self.preload)))
        master = next(h for h in hosts if 0 in h.ranks)
        env = {
            **os.environ,
            **self._host_env(host),
            "MASTER_ADDR": self.net.address(master.n),
            "MASTER_PORT": str(RDZV_PORT),
            "WORLD_SIZE": str(self._world),
            "LOCAL_WORLD_SIZE": str(len(host.ranks)),
        }
        host.workers = []
        with main_without_a_file():
            for local, rank in enumerate(host.ranks):
                worker = ctx.Process(
                    target=host_worker.forked,
                    args=(
                        str(host.folder / "job.pkl"),
                        self.net.namespace(host.n),
                        host.cores,
                        {**env, "RANK": str(rank), "LOCAL_RANK": str(local)},
                        str(host.folder / "host.log"),
                    ),
                    name=f"g3-host{host.n}-rank{rank}",
                )
                worker.start()
                host.workers.append(worker)

    def _supervise(self, hosts: list[_Host], run_dir: Path, prefix: str, timeout: float) -> Exception | None:
        """Watch the agents until every one has finished; inject the faults; restart a crashed host while it
        has restarts left. Returns the run's failure (None: success)."""
        pending = sorted(self.faults, key=lambda f: f.epoch)
        started = time.time()
        fire_at: dict[Fault, float] = {}
        link_back: list[tuple[float, int]] = []
        while True:
            time.sleep(POLL_SECONDS / 4 if pending else POLL_SECONDS)  # a fault fires close to its time
            now = time.time()
            for f in list(pending):
                when = _fault_time(run_dir, f)
                if when is not None:
                    fire_at.setdefault(f, when)
                if f in fire_at and now >= fire_at[f]:
                    pending.remove(f)
                    if f.kind == "link-down":
                        self.net.set_link(f.host, up=False)
                        link_back.append((now + f.seconds, f.host))
                    else:
                        hosts[f.host].agent.kill()  # kill-agent faults run with agents (uses_agents)
            for t, h in list(link_back):
                if now >= t:
                    self.net.set_link(h, up=True)
                    link_back.remove((t, h))
            codes = [h.poll() for h in hosts]
            if all(c == 0 for c in codes):
                return None
            for host, code in zip(hosts, codes, strict=True):
                if code is None or code == 0:
                    continue
                if code < 0 and host.restarts < self.max_restarts:  # the host crashed: started again
                    host.restarts += 1
                    self.net.kill_host_processes(host.n)
                    self._start_agent(host)
                    started = now  # its workers start from scratch
                    continue
                return self._failure(hosts, host, code, prefix)
            hung = _silent_rank(hosts, prefix, started, timeout)
            if hung is not None:
                rank, host = hung
                return G3RuntimeError(
                    f"worker {rank} on host {host.n} stopped answering: no heartbeat for "
                    f"{timeout:.0f} s; every host was stopped (log: "
                    f"{log_path(run_dir, rank, prefix, 'log')})"
                )

    def _failure(self, hosts: list[_Host], host: _Host, code: int, prefix: str) -> Exception:
        """The error of the run: the first worker error written on any host (after the hosts' logs are
        gathered they are in the run folder), with the hosts whose link is down."""
        errors = []
        for h in hosts:
            for f in (h.run_dir / "logs").glob(f"{prefix}rank-*.error"):
                errors.append(
                    (f.stat().st_mtime, int(f.name[len(prefix) + 5 : -6]), h, f.read_text().strip())
                )
        try:
            down = self.net.links_down()
        except (G3InputError, G3RuntimeError):
            down = []
        lost = "; ".join(
            f"host {n} ({self.net.address(n)}, ranks {', '.join(map(str, hosts[n].ranks))}) lost its link"
            for n in down
        )
        if errors:
            _, rank, h, text = min(errors, key=lambda e: (e[0], e[1]))
            line = text.splitlines()[0] if text else "(no message)"
            message = f"worker {rank} on host {h.n} failed: {line} (log: logs/{prefix}rank-{rank:05d}.log)"
            if not lost and (line.startswith(BAD_INPUT) or any(e in text for e in ENVIRONMENT)):
                return G3InputError(message)
        else:
            how = f"exited with code {code}" if code > 0 else f"was killed by signal {-code}"
            what = "torchrun agent" if host.agent is not None else "worker process"
            message = f"host {host.n}'s {what} {how} (log: logs/{prefix}host-{host.n:05d}.log)"
        return G3RuntimeError(f"{lost}: {message}" if lost else message)

    def _stop_host(self, host: _Host) -> None:
        self.net.kill_host_processes(host.n)
        for worker in host.workers:  # also one that had not yet entered the namespace
            if worker.exitcode is None:
                worker.kill()
            worker.join(timeout=10)
        if host.agent is not None:
            if host.agent.poll() is None:
                host.agent.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                host.agent.wait(timeout=10)


def _fault_time(run_dir: Path, fault: Fault) -> float | None:
    """When ``fault`` fires: half an epoch after its epoch's record is in rank 0's metrics (None: not yet)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
        if record.get("epoch") == fault.epoch:
            return path.stat().st_mtime + 0.5 * float(record.get("epoch_seconds", 0.0))
    return None


def _silent_rank(hosts: list[_Host], prefix: str, started: float, timeout: float) -> tuple[int, _Host] | None:
    now = time.time()
    for host in hosts:
        for rank in host.running_ranks():
            f = heartbeat_path(host.run_dir, rank, prefix)
            last = max(f.stat().st_mtime if f.is_file() else 0.0, started + STARTUP_GRACE)
            if now - last > timeout:
                return rank, host
    return None


def _gather(hosts: list[_Host], run_dir: Path, prefix: str) -> None:
    """Into the run folder: every file another host's ranks wrote that host 0's folder lacks (their logs,
    their per-rank checkpoint state, trace files), and every host's log (its workers' output, and its torchrun
    agent's where it had one); heartbeat files go."""
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for host in hosts:
        if host.n:
            for f in sorted(host.run_dir.rglob("*")):
                dst = run_dir / f.relative_to(host.run_dir)
                if f.is_file() and not f.name.endswith(".alive") and not dst.exists():
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, dst)
        host_log = host.folder / "host.log"
        if host_log.is_file():
            shutil.copy2(host_log, logs / f"{prefix}host-{host.n:05d}.log")
    for f in logs.glob(f"{prefix}rank-*.alive"):
        f.unlink(missing_ok=True)


@contextlib.contextmanager
def _stderr_appending():
    """Standard error appended to while rank 0 writes into it too: rank 0 opens the same file through /proc
    (a file description of its own, appending), so a launcher writing at its own offset would write over the
    workers' lines, and its last error line would end in a fragment of an epoch's progress. Nothing changes
    for a terminal or a pipe."""
    try:
        regular = stat.S_ISREG(os.fstat(2).st_mode)
    except OSError:
        regular = False
    if not regular:
        yield
        return
    sys.stderr.flush()
    flags = fcntl.fcntl(2, fcntl.F_GETFL)
    fcntl.fcntl(2, fcntl.F_SETFL, flags | os.O_APPEND)
    try:
        yield
    finally:
        sys.stderr.flush()
        fcntl.fcntl(2, fcntl.F_SETFL, flags)
        os.lseek(2, 0, os.SEEK_END)  # what the launcher writes next follows what the workers wrote


def clean_stale_host_folders(parent: Path) -> None:
    """Host folders a killed launcher left beside its run (``.g3e<pid>-hosts-…``)."""
    if not parent.is_dir():
        return
    for d in parent.iterdir():
        m = HOSTS_DIR.match(d.name)
        if m and d.is_dir() and not pid_alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)
