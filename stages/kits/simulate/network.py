"""The network of a simulation: parsing link rates and latencies, the ring all-reduce of the weight gradients,
the :class:`~.engine.Network` a simulation runs on (uniform, or per worker for a cluster of unlike hosts), and
compute rates scaled to a worker's speed."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from stages.common.errors import G3InputError
from stages.kits.simulate.engine import Network
from stages.kits.simulate.profile import LayerRates, PhaseRates, Rates

if TYPE_CHECKING:  # the options parse with this module's parsers
    from stages.kits.simulate.options import SimulateOptions

_SI = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_BW_UNITS = {
    **{p + "bit": v / 8 for p, v in _SI.items()},
    **{p + "b": v for p, v in _SI.items()},
    **{"kib": 2**10, "mib": 2**20, "gib": 2**30},
    **{p + "bps": v / 8 for p, v in _SI.items() if p != "t"},
}


def parse_bandwidth(text: str) -> float:
    """Bytes per second from ``10Gbit``, ``25Gbps``, ``1.25GB`` (per second) or ``inf``."""
    t = str(text).strip().lower().removesuffix("/s")
    if t in ("inf", "infinite", "unlimited"):
        return math.inf
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)", t)
    if not m or m.group(2) not in _BW_UNITS:
        raise ValueError(f"not a bandwidth: {text!r} (examples: 10Gbit, 100Gbit, 1.25GB, 400Mbit)")
    value = float(m.group(1)) * _BW_UNITS[m.group(2)]
    if value <= 0:
        raise ValueError("bandwidth must be positive")
    return value


_LAT_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_latency(text: str) -> float:
    """Seconds from ``50us``, ``0.2ms``, ``1e-5s``, ``0``."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(s|ms|us|µs|ns)?\s*", str(text).lower())
    if not m:
        raise ValueError(f"not a latency: {text!r} (examples: 50us, 0.2ms, 2ms)")
    return float(m.group(1)) * _LAT_UNITS[m.group(2) or "s"]


def parse_workers_list(text: str) -> tuple[int, ...]:
    """``2,4,8,16`` or ``2-16`` (powers of two) or ``none``."""
    t = str(text).strip().lower()
    if t == "none":
        return ()
    if not t:
        raise ValueError("empty: give worker counts (2,4,8,16), a range (2-16) or 'none'")
    if re.fullmatch(r"\d+-\d+", t):
        lo, hi = (int(x) for x in t.split("-"))
        out, k = [], 1
        while k <= hi:
            if k >= lo:
                out.append(k)
            k *= 2
        return tuple(out)
    try:
        ks = tuple(int(x) for x in t.split(",") if x.strip())
    except ValueError:
        raise ValueError(
            f"not a list of worker counts: {text!r} (examples: 2,4,8,16 or 2-16 or none)"
        ) from None
    if any(k < 1 for k in ks):
        raise ValueError("worker counts must be >= 1")
    return ks


def allreduce_seconds(num_params: int, k: int, net: Network) -> float:
    """Ring all-reduce of the float32 weight gradients: 2(K-1)/K of the bytes per link, 2(K-1) latencies (at
    the slowest link when the links differ: every worker's part passes through it)."""
    if k <= 1 or net.one_host(k):  # one worker, or every worker on one host
        return 0.0
    return 2 * (k - 1) / k * net.transfer(num_params * 4) + 2 * (k - 1) * net.latency


def network(options: SimulateOptions, k: int, workers_per_host: int = 1) -> Network:
    """The network of ``options`` (bandwidth already the payload's, see :func:`simulate_plan`) at ``k`` workers:
    with the per-worker links, speeds and hosts of a cluster, which are given for that K."""
    if any(
        v is not None and len(v) != k
        for v in (options.worker_speed, options.worker_bandwidth, options.worker_hosts)
    ):
        raise G3InputError(f"per-worker speeds, links and hosts are given for another K than {k}")
    return Network(
        options.bandwidth,
        options.latency,
        workers_per_host=workers_per_host,
        links=options.worker_bandwidth,
        speeds=options.worker_speed,
        hosts=options.worker_hosts,
    )


def rates_at(rates: Rates, speed: float) -> Rates:
    """``rates`` on a worker ``speed`` times as fast as the profiled one: every duration divided by it."""
    if speed == 1.0:
        return rates

    def phase(p: PhaseRates) -> PhaseRates:
        return PhaseRates(p.per_arc / speed, p.per_node / speed, p.per_bin / speed)

    return replace(
        rates,
        layers=[
            LayerRates(phase(lr.forward), phase(lr.backward), lr.gather_per_row / speed)
            for lr in rates.layers
        ],
        overhead_per_bin=rates.overhead_per_bin / speed,
        step_seconds=rates.step_seconds / speed,
    )
