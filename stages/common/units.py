"""Parsing and printing sizes such as ``8GiB``, ``512MB`` or ``10Gbit``."""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_size(text: str) -> int:
    """Bytes in a size string: ``1234``, ``8GiB``, ``512MB``, ``1.5G``. Raises ValueError."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 8GiB, 512MB, 1000000)")
    unit = m.group(2).lower()
    if unit not in _UNITS:
        raise ValueError(f"unknown size unit {m.group(2)!r} in {text!r} (use B, KB, MB, GB, KiB, MiB, GiB)")
    return int(float(m.group(1)) * _UNITS[unit])


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps|b)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(text: str) -> int:
    """A link rate in bits per second: ``100mbit``, ``1gbit``, ``10gbit``, ``2.5gbit``, ``500kbit`` (bits: a
    trailing ``bit``/``bps`` or none; the ``b`` of ``100mb`` also means bits, as in tc)."""
    m = _RATE.match(str(text))
    if not m:
        raise ValueError(f"not a link rate: {text!r} (examples: 100mbit, 1gbit, 10gbit)")
    bits = float(m.group(1)) * _SCALE[m.group(2).lower()]
    if not 1e5 <= bits <= 1e12:
        raise ValueError(f"link rate {text!r} is outside 100kbit-1000gbit")
    return int(bits)


def rate_label(bits: float) -> str:
    """``100mbit``, ``1gbit``, ``2.5gbit``: the rate as tc and ``--emulate-link`` spell it."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{bits / scale:g}{unit}"
    return f"{bits:g}bit"
