"""A cluster of more than one kind of host, for `g3 advise STORE --cluster FILE` (schema ``g3.cluster`` v1,
docs/ARTIFACTS.md "Cluster file").

A cluster file is a JSON object written by the user::

    {"schema": "g3.cluster", "schema_version": 1, "name": "lab",
     "hosts": [{"name": "new", "count": 2, "device_memory": "16GiB", "link": "1gbit"},
               {"name": "old", "count": 2, "device_memory": "8GiB", "link": "100mbit", "speed": 0.5}]}

Each entry of ``hosts`` is a kind of host: ``count`` hosts of it, each running ``workers_per_host`` workers
(default 1), each worker with ``device_memory`` (as ``--device-memory`` takes it), the host's ``link`` (as
``--link`` takes it: per host and direction) and ``speed`` (compute speed relative to the machine `g3 advise`
calibrates on, default 1.0), and an optional ``name``. Ranks are placed on the hosts in the file's order:
ranks 0 … of the first kind's first host, then its second host, …, then the next kind's. Bad input is one line
naming the file and the field (exit 2).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from stages.common.errors import G3InputError
from stages.common.units import human_bytes, parse_rate, parse_size

CLUSTER_SCHEMA = "g3.cluster"
CLUSTER_VERSION = 1
_TOP_FIELDS = {"schema", "schema_version", "name", "hosts"}
_HOST_FIELDS = {"name", "count", "workers_per_host", "device_memory", "link", "speed"}


@dataclass(frozen=True)
class HostKind:
    name: str
    count: int  # hosts of this kind
    workers_per_host: int
    device_memory: str  # as the file gives it (text `g3 plan --device-memory` takes)
    device_memory_bytes: int
    link: str  # the rate as `--emulate-link` spells it (lower case)
    link_bits_per_second: int
    speed: float  # compute speed relative to the machine advise calibrates on

    @property
    def workers(self) -> int:
        return self.count * self.workers_per_host

    def describe(self) -> str:
        """``2x new (16.0 GiB, 1gbit)``, ``2x old (2 workers each, 8.0 GiB, 100mbit, speed 0.5)``."""
        parts = [f"{self.workers_per_host} workers each"] if self.workers_per_host > 1 else []
        parts += [human_bytes(self.device_memory_bytes), self.link]
        if self.speed != 1.0:
            parts.append(f"speed {self.speed:g}")
        return f"{self.count}x {self.name} ({', '.join(parts)})"

    def to_json(self) -> dict:
        return {**asdict(self), "workers": self.workers}


@dataclass(frozen=True)
class Cluster:
    name: str
    path: str
    kinds: tuple[HostKind, ...]

    @property
    def workers(self) -> int:
        """K: every host's workers."""
        return sum(kind.workers for kind in self.kinds)

    def rank_kinds(self) -> list[int]:
        """The host kind of every rank (ranks fill the hosts in the file's order)."""
        return [i for i, kind in enumerate(self.kinds) for _ in range(kind.workers)]

    def rank_hosts(self) -> list[int]:
        """The host of every rank, numbered 0 … in the same order."""
        out, host = [], 0
        for kind in self.kinds:
            for _ in range(kind.count):
                out += [host] * kind.workers_per_host
                host += 1
        return out

    def speeds(self) -> tuple[float, ...]:
        return tuple(self.kinds[i].speed for i in self.rank_kinds())

    def link_bytes(self) -> tuple[float, ...]:
        """Every rank's host's link in bytes per second (the simulator's unit)."""
        return tuple(self.kinds[i].link_bits_per_second / 8 for i in self.rank_kinds())

    def smallest_memory(self) -> HostKind:
        """The kind with the least device memory: every candidate is planned for it, so bins fit every host."""
        return min(self.kinds, key=lambda kind: kind.device_memory_bytes)

    def slowest_link(self) -> HostKind:
        return min(self.kinds, key=lambda kind: kind.link_bits_per_second)

    def describe(self) -> str:
        return f"{self.name}: " + ", ".join(kind.describe() for kind in self.kinds)

    def to_json(self) -> dict:
        return {
            "schema": CLUSTER_SCHEMA,
            "schema_version": CLUSTER_VERSION,
            "name": self.name,
            "path": self.path,
            "workers": self.workers,
            "description": self.describe(),
            "hosts": [kind.to_json() for kind in self.kinds],
            "rank_kinds": [self.kinds[i].name for i in self.rank_kinds()],
        }

    def fit(self, peaks: list[int | None]) -> list[dict]:
        """Per host kind, whether its workers' peak memory (``peaks``: per rank, from the plan) fits its device:
        ``{name, device_memory_bytes, peak_memory_bytes, fits}`` (``fits`` None: the plan has no estimate)."""
        kinds = self.rank_kinds()
        out = []
        for i, kind in enumerate(self.kinds):
            mine = [p for r, p in enumerate(peaks) if r < len(kinds) and kinds[r] == i and p is not None]
            peak = max(mine) if mine else None
            out.append(
                {
                    "name": kind.name,
                    "device_memory_bytes": kind.device_memory_bytes,
                    "peak_memory_bytes": peak,
                    "fits": None if peak is None else peak <= kind.device_memory_bytes,
                }
            )
        return out


def load_cluster(path: str | Path) -> Cluster:
    """The cluster file at ``path``, checked; any bad field is one line naming the file and the field."""
    from stages.common.artifact_json import read_json_file

    path = Path(path)
    data = read_json_file(path, check=False)  # unreadable, not JSON, not an object: one line naming the file

    def bad(field: str, what: str) -> G3InputError:
        return G3InputError(f"{field}: {what}", path=path)

    name, hosts = _check_top(data, path.stem, bad)
    names: set[str] = set()
    kinds = [_host_kind(h, i, names, bad) for i, h in enumerate(hosts)]
    return Cluster(name=name.strip(), path=str(path), kinds=tuple(kinds))


def _check_top(data: dict, stem: str, bad) -> tuple[str, list]:
    """The file's checked top-level fields: its name and its list of host kinds."""
    extra = sorted(set(data) - _TOP_FIELDS)
    if extra:
        raise bad(extra[0], f"unknown field (a cluster file has {', '.join(sorted(_TOP_FIELDS))})")
    if data.get("schema") != CLUSTER_SCHEMA:
        raise bad("schema", f"must be {json.dumps(CLUSTER_SCHEMA)}, not {json.dumps(data.get('schema'))}")
    if data.get("schema_version") != CLUSTER_VERSION or isinstance(data.get("schema_version"), bool):
        raise bad(
            "schema_version",
            f"must be {CLUSTER_VERSION} (this g3 reads version {CLUSTER_VERSION}), not "
            f"{json.dumps(data.get('schema_version'))}",
        )
    name = data.get("name", stem)
    if not isinstance(name, str) or not name.strip():
        raise bad("name", f"must be a non-empty string, not {json.dumps(name)}")
    hosts = data.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        raise bad(
            "hosts", 'must be a non-empty list of host kinds ({"count": …, "device_memory": …, "link": …})'
        )
    return name, hosts


def _host_kind(h, i: int, names: set[str], bad) -> HostKind:
    """Host kind ``i`` of the file, checked (``names``: the kinds' names so far)."""
    where = f"hosts[{i}]"
    if not isinstance(h, dict):
        raise bad(where, f"must be an object, not {json.dumps(h)[:40]}")
    if isinstance(h.get("name"), str) and h["name"].strip():
        where = f"hosts[{i}] ({h['name']})"
    extra = sorted(set(h) - _HOST_FIELDS)
    if extra:
        raise bad(f"{where}.{extra[0]}", f"unknown field (a host kind has {', '.join(sorted(_HOST_FIELDS))})")
    for field in ("count", "device_memory", "link"):
        if field not in h:
            raise bad(f"{where}.{field}", "missing")
    kind_name = h.get("name", f"kind{i}")
    if not isinstance(kind_name, str) or not kind_name.strip():
        raise bad(f"{where}.name", f"must be a non-empty string, not {json.dumps(kind_name)}")
    if kind_name in names:
        raise bad(f"{where}.name", f"{kind_name!r} names two host kinds")
    names.add(kind_name)
    counts = {}
    for field, default in (("count", None), ("workers_per_host", 1)):
        value = h.get(field, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise bad(f"{where}.{field}", f"must be a whole number of at least 1, not {json.dumps(value)}")
        counts[field] = value
    memory_bytes, link_bits, speed = _host_resources(h, where, bad)
    return HostKind(
        name=kind_name,
        count=counts["count"],
        workers_per_host=counts["workers_per_host"],
        device_memory=str(h["device_memory"]),
        device_memory_bytes=memory_bytes,
        link=h["link"].strip().lower(),
        link_bits_per_second=link_bits,
        speed=float(speed),
    )


def _host_resources(h: dict, where: str, bad) -> tuple[int, int, float]:
    """A host kind's checked device memory and link (bytes, bits per second) and speed."""
    memory = h["device_memory"]
    try:
        memory_bytes = (
            parse_size(str(memory))
            if isinstance(memory, str | int) and not isinstance(memory, bool)
            else None
        )
    except ValueError as exc:
        raise bad(f"{where}.device_memory", str(exc)) from None
    if memory_bytes is None or memory_bytes <= 0:
        raise bad(
            f"{where}.device_memory", f'must be a positive size such as "16GiB", not {json.dumps(memory)}'
        )
    link = h["link"]
    if not isinstance(link, str):
        raise bad(f"{where}.link", f'must be a link rate such as "1gbit", not {json.dumps(link)}')
    try:
        link_bits = parse_rate(link.strip().lower())
    except ValueError as exc:
        raise bad(f"{where}.link", str(exc)) from None
    speed = h.get("speed", 1.0)
    if (
        not isinstance(speed, int | float)
        or isinstance(speed, bool)
        or not math.isfinite(speed)
        or speed <= 0
    ):
        raise bad(
            f"{where}.speed",
            f"must be a positive number (1.0: as fast as this machine), not {json.dumps(speed)}",
        )
    return memory_bytes, link_bits, speed
