"""Counter-based random choices: a node's draw depends only on (seed, epoch, stream, global node id), never on a
stateful generator, so two workers (or one process) that ask about the same node get the same answer without
talking, whatever the worker count, thread count or order of the questions.

The hash is the dropout masks' (``stages.kits.runtime.dropout``): ``stream`` takes the place of the layer, offset by
``STREAM_BASE`` so no stream coincides with a dropout layer.
"""

from __future__ import annotations

import math

import torch

from stages.kits.runtime.dropout import dropout_uniform_bits

STREAM_BASE = 0x5A000000


def keep_nodes(seed: int, epoch: int, stream: int, node_ids: torch.Tensor, p: float) -> torch.Tensor:
    """Bool ``[n]``: node ``node_ids[i]`` is kept with probability ``p`` (independently per node and stream)."""
    if p >= 1.0:
        return torch.ones(len(node_ids), dtype=torch.bool)
    bits = dropout_uniform_bits(seed, epoch, STREAM_BASE + stream, node_ids.to(torch.int64), 1)[:, 0]
    return bits < math.ceil(p * 2.0**32)
