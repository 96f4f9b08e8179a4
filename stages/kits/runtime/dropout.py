"""Dropout masks that depend only on (seed, epoch, layer, global node id, column).

In G3 a node's layer output is computed by whichever worker owns it, in whichever bin the plan put it in, and
backward *recomputes* each bin's forward (G3 §5.2). A stateful RNG (``torch.nn.functional.dropout``) would
give a different mask per worker count, per bin order, per device, and between forward and the backward
recomputation — so distributed training would no longer compute what single-process training computes
(G3 §5.3). Instead every mask entry is a **counter-based hash** of its coordinates, turned into a uniform
number in [0, 1) and kept when it is ``>= p``.

The hash is Chris Wellons' ``lowbias32`` 32-bit integer mixer (``mix``), evaluated on int64 tensors so that
it gives bit-identical results on every device: a product of a 32-bit value and a 32-bit constant may wrap
past 2^63, and wrapping int64 arithmetic (what torch computes on every device) keeps its low 32 bits exact;
results are reduced ``& 0xFFFFFFFF`` after each step. The one round over all ``n * width`` entries (``final``) has lowbias32's shape with odd
multipliers below 2^31 (``0x7FEB352D``, ``0x31848BAB``), whose plain int64 products stay below 2^63: it is what
the mask costs, about as much as ``torch.nn.functional.dropout``. The same code runs on Python ints (for the
scalar part of the key), which never overflow at all.

Mask entry for node ``n`` (global id, 64-bit), column ``c`` of layer ``l`` in epoch ``e`` under ``seed``::

    k    = mix(mix(mix(mix(seed_lo ^ C0) ^ seed_hi) ^ e) ^ l)        # scalars
    node = mix(mix(k ^ n_lo) ^ n_hi)                                  # one per node
    col  = mix((c + mix(k ^ C1)) mod 2^32)                            # one per column
    h    = final(node ^ col)                                          # one per entry
    keep = h >= ceil(p * 2^32)        (i.e. h / 2^32 >= p)

Changing any of this changes every trained model: ``tests/test_models.py`` pins a few values.
"""

from __future__ import annotations

import math

import torch

_M32 = 0xFFFFFFFF
_C0 = 0x9E3779B9  # golden-ratio constant: keeps seed 0 away from mix's fixed point 0
_C1 = 0x85EBCA6B  # separates the column stream from the node stream
_K1 = 0x7FEB352D  # lowbias32 multipliers (Wellons, "Prospecting for hash functions")
_K2 = 0x846CA68B
_F1 = 0x7FEB352D  # odd multipliers below 2^31 for the per-entry round: a plain int64 product cannot overflow
_F2 = 0x31848BAB  # (second multiplier of Wellons' triple32)


def _mul32(h, c: int):
    """``(h * c) mod 2^32`` for ``0 <= h < 2^32`` and a 32-bit constant ``c``. On a tensor, one int64 product:
    it may wrap past 2^63, but wrapping keeps the low 64 bits exact, so the low 32 are (two operations, not
    seven: the mask is dispatch-bound on a GPU)."""
    return (h * c) & _M32


def _mix(h):
    """lowbias32 on values in [0, 2^32): a bijection with full avalanche; works on ints and int64 tensors."""
    h = h ^ (h >> 16)
    h = _mul32(h, _K1)
    h = h ^ (h >> 15)
    h = _mul32(h, _K2)
    return h ^ (h >> 16)


def _final(h: torch.Tensor) -> torch.Tensor:
    """The per-entry round, the only one over ``[n, width]``: lowbias32's shape with multipliers < 2^31.

    Its inputs are XORs of two already well-mixed 32-bit values, so one cheaper round suffices to break their
    linear structure; keeping it to ~10 in-place int64 ops makes the mask cost a small fraction of a layer.
    """
    h ^= h >> 16
    h.mul_(_F1).bitwise_and_(_M32)
    h ^= h >> 15
    h.mul_(_F2).bitwise_and_(_M32)
    h ^= h >> 16
    return h


def _key(seed: int, epoch: int, layer: int) -> int:
    seed &= (1 << 64) - 1  # negative seeds map to their two's-complement value
    k = _mix((seed & _M32) ^ _C0)
    k = _mix(k ^ (seed >> 32))
    k = _mix(k ^ (epoch & _M32))
    return _mix(k ^ (layer & _M32))


def dropout_uniform_bits(
    seed: int, epoch: int, layer: int, node_ids: torch.Tensor, width: int
) -> torch.Tensor:
    """The 32-bit hash of every mask entry, int64 ``[n, width]`` with values in ``[0, 2^32)``."""
    k = _key(int(seed), int(epoch), int(layer))
    ids = node_ids.to(torch.int64)
    node = _mix(_mix((ids & _M32) ^ k) ^ (ids >> 32))
    cols = torch.arange(width, dtype=torch.int64, device=ids.device)
    col = _mix((cols + _mix(k ^ _C1)) & _M32)
    return _final(node[:, None] ^ col[None, :])


def dropout_mask(
    seed: int,
    epoch: int,
    layer: int,
    node_ids: torch.Tensor,
    width: int,
    p: float,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Inverted-dropout mask ``[n, width]`` for the nodes ``node_ids`` (global ids, LongTensor ``[n]``).

    Entries are ``0`` (dropped, probability ``p``) or ``1 / (1 - p)`` (kept). The value of an entry depends only
    on ``(seed, epoch, layer, node id, column)``: not on the other nodes asked for, their order, the number of
    workers or the device. ``p == 0`` returns ones without hashing.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if device is None:
        device = node_ids.device
    n = node_ids.shape[0]
    if p == 0.0:
        return torch.ones((n, width), dtype=dtype, device=device)
    bits = dropout_uniform_bits(seed, epoch, layer, node_ids.to(device), width)
    # u = bits / 2^32 >= p  <=>  bits >= ceil(p * 2^32): compared as integers, so exact on every device
    threshold = math.ceil(p * 2.0**32)
    # the scale as a Python number, a kernel argument: a tensor made of it would be a host -> device copy per call
    return (bits >= threshold).to(dtype).mul_(1.0 / (1.0 - p))
