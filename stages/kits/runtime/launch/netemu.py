"""An emulated cluster network on this machine: one Linux network namespace per host, joined by one bridge.

::

    namespace g3e<pid>-sw:   br0 ── h0 ── h1 ── … ── h{H-1}        (the switch; tbf on each port: the host's download)
                                   │     │
    namespace g3e<pid>-h0:        eth0  (198.18.0.100, tbf: the host's upload)
    namespace g3e<pid>-h1:              eth0  (198.18.0.101)

Every host's NIC is one veth pair: ``eth0`` in the host's namespace, port ``hN`` on the bridge in the switch's
namespace. A ``tbf`` qdisc on each end shapes the link to the same rate in both directions, per host, as a NIC
of that speed would (the host side shapes what the host sends, the switch side what it receives). Nothing is
created in the machine's own namespace: the namespaces have no default route, no NAT and no link to the
machine's interfaces, so traffic between hosts stays on this machine and nothing else is reachable from them.

What it models and what it does not: the link's rate and its queue (the queue holds 20 ms at the rate, at least 16
packets); not propagation delay or loss (``netem`` is not in every kernel, nor in this sandbox's); the hosts share
this machine's CPU (each host gets its own cores where there are enough, ``host_cores``).

Names start with ``g3e<launcher pid>-`` so that a launcher that was killed (SIGKILL, no clean-up) leaves names
the next launcher, or ``g3 cluster clean``, recognises as stale (:func:`clean_stale`).

Addresses: host n is ``subnet[100 + n]``, by default in 198.18.0.0/24 — part of 198.18.0.0/15, which RFC 2544
sets aside for benchmarking network devices: no real network routes it, so an emulated host can never be
confused with a real one. Three-digit host numbers keep the addresses' text in host order.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from stages.common.errors import G3InputError, G3RuntimeError
from stages.common.units import parse_rate, rate_label  # noqa: F401  (netemu's names too)

PREFIX = "g3e"
DEFAULT_SUBNET = "198.18.0.0/24"
FIRST_HOST = 100  # host n is subnet[FIRST_HOST + n]: addresses of three digits sort in host order
MAX_HOSTS = 100
MTU = 1500  # an Ethernet NIC's; jumbo frames would lower per-packet CPU cost, not the link's rate
QUEUE_SECONDS = 0.020  # tbf's latency: how long a packet may wait in the link's queue
NIC = "eth0"  # the host's interface name inside its namespace
COMMAND_SECONDS = 20.0  # any one `ip`/`tc` command


def host_cores(hosts: int, cores: list[int] | None = None) -> list[list[int]]:
    """The cores each host runs on: the machine's cores (those this process may use) split into ``hosts``
    contiguous shares, as evenly as they go; with more hosts than cores, host n shares core n mod C."""
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    c = len(cores)
    if hosts <= c:
        return [cores[n * c // hosts : (n + 1) * c // hosts] for n in range(hosts)]
    return [[cores[n % c]] for n in range(hosts)]


def _run(args: list[str], what: str) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_SECONDS)
    except FileNotFoundError:
        raise G3InputError(f"{what}: `{args[0]}` is not installed (iproute2 provides ip and tc)") from None
    except subprocess.TimeoutExpired:
        raise G3RuntimeError(
            f"{what}: `{' '.join(args)}` did not finish in {COMMAND_SECONDS:.0f} s"
        ) from None
    if done.returncode != 0:
        err = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        if "Operation not permitted" in err or "Permission denied" in err:
            raise G3InputError(
                f"{what}: not allowed to create network namespaces ({err}); the emulated "
                "network needs root or CAP_NET_ADMIN"
            )
        raise G3RuntimeError(f"{what}: `{' '.join(args)}` failed: {err}")
    return done.stdout


_WHY_NOT: list[str | None] = []


def why_not_available() -> str | None:
    """None where this process can build the emulated network, else the reason (checked once per process, by
    creating a namespace with a tbf qdisc and removing it)."""
    if _WHY_NOT:
        return _WHY_NOT[0]
    reason = None
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not found (install iproute2)"
    elif hasattr(os, "geteuid") and os.geteuid() != 0 and not _has_net_admin():
        reason = "network namespaces need root or CAP_NET_ADMIN"
    else:
        probe = f"{PREFIX}{os.getpid()}-probe"
        try:
            _run(["ip", "netns", "add", probe], "the emulated network")
            tbf = f"tc -n {probe} qdisc add dev lo root tbf rate 1gbit burst 32kb latency 20ms"
            _run(tbf.split(), "the emulated network (tbf)")
        except (G3InputError, G3RuntimeError) as exc:
            reason = str(exc)
        finally:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=COMMAND_SECONDS)
    _WHY_NOT.append(reason)
    return reason


def _has_net_admin() -> bool:
    try:
        with open("/proc/self/status") as f:
            caps = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
        return bool(caps & (1 << 12))  # CAP_NET_ADMIN
    except (OSError, StopIteration, ValueError):
        return False


def routed_subnets(route_table: str = "/proc/net/route") -> list[ipaddress.IPv4Network]:
    """The IPv4 destinations this machine routes to (its own subnets), default route left out."""
    nets = []
    try:
        lines = Path(route_table).read_text().splitlines()[1:]
    except OSError:
        return nets
    for line in lines:
        f = line.split()
        if len(f) < 8:
            continue
        try:  # little-endian hex, as the kernel prints them
            dest = ipaddress.IPv4Address(int(f[1], 16).to_bytes(4, "little"))
            mask = ipaddress.IPv4Address(int(f[7], 16).to_bytes(4, "little"))
            net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
        except ValueError:
            continue
        if net.prefixlen:
            nets.append(net)
    return nets


def unusable_subnet(net: ipaddress.IPv4Network, route_table: str = "/proc/net/route") -> str | None:
    """Why the emulated hosts cannot take addresses in ``net`` (None: they can): addresses that are not a
    host's to take (loopback, link-local, multicast, unspecified, reserved) or a subnet this machine already
    routes, whose traffic would leave the namespaces or shadow a real network."""
    for kind in ("loopback", "link_local", "multicast", "unspecified", "reserved"):
        if getattr(net, f"is_{kind}"):
            return (
                f"{kind.replace('_', '-')} addresses cannot be given to emulated hosts; use a private or "
                f"benchmark subnet such as the default {DEFAULT_SUBNET}"
            )
    if net.overlaps(ipaddress.IPv4Network("0.0.0.0/8")):
        return (
            "0.0.0.0/8 means 'this network', not addresses a host can take; use a private or benchmark "
            f"subnet such as the default {DEFAULT_SUBNET}"
        )
    for own in routed_subnets(route_table):
        if net.overlaps(own):
            return f"overlaps {own}, a subnet this machine routes; choose one it does not (default {DEFAULT_SUBNET})"
    return None


@dataclass
class EmulatedNetwork:
    """H hosts on one switch, every link shaped to ``rate_bits`` per direction. ``create`` builds it and
    ``destroy`` removes every namespace it made (also those of a half-finished ``create``)."""

    hosts: int
    rate_bits: int
    subnet: str = DEFAULT_SUBNET
    owner: int = field(default_factory=os.getpid)
    created: list[str] = field(default_factory=list)

    def __post_init__(self):
        try:
            net = ipaddress.IPv4Network(self.subnet, strict=False)
        except ValueError as exc:
            raise G3InputError(f"--emulate-subnet {self.subnet}: {exc}") from None
        why = unusable_subnet(net)
        if why:
            raise G3InputError(f"--emulate-subnet {self.subnet}: {why}")
        if not 1 <= self.hosts <= MAX_HOSTS:
            raise G3InputError(f"--hosts {self.hosts}: the emulated network holds 1-{MAX_HOSTS} hosts")
        if net.num_addresses < FIRST_HOST + self.hosts + 1:
            raise G3InputError(
                f"--emulate-subnet {self.subnet} is too small for {self.hosts} hosts (host n is "
                f"address {FIRST_HOST} + n of the subnet: give a /24 or larger)"
            )
        self.network = net

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.owner}"

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def namespace(self, host: int) -> str:
        return f"{self.prefix}-h{host}"

    def address(self, host: int) -> str:
        return str(self.network[FIRST_HOST + host])

    def describe(self) -> dict:
        return {
            "link": rate_label(self.rate_bits),
            "link_bits_per_second": self.rate_bits,
            "hosts": self.hosts,
            "subnet": str(self.network),
            "mtu": MTU,
            "queue_seconds": QUEUE_SECONDS,
            "addresses": [self.address(n) for n in range(self.hosts)],
        }

    def _tbf(self) -> list[str]:
        """tbf's arguments: the rate; a bucket of 1 ms at the rate, at least two full packets (smaller buckets cost
        throughput at 10 Gbit/s; a larger one lets a small message through faster than the rate); a queue of
        QUEUE_SECONDS at the rate, at least 16 packets (a slow link's queue must hold some)."""
        burst = max(2 * (MTU + 14), int(self.rate_bits / 8 * 0.001))
        limit = burst + max(16 * (MTU + 14), int(self.rate_bits / 8 * QUEUE_SECONDS))
        return ["tbf", "rate", f"{self.rate_bits}bit", "burst", str(burst), "limit", str(limit)]

    def create(self) -> None:
        what = "the emulated network"
        sw = self.switch
        try:
            self._add_namespace(sw)
            _run(f"ip -n {sw} link add br0 type bridge".split(), what)
            _run(f"ip -n {sw} link set br0 up".split(), what)
            for n in range(self.hosts):
                ns, port = self.namespace(n), f"h{n}"
                self._add_namespace(ns)
                for command in (
                    f"ip -n {sw} link add {port} mtu {MTU} type veth peer name {NIC} mtu {MTU} netns {ns}",
                    f"ip -n {sw} link set {port} master br0 up",
                    f"ip -n {ns} addr add {self.address(n)}/{self.network.prefixlen} dev {NIC}",
                    f"ip -n {ns} link set {NIC} up",
                    f"ip -n {ns} link set lo up",
                ):
                    _run(command.split(), what)
                _run(["tc", "-n", ns, "qdisc", "add", "dev", NIC, "root", *self._tbf()], what)
                _run(["tc", "-n", sw, "qdisc", "add", "dev", port, "root", *self._tbf()], what)
        except BaseException:
            self.destroy()
            raise

    def _add_namespace(self, name: str) -> None:
        _run(["ip", "netns", "add", name], "the emulated network")
        self.created.append(name)

    def destroy(self) -> None:
        """Kill every process left in a host's namespace, then remove the namespaces (and with them the links)."""
        for name in reversed(self.created):
            remove_namespace(name)
        self.created.clear()

    def exec_prefix(self, host: int) -> list[str]:
        """The command prefix that runs a program on host ``host``."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def kill_host_processes(self, host: int, sig: int = signal.SIGKILL) -> None:
        for pid in namespace_pids(self.namespace(host)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def set_link(self, host: int, up: bool) -> None:
        """Take host ``host``'s link down (as a pulled cable: its switch port) or bring it back up."""
        _run(
            ["ip", "-n", self.switch, "link", "set", f"h{host}", "up" if up else "down"],
            "the emulated network",
        )

    def links_down(self) -> list[int]:
        """The hosts whose switch port is down."""
        out = json.loads(
            _run(["ip", "-j", "-n", self.switch, "link", "show"], "the emulated network") or "[]"
        )
        down = {e["ifname"] for e in out if "UP" not in e.get("flags", [])}
        return [n for n in range(self.hosts) if f"h{n}" in down]

    def port_bytes(self) -> list[dict]:
        """Bytes each host sent and received over its link so far (its switch port's counters, seen from the
        switch: what the port received the host sent)."""
        out = json.loads(
            _run(["ip", "-j", "-s", "-n", self.switch, "link", "show"], "the emulated network") or "[]"
        )
        stats = {e["ifname"]: e.get("stats64") or e.get("stats") or {} for e in out}
        return [
            {
                "sent": int(stats.get(f"h{n}", {}).get("rx", {}).get("bytes", 0)),
                "received": int(stats.get(f"h{n}", {}).get("tx", {}).get("bytes", 0)),
            }
            for n in range(self.hosts)
        ]


def namespace_pids(name: str) -> list[int]:
    done = subprocess.run(
        ["ip", "netns", "pids", name], capture_output=True, text=True, timeout=COMMAND_SECONDS
    )
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def remove_namespace(name: str) -> None:
    """Kill what runs in namespace ``name`` and delete it (its veth ends go with it); quiet if it is gone."""
    for _ in range(3):  # a process may fork while the first ones are killed
        pids = namespace_pids(name)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_SECONDS)


def g3_namespaces() -> list[str]:
    if shutil.which("ip") is None:
        return []
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=COMMAND_SECONDS)
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    return [n for n in names if re.match(rf"^{PREFIX}\d+-", n)]


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (the launcher whose pid a name carries)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_alive(name: str) -> bool:
    return pid_alive(int(re.match(rf"^{PREFIX}(\d+)-", name).group(1)))


def clean_stale(everything: bool = False) -> list[str]:
    """Remove the namespaces (and what runs in them) of emulated networks whose launcher is gone — or, with
    ``everything``, of every g3 emulated network on this machine. Returns the names removed."""
    removed = []
    for name in g3_namespaces():
        if everything or not _owner_alive(name):
            remove_namespace(name)
            removed.append(name)
    return removed
