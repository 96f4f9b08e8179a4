"""Per-epoch metrics: one JSON line per epoch in RUN/metrics.jsonl (rank 0), and the live display."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import torch

from stages.common.artifact_json import sealed
from stages.common.cost import process_peak_bytes


def minor_page_faults() -> int:
    """This process's minor page faults so far (0 where ``resource`` is missing): per epoch, how much memory
    the worker took fresh from the OS (each fault maps, and the kernel zeroes, a 4 KiB page)."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
    except Exception:
        return 0


def peak_memory_bytes(device: str) -> int:
    """Peak device memory: CUDA's max allocated, else this process's peak resident set
    (:func:`stages.common.cost.process_peak_bytes`: ``VmHWM``, not ``ru_maxrss``, which is kept across
    ``execve`` — a worker spawned by a process that had grown large would report its parent's peak)."""
    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(torch.device(device)))
    return process_peak_bytes() or int(psutil.Process(os.getpid()).memory_info().rss)


class NicCounter:
    """Bytes through this host's network interface — the one gloo talks over (``GLOO_SOCKET_IFNAME``) — counted
    by the host's first worker only (``LOCAL_RANK`` 0), so that summing over the workers counts each host once.
    Everything that crossed the interface counts: gloo's collectives, the transport's messages, acknowledgements
    and any other traffic of the host; TCP/IP headers once per segmentation-offloaded packet (up to 64 KiB), not
    per wire frame. Nothing where there is no such interface (local workers on loopback)."""

    def __init__(self):
        name = os.environ.get("GLOO_SOCKET_IFNAME", "")
        first = os.environ.get("LOCAL_RANK", "0") == "0"
        self.name = name if name and name != "lo" and first else None
        self.start = self._read()

    def _read(self) -> tuple[int, int] | None:
        """(sent, received) of the interface in this thread's network namespace: /proc/self/net/dev is the
        namespace's own (/sys/class/net is the namespace of whoever mounted /sys, which a worker that entered its
        host's namespace with setns did not)."""
        if self.name is None:
            return None
        try:
            for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]:
                face, _, fields = line.partition(":")
                if face.strip() == self.name:
                    values = fields.split()
                    return int(values[8]), int(values[0])
        except (OSError, ValueError, IndexError):
            return None
        return None

    def reset(self) -> None:
        self.start = self._read()

    def since_reset(self) -> dict:
        """``{"nic_bytes_sent", "nic_bytes_recv"}`` since the last reset (empty where not counted)."""
        now = self._read()
        if now is None or self.start is None:
            return {}
        return {"nic_bytes_sent": now[0] - self.start[0], "nic_bytes_recv": now[1] - self.start[1]}


class MetricsWriter:
    """Appends epoch records (rank 0 only) and renders them live."""

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        world: int,
        live: bool,
        epochs: int,
        start: int,
        network: dict | None = None,
        loggers: tuple[str, ...] = (),
    ):
        self.rank = rank
        self.network = network  # where the workers ran, as their launcher put it: in every record
        self.path = Path(run_dir) / "metrics.jsonl"
        if rank == 0:  # a resumed run rewrites its record from the epoch it resumes at
            keep_epochs_before(self.path, start)
        self.file = open(self.path, "a") if rank == 0 else None  # noqa: SIM115 - closed in close()
        from stages.train.loggers import make_loggers

        self.loggers = make_loggers(loggers, run_dir, start) if rank == 0 else []  # --logger
        self.display = None
        if live:
            from stages.train.display import LiveDisplay

            self.display = LiveDisplay(world, epochs, start)

    def epoch(self, record: dict, workers: list[dict]) -> None:
        if self.file is None:
            return
        record = dict(record)
        record["workers"] = workers
        record["bytes_sent"] = sum(w["bytes_sent"] for w in workers)
        nic = [w["nic_bytes_sent"] for w in workers if "nic_bytes_sent" in w]
        if nic:  # what crossed the hosts' network interfaces, next to the transport's own count
            record["link_bytes_sent"] = sum(nic)
        if self.network:
            record["network"] = self.network
        # each line sealed (content_sha256, as an artifact's JSON): the file is appended to, so it has no seal of
        # its own, and a damaged line is refused by whoever reads it
        self.file.write(json.dumps(sealed(json.loads(json.dumps(record)))) + "\n")
        self.file.flush()
        for logger in self.loggers:
            logger.epoch(record)
        if self.display is not None:
            self.display.update(record)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        for logger in self.loggers:
            logger.close()
        if self.display is not None:
            self.display.close()


def keep_epochs_before(path: Path, start: int) -> None:
    """metrics.jsonl without the records of epochs ``start`` and later (those a resumed run trains again)."""
    if not path.is_file():
        return
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    kept = [ln for ln in lines if json.loads(ln).get("epoch", 0) < start]
    if len(kept) != len(lines):
        from stages.common.atomic import atomic_file

        with atomic_file(path) as tmp:
            tmp.write_text("".join(ln + "\n" for ln in kept))


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
