"""Neighbour sampling, relabelling and block building with torch operations, on the device that holds the graph.

The host sampler (:mod:`stages.kits.runtime.neighbor_sampler`, numba) and this one compute the same rule
(docs/DESIGN.md, "Sampling specification"): node ``v`` of degree ``d`` keeps all its in-neighbours when the
fanout is −1 or ``d <= fanout``, else Floyd's algorithm over positions ``j = d − f … d − 1`` with
``t = mix(node_key ^ j) mod (j + 1)`` (``node_key = mix(key ^ mix(v))``, ``mix`` splitmix64's finaliser),
the picks in ascending position. So both draw the same neighbours, and a mini-batch run whose sampling runs on
a GPU computes what one sampling on the host computes.

Vectorised over the frontier rather than per node: Floyd's ``f`` rounds run for every node at once (a node
with ``d <= f`` takes its whole row instead), and which rounds find their candidate taken is worked out without
running the rounds in order (:func:`floyd_repeats`). 64-bit words are torch int64 with wrapping arithmetic; shifts are made logical by masking
and the modulo of an unsigned word is taken in two halves. The output sizes depend on the data, so a hop reads
back how many picks it made and how many new sources they bring (the relabel's count; it sorts nothing): in one
read-back, since the draw leaves its picks in fixed-size slots (``fanout`` per node, :func:`sample_slots`), relabels
them there and compacts them once both counts are known. That is the device sampler's whole cost in host
synchronisations: one per hop (two where the fanout is −1, or with peers). With peers, a hop and the
input gather each read back how many of their nodes are here, and the ids of the others leave the device for
their owners (:class:`Owners`).

:func:`induced_subgraph` is clustergcn's step on the device: the subgraph a step's rows induce, numbered as its
host path numbers it.
"""

from __future__ import annotations

import warnings

import torch

_GOLDEN = 0x9E3779B97F4A7C15
_C1, _C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _signed(x: int) -> int:
    """A 64-bit word as the int64 with the same bits."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of 64-bit words held in int64 (torch's ``>>`` is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 words (wrapping arithmetic, the bits of the uint64 result)."""
    z = z + _signed(_GOLDEN)
    z = (z ^ _shr(z, 30)) * _signed(_C1)
    z = (z ^ _shr(z, 27)) * _signed(_C2)
    return z ^ _shr(z, 31)


def unsigned_mod(z: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``z mod m`` with ``z`` read as an unsigned 64-bit word and ``0 < m < 2^62``: the high 63 bits first."""
    hi = torch.remainder(_shr(z, 1), m)
    return torch.remainder(2 * hi + (z & 1), m)


def sample_rows(
    indptr: torch.Tensor, nbrs: torch.Tensor, rows: torch.Tensor, nodes: torch.Tensor, fanout: int, key: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`stages.kits.runtime.neighbor_sampler.sample_rows` on the device: the neighbours of ``nodes`` (global ids),
    whose rows of the CSR ``indptr``/``nbrs`` (global ids, ascending within a row) are ``rows``. Returns
    ``(counts [n], neighbours [sum(counts)])``, each node's picks in ascending global id, on ``nbrs``'s device."""
    dev = nbrs.device
    rows, nodes = rows.to(dev, torch.int64), nodes.to(dev, torch.int64)
    starts = indptr[rows]
    degree = indptr[rows + 1] - starts
    if fanout >= 0:
        counts, slots = sample_slots(nbrs, starts, degree, nodes, fanout, key)
        total = int(counts.sum()) if len(counts) else 0  # the one read-back of the draw: its output's size
        return counts, slots.flatten()[compact_slots(counts, fanout, total)]
    total = int(degree.sum()) if len(degree) else 0
    row_of = torch.repeat_interleave(torch.arange(len(rows), device=dev), degree, output_size=total)
    pos = torch.arange(total, device=dev) - (torch.cumsum(degree, 0) - degree)[row_of]
    return degree, nbrs[starts[row_of] + pos]


def sample_slots(
    nbrs: torch.Tensor, starts: torch.Tensor, degree: torch.Tensor, nodes: torch.Tensor, fanout: int, key: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The draw of ``nodes`` (rows ``starts``/``degree`` of ``nbrs``) at ``fanout >= 0``, in fixed-size slots and
    without reading anything back: ``(counts [n], slots [n, fanout])``, node i's picks in ``slots[i, :counts[i]]``
    in ascending global id, −1 in the slots after them."""
    dev = nbrs.device
    counts = torch.clamp(degree, max=fanout)
    if fanout == 0 or len(nodes) == 0 or len(nbrs) == 0:
        return counts, nbrs.new_full((len(nodes), fanout), -1)
    node_key = mix64(_signed(key) ^ mix64(nodes))
    # every round's candidate at once (the hashes do not depend on earlier rounds); round i takes j_i where t_i
    # was taken before (:func:`floyd_repeats`, without a loop over the rounds)
    j = degree[:, None] - fanout + torch.arange(fanout, device=dev)
    t = unsigned_mod(mix64(node_key[:, None] ^ j), torch.clamp(j + 1, min=1))
    taken = torch.sort(torch.where(floyd_repeats(t, j[:, :1]), j, t), dim=1).values
    # a drawn row's picks are its ``fanout`` slots in order; a row kept whole fills its first ``degree`` slots
    slot = torch.arange(fanout, device=dev)
    pos = torch.where((degree > fanout)[:, None], taken, slot)
    filled = slot < counts[:, None]
    return counts, torch.where(filled, nbrs[torch.where(filled, starts[:, None] + pos, 0)], -1)


def compact_slots(counts: torch.Tensor, fanout: int, total: int) -> torch.Tensor:
    """Where the ``total`` picks of :func:`sample_slots` are in its flattened slots, in order."""
    dev = counts.device
    row_of = torch.repeat_interleave(torch.arange(len(counts), device=dev), counts, output_size=total)
    first = torch.cumsum(counts, 0) - counts
    return row_of * fanout + torch.arange(total, device=dev) - first[row_of]


def floyd_repeats(t: torch.Tensor, j0: torch.Tensor) -> torch.Tensor:
    """Which rounds of Floyd's algorithm find their candidate taken already, for every row at once: ``t [n, f]``
    the rounds' candidates, round ``i`` drawing from ``0 … j0 + i`` (``j0 [n, 1]``). Returns bool ``[n, f]``.

    Round ``i`` takes ``j_i = j0 + i`` where ``t_i`` is taken, else ``t_i``. Every earlier candidate is taken by
    then (itself, or it was taken before it came up), and the other things taken are the ``j_k`` of earlier
    repeats, so round ``i`` repeats when ``t_i`` equals an earlier candidate, or equals ``j_k`` for the round
    ``k = t_i − j0 < i`` and round ``k`` repeated. The first part is a stable sort of each row; the second a
    chain of rounds, each earlier than the last, ORed by pointer jumping in ⌈log2(f + 1)⌉ steps, so a hop costs
    a number of operations that grows with the fanout's logarithm, not with the fanout."""
    n, f = t.shape
    dev = t.device
    order = torch.sort(t, dim=1, stable=True)
    # an equal value earlier in a stable sort is an earlier round's candidate
    repeats = torch.zeros((n, f + 1), dtype=torch.bool, device=dev)  # column f: "no round", never a repeat
    repeats[:, :f].scatter_(1, order.indices[:, 1:], order.values[:, 1:] == order.values[:, :-1])
    rounds = torch.arange(f, device=dev)
    k = t - j0
    nxt = torch.where((k >= 0) & (k < rounds), k, f)
    nxt = torch.cat([nxt, torch.full((n, 1), f, dtype=nxt.dtype, device=dev)], dim=1)
    for _ in range(f.bit_length()):
        repeats |= repeats.gather(1, nxt)
        nxt = nxt.gather(1, nxt)
    return repeats[:, :f]


def relabel(
    dst: torch.Tensor, nbrs: torch.Tensor, scratch: torch.Tensor, total: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The sources a hop adds and where each pick lands among the block's sources, as
    ``neighbor_sampler.block_from_sample`` numbers them: ``dst`` first, then the picks that are not
    destinations in order of first appearance. ``scratch``: int64 ``[num_nodes]`` all −1 on the device (left
    so). ``nbrs`` may hold −1 (empty slots: neither new nor placed). ``total``: a count on the device read back
    with the new sources' (one read-back for both). Returns ``(new [m], positions [len(nbrs)], total)``.

    No sort: each id's first pick is found by a scatter of pick indices (the least wins), the first picks of
    new ids are ranked by a running count, and the one read-back is how many there are (the output's size)."""
    dev = nbrs.device
    n_dst, m = len(dst), len(nbrs)
    scratch[dst] = torch.arange(n_dst, device=dev)
    empty = nbrs < 0
    ids = torch.where(empty, dst[:1].expand(m) if n_dst else 0, nbrs)  # an empty slot reads as a destination
    pos = scratch[ids]
    scratch.index_fill_(0, dst, -1)  # a scalar written by indexing would be a tensor made on the host first
    if m == 0:
        return nbrs[:0], pos, int(total) if total is not None else 0
    is_new = pos < 0
    picks = torch.arange(m, device=dev)
    scratch.scatter_reduce_(0, ids, picks, reduce="amin", include_self=False)
    first_of = scratch[ids]  # the first pick of each pick's id
    scratch.index_fill_(0, ids, -1)
    first = is_new & (first_of == picks)
    rank = torch.cumsum(first, 0) - 1  # among the new ids, in order of first appearance
    if total is None:
        n_new, total_here = int(rank[-1]) + 1, m  # the one read-back: how many sources the hop adds
    else:  # both counts in one word (each < 2^31), one read-back
        both = int(total * (1 << 32) + rank[-1] + 1)
        n_new, total_here = both & ((1 << 32) - 1), both >> 32
    new = nbrs.new_empty(n_new + 1)  # the last slot takes every pick that is not a new id's first
    new.scatter_(0, torch.where(first, rank, n_new), ids)
    return new[:n_new], torch.where(is_new, n_dst + rank[first_of], pos), total_here


def block_arrays(
    dst: torch.Tensor, counts: torch.Tensor, nbrs: torch.Tensor, scratch: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One hop's block as ``(src, indptr, indices)`` on the device (``block_from_sample``'s numbering):
    ``src`` = ``dst`` then the new sources, the next hop's destinations."""
    new, pos, _ = relabel(dst, nbrs, scratch)
    return torch.cat([dst, new]), _indptr(counts), pos


def slot_block_arrays(
    dst: torch.Tensor, counts: torch.Tensor, slots: torch.Tensor, scratch: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`block_arrays` of a draw left in its slots (:func:`sample_slots`): relabelled there, the picks'
    count read back with the new sources' count, then the slots compacted — one read-back for the hop."""
    fanout = slots.shape[1]
    new, pos, total = relabel(dst, slots.flatten(), scratch, counts.sum())
    return torch.cat([dst, new]), _indptr(counts), pos[compact_slots(counts, fanout, total)]


def _indptr(counts: torch.Tensor) -> torch.Tensor:
    indptr = torch.zeros(len(counts) + 1, dtype=torch.int64, device=counts.device)
    torch.cumsum(counts, 0, out=indptr[1:])
    return indptr


def device_array(a, device: torch.device, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """``a`` on ``device`` as ``dtype``: a copy on another device or in another dtype, else ``a``'s own memory (the
    CPU standing in for a device holds no second arcs-sized array). A shard's arrays are read-only maps, only
    ever read through these tensors: torch's warning about tensors over read-only arrays does not apply."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.as_tensor(a).to(device, dtype)


class DeviceGraph:
    """A worker's sampling input on its device: the in-edge CSR (neighbours as global ids, ascending within a
    row), each global id's structure row and input row here (−1: another worker's), the input features, labels
    and, for GCN, the degrees of the input rows. :meth:`blocks` samples a step's message-flow graph there and
    :meth:`inputs` gathers its first layer's rows, so a step is prepared without leaving the device.

    ``owners``: how to reach the rows another worker holds (:class:`Owners`; None: every row is here). Their
    nodes are drawn by their owners and their input rows pulled from them, on the host (the service is
    sockets): the ids leave the device, the answers enter it, and the rest of the step stays there.
    ``row_of`` None: the CSR is the whole graph's (rows are global ids)."""

    def __init__(
        self,
        indptr,
        nbrs,
        row_of,
        features: torch.Tensor,
        labels: torch.Tensor,
        degrees: torch.Tensor | None,
        device: torch.device,
        input_row_of=None,
        owners: Owners | None = None,
    ):
        self.indptr, self.nbrs = device_array(indptr, device), device_array(nbrs, device)
        self.row_of = None if row_of is None else device_array(row_of, device)
        self.input_row_of = self.row_of if input_row_of is None else device_array(input_row_of, device)
        self.features, self.labels = features.to(device), labels.to(device)
        self.degrees = None if degrees is None else degrees.to(device)
        self.scratch = torch.full((len(self.input_row_of),), -1, dtype=torch.int64, device=device)
        self.device, self.owners = device, owners

    def blocks(self, targets, fanouts: list[int], key_of_hop) -> list:
        """The blocks of a step whose targets are ``targets`` (global ids), first layer first, as
        ``neighbor_sampler.build_blocks`` makes them on the host (``SampledBlock``s of device tensors)."""
        from stages.kits.runtime.neighbor_sampler import SampledBlock

        dst = torch.as_tensor(targets).to(self.device, torch.int64)
        out = []
        for hop, fanout in enumerate(fanouts):
            if fanout >= 0:  # the picks' and the new sources' counts in one read-back
                counts, slots = self.draw_slots(dst, fanout, key_of_hop(hop))
                src, indptr, indices = slot_block_arrays(dst, counts, slots, self.scratch)
            else:
                counts, picks = self.draw(dst, fanout, key_of_hop(hop))
                src, indptr, indices = block_arrays(dst, counts, picks, self.scratch)
            out.append(SampledBlock(dst, src, indptr, indices))
            dst = src
        return out[::-1]

    def draw(self, nodes: torch.Tensor, fanout: int, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(counts, picks)`` of ``nodes`` in their order: the rows here drawn on the device while their
        owners draw the others (the same rule, so the same picks)."""
        rows = nodes if self.row_of is None else self.row_of[nodes]
        if self.owners is None or self.row_of is None:
            return sample_rows(self.indptr, self.nbrs, rows, nodes, fanout, key)
        order, n_here = here_first(rows)
        if n_here == len(nodes):
            return sample_rows(self.indptr, self.nbrs, rows, nodes, fanout, key)
        waiting = self.owners.sample(nodes[order[n_here:]].cpu().numpy(), fanout, key)
        here = order[:n_here]
        counts_here, picks_here = sample_rows(self.indptr, self.nbrs, rows[here], nodes[here], fanout, key)
        counts_away, picks_away = (torch.as_tensor(a).to(self.device, torch.int64) for a in waiting())
        return regroup(order, torch.cat([counts_here, counts_away]), torch.cat([picks_here, picks_away]))

    def draw_slots(self, nodes: torch.Tensor, fanout: int, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`draw` at ``fanout >= 0`` in :func:`sample_slots`' form, reading back only, with peers, how many
        of ``nodes`` are here: the owners' answers are put into slots of their own."""
        rows = nodes if self.row_of is None else self.row_of[nodes]
        if self.owners is None or self.row_of is None:
            return self._slots(rows, nodes, fanout, key)
        order, n_here = here_first(rows)
        if n_here == len(nodes):
            return self._slots(rows, nodes, fanout, key)
        waiting = self.owners.sample(nodes[order[n_here:]].cpu().numpy(), fanout, key)
        here = order[:n_here]
        counts_here, slots_here = self._slots(rows[here], nodes[here], fanout, key)
        counts_away, picks_away = (torch.as_tensor(a).to(self.device, torch.int64) for a in waiting())
        slots_away = torch.full((len(counts_away), fanout), -1, dtype=torch.int64, device=self.device)
        slots_away.view(-1)[compact_slots(counts_away, fanout, len(picks_away))] = picks_away
        counts, slots = (
            torch.empty_like(rows),
            torch.empty((len(nodes), fanout), dtype=torch.int64, device=self.device),
        )
        counts[order] = torch.cat([counts_here, counts_away])
        slots[order] = torch.cat([slots_here, slots_away])
        return counts, slots

    def _slots(self, rows, nodes, fanout: int, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        starts = self.indptr[rows]
        return sample_slots(self.nbrs, starts, self.indptr[rows + 1] - starts, nodes, fanout, key)

    def inputs(self, nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """The input rows of ``nodes`` (global ids on the device), for GCN their global (in, out) degrees, and
        how many rows came from other workers."""
        rows = self.input_row_of[nodes]
        if self.owners is not None:
            order, n_here = here_first(rows)
            if n_here < len(nodes):
                return self._inputs_with_peers(nodes, rows, order, n_here)
        return (
            self.features.index_select(0, rows),
            None if self.degrees is None else self.degrees.index_select(0, rows),
            0,
        )

    def _inputs_with_peers(self, nodes, rows, order, n_here) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        away = order[n_here:]
        waiting = self.owners.rows(nodes[away].cpu().numpy())
        here = order[:n_here]
        x = torch.empty((len(nodes), self.features.shape[1]), dtype=self.features.dtype, device=self.device)
        x.index_copy_(0, here, self.features.index_select(0, rows[here]))
        degrees = None
        if self.degrees is not None:
            degrees = torch.empty((len(nodes), 2), dtype=self.degrees.dtype, device=self.device)
            degrees.index_copy_(0, here, self.degrees.index_select(0, rows[here]))
        x_away, degrees_away = waiting()
        x.index_copy_(0, away, x_away.to(self.device, x.dtype))
        if degrees is not None:
            degrees.index_copy_(0, away, torch.as_tensor(degrees_away).to(self.device, degrees.dtype))
        return x, degrees, len(away)

    def target_labels(self, nodes: torch.Tensor) -> torch.Tensor:
        """The labels of ``nodes``, each one's input row here."""
        return self.labels[self.input_row_of[nodes]]


class Owners:
    """How a :class:`DeviceGraph` reaches what other workers hold: ``sample(ids, fanout, key)`` and ``rows(ids)``
    send the requests (host arrays of global ids, none of them here) and return a function that waits for the
    answers — ``(counts, picks)`` as the host sampler gives them, and ``(rows [n, width], degrees [n, 2] or
    None)`` — so that the device works on the rows here while the requests travel."""

    def __init__(self, sample, rows):
        self.sample, self.rows = sample, rows


def here_first(rows: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Positions with their rows here (``rows >= 0``) first, then the others, each group in its order; and how
    many are here (the one number read back)."""
    away = (rows < 0).to(torch.int8)
    n_here = len(rows) - int(away.sum())
    return torch.argsort(away, stable=True), n_here


def regroup(
    order: torch.Tensor, counts_sorted: torch.Tensor, picks_sorted: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR answers given for ``nodes[order]`` put back in the order of ``nodes`` (the host's
    ``distdgl.regroup`` in torch operations; the picks' count is their length, so nothing is read back)."""
    counts = torch.empty_like(counts_sorted)
    counts[order] = counts_sorted
    starts = torch.empty_like(counts_sorted)
    starts[order] = torch.cumsum(counts_sorted, 0) - counts_sorted
    offsets = torch.cumsum(counts, 0) - counts
    total = len(picks_sorted)
    take = torch.repeat_interleave(starts - offsets, counts, output_size=total)
    return counts, picks_sorted[take + torch.arange(total, device=picks_sorted.device)]


def induced_subgraph(
    indptr: torch.Tensor, indices: torch.Tensor, nodes: torch.Tensor, scratch: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The subgraph the rows ``nodes`` (ascending) induce in the CSR ``indptr``/``indices``: ``(indptr [n + 1],
    sources [m])``, each row's in-arcs from other chosen rows in CSR order, a source numbered by its place in
    ``nodes`` — what clustergcn's host sampler makes. ``scratch``: int64 ``[rows]`` all −1 (left so).

    Two read-backs: the chosen rows' arc count (the gather's size) and the kept arcs' (the mask's)."""
    dev = indices.device
    n = len(nodes)
    scratch[nodes] = torch.arange(n, device=dev)
    starts = indptr[nodes]
    counts = indptr[nodes + 1] - starts
    ends = torch.cumsum(counts, 0)
    total = int(ends[-1]) if n else 0
    row = torch.repeat_interleave(torch.arange(n, device=dev), counts, output_size=total)
    arc = (starts - (ends - counts))[row] + torch.arange(total, device=dev)
    src = scratch[indices[arc]]
    scratch.index_fill_(0, nodes, -1)
    kept = torch.nonzero(src >= 0).flatten()  # one read-back for both (a boolean mask would take one each)
    src, row = src[kept], row[kept]
    # ``row`` ascends: each row's first kept arc is where the row's number would be inserted
    out_indptr = torch.searchsorted(row, torch.arange(n + 1, device=dev))
    return out_indptr, src
