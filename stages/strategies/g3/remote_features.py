"""Remote input features fetched bin by bin from their owners (``--remote-features bin``), for streamed workers.

A streamed worker reads its own input rows from the shard on disk as each bin runs, but the rows of its remote
sources live on their owners. Exchanged once per run (``epoch``, the default where the disk allows), they are
written into ``TMPDIR`` for the whole run: 4 B × features per remote row, at a billion arcs the largest part of what
the workers spill (docs/BENCHMARKS.md). ``bin`` keeps none of them: each bin asks the owners of its
remote sources for their rows over the request service (:class:`~stages.kits.runtime.sampling_service.
SamplingService`) when its inputs are gathered — on the read-ahead thread, so the fetch of bin b + 1 overlaps
the compute of bin b. Backward's recomputation of layer 0 fetches them again: a remote row crosses the network
once per bin that reads it in each pass, instead of once per run; what it saves is disk, not bytes.

A request names rows by their position in the owner's send list for the asker: the shards list a worker's
remote nodes grouped by owner in ascending global id (``remote_owner_ptr``) and each owner's send list for
that worker in the same order (``send_ptr``, ``send``), so position j of the asker's group for owner p is
``send_to(asker)[j]`` on p. No id exchange is needed, and the rows are the stored ones bit for bit: the same
model as the exchange gives.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from stages.common.atomic import free_bytes
from stages.kits.runtime.sampling_service import SamplingService

HANDLER = "features-bin"  # also the label its bytes are counted under (bytes_sent_per_phase)


def fetches_per_bin(
    mode: str, streamed: bool, num_remote: int, spill_with_features: int, workers: int
) -> bool:
    """Whether a worker fetches its remote input features per bin: ``bin``, or ``auto`` where its streamed
    workers' spill with the features (``spill_with_features`` bytes each) exceeds what ``TMPDIR``'s disk has free.
    A worker that holds its partition in memory, or has no remote rows, exchanges them once either way."""
    if not streamed or num_remote == 0 or mode == "epoch":
        return False
    if mode == "bin":
        return True
    return free_bytes(Path(tempfile.gettempdir())) < spill_with_features * workers


class RemoteFeatures:
    """One worker's side of the per-bin fetch: it answers its peers' requests for its rows and asks its remote
    rows' owners for theirs. Collective to start (the service exchanges its address with every worker)."""

    def __init__(self, ctx, shard, rows_by_shard_id, dtype: torch.dtype, timeout: float):
        """``rows_by_shard_id(ids)``: the input features of this worker's owned nodes by shard-local id (numpy)."""
        self.rank, self.world, self.dtype = ctx.rank, ctx.world, dtype
        self.shard, self.rows_by_shard_id = shard, rows_by_shard_id
        self.owner_ptr = shard.remote_owner_ptr  # [K + 1]: remote offsets grouped by owner
        self.width = int(shard.manifest["features.npy"]["shape"][1])
        self.service = SamplingService(
            ctx.rank, ctx.world, {HANDLER: self._serve}, ctx.transport.stats, ctx.tracer, timeout
        )

    def _serve(self, params: np.ndarray, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """A peer's request: rows at positions ``arrays[0]`` of this worker's send list for it (``params[0]``)."""
        asker, positions = int(params[0]), np.asarray(arrays[0], dtype=np.int64)
        sent = self.shard.send_to(asker)
        if len(positions) and (positions.min() < 0 or positions.max() >= len(sent)):
            raise ValueError(f"positions outside the {len(sent)} rows sent to worker {asker}")
        return [self.rows_by_shard_id(np.asarray(sent[positions], dtype=np.int64))]

    def rows(self, offsets: np.ndarray) -> torch.Tensor:
        """Input features ``[len(offsets), width]`` of the remote rows at ``offsets`` (local id - owned), asked of
        every owner at once, then read in turn."""
        offsets = np.asarray(offsets, dtype=np.int64)
        owner = np.searchsorted(self.owner_ptr, offsets, side="right") - 1
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(self.world + 1))
        asked = []
        for peer in range(self.world):  # a loop over peers, not rows
            picked = order[bounds[peer] : bounds[peer + 1]]
            if len(picked):
                positions = (offsets[picked] - self.owner_ptr[peer]).astype(np.int32)
                asked.append((picked, self.service.submit(peer, HANDLER, [self.rank], [positions])))
        out = torch.empty((len(offsets), self.width), dtype=self.dtype)
        for picked, pending in asked:
            (rows,) = pending.result()
            out[torch.from_numpy(picked)] = torch.from_numpy(rows).to(self.dtype)
        return out

    def close(self) -> None:
        self.service.close()
